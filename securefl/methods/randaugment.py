"""FixMatch's strong augmentation: RandAugment followed by Cutout, drawn from a generator.

FixMatch (Sohn et al. 2020, §2.3 and Table 12, "RA") augments an unlabeled image strongly
by ``num_ops = 2`` operations drawn uniformly from the table below, each with a magnitude
drawn uniformly from its range (RandAugment, Cubuk et al. 2020, with random magnitudes),
then Cutout: a square of gray (0.5) of side up to ``cutout`` times the image side at a
random centre.

==============  ====================================  ===============================
operation       magnitude range                       Pillow call
==============  ====================================  ===============================
Identity        --                                    --
AutoContrast    --                                    ``ImageOps.autocontrast``
Equalize        --                                    ``ImageOps.equalize``
Brightness      factor in [0.05, 0.95]                ``ImageEnhance.Brightness``
Color           factor in [0.05, 0.95]                ``ImageEnhance.Color``
Contrast        factor in [0.05, 0.95]                ``ImageEnhance.Contrast``
Sharpness       factor in [0.05, 0.95]                ``ImageEnhance.Sharpness``
Posterize       bits in {4, ..., 8}                   ``ImageOps.posterize``
Solarize        threshold in [0, 1] of the range      ``ImageOps.solarize``
Rotate          angle in [-30, 30] degrees            ``Image.rotate``
ShearX, ShearY  shear in [-0.3, 0.3]                  ``Image.transform`` (affine)
TranslateX, Y   shift in [-0.3, 0.3] of the side      ``Image.transform`` (affine)
==============  ====================================  ===============================

Areas uncovered by a geometric operation are black (0), as in Pillow's defaults; Color is
the identity on a one-channel image (Pillow's enhancer blends with the image's own
grayscale), as it is for FixMatch's reference code on grayscale data.

Why written here: the image operations are Pillow's (as in FixMatch's reference code);
this module is only the table above and the sampling.  Every draw (operations,
magnitudes, Cutout boxes) comes from the caller's ``torch.Generator``, so a client's
augmentation is reproducible from its seed and independent of other threads; torchvision's
RandAugment draws from torch's global generator, and the registry's torchvision 0.28 wheel
does not load with the CPU build of torch 2.13 (``operator torchvision::nms does not
exist``).  Images are quantised to 8 bits for Pillow and returned as float32 in [0, 1].
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image, ImageEnhance, ImageOps

from securefl.errors import InputError

Operation = Callable[[Image.Image, float], Image.Image]


@dataclass(frozen=True)
class Op:
    """One RandAugment operation: ``apply(image, magnitude)`` with the magnitude drawn
    uniformly from ``[low, high]`` (ignored where ``low == high``)."""

    name: str
    apply: Operation
    low: float = 0.0
    high: float = 0.0

    def magnitude(self, level: float) -> float:
        """The magnitude at ``level`` in [0, 1)."""
        return self.low + (self.high - self.low) * level


def _affine(coefficients: Callable[[Image.Image, float], tuple[float, ...]]) -> Operation:
    return lambda image, m: image.transform(image.size, Image.Transform.AFFINE,
                                            coefficients(image, m), fillcolor=0)


OPS: tuple[Op, ...] = (
    Op("Identity", lambda image, m: image),
    Op("AutoContrast", lambda image, m: ImageOps.autocontrast(image)),
    Op("Equalize", lambda image, m: ImageOps.equalize(image)),
    Op("Brightness", lambda image, m: ImageEnhance.Brightness(image).enhance(m), 0.05, 0.95),
    Op("Color", lambda image, m: ImageEnhance.Color(image).enhance(m), 0.05, 0.95),
    Op("Contrast", lambda image, m: ImageEnhance.Contrast(image).enhance(m), 0.05, 0.95),
    Op("Sharpness", lambda image, m: ImageEnhance.Sharpness(image).enhance(m), 0.05, 0.95),
    Op("Posterize", lambda image, m: ImageOps.posterize(image, int(m)), 4.0, 9.0),
    Op("Solarize", lambda image, m: ImageOps.solarize(image, int(256 * m)), 0.0, 1.0),
    Op("Rotate", lambda image, m: image.rotate(m, fillcolor=0), -30.0, 30.0),
    Op("ShearX", _affine(lambda image, m: (1, m, 0, 0, 1, 0)), -0.3, 0.3),
    Op("ShearY", _affine(lambda image, m: (1, 0, 0, m, 1, 0)), -0.3, 0.3),
    Op("TranslateX", _affine(lambda image, m: (1, 0, m * image.size[0], 0, 1, 0)), -0.3, 0.3),
    Op("TranslateY", _affine(lambda image, m: (1, 0, 0, 0, 1, m * image.size[1])), -0.3, 0.3),
)
"""FixMatch's RandAugment table (module docstring); Posterize's bits are
``floor(magnitude)`` over [4, 9), i.e. uniform on {4, ..., 8}."""

CUTOUT_FILL = 0.5


def _to_image(pixels: np.ndarray) -> Image.Image:
    """``(C, H, W)`` uint8 pixels as a Pillow image (mode L or RGB)."""
    return Image.fromarray(pixels[0] if len(pixels) == 1 else np.moveaxis(pixels, 0, -1))


def _from_image(image: Image.Image, channels: int) -> np.ndarray:
    array = np.asarray(image, dtype=np.float32) / 255.0
    return array[None] if channels == 1 else np.moveaxis(array, -1, 0)


def randaugment(images: torch.Tensor, generator: torch.Generator, *, num_ops: int = 2,
                cutout: float = 0.5) -> torch.Tensor:
    """FixMatch's strong augmentation of ``images`` (``(n, C, H, W)``, C in {1, 3}, values
    in [0, 1]): ``num_ops`` random operations of :data:`OPS` per image, then Cutout of side
    up to ``cutout`` times the image side (``cutout=0``: none).  Draws only from
    ``generator``; returns a new float32 tensor on ``images``' device.  The draws are made
    on the generator's device (a CUDA generator for CUDA runs); Pillow works on the CPU, so
    the images cross to the CPU and back."""
    if images.ndim != 4 or images.shape[1] not in (1, 3):
        raise InputError("images", tuple(images.shape), "must be (n, C, H, W) with C = 1 or 3")
    if not isinstance(num_ops, int) or isinstance(num_ops, bool) or num_ops < 0:
        raise InputError("num_ops", num_ops, "must be an integer >= 0")
    if not 0.0 <= cutout <= 1.0:
        raise InputError("cutout", cutout, "must lie in [0, 1]")
    n, channels, height, width = images.shape
    device = generator.device
    ops = torch.randint(len(OPS), (n, num_ops), generator=generator, device=device).tolist()
    levels = torch.rand((n, num_ops), generator=generator, dtype=torch.float64, device=device).tolist()
    boxes = torch.rand((n, 3), generator=generator, dtype=torch.float64, device=device).tolist()
    pixels = (images.detach().clamp(0.0, 1.0) * 255.0).round().to(torch.uint8).cpu().numpy()
    out = np.empty((n, channels, height, width), dtype=np.float32)
    for i in range(n):
        image = _to_image(pixels[i])
        for op_index, level in zip(ops[i], levels[i]):
            op = OPS[op_index]
            image = op.apply(image, op.magnitude(level))
        out[i] = _from_image(image, channels)
        side = int(boxes[i][0] * cutout * min(height, width))
        if side > 0:
            top = int(boxes[i][1] * height) - side // 2
            left = int(boxes[i][2] * width) - side // 2
            out[i, :, max(top, 0):max(top + side, 0), max(left, 0):max(left + side, 0)] = CUTOUT_FILL
    return torch.from_numpy(out).to(images.device)
