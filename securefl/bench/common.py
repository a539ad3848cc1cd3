"""Shared plumbing of the benchmarks: argument checks, peak memory, output-file checks and
the human-readable summary of a record.  The machine description
(:func:`securefl.machine.machine_info`) and atomic JSON output and human units
(:mod:`securefl.output`), which the experiments share, live in the lowest room and are
re-exported here.

Argument checks (:func:`require_int`, :func:`require_float`) raise
:class:`~securefl.errors.InputError` naming the *flag* (``--m``) and the value, so the CLI
prints one line such as ``securefl: InputError: --m=-1: must be an integer >= 1``.

Summaries (:func:`format_field`) pick the unit from the field name alone, so fields a
benchmark adds later are formatted too: ``bytes`` -> B/kB/MB/GB (10^3 steps), ``ots_per_``
-> M OT/s, ``seconds`` -> µs/ms/s/min, ``_gbps`` -> GB/s, ``gflops`` -> GFLOP/s, ``_mb`` ->
MiB, ratios ``12.3x``, agreements and accuracies in %, integers with thousands separators.
The JSON keeps the raw numbers.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from securefl.errors import InputError
from securefl.machine import machine_info, memory_bytes

if TYPE_CHECKING:
    import torch
from securefl.output import atomic_write, format_bytes, format_seconds, jsonable, write_json


def add_workers_argument(parser: argparse.ArgumentParser) -> None:
    """``--workers``: threads of the LWE backends' products (default: the cores available;
    SHADE's hops run on one thread per client, so its benchmarks take 1 only)."""
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="threads of the lwe/rlwe products (default: the CPU cores available, "
        f"{len(os.sched_getaffinity(0))} here); SHADE runs each client's hops on one thread, "
        "as deployed, so it takes 1 only (its default)",
    )


def default_workers(args: argparse.Namespace, *, single_threaded: bool) -> None:
    """Resolve ``--workers``: unset, the cores available (``1`` if ``single_threaded``); set
    above 1 where the work is ``single_threaded``: :class:`InputError` naming the flag."""
    if args.workers is None:
        args.workers = 1 if single_threaded else len(os.sched_getaffinity(0))
    elif single_threaded and not isinstance(args.workers, bool) and args.workers != 1:
        raise InputError("--workers", args.workers, "SHADE runs each client's hops on one thread, "
                                                    "as deployed: only 1 (threads are the lwe/rlwe "
                                                    "products')")


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def require_int(
    args: argparse.Namespace,
    flag: str,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    optional: bool = False,
) -> None:
    """``args.<flag>`` is an integer in ``[minimum, maximum]`` (``None`` if ``optional``)."""
    value = getattr(args, _dest(flag))
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InputError(flag, value, "must be an integer")
    if minimum is not None and value < minimum:
        if maximum is not None:
            raise InputError(flag, value, f"must be an integer in {minimum}..{maximum}")
        raise InputError(flag, value, f"must be an integer >= {minimum}")
    if maximum is not None and value > maximum:
        raise InputError(flag, value, f"must be an integer <= {maximum}")


def require_float(
    args: argparse.Namespace,
    flag: str,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> None:
    """``args.<flag>`` is a finite number in the interval ``low .. high`` (open ends as given)."""
    value = getattr(args, _dest(flag))
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
        raise InputError(flag, value, "must be a number")
    interval = (
        f"{'(' if low_open else '['}{'-inf' if low is None else low}, "
        f"{'inf' if high is None else high}{')' if high_open else ']'}"
    )
    if not math.isfinite(value):
        raise InputError(flag, value, f"must be a finite number in {interval}")
    below = low is not None and (value <= low if low_open else value < low)
    above = high is not None and (value >= high if high_open else value > high)
    if below or above:
        raise InputError(flag, value, f"must be in {interval}")


def validate_shared(args: argparse.Namespace) -> None:
    """Check the arguments the shared helpers add (``--workers``)."""
    if hasattr(args, "workers"):
        require_int(args, "--workers", minimum=1, optional=True)


def peak_memory_mb() -> float:
    """Peak resident set size of this process so far, in MiB (Linux ru_maxrss is KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def check_output_file(path: str | os.PathLike, flag: str = "--json") -> Path:
    """Check, before any work, that a file can be written at ``path``.

    ``path`` must not be a folder and its parent folder must exist (no folders are
    created) and accept a new file (probed by creating and removing one).  Raises
    :class:`InputError` naming ``flag``.
    """
    target = Path(path)
    if target.is_dir() or str(path).endswith(os.sep):
        raise InputError(flag, str(path), "names a folder; give a file name such as out.json")
    parent = target.parent
    if not parent.is_dir():
        problem = "is not a folder" if parent.exists() else "does not exist"
        raise InputError(flag, str(path), f"parent folder {str(parent)!r} {problem}")
    try:
        with tempfile.NamedTemporaryFile(dir=parent, prefix=f".{target.name}.", suffix=".probe"):
            pass
    except OSError as exc:
        raise InputError(
            flag, str(path), f"cannot write in {str(parent)!r} ({exc.strerror or exc})"
        ) from None
    return target


def best_seconds(work: Callable[[], object], device: torch.device | None = None, repeats: int = 3) -> float:
    """Fastest of ``repeats`` timed calls of ``work`` after one untimed call (a CUDA ``device``
    synchronised before each clock read)."""
    def once() -> float:
        tick = time.perf_counter()
        work()
        if device is not None and device.type == "cuda":
            import torch  # only a CUDA timing needs it

            torch.cuda.synchronize(device)
        return time.perf_counter() - tick
    once()
    return min(once() for _ in range(repeats))


def format_field(name: str, value: Any) -> str:
    """A record field for people, its unit chosen by the field's name (see the module doc)."""
    if isinstance(value, bool) or value is None:
        return {True: "yes", False: "no", None: "-"}[value]
    if isinstance(value, (list, tuple)):
        return ", ".join(format_field(name, item) for item in value)
    if isinstance(value, np.generic):
        value = value.item()
    if not isinstance(value, (int, float)):
        return str(value)
    key = name.lower()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if "ots_per_" in key:
        return f"{value / 1e6:,.2f} M OT/s" if abs(value) >= 1e5 else f"{value:,.0f} OT/s"
    if "ratio" in key or "_over_" in key:
        return f"{value:,.3g}x" if abs(value) < 1000 else f"{value:,.0f}x"
    if "gbps" in key:
        return f"{value:.2f} GB/s"
    if "gflops" in key:
        return f"{value:.1f} GFLOP/s"
    if "bytes" in key:
        return format_bytes(value)
    if "seconds" in key:
        return format_seconds(float(value))
    if key.endswith("_mb"):
        return f"{value:,.0f} MiB"
    if key.endswith("_gb"):
        return f"{value:,.1f} GB"
    if "agreement" in key or "accuracy" in key:
        return f"{100 * value:.2f} %"
    if "diff" in key or "error" in key:
        return f"{value:.2g}"
    if isinstance(value, int):
        return f"{value:,}"
    if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-3):
        return f"{value:.3g}"
    return f"{value:,.4g}"


def record_rows(
    record: dict[str, Any], *, skip: tuple[str, ...] = ("machine",)
) -> Iterator[tuple[str, str]]:
    """``(label, formatted value)`` for every field of ``record``; nested tables are
    flattened as ``parent.child`` (their unit from the child's and the parent's names)."""
    for key, value in record.items():
        if key in skip:
            continue
        if isinstance(value, dict):
            for child, item in value.items():
                yield _label(f"{key}: {child}"), format_field(f"{key}_{child}", item)
            continue
        yield _label(key), format_field(key, value)


def _label(key: str) -> str:
    return key.replace("_", " ")


__all__ = ["add_workers_argument", "atomic_write", "check_output_file", "default_workers", "format_bytes",
           "format_field", "format_seconds", "jsonable", "machine_info", "memory_bytes",
           "peak_memory_mb", "record_rows", "require_float", "require_int", "validate_shared",
           "write_json"]
