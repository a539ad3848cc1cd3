"""Fixed-point encoding of real (or integer) vectors into the ring Z_(2^k), k <= 64.

Secure summation adds ring elements; real numbers enter the ring as

    enc(x) = round(clip(x) * scale) mod 2^k,          scale = 2^f (a power of two)
    dec(s) = signed(s) / scale,   signed(s) = s - 2^k if s >= 2^(k-1) else s

where ``clip`` maps x into [-C, C] when a clip bound C is given.  Integer vectors enter
as themselves mod 2^k (scale 1, no rounding).  Sums are computed in a numpy container
dtype of width w in {8, 16, 32, 64} >= k (arithmetic mod 2^w, then reduced mod 2^k,
which is exact because 2^k divides 2^w).

**Overflow.**  For real inputs the decoded sum of n encodings equals the true integer
sum only if that sum lies in [-2^(k-1), 2^(k-1)).  :class:`FixedPoint` guarantees this *by
construction* and locally, without any party learning another's input, with exact
integer arithmetic at every k (never a float64 comparison, which rounds 2^63 - 1 up to
2^63): with a clip bound C it requires ``n * round(C * scale) < 2^(k-1)`` when it is
built; without one, every encoder rejects a value whose scaled, rounded encoding
``|round(x * scale)|`` exceeds ``B = floor((2^(k-1) - 1) / n)`` (the per-client share of
the range; the comparison is against the largest float64 not above B, which is exact
for the integer-valued floats it compares).  Either way the n encodings sum to at most
n B < 2^(k-1) in absolute value, the int64 cast cannot overflow, and an overflow is
reported as an :class:`~securefl.errors.InputError` naming the parameter, never a
wrapped result.  Integer inputs are ring elements by design: they are summed mod 2^k
(only each value's range is checked), which is what one-time pads need.

**Error bound.** Rounding moves each encoded value by at most 1/(2 scale); the integer
sum is exact; the final conversion of the integer sum S to float64 rounds by at most
|S| 2^-53 and the division by a power-of-two scale is exact.  Hence

    |dec(sum_i enc(x_i)) - sum_i clip(x_i)| <= n / (2 scale) + 2^-53 (sum_i |clip(x_i)| + n / (2 scale))

which :meth:`FixedPoint.error_bound` returns.  The secure and the plaintext backends of
:func:`securefl.runtime.secure_sum` both use these functions, so their decoded totals
are bit-identical.

Why by hand: no maintained library offers vectorised two's-complement fixed point in
Z_(2^k) with a stated bound; it is a few lines of numpy.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np

from securefl.errors import InputError

DEFAULT_MODULUS_BITS = 64
DEFAULT_SCALE = 2.0**32
"""Default scale for floats: resolution 2^-32 ~ 2.3e-10; with n clients each value may
reach (2^31 - 1) / n (about 2.1e7 for 100 clients) without a clip bound."""


def container_dtype(modulus_bits: int) -> np.dtype:
    """The narrowest unsigned numpy dtype holding Z_(2^modulus_bits)."""
    if not isinstance(modulus_bits, (int, np.integer)) or not 1 <= modulus_bits <= 64:
        raise InputError("modulus_bits", modulus_bits, "must be an integer in 1..64")
    for bits in (8, 16, 32, 64):
        if modulus_bits <= bits:
            return np.dtype(f"uint{bits}")
    raise AssertionError("unreachable")


def ring_mask(modulus_bits: int) -> np.unsignedinteger:
    """2^k - 1 in the container dtype (AND with it reduces mod 2^k)."""
    dtype = container_dtype(modulus_bits)
    return dtype.type((1 << modulus_bits) - 1)


@dataclass(frozen=True)
class FixedPoint:
    """Encoding parameters shared by all parties of one secure sum.

    Parameters
    ----------
    parties:
        Number of clients whose encodings may be summed (sets the overflow bound).
    modulus_bits:
        k: the ring is Z_(2^k).
    scale:
        A power of two (2^f) for real inputs; ``1.0`` for integer inputs.
    clip:
        Optional bound C: real inputs are clipped to [-C, C] before encoding.
    integer:
        True for integer inputs (no scaling, no rounding, no clipping).
    signed:
        For integer inputs: decode to int64 (two's complement) rather than uint64.
    """

    parties: int
    modulus_bits: int = DEFAULT_MODULUS_BITS
    scale: float = DEFAULT_SCALE
    clip: float | None = None
    integer: bool = False
    signed: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.parties, (int, np.integer)) or self.parties < 1:
            raise InputError("parties", self.parties, "must be a positive integer")
        container_dtype(self.modulus_bits)
        if self.integer:
            if self.scale != 1.0 or self.clip is not None:
                raise InputError("scale", self.scale, "integer inputs take no scale or clip")
            return
        if not (isinstance(self.scale, (int, float)) and math.isfinite(self.scale) and self.scale > 0):
            raise InputError("scale", self.scale, "must be a positive finite number")
        if math.frexp(self.scale)[0] != 0.5:
            raise InputError("scale", self.scale, "must be a power of two (2^f)")
        if self.clip is not None:
            clip = self.clip
            if not (isinstance(clip, numbers.Real) and math.isfinite(clip) and clip > 0):
                raise InputError("clip", self.clip, "must be a positive finite number")
            if not math.isfinite(self.clip * self.scale):
                raise InputError("clip", self.clip, f"clip x scale {self.scale:g} is not finite")
            worst = self.parties * round(self.clip * self.scale)
            if worst >= 1 << (self.modulus_bits - 1):
                raise InputError(
                    "clip",
                    self.clip,
                    f"{self.parties} clients x clip x scale {self.scale:g} = {worst} overflows "
                    f"Z_(2^{self.modulus_bits}) (needs < 2^{self.modulus_bits - 1}); "
                    "lower clip or scale, or raise modulus_bits",
                )

    @property
    def dtype(self) -> np.dtype:
        """Container dtype of encoded vectors."""
        return container_dtype(self.modulus_bits)

    @property
    def scaled_bound(self) -> int:
        """B = floor((2^(k-1) - 1) / n): the largest |round(x * scale)| one client may send."""
        return ((1 << (self.modulus_bits - 1)) - 1) // self.parties

    @property
    def bound(self) -> float:
        """Largest |x| one client may contribute: the clip bound, or the largest float64
        not above B, divided by the (power-of-two) scale, which is exact."""
        if self.clip is not None:
            return float(self.clip)
        return _float_at_most(self.scaled_bound) / self.scale

    def encode(self, x: np.ndarray, *, name: str = "x") -> np.ndarray:
        """Encode one client's 1-D vector into the container dtype (values in [0, 2^k))."""
        x = np.asarray(x)
        if self.integer:
            return self._encode_integer(x, name)
        if x.dtype.kind not in "fiub":
            raise InputError(name, x, "must be a real-valued array")
        x = x.astype(np.float64, copy=False)
        if not np.all(np.isfinite(x)):
            raise InputError(name, x, "contains NaN or infinity")
        if self.clip is not None:
            x = np.clip(x, -self.clip, self.clip)
        scaled = np.rint(x * self.scale)
        # |scaled| are integer-valued floats (or inf), so comparing them with the largest
        # float64 <= B is the exact integer test |round(x * scale)| <= B.
        peak = float(np.max(np.abs(scaled))) if scaled.size else 0.0
        if self.clip is None and peak > _float_at_most(self.scaled_bound):
            raise InputError(
                name,
                x,
                f"max |x| = {float(np.max(np.abs(x))):g} encodes to {peak:.0f} > "
                f"{self.scaled_bound} = floor((2^{self.modulus_bits - 1} - 1) / {self.parties}), "
                f"the overflow-safe bound for {self.parties} clients in Z_(2^{self.modulus_bits}) "
                f"at scale {self.scale:g} (|x| <= {self.bound:g}); "
                "pass clip=, a smaller scale or more modulus_bits",
            )
        return self._reduce(scaled.astype(np.int64).view(np.uint64))

    def _encode_integer(self, x: np.ndarray, name: str) -> np.ndarray:
        if x.dtype.kind not in "iu":
            raise InputError(name, x, "integer inputs must have an integer dtype")
        k = self.modulus_bits
        if x.size:
            low, high = int(x.min()), int(x.max())
            lo_ok, hi_ok = (-(1 << (k - 1)), (1 << (k - 1)) - 1) if self.signed else (0, (1 << k) - 1)
            if low < lo_ok or high > hi_ok:
                raise InputError(
                    name, x, f"values [{low}, {high}] outside [{lo_ok}, {hi_ok}] for Z_(2^{k})"
                )
        wide = x.astype(np.int64).view(np.uint64) if x.dtype.kind == "i" else x.astype(np.uint64)
        return self._reduce(wide)

    def _reduce(self, wide: np.ndarray) -> np.ndarray:
        mask = np.uint64((1 << self.modulus_bits) - 1)
        return np.bitwise_and(wide, mask).astype(self.dtype)

    def decode(self, total: np.ndarray) -> np.ndarray:
        """Decode a ring-element sum: float64 for reals, int64/uint64 for integers."""
        total = np.asarray(total)
        k = self.modulus_bits
        reduced = np.bitwise_and(total.astype(np.uint64), np.uint64((1 << k) - 1))
        if self.integer and not self.signed:
            return reduced
        # Two's-complement sign extension from bit k - 1: shift it to bit 63, then an
        # arithmetic shift back (exact at every k; 2^k itself never appears).
        shift = np.uint64(64 - k)
        signed = np.left_shift(reduced, shift).view(np.int64) >> np.int64(64 - k)
        if self.integer:
            return signed
        return signed.astype(np.float64) / self.scale

    def error_bound(self, parties: int, abs_sum: float | np.ndarray) -> float | np.ndarray:
        """Bound on |decoded sum - sum of clipped inputs| for ``parties`` summands whose
        clipped absolute values sum to ``abs_sum`` (0 for integer inputs)."""
        if self.integer:
            return 0.0 if np.ndim(abs_sum) == 0 else np.zeros_like(abs_sum, dtype=np.float64)
        rounding = parties / (2.0 * self.scale)
        return rounding + 2.0**-53 * (np.asarray(abs_sum, dtype=np.float64) + rounding)


def _float_at_most(value: int) -> float:
    """The largest float64 not above the integer ``value`` (float() may round up)."""
    result = float(value)
    if int(result) > value:
        result = math.nextafter(result, -math.inf)
    return result


def encode_fixed_point(x: np.ndarray, encoding: FixedPoint) -> np.ndarray:
    """Functional form of :meth:`FixedPoint.encode`."""
    return encoding.encode(x)


def decode_fixed_point(total: np.ndarray, encoding: FixedPoint) -> np.ndarray:
    """Functional form of :meth:`FixedPoint.decode`."""
    return encoding.decode(total)


def ring_sum(encoded: list[np.ndarray], modulus_bits: int) -> np.ndarray:
    """Sum encoded vectors in Z_(2^k) (container arithmetic wraps mod 2^w, then reduce)."""
    dtype = container_dtype(modulus_bits)
    if not encoded:
        raise InputError("encoded", encoded, "need at least one vector")
    total = np.zeros_like(encoded[0], dtype=dtype)
    for vector in encoded:
        np.add(total, vector, out=total)
    return np.bitwise_and(total, ring_mask(modulus_bits))
