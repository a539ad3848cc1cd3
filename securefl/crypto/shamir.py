"""Shamir t-of-n secret sharing over the prime field F_p, p = 2^61 - 1, vectorised.

A secret s in F_p is shared by drawing a uniformly random polynomial
f(X) = s + a_1 X + ... + a_(t-1) X^(t-1) and giving party j the share f(x_j) at a
public non-zero point x_j.  Any t shares determine f, hence s = f(0) by Lagrange
interpolation  s = sum_j lambda_j f(x_j),  lambda_j = prod_(i != j) x_i / (x_i - x_j);
any t - 1 shares are jointly uniform on F_p^(t-1) whatever s is (information-theoretic
secrecy).  Byte strings (keys, seeds) are split into 7-byte limbs (56 bits < 61 bits),
each shared with its own polynomial.

Vectorisation.  Sharing m secrets at n points is the matrix product V @ C mod p of the
(n, t) Vandermonde matrix and the (t, m) coefficient matrix; reconstruction is
lambda @ S mod p.  Both run as one float64 GEMM on 16-bit limbs: with A = sum_a A_a 2^(16a)
and B = sum_b B_b 2^(16b), every entry of A_a @ B_b is below t 2^32, so float64 is exact
for t <= 2^19; the seven partial sums Q_s = sum_(a+b=s) A_a @ B_b are recombined with
2^(16 s) mod p, a bit rotation because 2^61 = 1 (mod p).  (Measured on the project
machine: 1000 polynomials of degree 50 at 100 points in ~15 ms, against ~0.4 s with
Python integers.)  Vandermonde matrices and Lagrange coefficients depend only on the
public points and are cached.

Why by hand: no maintained Python library shares numpy batches of secrets; the
generic ones loop over Python integers per secret.

Randomness: polynomial coefficients come from ``rng(nbytes)``, by default
``secrets.token_bytes`` (OS CSPRNG), with rejection sampling so they are exactly
uniform on F_p.
"""

from __future__ import annotations

import math
import secrets as _secrets
from collections.abc import Callable, Sequence
from functools import lru_cache

import numpy as np

from securefl.errors import InputError

PRIME = (1 << 61) - 1
"""The Mersenne prime p = 2^61 - 1."""

LIMB_BYTES = 7
"""Bytes of a byte string packed into one field element."""

_P = np.uint64(PRIME)
_MASK16 = np.uint64(0xFFFF)

RandomBytes = Callable[[int], bytes]


def random_field_elements(shape: int | tuple[int, ...], rng: RandomBytes | None = None) -> np.ndarray:
    """Uniform elements of F_p (uint64) by rejection sampling 61-bit strings."""
    rng = rng or _secrets.token_bytes
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    count = int(np.prod(shape, dtype=np.int64))
    out = np.frombuffer(rng(8 * count), dtype=np.uint64).copy() & _P
    bad = np.flatnonzero(out == _P)
    while bad.size:
        out[bad] = np.frombuffer(rng(8 * bad.size), dtype=np.uint64) & _P
        bad = bad[out[bad] == _P]
    return out.reshape(shape)


def _reduce(x: np.ndarray) -> np.ndarray:
    """x mod p for x < 2^64 - 2^3 (one fold plus one conditional subtraction)."""
    x = (x & _P) + (x >> np.uint64(61))
    return np.where(x >= _P, x - _P, x)


def _times_power_of_two(x: np.ndarray, exponent: int) -> np.ndarray:
    """x * 2^exponent mod p for x < p (a 61-bit rotation)."""
    e = exponent % 61
    if e == 0:
        return x
    low = (x << np.uint64(e)) & _P
    return low + (x >> np.uint64(61 - e))


def matmul_mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(a @ b) mod p for uint64 matrices with entries in F_p, via float64 GEMM on 16-bit limbs."""
    a = np.asarray(a, dtype=np.uint64)
    b = np.asarray(b, dtype=np.uint64)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise InputError("b", b, f"shapes {a.shape} and {b.shape} do not multiply")
    inner = a.shape[1]
    if inner > 1 << 19:
        raise InputError("a", a, "inner dimension above 2^19 is not exact in float64")
    rows, cols = a.shape[0], b.shape[1]
    shifts = [np.uint64(16 * i) for i in range(4)]
    a_limbs = np.concatenate([((a >> s) & _MASK16).astype(np.float64) for s in shifts], axis=0)
    b_limbs = np.concatenate([((b >> s) & _MASK16).astype(np.float64) for s in shifts], axis=1)
    products = (a_limbs @ b_limbs).astype(np.uint64)
    total = np.zeros((rows, cols), dtype=np.uint64)
    for s in range(7):
        partial = np.zeros((rows, cols), dtype=np.uint64)
        for i in range(max(0, s - 3), min(3, s) + 1):
            j = s - i
            partial += products[i * rows : (i + 1) * rows, j * cols : (j + 1) * cols]
        total += _times_power_of_two(_reduce(partial), 16 * s)
    return _reduce(total)


def _check_points(points: Sequence[int]) -> tuple[int, ...]:
    xs = tuple(int(x) for x in points)
    if len(set(xs)) != len(xs):
        raise InputError("points", points, "must be distinct")
    if any(not 0 < x < PRIME for x in xs):
        raise InputError("points", points, f"must lie in 1..{PRIME - 1}")
    return xs


@lru_cache(maxsize=256)
def _vandermonde(xs: tuple[int, ...], threshold: int) -> np.ndarray:
    rows = [[pow(x, d, PRIME) for d in range(threshold)] for x in xs]
    return np.array(rows, dtype=np.uint64).reshape(len(xs), threshold)


@lru_cache(maxsize=4096)
def _lagrange(xs: tuple[int, ...]) -> np.ndarray:
    # Exact integer products first (C-level math.prod over Python ints), one reduction
    # and one inversion per coefficient: ~10x faster than a modular double loop.
    total = math.prod(xs)
    coefficients = []
    for xj in xs:
        denominator = math.prod([xi - xj for xi in xs if xi != xj])
        coefficients.append((total // xj) % PRIME * pow(denominator % PRIME, PRIME - 2, PRIME) % PRIME)
    return np.array(coefficients, dtype=np.uint64)


def share(
    secrets: np.ndarray,
    *,
    threshold: int,
    points: Sequence[int],
    rng: RandomBytes | None = None,
) -> np.ndarray:
    """Share each element of the 1-D uint64 array ``secrets`` (values < p) t-of-n.

    Returns a ``(len(points), len(secrets))`` uint64 array: row j holds party j's shares
    f_i(points[j]) of every secret i.
    """
    values = np.asarray(secrets)
    if values.ndim != 1 or values.dtype.kind not in "ui":
        raise InputError("secrets", secrets, "must be a 1-D integer array")
    values = values.astype(np.uint64)
    if values.size and int(values.max()) >= PRIME:
        raise InputError("secrets", secrets, "elements must be < p = 2^61 - 1")
    xs = _check_points(points)
    if not isinstance(threshold, (int, np.integer)) or not 1 <= threshold <= len(xs):
        raise InputError("threshold", threshold, f"must be in 1..{len(xs)} (number of points)")
    coefficients = np.empty((threshold, values.size), dtype=np.uint64)
    coefficients[0] = values
    coefficients[1:] = random_field_elements((threshold - 1, values.size), rng)
    return matmul_mod(_vandermonde(xs, int(threshold)), coefficients)


def reconstruct(points: Sequence[int], shares: np.ndarray) -> np.ndarray:
    """Recover the secrets from shares held at ``points`` (rows of ``shares``).

    Correct whenever ``len(points) >= threshold``; with fewer shares the output is a
    uniformly distributed wrong value (Shamir has no built-in integrity check).
    """
    shares = np.asarray(shares)
    xs = _check_points(points)
    if shares.ndim != 2 or shares.shape[0] != len(xs):
        raise InputError("shares", shares, f"must be ({len(xs)}, m): one row per point")
    if shares.size and int(shares.max()) >= PRIME:
        raise InputError("shares", shares, "elements must be < p = 2^61 - 1")
    return matmul_mod(_lagrange(xs)[None, :], shares.astype(np.uint64))[0]


def bytes_to_elements(data: np.ndarray) -> np.ndarray:
    """Pack a ``(m, L)`` uint8 array (m byte strings) into ``(m, ceil(L/7))`` field elements."""
    data = np.asarray(data)
    if data.ndim != 2 or data.dtype != np.uint8:
        raise InputError("data", data, "must be a (m, L) uint8 array")
    m, length = data.shape
    limbs = -(-length // LIMB_BYTES)
    padded = np.zeros((m, limbs, 8), dtype=np.uint8)
    flat = np.zeros((m, limbs * LIMB_BYTES), dtype=np.uint8)
    flat[:, :length] = data
    padded[:, :, :LIMB_BYTES] = flat.reshape(m, limbs, LIMB_BYTES)
    return padded.view("<u8").reshape(m, limbs)


def elements_to_bytes(elements: np.ndarray, length: int) -> np.ndarray:
    """Inverse of :func:`bytes_to_elements`: ``(m, limbs)`` elements -> ``(m, length)`` uint8.

    Raises :class:`InputError` if an element does not fit 56 bits (a wrong reconstruction).
    """
    elements = np.asarray(elements, dtype=np.uint64)
    if elements.ndim != 2:
        raise InputError("elements", elements, "must be (m, limbs)")
    if elements.size and int(elements.max()) >= 1 << (8 * LIMB_BYTES):
        raise InputError("elements", elements, "an element exceeds 56 bits: not a packed byte string")
    m, limbs = elements.shape
    if not 0 <= length <= limbs * LIMB_BYTES:
        raise InputError("length", length, f"must be in 0..{limbs * LIMB_BYTES}")
    raw = elements.astype("<u8").view(np.uint8).reshape(m, limbs, 8)[:, :, :LIMB_BYTES]
    return raw.reshape(m, limbs * LIMB_BYTES)[:, :length].copy()


def shares_to_bytes(shares: np.ndarray) -> bytes:
    """Little-endian 8-byte encoding of a uint64 share array (row-major)."""
    return np.ascontiguousarray(shares, dtype="<u8").tobytes()


def shares_from_bytes(data: bytes, count: int) -> np.ndarray:
    """Parse ``count`` shares written by :func:`shares_to_bytes`, checking each is < p."""
    if len(data) != 8 * count:
        raise InputError("data", data, f"must be {8 * count} bytes for {count} shares, got {len(data)}")
    values = np.frombuffer(data, dtype="<u8").astype(np.uint64)
    if values.size and int(values.max()) >= PRIME:
        raise InputError("data", data, "a share is not below p = 2^61 - 1")
    return values


shamir_share = share
"""Alias of :func:`share` under a name unambiguous in ``securefl.crypto``."""

shamir_reconstruct = reconstruct
"""Alias of :func:`reconstruct` under a name unambiguous in ``securefl.crypto``."""
