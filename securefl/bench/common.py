"""Shared plumbing of the benchmarks: argument checks, machine description, peak memory,
atomic JSON output and the human-readable summary of a record.

Argument checks (:func:`require_int`, :func:`require_float`) raise
:class:`~securefl.errors.InputError` naming the *flag* (``--m``) and the value, so the CLI
prints one line such as ``securefl: InputError: --m=-1: must be an integer >= 1``.

Summaries (:func:`format_field`) pick the unit from the field name alone, so fields a
benchmark adds later are formatted too: ``bytes`` -> B/kB/MB/GB (10^3 steps), ``ots_per_``
-> M OT/s, ``seconds`` -> µs/ms/s/min, ``_gbps`` -> GB/s, ``_mb`` -> MiB, ratios ``12.3x``,
agreements and accuracies in %, integers with thousands separators.  The JSON keeps the
raw numbers.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, Callable, Iterator

import numpy as np

from securefl.errors import InputError
from securefl.machine import cpu_model


def add_workers_argument(parser: argparse.ArgumentParser) -> None:
    """``--workers``: threads sharing each SHADE pair's OT work (default: the cores available)."""
    parser.add_argument(
        "--workers",
        type=int,
        default=len(os.sched_getaffinity(0)),
        help="threads sharing each SHADE pair's OT work (default: the CPU cores available, "
        "%(default)s here)",
    )


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
        require_int(args, "--workers", minimum=1)


def memory_bytes() -> int | None:
    """Physical memory of this machine in bytes (None where unknown)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None


def machine_info() -> dict[str, Any]:
    """Where a figure was measured: CPU model, cores, memory, Python and library versions."""
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
    }


def _git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).resolve().parent,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


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


def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], Any], *,
                 mode: int | None = None) -> Path:
    """Create ``path`` atomically: ``write(handle)`` fills a hidden temporary file in the
    same folder, which is fsynced and renamed over ``path``.  Its permissions are
    ``0666 & ~umask``, or exactly ``mode`` (e.g. ``0o600`` for a file holding secrets: the
    temporary file is created 0600, so no other user can open it at any moment).

    On any failure (an exception in ``write``, a full disk, Ctrl-C) the temporary file is
    removed and ``path`` keeps its previous content: no partial files are left behind.
    """
    target = Path(path)
    descriptor, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_umask() if mode is None else mode)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_json(record: dict[str, Any], path: str | os.PathLike) -> Path:
    """Write ``record`` as indented JSON atomically (:func:`atomic_write`); the parent
    folder must exist (:func:`check_output_file` checks it before the run)."""
    text = json.dumps(record, indent=2, default=jsonable) + "\n"
    return atomic_write(path, lambda handle: handle.write(text.encode()))


def jsonable(value: Any) -> Any:
    """``json.dumps`` fallback for numpy scalars and arrays and paths."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def format_bytes(count: float) -> str:
    """Bytes in decimal units as the README quotes them: 16 B, 8.39 kB, 159.44 MB, 51.50 GB."""
    value, units = float(count), ("B", "kB", "MB", "GB", "TB", "PB")
    index = 0
    while abs(value) >= 1000 and index < len(units) - 1:
        value /= 1000
        index += 1
    if index == 0:
        return f"{value:.0f} B" if value.is_integer() else f"{value:.2f} B"
    return f"{value:,.2f} {units[index]}"


def format_seconds(seconds: float) -> str:
    """Seconds with sensible precision: 850 µs, 12.3 ms, 2.27 s, 31.6 s, 143 s (2 min 23 s).

    A value that rounds up to the next unit is written in it (0.9996 s is "1 s", never
    "1e+03 ms")."""
    if seconds == 0:
        return "0 s"
    if abs(float(f"{seconds * 1e6:.3g}")) < 1000:
        return f"{seconds * 1e6:.3g} µs"
    if abs(float(f"{seconds * 1e3:.3g}")) < 1000:
        return f"{seconds * 1e3:.3g} ms"
    if abs(float(f"{seconds:.3g}")) < 100:
        return f"{seconds:.3g} s"
    minutes, rest = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    clock = f"{hours} h {minutes} min" if hours else f"{minutes} min {rest} s"
    return f"{seconds:,.0f} s ({clock})"


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
