"""Keep freed memory in the process for reuse, so that fresh large arrays do not page-fault.

**Why.**  The protocols make fresh arrays of megabytes in every exchange (SHADE's sealed
correction batches, 37 MB a pair on the digits round, its seeds and IKNP matrices), and
glibc's ``malloc`` serves every allocation above its mmap threshold (128 KiB, rising with
use to at most 32 MiB) with a fresh ``mmap`` that ``free`` hands back to the kernel.  So each
round faults its batches in anew, page by page, and the kernel zeroes every page: on a
digits SHADE round (5 x 135 points, L = 1024, 2026-11-28, AMD EPYC) 13-26 thousand minor
faults and 0.05-0.12 s of kernel time in a 0.55-0.65 s round, and 0.4-0.6 s in one round of
three where transparent huge pages had to be compacted first.  Retained, the same rounds
take 0.44 s with no fault and no kernel time, against 0.50-0.55 s unretained in the same
sitting (``docs/measurements.md``, "SHADE without fresh pages").

**What.**  :func:`retain_freed_memory` makes glibc serve every allocation from the heap
(``M_MMAP_MAX = 0``) and keep the heap's freed top (``M_TRIM_THRESHOLD`` at its largest),
so the pages a freed array held serve the next one.  Only ``free`` releases memory to the
allocator, so nothing still in use is ever reused: the allocator's own bookkeeping decides
what is free, not securefl.  The price is that the process keeps its peak resident memory
until it exits.  The ``securefl`` command calls it at start (:func:`securefl.cli.console`;
``SECUREFL_RETAIN_MEMORY=0`` leaves glibc's defaults); code importing securefl as a library
may call it itself.  Elsewhere than glibc (musl, macOS, Windows) it does nothing and says so.

Written by hand because it is two ``mallopt`` calls: an allocator replacing glibc's
(jemalloc, tcmalloc) would also retain memory, but is loaded by ``LD_PRELOAD`` before the
process starts, which a Python package cannot arrange for its users.
"""

from __future__ import annotations

import ctypes
import os
import platform

DISABLE_VARIABLE = "SECUREFL_RETAIN_MEMORY"
"""Set to ``0`` to leave the C library's allocator as it is."""

_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_LARGEST_INT = 2**31 - 1
_retained = False


def retain_freed_memory() -> bool:
    """Make this process's glibc keep freed memory for reuse (module docstring) and return
    whether the process now does: not where the C library is not glibc, nor with
    ``SECUREFL_RETAIN_MEMORY=0`` (unless an earlier call already made it; it is not undone)."""
    global _retained
    if os.environ.get(DISABLE_VARIABLE, "1") == "0" or platform.libc_ver()[0] != "glibc":
        return _retained
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)  # glibc is loaded: no library search
    if mallopt is None:
        return _retained
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    _retained = bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, _LARGEST_INT))
    return _retained


def retained() -> bool:
    """Whether :func:`retain_freed_memory` took effect in this process (records say so)."""
    return _retained
