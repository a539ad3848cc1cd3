"""Ring-structured public matrix for the LWE Hamming backend: the ``"rlwe"`` backend.

:mod:`securefl.crypto.lwe` spends most of its time multiplying by the public matrix
``M in Z_q^{K x n}`` (``K = L + L'``): ``C = S M^T`` and the hint ``M^T Y'^T``, each
``n_j n K`` multiply-adds per party whatever the pairs.  The ``"rlwe"`` backend builds ``M``
from negacyclic blocks, as every homomorphic-encryption library does, so that both products
become polynomial products in ``R = Z[X]/(X^N + 1)``, ``N = n = L' = 4096``: ``O(N log N)``
per point and block instead of ``O(N K)``; and when ``L <= N / 2`` it packs ``P = floor(N / L)``
points' codes into one ring ciphertext under one secret, which shrinks the encryptor's
broadcast ``C``.  Everything else (the hint, the answers, noise bound, flooding, decryption,
shares, the bits out) is the LWE backend's, unchanged.

**The structured M.**  From the session seed (domain ``securefl/rlwe/M/``) AES-CTR expands
``m = ceil(L / N) + 1`` uniform polynomials ``a_0, ..., a_{m-1} in R_q``, ``q = 2^104``.  Let
``A_k`` be the ``N x N`` negacyclic matrix of ``a_k`` (``A_k s`` is the coefficient vector of
``a_k s``).  ``M`` stacks ``A_0, ..., A_{m-2}`` (the message columns, the last one cut to the
``L - (m-2) N`` rows that exist) and ``A_{m-1}`` (the ``L' = N`` re-randomisation rows).
Then, writing polynomials for vectors:

* ``C_i`` (encryptor, secret ``s_i``): column ``c < L`` is coefficient ``c mod N`` of
  ``a_{c div N} s_i``; column ``L + j`` is coefficient ``j`` of ``a_{m-1} s_i``: ``m`` ring
  products per point.
* ``H'_j`` (evaluator, ``y'_j = [y_j | r_j]`` cut into ``N``-blocks ``v_0 .. v_{m-1}``, the
  last message block zero-padded): the transpose of a negacyclic matrix is the negacyclic
  matrix of the conjugate ``a*(X) = a(X^-1) = a_0 - a_{N-1} X - ... - a_1 X^{N-1}``, so
  ``H'_j = M^T y'_j + g_j = sum_k a_k* v_k + g_j``: ``m`` ring products, summed before one
  inverse transform.

**Packed ciphertexts** (:func:`packing` ``P = max(1, floor(N / L))``; ``P >= 2`` only for
``L <= N / 2``, where ``m = 2``: ``a = a_0``, ``b = a_1``).  The encryptor's points
``gP .. gP + P_g - 1`` (``P_g <= P``, the last group may be short; :func:`groups` ``G = ceil(n /
P)``) share one ternary secret ``s_g`` and it sends, per group, the coefficients
``0 .. P_g L - 1`` of ``c_g = a s_g + e_g + Delta sum_t m(x_{gP+t}) X^(tL)`` (``m(x) = -2x``)
and all ``N`` of ``p_g = b s_g + e'_g``: ``n L + G N`` elements
(:func:`ciphertext_elements`) instead of ``n (L + N)``, and ``2 G`` ring products instead of
``2 n``.  *Why it is today's C.*  Let ``sigma_{g,t} = s_g X^(-tL)`` (:func:`times_power`: a
cyclic shift that negates the wrapped coefficients, so still ternary).  Then
``c_g X^(-tL) = a sigma_{g,t} + e_g X^(-tL) + Delta (m(x_{gP+t}) + sum_{t' != t} m(x_{gP+t'})
X^((t'-t)L))``; a point ``t' > t`` sits at coefficients ``>= L``, and one ``t' < t`` wraps (with
its sign) to ``N + (t'-t)L + j >= N - (P-1)L >= L`` since ``PL <= N``: the coefficients
``0 .. L - 1`` of ``c_g X^(-tL)`` are ``c_g``'s ``tL .. tL + L - 1`` (no wrap, ``tL + L <= N``)
and carry point ``t``'s message alone.  With ``p_g X^(-tL) = b sigma_{g,t} + e'_g X^(-tL)``, the
row ``[c_g[tL .. tL + L - 1] | p_g X^(-tL)]`` is exactly the row of ``C = S M^T + E + Delta
[-2X | 0]`` of a point with secret ``sigma_{g,t}`` and noise a signed permutation of
``(e_g, e'_g)``: every ``|E|`` and ``|S|`` entry is bounded as before, so ``N_max``, the
decryption window, the flooding and the ``2^-40`` session bound are unchanged.  The evaluator
never rebuilds the rows: multiplying by ``X`` is an orthogonal signed permutation of the
coefficients, so ``<p_g X^(-tL), r_j> = <p_g, r_j X^(tL)>`` (:func:`times_power_columns`) and
``C Y'^T`` is the same GEMMs on the received blocks; the encryptor decrypts with the rows
``sigma_{g,t}`` against the same hint.  The bits out are the exact Hamming matrix, as before.
``P = 1`` (``L > N / 2``, or the ``"lwe"`` backend) is the unpacked format, byte for byte.

The products are exact integer products in ``Z[X]/(X^N + 1)`` of the public ``a_k`` (four
26-bit limbs, :data:`FFT_LIMB_BITS`) by the ternary or binary ``s_i``, ``v_k``, computed by
float64 FFTs and checked (:class:`~securefl.crypto.linalg.NegacyclicProducts`: every product
passes an evaluation check mod a prime before use, and a known-answer test runs on the
device before each session); the limbs are recombined into the elements mod ``2^104``
(:func:`~securefl.crypto.kernels.rlwe_limbs_into`; for the hint, of which only
``floor(H' / 2^72)`` is sent, straight into those bits with every carry,
:func:`~securefl.crypto.kernels.rlwe_hint_top_into`).  Since ``C = S M^T + E + Delta [-2X | 0]``
and ``H' = M^T Y'^T + G`` hold exactly as in the LWE backend, its correctness argument
(``|E Y'^T - S G| <= N_max``, exact floor) carries over word for word: the ring backend
outputs the same bits, the exact Hamming matrix.

**Who learns what: the security argument for the ring.**  Unchanged in form from
:mod:`securefl.crypto.lwe`; the assumption changes from LWE to ring-LWE.

* *The evaluator learns nothing about X.*  Row ``i`` of ``C`` is ``(a_k, a_k s_i + e_{i,k})``
  for ``k < m`` (the message columns carrying ``Delta (-2 x_i)``, the last block cut): ``m``
  RLWE samples in ``R_q = Z_q[X]/(X^N + 1)`` under one ternary secret ``s_i``, the public
  ``a_k`` shared by all rows (as the public key ``a`` of every RLWE public-key scheme).
  By a hybrid over rows and decision-RLWE with ``m`` samples (equivalently: module-LWE of
  rank 1, or LWE with ``mN`` structured samples), ``C`` is pseudorandom.  *Packed*
  (``P >= 2``): what the evaluator receives of group ``g`` is ``(a, c_g)`` restricted to its
  first ``P_g L`` coefficients and ``(b, p_g)``: two RLWE samples under the one secret ``s_g``
  (the first cut, carrying ``Delta sum_t m(x_{gP+t}) X^(tL)``), the same ``m = 2`` samples per
  secret as unpacked, and ``G`` secrets in all instead of ``n``.  By a hybrid over the ``G``
  groups, each step decision-RLWE with 2 samples (restricting a sample to some coefficients
  is a public function of it), every ``(c_g, p_g)`` may be replaced by uniform, whatever the
  messages; the rows of ``C`` the protocol works with are a public function (rotations) of
  them, so nothing about ``X`` is learned.  The messages of different points never mix (the
  wrap argument above), which is correctness, not privacy.  What changes with packing: the
  bytes of ``C`` (``13 (n L + G N)``), the number of secrets (``G``), the rotations
  ``sigma_{g,t}`` of one secret standing for ``P`` points; what does not: the assumption
  (ring-LWE, same ``N``, ``q``, distributions), the samples per secret (2), the hint, the
  flooding bound, and every statement below.
* *The encryptor learns nothing about Y beyond its share.*  ``H'_j = (sum_{k < m-1} a_k* v_k)
  + (a_{m-1}* r_j + g_j)``; the bracket is one RLWE sample under the fresh ternary ``r_j``
  with the uniform public ``a_{m-1}*`` (conjugation is a bijection of ``R_q``), so ``H'_j`` is
  pseudorandom whatever ``y_j`` is.  The answer ``D`` is flooded exactly as in the LWE
  backend (same ``N_max``, same ``2^-40`` session bound, :func:`~securefl.crypto.lwe.statistical_distance`).
* *The server* and *collusions* of the server with one client: as in :mod:`securefl.crypto.lwe`.

*Parameters and estimate.*  ``N = 4096`` (power of two: ``X^N + 1`` is the ``2N``-th
cyclotomic polynomial), ``q = 2^104``, ternary secrets, ``CBD(21)`` noise (``sigma = 3.24``),
at most ``m <= 17`` samples per secret.  The cyclotomic structure gives no known attack
beyond the generic ones at these parameters, so ring-LWE is estimated as LWE of dimension
``N`` (the convention of the HE standard, whose table is for RLWE).

- *HE standard* (Albrecht et al. 2018, Table for ternary secrets, ``sigma ~ 3.2``; computed
  with the lattice estimator and the ``BKZ.sieve`` cost ``2^(0.292 beta + 16.4 + log2(8d))``):
  ``N = 4096`` allows ``log2 q <= 109`` at 128 bits classical, ``<= 75`` at 192 bits; 104 is
  inside the 128-bit bound (:data:`~securefl.crypto.lwe.HE_STANDARD_128_TERNARY`).
- *Primal uSVP* (ADPS16 "2016 estimate", :func:`primal_usvp_blocksize`; secret rescaled by
  ``sigma_e / sigma_s``): block size ``beta = 351`` (``d = 7858``, i.e. 3761 of the available
  samples), so **core-SVP 102.5 bits classical** (``0.292 beta``) and **93.0 quantum**
  (``0.265 beta``); in the standard's ``BKZ.sieve`` model the same ``beta`` costs **134.8
  bits**.  The same computation at ``log2 q = 109`` gives 127.9 bits in that model: it
  reproduces the standard's 128-bit boundary, the check :func:`security_bits` is tested on.
  Core-SVP ~102 bits is the figure to compare with papers that state core-SVP (Kyber-512:
  118); hybrid and dual attacks on sparse or ternary secrets are not covered by this estimate
  and are not expected to do better at ``N = 4096`` (the standard's table includes them).

Not covered (as for LWE): malicious parties, timing side channels.

Why a separate backend name and not a flag of ``"lwe"``: the security assumption is part of
what a party agrees to run (ring-LWE is a stronger assumption than LWE), so it is named in
the configuration and the records; the messages and their sizes are the LWE backend's at
``L > N / 2`` and the packed ``C`` above at ``L <= N / 2``.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from securefl.crypto import kernels, linalg, prg
from securefl.errors import InputError

RING_DIMENSION = 4096
"""N: degree of X^N + 1; equals the LWE dimension n and the re-randomisation length L'."""
FFT_LIMB_BITS = 26
"""Public polynomials enter the FFT as four signed 26-bit limbs (104 bits)."""
FFT_LIMBS = 4
SEED_DOMAIN = b"securefl/rlwe/M/"
"""Domain of the public polynomials' seed (the LWE backend's M uses ``securefl/lwe/M/``)."""

_M26 = (1 << 26) - 1


def polynomial_count(length: int) -> int:
    """``m = ceil(L / N) + 1``: the public polynomials of a session with codes of length ``L``."""
    return -(-int(length) // RING_DIMENSION) + 1


def packing(length: int) -> int:
    """``P = max(1, floor(N / L))``: the points whose codes share one ring-LWE ciphertext
    (one secret ``s_g``) at code length ``L``; ``P = 1`` (``L > N / 2``) is one point per secret."""
    if int(length) < 1:
        raise InputError("L", length, "must be at least 1")
    return max(1, RING_DIMENSION // int(length))


def groups(points: int, length: int) -> int:
    """``G = ceil(n / P)``: the ciphertexts (secrets) of ``points`` codes of length ``L``."""
    return -(-int(points) // packing(length))


def ciphertext_elements(points: int, length: int) -> int:
    """Elements of ``Z_(2^104)`` in the ``C`` of an encryptor of ``points`` codes of length
    ``L``: ``n L`` message coefficients and ``G N`` re-randomisation coefficients
    (``n (L + N)`` when ``P = 1``, the LWE backend's)."""
    return int(points) * int(length) + groups(points, length) * RING_DIMENSION


def times_power(rows: np.ndarray, power: int) -> np.ndarray:
    """``v X^power`` in ``Z[X]/(X^N + 1)`` for every row ``v`` (last axis: the ``N``
    coefficients), ``-N < power < N``: a cyclic shift of the coefficients that negates those
    wrapping past ``X^N`` (``X^N = -1``).  On ternary rows the result is ternary."""
    n = rows.shape[-1]
    if not -n < power < n:
        raise InputError("power", power, f"must lie in (-{n}, {n})")
    if power < 0:
        return -times_power(rows, power + n)
    out = np.empty_like(rows)
    out[..., power:] = rows[..., : n - power]
    out[..., :power] = -rows[..., n - power :]
    return out


def times_power_columns(rows: np.ndarray, power: int, start: int, stop: int) -> np.ndarray:
    """Coefficients ``start .. stop - 1`` of :func:`times_power` ``(rows, power)``,
    ``0 <= power < N``, without the other coefficients."""
    n = rows.shape[-1]
    if not 0 <= power < n or not 0 <= start <= stop <= n:
        raise InputError("power", power, f"needs 0 <= power < {n} and 0 <= start <= stop <= {n}")
    out = np.empty((*rows.shape[:-1], stop - start), dtype=rows.dtype)
    split = min(max(power, start), stop)
    out[..., : split - start] = -rows[..., n - power + start : n - power + split]
    out[..., split - start :] = rows[..., split - power : stop - power]
    return out


def check_ring_parameters(length: int, lwe_dimension: int, rerandomisation: int, modulus_bits: int) -> None:
    """Raise :class:`InputError` naming the parameter unless the ring structure fits the LWE
    constants: ``n = L' = N`` a power of two, ``q = 2^(4 x 26)``, and every ring product (at
    most ``(L + L') (2^26 - 1)`` in absolute value per limb) below ``2^53``."""
    if lwe_dimension != RING_DIMENSION or rerandomisation != RING_DIMENSION:
        raise InputError("LWE_DIMENSION", lwe_dimension, f"ring-LWE needs n = L' = N = {RING_DIMENSION}")
    if RING_DIMENSION & (RING_DIMENSION - 1):
        raise InputError("RING_DIMENSION", RING_DIMENSION, "must be a power of two (X^N + 1 cyclotomic)")
    if FFT_LIMBS * FFT_LIMB_BITS != modulus_bits:
        raise InputError("FFT_LIMB_BITS", FFT_LIMB_BITS, f"{FFT_LIMBS} limbs must cover log2 q = {modulus_bits}")
    if (int(length) + rerandomisation) * ((1 << FFT_LIMB_BITS) - 1) >= 1 << linalg.FLOAT64_EXACT_BITS:
        raise InputError("L", length, "ring products of this many terms overflow float64's 53 bits")


def public_limbs(seed: bytes, length: int) -> np.ndarray:
    """The ``m`` uniform public polynomials ``a_k in Z_(2^104)[X]/(X^N + 1)`` of a session,
    13 AES-CTR bytes per coefficient, as float64 limbs ``(m, 4, N)`` (bits 0-25, 26-51,
    52-77, 78-103)."""
    count = polynomial_count(length) * RING_DIMENSION
    raw = prg.expand(seed, 13 * count, np.uint8)
    low = raw[: 8 * count].view(np.uint64).astype(np.int64, copy=False)
    top = raw[8 * count : 12 * count].view(np.uint32).astype(np.int64)
    middle = raw[12 * count :].astype(np.int64)
    limbs = np.stack(
        [
            low & _M26,
            (low >> 26) & _M26,
            ((low >> 52) & 0xFFF) | (middle << 12) | ((top & 0x3F) << 20),
            top >> 6,
        ]
    )
    return limbs.reshape(FFT_LIMBS, -1, RING_DIMENSION).transpose(1, 0, 2).astype(np.float64)


def conjugate(limbs: np.ndarray) -> np.ndarray:
    """``a*(X) = a(X^-1)``: coefficient 0 kept, coefficient ``j >= 1`` is ``-a_{N-j}`` (on
    signed limbs, exact); its negacyclic matrix is the transpose of ``a``'s."""
    out = np.empty_like(limbs)
    out[..., 0] = limbs[..., 0]
    out[..., 1:] = -limbs[..., :0:-1]
    return out


class RingMatrix:
    """The two products with the ring-structured ``M`` of one party, on a torch device.

    :meth:`ciphertext_products` gives the products ``a_k S`` polynomial by polynomial (exact
    26-bit limbs, which :func:`~securefl.crypto.kernels.rlwe_limbs_into` regroups into the
    columns of ``C``); :meth:`hint_top` gives the top 32 bits of ``M^T Y'^T + G``, all the
    hint that is sent.
    """

    def __init__(self, seed: bytes, length: int, *, device: torch.device) -> None:
        self.length = int(length)
        self.device = device
        self._limbs = public_limbs(seed, length)
        self._forward: linalg.NegacyclicProducts | None = None
        self._transposed: linalg.NegacyclicProducts | None = None
        self._scratch = np.empty(0, dtype=np.float64)

    @property
    def count(self) -> int:
        return self._limbs.shape[0]

    def polynomial_of_column(self, column: int) -> tuple[int, int]:
        """Column ``c`` of ``C`` is coefficient ``j`` of ``a_k s``: returns ``(k, j)``."""
        if column < self.length:
            return column // RING_DIMENSION, column % RING_DIMENSION
        return self.count - 1, column - self.length

    def _products_buffer(self, rows: int) -> np.ndarray:
        """One ``(rows, 4, N)`` scratch array for every product of this party: each call's
        result is consumed before the next call, and fresh arrays of this size would
        page-fault anew (the same reuse as :meth:`securefl.crypto.lwe.LWEParty._buffer`)."""
        size = rows * FFT_LIMBS * RING_DIMENSION
        if self._scratch.size < size:
            self._scratch = np.empty(size, dtype=np.float64)
        return self._scratch[:size].reshape(rows, FFT_LIMBS, RING_DIMENSION)

    def ciphertext_products(self, secret: np.ndarray, k: int) -> np.ndarray:
        """``a_k s_i`` for every row ``s_i`` of ``secret`` (``(rows, N)`` ternary float64):
        the exact integer limb products ``(rows, 4, N)``, valid until this party's next product."""
        if self._forward is None:
            self._forward = linalg.NegacyclicProducts(self._limbs, limb_bits=FFT_LIMB_BITS, device=self.device)
        return self._forward.multiply(secret[None], [k], out=self._products_buffer(secret.shape[0]))

    def hint_top(self, evaluation: np.ndarray, noise: np.ndarray) -> np.ndarray:
        """The hint on the wire: ``floor(H' / 2^72)`` (uint32 ``(rows, N)``) of
        ``H' = M^T y'_j + g_j = sum_k a_k* v_k + g_j`` mod ``2^104`` for every row ``y'_j`` of
        ``evaluation`` (``(rows, L + N)``) and ``g_j`` of ``noise`` (float64 ``(rows, N)``)."""
        rows = evaluation.shape[0]
        if self._transposed is None:
            self._transposed = linalg.NegacyclicProducts(
                conjugate(self._limbs), limb_bits=FFT_LIMB_BITS, device=self.device
            )
        if self.length % RING_DIMENSION == 0:  # whole blocks: a view, no copy
            blocks = evaluation.reshape(rows, self.count, RING_DIMENSION).transpose(1, 0, 2)
        else:
            blocks = self._padded_blocks(evaluation)
        products = self._transposed.multiply(blocks, list(range(self.count)), out=self._products_buffer(rows))
        top = np.empty((rows, RING_DIMENSION), dtype=np.uint32)
        kernels.rlwe_hint_top_into(products, noise, top)
        return top

    def _padded_blocks(self, evaluation: np.ndarray) -> np.ndarray:
        """``y'_j`` cut into the ``m`` blocks ``v_k`` of ``N`` coefficients, the last message
        block zero-padded: ``(m, rows, N)``."""
        rows = evaluation.shape[0]
        blocks = np.zeros((self.count, rows, RING_DIMENSION), dtype=np.float64)
        for k in range(self.count - 1):
            part = evaluation[:, k * RING_DIMENSION : min((k + 1) * RING_DIMENSION, self.length)]
            blocks[k, :, : part.shape[1]] = part
        blocks[-1] = evaluation[:, self.length :]
        return blocks


def primal_usvp_blocksize(n: int, log2_q: float, sigma_error: float, sigma_secret: float) -> tuple[int, int]:
    """Smallest BKZ block size ``beta`` (and its lattice dimension ``d``) for which the primal
    uSVP attack succeeds on LWE(``n``, ``q``) under the ADPS16 condition
    ``sigma sqrt(beta) <= delta^(2 beta - d - 1) Vol^(1/d)``, with ``d = m + n + 1``,
    ``Vol = q^m (sigma_error / sigma_secret)^n`` (secret rescaled), the optimal number of
    samples ``m`` and ``delta = ((pi beta)^(1/beta) beta / (2 pi e))^(1 / (2 (beta - 1)))``."""
    if n < 1 or log2_q <= 0 or sigma_error <= 0 or sigma_secret <= 0:
        raise InputError("n", n, "needs n >= 1, log2 q > 0 and positive standard deviations")
    scale = math.log2(sigma_error / sigma_secret)
    for beta in range(40, 4 * n):
        log_delta = math.log2(((math.pi * beta) ** (1 / beta) * beta / (2 * math.pi * math.e))) / (2 * (beta - 1))
        target = math.log2(sigma_error * math.sqrt(beta))
        for samples in range(max(1, beta - n), 4 * n + 1, 16):
            d = samples + n + 1
            if target <= log_delta * (2 * beta - d - 1) + (samples * log2_q + n * scale) / d:
                return beta, d
    raise InputError("log2_q", log2_q, "no block size below 4n breaks it: q is too small for this estimate")


def security_bits(n: int, log2_q: float, sigma_error: float, sigma_secret: float) -> dict[str, float]:
    """Costs of the primal uSVP attack (:func:`primal_usvp_blocksize`) in three models:
    core-SVP classical ``0.292 beta``, core-SVP quantum ``0.265 beta`` and the HE standard's
    ``BKZ.sieve`` ``0.292 beta + 16.4 + log2(8 d)``."""
    beta, d = primal_usvp_blocksize(n, log2_q, sigma_error, sigma_secret)
    return {
        "beta": float(beta),
        "core_svp_classical": 0.292 * beta,
        "core_svp_quantum": 0.265 * beta,
        "bkz_sieve": 0.292 * beta + 16.4 + math.log2(8 * d),
    }
