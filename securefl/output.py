"""Writing results, for every room: files created atomically (:func:`atomic_write`,
:func:`write_json`, :func:`jsonable` for numpy values) and figures in human units
(:func:`format_bytes`, :func:`format_seconds`).  The benchmarks' JSON records and the
experiments' results, checkpoints, tables and plots use them alike.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import numpy as np


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
