"""Where torch computes: ``--device auto|cpu|cuda[:i]``.

:func:`resolve_device` turns the configured name into a ``torch.device``: ``"auto"`` is
CUDA device 0 when torch sees one and the CPU otherwise; ``"cuda"`` / ``"cuda:i"`` are
refused (:class:`~securefl.errors.InputError` naming ``device``) when torch sees no such
device, so a run that asked for a GPU never falls back silently.

What moves to the device: the models (built and initialised on the CPU from ``seed``, then
moved, so a CUDA run starts from the CPU run's weights), every training and evaluation
batch, and the torch generators that draw batch orders, dropout masks and augmentations
(:func:`securefl.fl.rng.client_rng` with ``device``).  NumPy sees only CPU tensors
(``.cpu()`` before ``.numpy()``): uploads, features for label propagation, predictions.

**Randomness.**  On the CPU the generators are exactly those of a CPU-only build, drawn in
the same order, so CPU results are unchanged bit for bit.  On CUDA a generator is a CUDA
``torch.Generator`` seeded with the same integer; its stream differs from the CPU one
(different kernels), so CPU and CUDA runs agree statistically, not bit for bit.

**Determinism on CUDA.**  :func:`configure_determinism` sets ``CUBLAS_WORKSPACE_CONFIG``
(``:4096:8``, cuBLAS's reproducible workspace), ``torch.use_deterministic_algorithms(True)``
and turns cuDNN's benchmark autotuner off, so two runs of one command on one GPU give the
same results.  Operations without a deterministic CUDA kernel then raise rather than
vary; the networks' global pooling avoids them (:class:`securefl.models.nets.GlobalPool`).
"""

from __future__ import annotations

import os
import platform
import re

import torch

from securefl.errors import InputError

DEVICE_NAMES = ("auto", "cpu", "cuda", "cuda:<index>")
"""The accepted spellings of ``device``."""

_DEVICE = re.compile(r"(auto|cpu|cuda)(:(\d+))?\Z")

CUBLAS_WORKSPACE = ":4096:8"
"""``CUBLAS_WORKSPACE_CONFIG`` for reproducible cuBLAS results (CUDA's documentation)."""


def check_device_name(device: str) -> str:
    """``device`` if it is spelled as one of :data:`DEVICE_NAMES` (whether this machine has
    it is :func:`resolve_device`'s question); InputError naming ``device`` otherwise."""
    match = _DEVICE.match(device) if isinstance(device, str) else None
    if match is None or (match.group(2) and match.group(1) != "cuda"):
        raise InputError("device", device, f"must be one of {', '.join(DEVICE_NAMES)}")
    return device


def resolve_device(device: str) -> torch.device:
    """The ``torch.device`` that ``device`` ("auto", "cpu", "cuda" or "cuda:<index>")
    names on this machine; InputError when the name is malformed or names a CUDA device
    torch does not see."""
    match = _DEVICE.match(check_device_name(device))
    kind = match.group(1)
    if kind == "auto":
        return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    if kind == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise InputError("device", device,
                         f"torch {torch.__version__} sees no CUDA device (built for CUDA "
                         f"{torch.version.cuda}); use 'cpu' or 'auto', or install the CUDA "
                         "build of torch (README, Installation)")
    index = int(match.group(3) or 0)
    if index >= torch.cuda.device_count():
        raise InputError("device", device,
                         f"torch sees {torch.cuda.device_count()} CUDA device(s), indices from 0")
    return torch.device("cuda", index)


def configure_determinism(device: torch.device) -> None:
    """Make CUDA computations on ``device`` reproducible (module docstring); nothing on
    the CPU, whose kernels are deterministic for a fixed thread count already."""
    if device.type != "cuda":
        return
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True


def describe_device(device: torch.device) -> dict[str, str]:
    """``device`` (e.g. "cuda:0", "cpu") and ``device_name`` (the GPU's name, or the CPU's
    as the platform reports it) for results.json."""
    if device.type == "cuda":
        return {"device": str(device), "device_name": torch.cuda.get_device_name(device)}
    return {"device": "cpu", "device_name": _cpu_model()}


def _cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux; the platform's word elsewhere)."""
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def model_device(model: torch.nn.Module) -> torch.device:
    """The device ``model``'s parameters live on (the CPU for a model without any)."""
    for parameter in model.parameters():
        return parameter.device
    return torch.device("cpu")
