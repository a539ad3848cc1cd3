"""Which machine a result came from, and which float kernels computed it.

:func:`kernel_path` names everything that decides the last bits of securefl's float results:
two machines with the same kernel path run the same instructions on the same data, so their
float32 results agree bit for bit; two with different paths (an AVX-512 Xeon and an AVX2
EPYC, or one machine with ``ATEN_CPU_CAPABILITY=default``) agree only to rounding.  The
regression record (``tests/methods/regression``) keeps the kernel path it was written on
and compares digests only where it matches.  :func:`machine_line` is the one-line
description ``.ci/run`` prints first, so that a red CI says where it ran;
:func:`machine_info` the description every benchmark record and every run's provenance
carries (CPU, cores, memory, versions, commit, date).
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from securefl.memory import retained

KERNEL_ENVIRONMENT = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR",
                      "OPENBLAS_CORETYPE", "NPY_DISABLE_CPU_FEATURES", "ONEDNN_MAX_CPU_ISA",
                      "DNNL_MAX_CPU_ISA")
"""Variables that make torch, oneDNN, MKL, OpenBLAS or numpy take another code path."""

VECTOR_FLAG_PREFIXES = ("avx", "fma", "amx", "sse", "f16c")
"""The CPU flags (``/proc/cpuinfo``) that name vector instruction sets."""


def _cpuinfo_field(field: str) -> str | None:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith(field):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``; the platform's processor elsewhere)."""
    return _cpuinfo_field("model name") or platform.processor() or platform.machine()


def vector_flags() -> list[str]:
    """The CPU's vector-instruction flags, sorted (empty where ``/proc/cpuinfo`` is absent)."""
    flags = (_cpuinfo_field("flags") or "").split()
    return sorted(f for f in flags if f.startswith(VECTOR_FLAG_PREFIXES))


def torch_cpu_capability() -> str:
    """The instruction set torch's CPU kernels dispatch to (``AVX2``, ``AVX512``, ``DEFAULT``)."""
    import torch

    return str(torch.backends.cpu.get_cpu_capability())


def numpy_simd() -> list[str]:
    """The SIMD targets numpy dispatches to on this CPU."""
    core = getattr(np, "_core", None) or np.core
    features = core._multiarray_umath.__cpu_features__
    return sorted(name for name, on in features.items() if on)


def kernel_path() -> dict[str, Any]:
    """The CPU model and vector flags, torch's version and CPU capability, numpy's version
    and SIMD targets, and any variable of :data:`KERNEL_ENVIRONMENT` that is set."""
    import torch

    return {
        "cpu": cpu_model(),
        "cpu_flags": vector_flags(),
        "torch": torch.__version__,
        "torch_cpu_capability": torch_cpu_capability(),
        "numpy": np.__version__,
        "numpy_simd": numpy_simd(),
        "environment": {name: os.environ[name] for name in KERNEL_ENVIRONMENT if name in os.environ},
    }


def machine_line() -> str:
    """``machine: <CPU> · <n> cores · torch <version> <capability> · numpy <version>``."""
    import torch

    extra = " ".join(f"{k}={os.environ[k]}" for k in KERNEL_ENVIRONMENT if k in os.environ)
    return (f"machine: {cpu_model()} · {os.cpu_count()} cores · torch {torch.__version__} "
            f"{torch_cpu_capability()} · numpy {np.__version__}" + (f" · {extra}" if extra else ""))


if __name__ == "__main__":
    print(machine_line())


def memory_bytes() -> int | None:
    """Physical memory of this machine in bytes (None where unknown)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None


def machine_info() -> dict[str, Any]:
    """Where a figure was measured: CPU model, cores, memory, Python and library versions, and
    whether the process kept freed memory for reuse (:mod:`securefl.memory`)."""
    memory = memory_bytes()
    memory_gb = None if memory is None else round(memory / 2**30, 1)
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "memory_gb": memory_gb,
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "platform": platform.platform(),
        "commit": _git_commit(),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "retains_freed_memory": retained(),
    }


def _git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            check=False,
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).resolve().parent,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None
