"""Compact wire encodings of client-id lists that the receiver checks against what it knows.

Two encodings, both used by the authenticated secure aggregation
(:mod:`securefl.crypto.secagg`); neither carries any security by itself -- the receiver
checks the decoded list (a digest comparison, a signature per entry), so an encoding can
only save bytes:

* :func:`pack_subset` / :func:`unpack_subset`: a subset of a list both ends hold
  (``universe``, e.g. the survivor list U3 the receiver signed) as a bitmap, bit i
  (``numpy.packbits`` order) for ``universe[i]``: ceil(|universe| / 8) bytes instead of
  4 per member.  The decoder refuses a bitmap of another length or with a padding bit
  set, so each subset has exactly one encoding.
* :func:`pack_ids` / :func:`unpack_ids`: a list of distinct non-negative ids in a given
  order (the cohort: roster ids in secure-aggregation index order).  A strictly ascending
  list whose bitmap over 0..max is shorter than the list travels as that bitmap (dtype
  ``uint8``: ceil((max + 1) / 8) bytes, e.g. 63 bytes for 500 members of a 500-client
  roster instead of 2,000); any other list as int32 (int64 where an id does not fit).
  The dtype tells the two apart.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from securefl.errors import ProtocolError


def pack_subset(chosen: Sequence[int], universe: Sequence[int]) -> np.ndarray:
    """Bitmap (uint8) of ``chosen`` over ``universe``; every chosen id must be in it."""
    position = {int(u): i for i, u in enumerate(universe)}
    bits = np.zeros(len(position), dtype=bool)
    bits[[position[int(c)] for c in chosen]] = True
    return np.packbits(bits)


def unpack_subset(bitmap: np.ndarray, universe: Sequence[int], name: str) -> list[int]:
    """The members of ``universe`` whose bit is set, in ``universe`` order; a bitmap of the
    wrong dtype or length, or with a padding bit set: ProtocolError naming ``name``."""
    size = len(universe)
    if bitmap.ndim != 1 or bitmap.dtype != np.uint8 or bitmap.size != -(-size // 8):
        raise ProtocolError(f"{name}: expected a ({-(-size // 8)},) uint8 bitmap over {size} ids")
    bits = np.unpackbits(bitmap)
    if bits[size:].any():
        raise ProtocolError(f"{name}: bitmap sets a padding bit")
    return [int(universe[i]) for i in np.flatnonzero(bits[:size])]


def pack_ids(ids: Sequence[int]) -> np.ndarray:
    """``ids`` (distinct, non-negative) in their order, in the shorter encoding (module
    docstring)."""
    values = np.asarray([int(i) for i in ids], dtype=np.int64)
    ascending = values.size > 0 and bool(np.all(np.diff(values) > 0))
    if ascending and -(-(int(values[-1]) + 1) // 8) < 4 * values.size:
        bits = np.zeros(int(values[-1]) + 1, dtype=bool)
        bits[values] = True
        return np.packbits(bits)
    return values.astype(np.int32 if values.size == 0 or values.max() < 2**31 else np.int64)


def unpack_ids(array: np.ndarray, name: str) -> list[int]:
    """The id list :func:`pack_ids` encoded; malformed or repeated ids: ProtocolError."""
    if array.ndim != 1:
        raise ProtocolError(f"{name}: expected a 1-D array")
    if array.dtype == np.uint8:
        return np.flatnonzero(np.unpackbits(array)).tolist()
    if array.dtype.kind not in "iu":
        raise ProtocolError(f"{name}: expected a bitmap or integer ids")
    ids = array.tolist()
    if len(set(ids)) != len(ids) or any(i < 0 for i in ids):
        raise ProtocolError(f"{name}: ids must be distinct and non-negative")
    return ids
