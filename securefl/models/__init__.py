"""securefl.models: backbones split into feature extractor f_phi and head f_psi.

Public API::

    build_model(name, *, input_shape, num_classes, seed=0, **options) -> SplitNet
        name in MODEL_NAMES: "mlp" (digits; option hidden=(128, 64)), "cnn" (FedSemi's
        MNIST CNN), "resnet9" / "resnet8" (ProtoFSSL Table 6; option norm="bn"|"gn"|"none"),
        "cnn13" (Tarvainen & Valpola's 13-layer CNN, FedProp's CIFAR network; option
        dropout=0.5), or "auto" (mlp for inputs of at most 16x16 pixels, cnn for 1-channel
        images, resnet9 otherwise).  model.features(x) -> (n, model.feature_dim),
        model.head(z) -> logits, model(x) = head(features(x)).
    resolve_model_name(name, input_shape) -> the concrete name "auto" picks.
    dropout_generator(model, generator): context binding the generator that the model's
        dropout layers (cnn13) draw their masks from while training.

Initialisation is reproducible: the weights are drawn inside ``torch.random.fork_rng``
after ``torch.manual_seed(seed)``, so the global torch RNG is left untouched.
"""

from __future__ import annotations

from typing import Any

import torch

from securefl.errors import InputError
from securefl.models.nets import SeededDropout, SplitNet, cnn13, dropout_generator, fedsemi_cnn, mlp, resnet

MODEL_NAMES = ("mlp", "cnn", "resnet9", "resnet8", "cnn13", "auto")


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
                **options: Any) -> SplitNet:
    """Build architecture ``name`` with weights initialised from ``seed``."""
    input_shape = tuple(int(s) for s in input_shape)
    if num_classes < 2:
        raise InputError("num_classes", num_classes, "must be >= 2")
    concrete = resolve_model_name(name, input_shape)
    if concrete in ("cnn", "resnet9", "resnet8", "cnn13") and len(input_shape) != 3:
        raise InputError("input_shape", input_shape, f"{concrete} needs (channels, H, W)")
    if concrete == "cnn" and min(input_shape[1:]) < 16:
        raise InputError("input_shape", input_shape, "cnn needs images of at least 16x16")
    if concrete == "cnn13" and min(input_shape[1:]) < 12:
        raise InputError("input_shape", input_shape, "cnn13 needs images of at least 12x12")
    allowed = {"mlp": {"hidden"}, "cnn": set(), "resnet9": {"norm"}, "resnet8": {"norm"},
               "cnn13": {"dropout"}}
    unknown = set(options) - allowed[concrete]
    if unknown:
        raise InputError(sorted(unknown)[0], options[sorted(unknown)[0]],
                         f"not an option of model {concrete!r} (allowed: {sorted(allowed[concrete])})")
    if options.get("norm", "bn") not in ("bn", "gn", "none"):
        raise InputError("norm", options["norm"], "must be 'bn', 'gn' or 'none'")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if concrete == "mlp":
            return mlp(input_shape, num_classes, **options)
        if concrete == "cnn":
            return fedsemi_cnn(input_shape, num_classes)
        if concrete == "cnn13":
            return cnn13(input_shape, num_classes, **options)
        return resnet(input_shape, num_classes, with_head=concrete == "resnet9", **options)


__all__ = ["MODEL_NAMES", "SeededDropout", "SplitNet", "build_model", "dropout_generator",
           "resolve_model_name"]
