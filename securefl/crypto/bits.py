"""Bit-matrix helpers for OT extension: packing and a blocked word-level transpose.

IKNP OT extension holds a 128 x m bit matrix row-wise (one row per base OT) and needs
it column-wise (one 128-bit row per extended OT).  Bits are stored little-endian
inside 64-bit words: bit ``j`` of row ``i`` is ``(words[i, j // 64] >> (j % 64)) & 1``
(numpy ``packbits(..., bitorder="little")`` viewed as ``uint64``).

The transpose (:func:`transpose_bits`) is the compiled blocked 64 x 64 delta-swap
kernel of :mod:`securefl.crypto.kernels`; this module checks shapes and owns the layout.

No secrets are involved here beyond what the caller passes in; nothing is learned.
"""

from __future__ import annotations

import numpy as np

from securefl.crypto.kernels import transpose_bits_into
from securefl.errors import InputError


def pack_rows(bits: np.ndarray) -> np.ndarray:
    """Pack a ``(r, c)`` 0/1 array into ``(r, ceil(c / 64))`` uint64 words (little bit order)."""
    bits = np.asarray(bits)
    if bits.ndim != 2:
        raise InputError("bits", bits, "must be a 2-D array")
    rows, cols = bits.shape
    words = -(-cols // 64)
    out = np.zeros((rows, words * 8), dtype=np.uint8)
    out[:, : -(-cols // 8)] = np.packbits(bits.astype(np.uint8, copy=False), axis=1, bitorder="little")
    return out.view(np.uint64)


def unpack_rows(words: np.ndarray, cols: int) -> np.ndarray:
    """Inverse of :func:`pack_rows`: ``(r, w)`` uint64 words -> ``(r, cols)`` uint8 0/1."""
    words = np.ascontiguousarray(words, dtype=np.uint64)
    if words.ndim != 2 or cols > 64 * words.shape[1] or cols < 0:
        raise InputError("cols", cols, f"must be at most 64 * {words.shape[-1]}")
    return np.unpackbits(words.view(np.uint8), axis=1, count=cols, bitorder="little")


def transpose_bits(words: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Transpose an ``r x 64w`` bit matrix held as ``(r, w)`` uint64 words, ``r`` a multiple of 64.

    Returns ``(64w, r // 64)`` uint64 words: row ``j`` holds column ``j`` of the input,
    i.e. bit ``i`` of output row ``j`` is bit ``j`` of input row ``i``.
    """
    words = np.asarray(words)
    if words.ndim != 2 or words.dtype != np.uint64 or words.shape[0] % 64:
        raise InputError("words", words, "must be an (r, w) uint64 array with r a multiple of 64")
    rows, width = words.shape
    groups = rows // 64
    if out is None:
        out = np.empty((64 * width, groups), dtype=np.uint64)
    elif out.shape != (64 * width, groups) or out.dtype != np.uint64 or not out.flags.c_contiguous:
        raise InputError("out", out, f"must be a C-contiguous ({64 * width}, {groups}) uint64 array")
    return transpose_bits_into(words, out)
