"""securefl.models: backbones split into feature extractor f_phi and head f_psi.

Public API::

    build_model(name, *, input_shape, num_classes, seed=0, device=None, **options) -> SplitNet
        name in MODEL_NAMES: "mlp" (digits; option hidden=(128, 64)), "cnn" (FedSemi's
        MNIST CNN), "cnn_cifar" (FedSemi's CIFAR / SVHN CNN; options conv_dropout=0.05,
        fc_dropout=0.1), "resnet9" / "resnet8" (ProtoFSSL Table 6; option
        norm="bn"|"gn"|"none"), "cnn13" (Tarvainen & Valpola's 13-layer CNN, FedProp's
        CIFAR network; option dropout=0.5), "wrn28_2" (Wide ResNet-28-2, FedAnchor's and
        FixMatch's backbone), "resnet18" (CIFAR-style ResNet-18, FedAnchor's second
        backbone), or "auto" (mlp for inputs of at most 16x16 pixels, cnn for 1-channel
        images, resnet9 otherwise).  model.features(x) -> (n, model.feature_dim),
        model.head(z) -> logits, model(x) = head(features(x)).
    resolve_model_name(name, input_shape) -> the concrete name "auto" picks.
    dropout_generator(model, generator): context binding the generator that the model's
        dropout layers (cnn13) draw their masks from while training.

Initialisation is reproducible: the weights are drawn inside ``torch.random.fork_rng``
after ``torch.manual_seed(seed)``, so the global torch RNG is left untouched.  They are
always drawn on the CPU and then moved to ``device``, so a model starts from the same
weights on every device.
"""

from __future__ import annotations

from typing import Any

import torch

from securefl.errors import InputError
from securefl.models.nets import (
    GlobalPool,
    SeededDropout,
    SplitNet,
    cnn13,
    cnn_cifar,
    dropout_generator,
    fedsemi_cnn,
    mlp,
    resnet,
    resnet18,
    wide_resnet,
)

MODEL_NAMES = ("mlp", "cnn", "cnn_cifar", "resnet9", "resnet8", "cnn13", "wrn28_2", "resnet18", "auto")

_IMAGE_MODELS = {"cnn": 16, "cnn_cifar": 8, "resnet9": 8, "resnet8": 8, "cnn13": 12,
                 "wrn28_2": 4, "resnet18": 8}
"""Image architectures and the least image side each accepts."""

_OPTIONS = {"mlp": {"hidden"}, "cnn": set(), "cnn_cifar": {"conv_dropout", "fc_dropout"},
            "resnet9": {"norm"}, "resnet8": {"norm"}, "cnn13": {"dropout"}, "wrn28_2": set(),
            "resnet18": set()}


def resolve_model_name(name: str, input_shape: tuple[int, ...]) -> str:
    """The architecture ``name`` denotes for inputs of ``input_shape`` (resolves "auto")."""
    if name not in MODEL_NAMES:
        raise InputError("model", name, f"must be one of {MODEL_NAMES}")
    if name != "auto":
        return name
    if len(input_shape) != 3 or input_shape[1] * input_shape[2] <= 256:
        return "mlp"
    return "cnn" if input_shape[0] == 1 else "resnet9"


def build_model(name: str, *, input_shape: tuple[int, ...], num_classes: int, seed: int = 0,
                device: torch.device | str | None = None, **options: Any) -> SplitNet:
    """Build architecture ``name`` with weights initialised from ``seed`` (on the CPU),
    placed on ``device`` (the CPU when ``None``)."""
    input_shape = tuple(int(s) for s in input_shape)
    if num_classes < 2:
        raise InputError("num_classes", num_classes, "must be >= 2")
    concrete = resolve_model_name(name, input_shape)
    if concrete in _IMAGE_MODELS and len(input_shape) != 3:
        raise InputError("input_shape", input_shape, f"{concrete} needs (channels, H, W)")
    if concrete in _IMAGE_MODELS and min(input_shape[1:]) < _IMAGE_MODELS[concrete]:
        side = _IMAGE_MODELS[concrete]
        raise InputError("input_shape", input_shape, f"{concrete} needs images of at least {side}x{side}")
    unknown = set(options) - _OPTIONS[concrete]
    if unknown:
        raise InputError(sorted(unknown)[0], options[sorted(unknown)[0]],
                         f"not an option of model {concrete!r} (allowed: {sorted(_OPTIONS[concrete])})")
    if options.get("norm", "bn") not in ("bn", "gn", "none"):
        raise InputError("norm", options["norm"], "must be 'bn', 'gn' or 'none'")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = _construct(concrete, input_shape, num_classes, options)
    return model if device is None else model.to(device)


def _construct(concrete: str, input_shape: tuple[int, ...], num_classes: int,
               options: dict[str, Any]) -> SplitNet:
    if concrete == "mlp":
        return mlp(input_shape, num_classes, **options)
    if concrete == "cnn":
        return fedsemi_cnn(input_shape, num_classes)
    if concrete == "cnn_cifar":
        return cnn_cifar(input_shape, num_classes, **options)
    if concrete == "cnn13":
        return cnn13(input_shape, num_classes, **options)
    if concrete == "wrn28_2":
        return wide_resnet(input_shape, num_classes, depth=28, widen=2)
    if concrete == "resnet18":
        return resnet18(input_shape, num_classes)
    return resnet(input_shape, num_classes, with_head=concrete == "resnet9", **options)


__all__ = ["MODEL_NAMES", "GlobalPool", "SeededDropout", "SplitNet", "build_model",
           "dropout_generator", "resolve_model_name"]
