"""Exact integer products in float64 on any torch device: GEMMs and negacyclic polynomial products.

The LWE backends (:mod:`securefl.crypto.lwe`, :mod:`securefl.crypto.rlwe`) reduce all their
arithmetic mod ``q = 2^104`` to products of *limb* matrices (integers below ``2^36``) by small
matrices (entries in ``{-1, 0, 1}``), accumulated in float64.  A float64 result is exact when
every partial sum is an integer below ``2^53``; this module runs those products on a torch
device (``"cpu"``, ``"cuda"``, ``"cuda:1"``, ...) and *checks* that they were exact.

* :func:`gemm`: ``a @ b`` for numpy float64 operands, on the device (zero-copy on the CPU).
  :func:`check_exact_gemm` is the known-answer test run before every session on that device.
* :class:`NegacyclicProducts`: products in ``Z[X]/(X^N + 1)`` of *public* polynomials ``a``
  (``T`` signed limbs of at most ``limb_bits`` bits each) by *small* polynomials ``v``
  (coefficients in ``{-1, 0, 1}``).  ``q = 2^104`` has no ``2N``-th roots of unity, so the
  number-theoretic transform does not apply directly; the product is computed over the
  complex numbers by the folded, twisted FFT of length ``N / 2`` and rounded to integers:
  with ``z_k = exp(i pi (1 - 4k) / N)`` (``k < N/2``, the roots of ``X^N + 1`` with
  ``z^{N/2} = i``), ``a(z_k) = FFT_{N/2}((a_lo + i a_hi) * w)[k]`` where ``a_lo``, ``a_hi``
  are the two halves of the coefficients and ``w_j = exp(i pi j / N)``.  A product is
  ``IFFT(A * V) / w`` whose real part holds coefficients ``0 .. N/2 - 1`` and imaginary part
  ``N/2 .. N - 1``.  The exact result has ``|c| <= K 2^limb_bits`` (``K`` the number of
  terms summed, ``K 2^limb_bits < 2^53`` is required) and the floating-point error is about
  ``||a||_2 ||v||_2 2^-53 log2 N``: for ``N = 4096``, 26-bit limbs and up to ``2^16 + 2^12``
  summed small coefficients, about ``2^-9``, so rounding recovers the integers (and the check
  below catches any case where it does not).

**Exactness check before use.**  Every product this class returns is verified: with a
prime ``p = 786433 = 3 * 2^18 + 1`` and two roots ``r`` of ``X^N + 1`` mod ``p``, it
checks ``c(r) = sum_k a_k(r) v_k(r)`` mod ``p`` for every output row and limb (an
evaluation, i.e. Freivalds, check: ``O(N)`` per row against ``O(N log N)`` for the
product, computed with exact float64 sums below ``2^53``).  A wrong coefficient ``c_j``
off by ``e`` changes ``c(r)`` by ``e r^j != 0`` mod ``p`` whenever ``p`` does not divide
``e``, so a single wrong coefficient is always caught unless its error is a multiple of
``p`` (``>= 2^19``, far beyond a rounding slip); several random errors pass both roots with
probability about ``p^-2 = 2^-39``.  A failed check raises
:class:`~securefl.errors.PlatformError` before the product is used.
:func:`check_exact_ring` adds a known-answer test at the extreme magnitude (all-maximal
limbs times the all-ones polynomial, whose product is ``(2j + 2 - N) A`` in closed form),
run before every session on the device.

Why by hand: numpy, scipy and torch offer FFTs and GEMMs but no negacyclic product over
``Z_(2^k)``, and no library checks float64 results for exactness; the FFT folding is the
textbook one (e.g. TFHE's), written here in a dozen torch calls (on the CPU its last pass,
untwist and rounding, is a compiled kernel of :mod:`securefl.crypto.kernels`).  torch is
used only as a device-generic array library (the rest of the crypto room is numpy); it is
imported here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache, lru_cache

import numpy as np
import torch

from securefl.crypto import kernels
from securefl.errors import InputError, PlatformError

FLOAT64_EXACT_BITS = 53
CHECK_PRIME = 786433
"""``3 * 2^18 + 1``: a prime with ``2N``-th roots of unity for every ``N <= 2^17``."""
CHECK_ROOTS = 2
"""Evaluation points (roots of ``X^N + 1`` mod :data:`CHECK_PRIME`) of the exactness check."""
_CHUNK_BYTES = {"cpu": 1 << 22, "cuda": 1 << 28}
"""Largest complex intermediate of one batch of polynomial products: cache-sized on a CPU
(4 MiB), large on a GPU (256 MiB)."""


def resolve_device(device: str | torch.device) -> torch.device:
    """``device`` as a :class:`torch.device`; :class:`InputError` naming it if torch cannot use it."""
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise InputError("device", device, f"is not a torch device: {exc}") from None
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            raise InputError("device", device, "torch sees no CUDA device on this machine")
        if resolved.index is not None and resolved.index >= torch.cuda.device_count():
            raise InputError("device", device, f"torch sees {torch.cuda.device_count()} CUDA device(s)")
    elif resolved.type != "cpu":
        raise InputError("device", device, "must be 'cpu' or a CUDA device ('cuda', 'cuda:<k>')")
    return resolved


@contextmanager
def torch_threads(workers: int) -> Iterator[None]:
    """Run torch's CPU products on ``workers`` threads inside the block (restored after)."""
    before = torch.get_num_threads()
    torch.set_num_threads(int(workers))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _to_device(array: np.ndarray, device: torch.device) -> torch.Tensor:
    if array.dtype != np.float64:
        raise InputError("array", array, "products take float64 operands")
    if any(s < 0 for s in array.strides):
        array = np.ascontiguousarray(array)
    tensor = torch.from_numpy(array)
    return tensor if device.type == "cpu" else tensor.to(device)


def gemm(a: np.ndarray, b: np.ndarray, *, device: torch.device, out: np.ndarray | None = None) -> np.ndarray:
    """``a @ b`` of float64 numpy matrices on ``device`` (into ``out`` when given), as numpy.

    Exact whenever every partial sum is an integer below ``2^53`` and the device's GEMM
    is (:func:`check_exact_gemm`)."""
    left, right = _to_device(a, device), _to_device(b, device)
    if device.type == "cpu":
        if out is None:
            return torch.matmul(left, right).numpy()
        torch.matmul(left, right, out=torch.from_numpy(out))
        return out
    product = torch.matmul(left, right).cpu().numpy()
    if out is None:
        return product
    out[...] = product
    return out


@lru_cache(maxsize=8)
def _gemm_known_answer(inner: int, limb_bits: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The fixed operands of :func:`check_exact_gemm` as float64 and their exact int64 product
    (numpy's int64 matmul, no BLAS), computed once per process and shape (never written to)."""
    generator = np.random.default_rng(inner)  # a fixed test vector, not key material
    left = generator.integers(0, 1 << limb_bits, size=(32, inner), dtype=np.int64)
    left[0] = (1 << limb_bits) - 1
    right = generator.integers(-1, 2, size=(inner, 32), dtype=np.int64)
    right[:, 0] = 1
    right[:, 1] = -1
    return left.astype(np.float64), right.astype(np.float64), left @ right


def check_exact_gemm(device: torch.device, inner: int, limb_bits: int) -> None:
    """Known-answer test: ``limb_bits``-bit matrices (one row all-maximal) times ternary ones
    (one column all ones, one all minus ones) at inner dimension ``inner`` on ``device``,
    against int64 products (the expected answer is computed once per process; the device's
    product runs at every call); :class:`PlatformError` unless every entry is exact."""
    left, right, exact = _gemm_known_answer(int(inner), int(limb_bits))
    got = gemm(left, right, device=device)
    if got.shape != exact.shape or not np.array_equal(got, exact.astype(np.float64)):
        raise PlatformError(
            f"float64 matrix products are not exact on integers below 2^53 on device {device} "
            f"(inner dimension {inner}); the LWE Hamming backends refuse to run (use backend='shade')"
        )



def _roots(n: int) -> list[int]:
    """:data:`CHECK_ROOTS` distinct roots of ``X^n + 1`` modulo :data:`CHECK_PRIME`."""
    order = 2 * n
    if (CHECK_PRIME - 1) % order:
        raise InputError("N", n, f"the exactness check needs 2N to divide {CHECK_PRIME - 1}")
    for base in range(2, CHECK_PRIME):
        root = pow(base, (CHECK_PRIME - 1) // order, CHECK_PRIME)
        if pow(root, n, CHECK_PRIME) == CHECK_PRIME - 1:  # a primitive 2n-th root
            return [pow(root, 2 * k + 1, CHECK_PRIME) for k in range(CHECK_ROOTS)]
    raise AssertionError("unreachable: Z_p^* is cyclic")


@cache
def _powers(n: int) -> np.ndarray:
    """``r^j mod p`` for ``j < n`` and every check root ``r`` (``(n, R)`` float64, read-only;
    computed once per process and ring dimension)."""
    roots = _roots(n)
    out = np.empty((n, len(roots)), dtype=np.float64)
    for k, root in enumerate(roots):
        value = 1
        column = [0] * n
        for j in range(n):
            column[j] = value
            value = value * root % CHECK_PRIME
        out[:, k] = column
    out.flags.writeable = False
    return out


class NegacyclicProducts:
    """Products in ``Z[X]/(X^N + 1)`` of fixed public polynomials by small ones, on a device.

    ``publics`` is a float64 array ``(m, T, N)``: ``m`` public polynomials, each as ``T``
    integer limbs with ``|limb| < 2^limb_bits``.  :meth:`multiply` returns, for small
    polynomials ``v_k`` (rows of ``smalls[k]``, coefficients in ``{-1, 0, 1}``), the exact
    integer limbs ``c_t = sum_k v_k * publics[which[k], t]`` (module docstring), each
    product verified before it is returned.
    """

    def __init__(self, publics: np.ndarray, *, limb_bits: int, device: torch.device) -> None:
        publics = np.asarray(publics)
        if publics.ndim != 3 or publics.dtype != np.float64:
            raise InputError("publics", publics, "must be a float64 (m, T, N) array of limbs")
        n = publics.shape[2]
        if n < 2 or n & (n - 1) or n * CHECK_PRIME**2 >= 1 << FLOAT64_EXACT_BITS:
            raise InputError("N", n, "the ring dimension must be a power of two in [2, 8192] (exactness check)")
        if not 0 < limb_bits < FLOAT64_EXACT_BITS or np.abs(publics).max(initial=0) >= 2.0**limb_bits:
            raise InputError("limb_bits", limb_bits, "every public limb must be below 2^limb_bits in absolute value")
        self.n, self.limbs, self.limb_bits, self.device = n, publics.shape[1], int(limb_bits), device
        half = n // 2
        angles = torch.arange(half, dtype=torch.float64, device=device) * (np.pi / n)
        self._twist = torch.polar(torch.ones_like(angles), angles)
        self._untwist = self._twist.conj().resolve_conj().cpu().numpy()
        self._table = self._transform(torch.as_tensor(publics, device=device))
        self._powers = torch.tensor(_powers(n), device=device)
        self._public_values = self._evaluate(torch.as_tensor(publics, device=device))

    def _transform(self, polys: torch.Tensor) -> torch.Tensor:
        """``(..., N)`` real -> ``(..., N/2)`` complex: the values at the roots ``z_k``."""
        half = self.n // 2
        folded = torch.complex(polys[..., :half], polys[..., half:]) * self._twist
        return torch.fft.fft(folded, dim=-1)

    def _inverse(self, values: torch.Tensor, out: torch.Tensor) -> None:
        """``(rows, T, N/2)`` complex values -> ``(rows, T, N)`` real coefficients, rounded to
        integers, into ``out`` (on the CPU the untwist and rounding are one compiled pass,
        :func:`~securefl.crypto.kernels.untwist_round_into`)."""
        half = self.n // 2
        folded = torch.fft.ifft(values, dim=-1)
        if self.device.type == "cpu":
            kernels.untwist_round_into(folded.numpy(), self._untwist, out.numpy())
            return
        folded *= self._twist.conj()
        out[..., :half] = folded.real
        out[..., half:] = folded.imag
        out.round_()  # in place on the contiguous output: 2x faster on a CPU than on the strided views

    def _evaluate(self, polys: torch.Tensor) -> torch.Tensor:
        """``(..., N)`` integer polynomials (float64 integers) -> their values mod p at the check
        roots, ``(..., R)``.  Exact: ``fmod`` is exact, ``|fmod(c, p)| < p``, times powers below
        ``p``, summed over ``N`` terms: at most ``N p^2 < 2^53``."""
        reduced = torch.fmod(polys, float(CHECK_PRIME))
        return torch.fmod(reduced @ self._powers, float(CHECK_PRIME))

    def _check(self, smalls: torch.Tensor, which: torch.Tensor, coefficients: torch.Tensor) -> None:
        """The evaluation check of one batch: with row weights ``w_i = 1`` and ``w_i = i + 1``,
        ``sum_i w_i c_i(r) = sum_k (sum_i w_i v_{k,i}(r)) a_k(r)`` mod p for each limb and root.
        The weighted row sums are exact float64 GEMMs (:meth:`multiply` caps the batch so that
        ``sum_i (i + 1) |c_i| < 2^53``); the small side is summed before it is evaluated
        (evaluation is linear; ``|sum_i w_i v_i| <= rows^2`` for entries in ``{-1, 0, 1}``)."""
        rows = coefficients.shape[0]
        weights = torch.stack((torch.ones(rows, dtype=torch.float64, device=self.device),
                               torch.arange(1, rows + 1, dtype=torch.float64, device=self.device)))
        combined = (weights @ coefficients.reshape(rows, -1)).reshape(2, self.limbs, self.n)
        lhs = self._evaluate(combined)
        small_values = self._evaluate(weights @ smalls)
        rhs = torch.fmod(torch.einsum("kwr,ktr->wtr", small_values, self._public_values[which]), float(CHECK_PRIME))
        if bool(torch.remainder(lhs - rhs, float(CHECK_PRIME)).any()):
            raise PlatformError(
                f"a negacyclic polynomial product on device {self.device} failed its exactness check "
                f"(N={self.n}, {self.limb_bits}-bit limbs); the ring-LWE backend refuses to use it"
            )

    def multiply(self, smalls: np.ndarray, which: list[int] | tuple[int, ...], *,
                 out: np.ndarray | None = None) -> np.ndarray:
        """``c[i, t] = sum_k smalls[k, i] * publics[which[k], t]`` in ``Z[X]/(X^N + 1)``, exactly.

        ``smalls`` is float64 ``(k, rows, N)`` with entries in ``{-1, 0, 1}`` (a precondition the
        exactness bounds rely on; the callers pass ternary secrets and binary codes); returns float64
        ``(rows, T, N)`` integer limbs, written into ``out`` when given (a C-contiguous array of
        that shape, so that a caller multiplying again reuses its memory).  Raises
        :class:`PlatformError` if a batch fails its evaluation check (nothing of it is
        returned), :class:`InputError` on bad shapes or indices."""
        smalls = np.asarray(smalls)
        if smalls.ndim != 3 or smalls.shape[0] != len(which) or smalls.shape[2] != self.n or not len(which):
            raise InputError("smalls", smalls, f"must be (len(which)={len(which)} >= 1, rows, N={self.n})")
        if smalls.dtype != np.float64:
            raise InputError("smalls", smalls, "must be float64")
        if any(not 0 <= k < self._table.shape[0] for k in which):
            raise InputError("which", which, f"public polynomial indices must lie in [0, {self._table.shape[0]})")
        bound = len(which) * self.n * ((1 << self.limb_bits) - 1)
        rows = smalls.shape[1]
        chunk = max(1, _CHUNK_BYTES[self.device.type] // (16 * self.limbs * self.n // 2))
        while chunk > 1 and chunk * (chunk + 1) // 2 * bound >= 1 << FLOAT64_EXACT_BITS:
            chunk //= 2
        if bound >= 1 << FLOAT64_EXACT_BITS:
            raise InputError("smalls", smalls, f"{len(which)} x N terms of {self.limb_bits}-bit limbs reach 2^53")
        shape = (rows, self.limbs, self.n)
        if out is None:
            out = np.empty(shape, dtype=np.float64)
        elif out.shape != shape or out.dtype != np.float64 or not out.flags.c_contiguous:
            raise InputError("out", out.shape, f"must be a C-contiguous float64 array of shape {shape}")
        index = torch.as_tensor(list(which), dtype=torch.long, device=self.device)
        table = self._table[index]
        for start in range(0, rows, chunk):
            part = torch.as_tensor(smalls[:, start : start + chunk], device=self.device)
            spectrum = self._transform(part)
            products = spectrum[0, :, None, :] * table[0]
            for k in range(1, len(which)):
                products += spectrum[k, :, None, :] * table[k]
            target = out[start : start + part.shape[1]]
            coefficients = torch.from_numpy(target) if self.device.type == "cpu" else torch.empty(
                target.shape, dtype=torch.float64, device=self.device)
            self._inverse(products, coefficients)
            self._check(part, index, coefficients)
            if self.device.type != "cpu":
                target[...] = coefficients.cpu().numpy()
        return out


def check_exact_ring(n: int, limb_bits: int, device: torch.device) -> None:
    """Known-answer test of :class:`NegacyclicProducts` on ``device`` at the extreme magnitude:
    the all-``A`` polynomial (``A = 2^limb_bits - 1``, and ``-A``) times the all-ones one is
    ``(2j + 2 - N) A`` at coefficient ``j``; a monomial ``X^s`` shifts negacyclically.
    :class:`PlatformError` unless exact (each product also passes the evaluation check)."""
    top = float((1 << limb_bits) - 1)
    publics = np.stack([np.full((1, n), top), np.full((1, n), -top)])
    ring = NegacyclicProducts(publics, limb_bits=limb_bits, device=device)
    shift = n // 3
    monomial = np.zeros((1, 1, n))
    monomial[0, 0, shift] = 1.0
    smalls = np.concatenate([np.ones((1, 1, n)), monomial], axis=1)
    ramp = (2.0 * np.arange(n) + 2 - n) * top
    shifted = np.where(np.arange(n) >= shift, top, -top)
    for k, sign in ((0, 1.0), (1, -1.0)):
        got = ring.multiply(smalls, [k])
        if not (np.array_equal(got[0, 0], sign * ramp) and np.array_equal(got[1, 0], sign * shifted)):
            raise PlatformError(
                f"negacyclic float64 FFT products are not exact on device {device} "
                f"(N={n}, {limb_bits}-bit limbs); the ring-LWE backend refuses to run (use backend='lwe' or 'shade')"
            )
