"""Pieces shared by the methods: building the network for a federation, a network's state
cut into layers (FedSemi's unit of upload), weak input perturbation, and the translation
augmentation every FedAvg-family method and FedAnchor train with.

Translation augmentation (FedProp Appendix A.1, "standard data augmentation following
Tarvainen & Valpola (2017)", applied to all methods of its comparison): a random shift of
up to ``max_shift`` pixels per image; ``max_shift=None`` picks 2 pixels on images of side
>= 28 (Tarvainen & Valpola's 2 pixels on 32x32) and none on smaller ones (the 8x8
digits, where 2 pixels are a quarter of the image).  Horizontal flips follow the
translation where a method's ``hflip`` is set (FedProp App. A on CIFAR: "random
translations followed by a random horizontal flip"): each image is mirrored left-right
with probability 1/2.  They are off by default (digits and clothing are not
mirror-symmetric; SVHN's digits neither), and when off nothing is drawn for them.

Byte accounting follows :class:`securefl.fl.aggregation.AggregationReport`: *model* bytes
are what plain FedAvg would move (float32 down and up); *protocol* bytes are what privacy
and the method's own messages add on top (secure-sum overhead, prototypes, FSM vectors,
anchor latents).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from securefl.errors import InputError
from securefl.models import build_model


def build_network(name: str, federation, *, seed: int, device: torch.device | None = None,
                  **options) -> nn.Module:
    """``securefl.models.build_model`` for ``federation``'s input shape and classes, on
    ``device`` (the CPU when ``None``)."""
    return build_model(name, input_shape=tuple(federation.input_shape), num_classes=federation.num_classes,
                       seed=seed, device=device, **options)


def default_shift(input_shape: Sequence[int]) -> int:
    """The translation range ``max_shift=None`` stands for (see the module docstring)."""
    return 2 if len(input_shape) == 3 and min(input_shape[1:]) >= 28 else 0


def translation(input_shape: Sequence[int], max_shift: int | None,
                generator: torch.Generator, *, hflip: bool = False
                ) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """Batch augmentation by random translations, then random horizontal flips where
    ``hflip`` (module docstring); ``None`` when it would be the identity."""
    shift = default_shift(input_shape) if max_shift is None else max_shift
    if not isinstance(shift, (int, np.integer)) or isinstance(shift, bool) or shift < 0:
        raise InputError("max_shift", max_shift, "must be a non-negative integer or None")
    if not isinstance(hflip, (bool, np.bool_)):
        raise InputError("hflip", hflip, "must be true or false")
    if hflip and len(input_shape) != 3:
        raise InputError("hflip", hflip,
                         f"flips images (channels, H, W), not inputs of shape {tuple(input_shape)}")
    if shift == 0 and not hflip:
        return None
    if not hflip:
        return lambda batch: perturb(batch, 0.0, int(shift), generator)
    return lambda batch: random_hflip(perturb(batch, 0.0, int(shift), generator), generator)


def random_hflip(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Mirror each image of ``x`` ``(n, C, H, W)`` left-right with probability 1/2, one
    uniform draw per image from ``generator`` (on its device)."""
    if x.ndim != 4:
        raise InputError("x", tuple(x.shape), "must be images (n, C, H, W)")
    flip = torch.rand(len(x), generator=generator, device=generator.device) < 0.5
    return torch.where(flip.to(x.device)[:, None, None, None], x.flip(3), x)


@dataclass(frozen=True)
class LayerGroups:
    """A network's state split into "layers": the entries of its state dict grouped by
    owning module (``body.0.weight`` and ``body.0.bias`` form layer ``body.0``)."""

    names: tuple[str, ...]
    keys: tuple[tuple[str, ...], ...]
    shapes: tuple[tuple[tuple[int, ...], ...], ...]

    @classmethod
    def of(cls, model: nn.Module) -> "LayerGroups":
        grouped: dict[str, list[str]] = {}
        state = model.state_dict()
        for key, value in state.items():
            if value.is_floating_point():
                grouped.setdefault(key.rsplit(".", 1)[0], []).append(key)
        names = tuple(grouped)
        keys = tuple(tuple(grouped[n]) for n in names)
        shapes = tuple(tuple(tuple(state[k].shape) for k in ks) for ks in keys)
        return cls(names, keys, shapes)

    def arrays(self, model: nn.Module) -> list[np.ndarray]:
        """One flat float64 array per layer."""
        state = model.state_dict()
        return [np.concatenate([state[k].detach().cpu().numpy().astype(np.float64).ravel() for k in ks]) for ks in self.keys]

    def split(self, flat: np.ndarray) -> list[np.ndarray]:
        """Cut a flat vector of all layers (in order) into per-layer arrays."""
        sizes = [sum(int(np.prod(s)) for s in shapes) for shapes in self.shapes]
        if flat.size != sum(sizes):
            raise InputError("flat", flat.size, f"must have {sum(sizes)} entries")
        return list(np.split(np.asarray(flat, dtype=np.float64), np.cumsum(sizes)[:-1]))

    def load(self, model: nn.Module, layers: Sequence[np.ndarray]) -> None:
        """Write per-layer arrays back into ``model`` (in place)."""
        state = model.state_dict()
        with torch.no_grad():
            for ks, shapes, layer in zip(self.keys, self.shapes, layers):
                offset = 0
                for k, shape in zip(ks, shapes):
                    size = int(np.prod(shape))
                    state[k].copy_(torch.from_numpy(np.asarray(layer[offset : offset + size]).reshape(shape)))
                    offset += size


def layer_groups(model: nn.Module) -> LayerGroups:
    return LayerGroups.of(model)


def perturb(x: torch.Tensor, noise_std: float, max_shift: int, generator: torch.Generator) -> torch.Tensor:
    """Weak augmentation: a random translation of up to ``max_shift`` pixels per sample
    (zero padding; images ``(n, C, H, W)`` only) plus Gaussian noise of std ``noise_std``,
    drawn from ``generator``, which must live on ``x``'s device."""
    out = x
    if max_shift > 0 and x.ndim == 4 and len(x):
        n, _, h, w = x.shape
        shifts = torch.randint(-max_shift, max_shift + 1, (n, 2), generator=generator,
                               device=x.device).to(x.dtype)
        theta = torch.zeros(n, 2, 3, dtype=x.dtype, device=x.device)
        theta[:, 0, 0] = 1.0
        theta[:, 1, 1] = 1.0
        theta[:, 0, 2] = -2.0 * shifts[:, 0] / w
        theta[:, 1, 2] = -2.0 * shifts[:, 1] / h
        grid = F.affine_grid(theta, list(x.shape), align_corners=False)
        out = F.grid_sample(x, grid, mode="nearest", padding_mode="zeros", align_corners=False)
    if noise_std > 0:
        out = out + noise_std * torch.randn(out.shape, generator=generator, dtype=out.dtype,
                                            device=out.device)
    return out
