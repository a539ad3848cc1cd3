"""Plaintext Hamming distances of binary codes: the oracle and the ``plaintext`` backend.

``HD(x, y) = popcount(x XOR y)`` over bit-packed codes.  Codes are packed eight bits per
byte (little bit order) and zero-padded to a multiple of 64 bits; the padding is zero in
every code, so it never changes a distance.  The all-pairs kernel is faiss's
``hammings`` (64-bit popcount, OpenMP), which runs n = 2500, L = 4096 in well under
0.1 s on the project machine; it is a library call, nothing is hand-written here except
the packing.

No party is involved: this module sees every code in the clear.  It exists so that the
cost of the secure protocol (:mod:`securefl.crypto.shade`) is always quoted against an
honest, fast baseline, and so that tests have an exact reference.
"""

from __future__ import annotations

import faiss
import numpy as np

from securefl.crypto.bits import pack_rows
from securefl.errors import InputError


def pack_codes(bits: np.ndarray) -> np.ndarray:
    """Pack an ``(n, L)`` 0/1 array into ``(n, 8 * ceil(L / 64))`` uint8 rows (little bit order):
    the 64-bit words of :func:`securefl.crypto.bits.pack_rows`, seen as bytes."""
    return pack_rows(bits).view(np.uint8)


def hamming_matrix(left: np.ndarray, right: np.ndarray | None = None) -> np.ndarray:
    """All-pairs Hamming distances between the rows of two packed code arrays.

    ``left`` is ``(n_a, B)`` and ``right`` ``(n_b, B)`` uint8 from :func:`pack_codes`
    (``right`` defaults to ``left``); returns the ``(n_a, n_b)`` int32 matrix.
    """
    left = np.ascontiguousarray(left, dtype=np.uint8)
    right = left if right is None else np.ascontiguousarray(right, dtype=np.uint8)
    if left.ndim != 2 or right.ndim != 2 or left.shape[1] != right.shape[1]:
        raise InputError("right", right, f"must be 2-D with {left.shape[1]} bytes per row like left")
    if left.shape[1] % 8:
        raise InputError("left", left, "rows must be a multiple of 8 bytes (use pack_codes)")
    out = np.empty((left.shape[0], right.shape[0]), dtype=np.int32)
    if out.size:
        faiss.hammings(
            faiss.swig_ptr(left),
            faiss.swig_ptr(right),
            left.shape[0],
            right.shape[0],
            left.shape[1],
            faiss.swig_ptr(out),
        )
    return out
