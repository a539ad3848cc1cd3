"""Secure Hamming matrix with linear communication: LWE encryption of one party's codes.

SHADE (:mod:`securefl.crypto.shade`) sends a 16-bit correction per (point, point, bit):
``n_a n_b L 16`` bits per pair of parties.  Here party ``a`` (the *encryptor*) encrypts
its codes once under LWE, party ``b`` (the *evaluator*) evaluates the inner products
with its own codes on the ciphertexts, and the two end with additive shares of every
``HD(x_i, y_j)`` mod ``p = 2^16``.  Traffic is ``O(n_a (L + L') + n n_b + n_a n_b)``
elements, linear in the inputs plus the outputs.  The design follows
``../shared/lwe-hamming.md`` with the changes listed at the end.

**Notation and parameters** (module constants, checked by :func:`check_parameters`).
``X in {0,1}^{n_a x L}`` (encryptor), ``Y in {0,1}^{n_b x L}`` (evaluator),
``HD(x, y) = |x| + |y| - 2 <x, y>``.  ``q = 2^104`` (:data:`MODULUS_BITS`), ``p = 2^16``,
``Delta = q / p = 2^88``; LWE dimension ``n = 4096`` (:data:`LWE_DIMENSION`);
``L' = 4096`` re-randomisation columns (:data:`RERANDOMISATION`), ``K = L + L'``.
Secrets and re-randomisers are uniform ternary (``{-1, 0, 1}``, exact rejection sampling
of AES-CTR bytes); noise is the centred binomial ``CBD(eta = 21)``: the difference of
the popcounts of two 21-bit AES-CTR words, so ``|e| <= 21`` always and
``sigma = sqrt(21 / 2) = 3.24``.  ``M in Z_q^{K x n}`` is public, expanded with AES-CTR
from a session seed ``SHA-256(session || every party's X25519 public key)``.

**Protocol** (one pair; :class:`LWEParty` are the sans-I/O parties, :class:`LWEServer`
the relay, all frames over the metered, MACed :class:`~securefl.crypto.channel.Network`):

0. Every party broadcasts an X25519 public key, signed with its roster identity for the
   session and cohort and checked by every peer before use (:mod:`securefl.crypto.lwe_keys`;
   in process each session makes its own throwaway roster).  Each pair derives
   ``K_ab = HKDF(X25519(sk_a, pk_b))``: a MAC key for end-to-end tags on relayed
   broadcasts and an AES-GCM key for the answer ``D``.
1. ``a`` broadcasts ``C = S M^T + E + Delta [-2X | 0]`` (``n_a x K``; ``S`` ternary
   ``n_a x n``, a fresh secret per row, ``E`` noise), once per session whatever the
   number of peers, streamed in blocks of :data:`BLOCK_ROWS` columns.
2. ``b`` draws ``R`` ternary ``n_b x L'``, sets ``Y' = [Y | R]``, computes the hint
   ``H' = M^T Y'^T + G`` (``n x n_b``, ``G`` noise) and broadcasts its top 32-bit limb
   ``H'_top = floor(H' / 2^72)`` only (:data:`HINT_BYTES` = 4 bytes per element, once per
   session): step 4 reads nothing else.
3. ``b`` answers ``a`` with ``D = C Y'^T - U`` where ``U = Delta U_hi + U_lo``, ``U_hi``
   uniform mod ``p`` and ``U_lo`` uniform on ``[0, 2^87)``, keeping only the top
   :data:`RESPONSE_BITS` = 24 bits ``D' = D - r``, ``r = D mod 2^80`` (AES-GCM under
   ``K_ab``).  ``b``'s share is ``s_b = U_hi + |y_j|`` mod ``p``.
4. ``a`` computes ``t = D' - 2^72 S H'_top + theta`` with the received ``H'_top``
   (the lower 72 bits of ``H'``, never sent, only move ``t`` by
   ``|S (H' mod 2^72)| < n 2^72 = 2^84``, which ``theta`` absorbs),
   ``theta = 2^87 + 2^80 + 2^84 + 2^72``, and ``z = floor(t / Delta)`` mod ``p``; its share
   is ``s_a = z + |x_i|``.
5. Both send their ``n_a x n_b`` shares to the server, which adds them
   (:func:`securefl.protocols.hamming.relay.assemble`).

*Correctness, exact.*  ``D' - S H' = Delta (-2 X Y^T - U_hi) + N - U_lo - r`` with
``N = E Y'^T - S G``.  Every entry of ``E``, ``G`` is at most ``eta`` in absolute value,
every entry of ``Y'``, ``S`` at most 1, so ``|N| <= N_max = eta (L + L' + n)``
(:func:`noise_bound`; 258,048 < 2^18 at L = 4096).  The encryptor's own truncation adds
``S (H' mod 2^72)``, of absolute value below ``2^84``.  Hence
``N - U_lo - r + S (H' mod 2^72) + theta`` lies in
``(2^72 - N_max, 2^87 + 2^80 + 2^85 + 2^72 + N_max) subset [0, Delta)`` (``N_max < 2^72``) and the
floor is exactly ``-2 <x_i, y_j> - U_hi``: ``s_a + s_b = |x_i| + |y_j| - 2 <x_i, y_j>
= HD``.  No tail bound is involved: the noise is bounded by construction.

*Exact arithmetic.*  Elements mod ``q`` are three limbs of 36, 36 and 32 bits
(:data:`LIMB_BITS`).  Every product is a float64 GEMM of one limb matrix by a ternary or
binary matrix with inner dimension ``n`` or a block of at most :data:`BLOCK_ROWS` rows,
accumulated in float64 over the ``K`` rows: every partial sum is an integer of absolute
value at most ``K 2^36 < 2^53`` (``K <= 2^16 + 2^12``), hence exact; carries are then
propagated between limbs in int64.  The products run on a torch device (``device``:
``"cpu"``, ``"cuda"``; :mod:`securefl.crypto.linalg`).  Before every session
:func:`check_exact_products` multiplies known matrices on that device at the same inner
dimension and raises :class:`~securefl.errors.PlatformError` unless the result is exact.

**Who learns what** (semi-honest parties and server).

* *The evaluator learns nothing about X.*  Row ``i`` of ``C`` is ``K`` LWE samples
  ``(M_k, <s_i, M_k> + e + Delta m)`` under the fresh ternary secret ``s_i``;
  by a hybrid over the rows (all sharing the public ``M``, as in any LWE public-key
  scheme) ``C`` is pseudorandom under decision-LWE with ``n = 4096``, ``q = 2^104``,
  ternary secret, ``sigma = 3.24``.  HE security standard (Albrecht et al. 2018,
  ternary secrets, ``sigma ~ 3.2``, 128-bit classical security) allows ``log2 q <= 109``
  for ``n = 4096`` (:data:`HE_STANDARD_128_TERNARY`): 104 is inside it.
  *Which cost model this claim uses.*  "128 bits" is the HE standard's: the lattice
  estimator with the ``BKZ.sieve`` cost ``2^(0.292 beta + 16.4 + log2(8d))``, in which the
  primal attack's block size ``beta = 351`` costs 2^134.8 here.  Under the stricter
  core-SVP model used for the NIST post-quantum schemes (``0.292 beta`` classical,
  ``0.265 beta`` quantum; ADPS16) the same ``beta`` gives **2^102.5 classical, 2^93.0
  quantum** -- compare with Kyber-512's 118 core-SVP bits.  The computation
  (:func:`securefl.crypto.rlwe.primal_usvp_blocksize`, :func:`securefl.crypto.rlwe.security_bits`)
  and the argument for the ring are in :mod:`securefl.crypto.rlwe`; plain LWE with the
  same ``n``, ``q`` and distributions gets the same estimate.
  ``b`` also sees its own randomness and its share ``U_hi + |y_j|``.
* *The encryptor learns nothing about Y beyond its output share.*  Without ``R`` the
  hint ``M^T Y^T`` is a low-density knapsack in the codes; with it,
  ``H' = M_Y^T Y^T + (M_R^T R^T + G)`` and the bracket is ``n`` LWE samples under the
  fresh ternary secret ``r_j`` of dimension ``L' = 4096`` (same table entry), so ``H'``
  is pseudorandom whatever ``Y`` is; ``a`` receives only ``H'_top = floor(H' / 2^72)``, a
  public function of ``H'``, so whatever a simulator can do with a uniform ``H'`` it does
  with ``floor`` of it: dropping the low limbs can only lose information, never leak.  In
  the analysis below ``a`` is even given all of ``H'``.  The answer:
  ``D = S H' + Delta z + N - U_lo``.
  A simulator given ``z`` (uniform: ``U_hi``) outputs ``S H' + Delta z - U'`` with
  ``U'`` uniform on ``[0, 2^87)`` and clears the low 80 bits; per entry the two differ
  only by the shift ``N`` of a uniform interval of length ``2^87``, statistical
  distance ``|N| / 2^87 <= N_max / 2^87``, and dropping bits can only shrink it.  Over a
  whole session (all ``E = sum_{pairs} n_a n_b`` entries, independent ``U``):

      epsilon <= E * N_max / 2^87          (:func:`statistical_distance`)

  At L = 4096: ``N_max / 2^87 = 2^-69.0`` per entry; 2 x 500 points (E = 2^17.9):
  ``2^-51.1``; 2 x 2500 points (E = 2^22.6): ``2^-46.4``; FedProp's CIFAR-10 round,
  5 x 500 (E = 2^21.3): ``2^-47.8``; the MNIST round, 10 x 600 (E = 2^24.0): ``2^-45.1``.
  A session whose bound exceeds :data:`STATISTICAL_BOUND` = 2^-40 is refused with
  :class:`~securefl.errors.InputError` before any work (at L = 4096: beyond 2^29.0 cross
  entries, e.g. 2 x 23,350 points; at L = 65535, beyond 2^26.4).  After this
  statistical step ``D`` depends on ``Y`` only through ``H'``, which is then replaced
  by uniform (LWE): the encryptor's view is simulatable from ``X`` and ``z``.
* *The server* sees the public keys, ``C`` and ``H'`` (pseudorandom, above), ``D``
  under AES-GCM with ``K_ab`` (X25519 keys it does not hold; without that layer the top
  bits of ``D`` would leak a bit of ``C Y'^T`` per entry, because ``U_lo`` covers only
  half of ``[0, Delta)``), the end-to-end tags, the own blocks, and the two shares:
  ``s_b`` uniform (``U_hi``), ``s_a = HD - s_b``.  It learns exactly ``H``.
* *Collusion of the server with one client.*  With the encryptor ``a``: ``a``'s view is
  simulatable from ``(X, z)`` as above; the server adds ``s_b = HD - z - |x_i|``, a
  function of ``HD`` and ``a``'s view.  So the coalition learns ``HD(x_i, y_j)`` and
  nothing more (``R``, ``G``, ``U_lo``, ``Y`` stay hidden as above).  With the
  evaluator ``b``: ``b`` knows ``U``, ``Y'``, ``D``; ``C`` stays pseudorandom (LWE
  with ``a``'s secrets, which never leave ``a``), and the server adds
  ``s_a = HD - s_b``: again ``HD`` and nothing more.  That is what the server learns
  anyway, as with SHADE.
* Not covered: malicious parties (a malicious ``b`` can make ``a``'s output wrong or
  bias ``M`` by grinding its public key; neither party's privacy is lost to the
  server), timing side channels.

Relayed broadcasts (``C`` blocks, ``H'``) carry one 16-byte GMAC tag per recipient under
``K_ab`` (the server forwards each recipient its tag), so a relay that alters them is
caught (:class:`~securefl.errors.ProtocolError`), as are tampered, truncated, replayed or
reordered frames (channel MAC and sequence numbers), a block out of order, wrongly shaped
arrays, an invalid (low-order) public key, a failed AES-GCM tag on ``D``, or shares that
reconstruct a distance above ``L``.  The wire encodings have no out-of-range values to
check: ``C`` and ``M`` are exactly 13 bytes per element of ``Z_(2^104)``, ``H'_top`` exactly
4 bytes per element of ``Z_(2^32)``, ``D`` exactly 3 bytes per 24-bit entry.

**Costs** (bytes per element: 13 for ``C``, 4 for ``H'_top``).  ``C``: ``13 n_a K``;
``H'_top``: ``4 n n_b``; ``D``:
``3 n_a n_b`` + 16; shares ``2 x 2 n_a n_b``.  CPU: ``3 n_a n K`` multiply-adds for
``C``, ``3 n K n_b`` for the hint, ``3 n_a K n_b`` for ``C Y'^T`` and ``n_a n n_b``
for ``S H'_top``, as float64 GEMMs (:func:`securefl.crypto.linalg.gemm`, threads = ``workers``; ``n = 4096``,
``K = L + 4096``), about 80 % of the CPU time; the rest is AES-CTR, the limb kernels
(:mod:`securefl.crypto.kernels`) and the tags.  Memory is bounded by streaming ``M`` and
``C`` in blocks of :data:`BLOCK_ROWS` rows through reused buffers and by answering each
pair as soon as both of its broadcasts are complete (peak 1.9 GB at 2 x 2500 points,
2.7 GB for the MNIST round of 10 x 600, L = 4096).

**Ring-structured M** (``ring=True``, the ``"rlwe"`` backend): ``M`` is built from negacyclic
blocks and the products ``S M^T`` and ``M^T Y'^T`` become checked FFT polynomial products,
``O(N log N)`` per point instead of ``O(N K)``; at ``L <= N / 2`` it packs ``P = floor(N / L)``
points per ring ciphertext, so ``C`` is ``13 (n_a L + ceil(n_a / P) N)`` bytes (blocks of
the message columns, one row per point, then of the re-randomisation columns, one row per
ciphertext); the hint, the answers and the outputs are unchanged.  The packing, the security
argument for the ring and its estimate are in :mod:`securefl.crypto.rlwe`.

**Changes from the design note.**  (1) ``q = 2^104`` instead of ``2^96``: with
worst-case bounded noise the note's ``q`` gives ``2^-38.4`` at 2 x 2500 points (its
``2^-43.7`` needed a tail bound); ``2^104`` gives ``2^-46.4`` and stays inside the HE
standard (``<= 109``).  (2) The message is ``-2X`` and the weights ``|x_i|``, ``|y_j|``
are added to the shares locally, so the shares sum to ``HD`` as SHADE's do and no PRF
mask ``T`` is needed (``s_b`` is uniform through ``U_hi``).  (3) ``D`` is cut to 24
bits (``U_lo`` on ``[0, 2^87)`` leaves room for the 80 dropped bits) and sent under
AES-GCM, which also hides it from the relaying server.

Why by hand: no Python library offers LWE-based secure inner products; TenSEAL runs one
Python-level ciphertext operation per column per point and has no noise flooding.  The
pieces here are numpy/BLAS matrix products, ``cryptography``'s X25519, HKDF, AES-GCM and
the project's AES-CTR PRG.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from securefl.crypto import ghash, kernels, linalg, prg, rlwe
from securefl.crypto.channel import SERVER, Message
from securefl.crypto.hamming_shares import SHARE_BITS, pair_roles
from securefl.crypto.identity import SIGNATURE_BYTES
from securefl.crypto.lwe_keys import KeyBinding
from securefl.crypto.rand import RandomSource
from securefl.errors import InputError, ProtocolError

LWE_DIMENSION = 4096
"""n: length of the encryptor's secrets s_i."""
RERANDOMISATION = 4096
"""L': length of the evaluator's ternary re-randomisers r_j (the LWE dimension of the hint)."""
MODULUS_BITS = 104
"""log2 q."""
LIMB_BITS = (36, 36, 32)
"""Limbs of an element of Z_q, low to high (float64 GEMMs on each)."""
ETA = 21
"""Noise: centred binomial CBD(eta), |e| <= eta, sigma = sqrt(eta / 2)."""
RESPONSE_BITS = 24
"""Top bits of each entry of D that the evaluator sends."""
MASK_BITS = 87
"""U_lo is uniform on [0, 2^MASK_BITS)."""
DELTA_BITS = MODULUS_BITS - SHARE_BITS
DROPPED_BITS = MODULUS_BITS - RESPONSE_BITS
ELEMENT_BYTES = MODULUS_BITS // 8
"""Wire bytes per element of Z_q (exact: every 13-byte string is an element)."""
HINT_BYTES = (MODULUS_BITS - LIMB_BITS[0] - LIMB_BITS[1]) // 8
"""Wire bytes per element of the hint: its top limb ``floor(H' / 2^72)``, all the encryptor reads."""
BLOCK_ROWS = 2048
"""Rows of M (columns of C) generated and streamed at a time."""
STATISTICAL_BOUND = 2.0**-40
"""Largest statistical distance of a session's answers from the simulation."""
HE_STANDARD_128_TERNARY = {1024: 27, 2048: 54, 4096: 109, 8192: 218, 16384: 438, 32768: 881}
"""Largest log2 q for 128-bit classical security with ternary secrets and sigma ~ 3.2
(HomomorphicEncryption.org security standard, Albrecht et al. 2018)."""
FLOAT64_EXACT_BITS = 53

_M36 = (1 << 36) - 1
_M32 = (1 << 32) - 1


def noise_bound(length: int) -> int:
    """``N_max = eta (L + L' + n)``: the largest possible ``|E Y'^T - S G|`` of one entry."""
    return ETA * (int(length) + RERANDOMISATION + LWE_DIMENSION)


def cross_entries(sizes: list[int] | tuple[int, ...]) -> int:
    """``sum_{a < b} n_a n_b``: the entries of a session's answers ``D``."""
    total = sum(sizes)
    return (total * total - sum(s * s for s in sizes)) // 2


def statistical_distance(sizes: list[int] | tuple[int, ...], length: int) -> float:
    """Bound on the statistical distance of all of a session's answers from the simulation:
    ``cross_entries(sizes) * noise_bound(L) / 2^MASK_BITS`` (see the module docstring)."""
    return cross_entries(sizes) * noise_bound(length) / 2.0**MASK_BITS


def check_parameters(length: int) -> None:
    """Raise :class:`InputError` naming the parameter if the constants above cannot run codes of
    length ``length`` securely and exactly (security table, GEMM exactness, decryption window)."""
    if HE_STANDARD_128_TERNARY.get(LWE_DIMENSION, 0) < MODULUS_BITS:
        raise InputError("LWE_DIMENSION", LWE_DIMENSION, f"log2 q = {MODULUS_BITS} exceeds the HE standard's 128-bit bound")
    if HE_STANDARD_128_TERNARY.get(RERANDOMISATION, 0) < MODULUS_BITS:
        raise InputError("RERANDOMISATION", RERANDOMISATION, f"log2 q = {MODULUS_BITS} exceeds the HE standard's 128-bit bound")
    if sum(LIMB_BITS) != MODULUS_BITS or len(LIMB_BITS) != 3 or MODULUS_BITS % 8:
        raise InputError("LIMB_BITS", LIMB_BITS, f"must be three limbs summing to MODULUS_BITS={MODULUS_BITS} (whole bytes)")
    columns = int(length) + RERANDOMISATION
    if max(columns, LWE_DIMENSION) * ((1 << max(LIMB_BITS)) - 1) >= 1 << FLOAT64_EXACT_BITS:
        raise InputError("L", length, f"K = L + L' = {columns} rows of {max(LIMB_BITS)}-bit limbs overflow float64's 53 bits")
    if noise_bound(length) >= 1 << LIMB_BITS[0]:
        raise InputError("ETA", ETA, f"noise bound {noise_bound(length)} must fit in the low limb")
    top = LIMB_BITS[0] + LIMB_BITS[1]
    if noise_bound(length) >= 1 << top:
        raise InputError("ETA", ETA, f"noise bound {noise_bound(length)} must lie below 2^{top}")
    truncation = 2 * LWE_DIMENSION * (1 << top) + (1 << top)
    window = 2 * noise_bound(length) + (1 << DROPPED_BITS) + (1 << MASK_BITS) + truncation
    if window >= 1 << DELTA_BITS:
        raise InputError("MASK_BITS", MASK_BITS, f"decryption window {window} does not fit below Delta = 2^{DELTA_BITS}")
    if min(MASK_BITS, DROPPED_BITS) < LIMB_BITS[0] + LIMB_BITS[1] or RESPONSE_BITS > 32:
        raise InputError("RESPONSE_BITS", RESPONSE_BITS, "the kept bits of D and the top of U_lo must lie in the top limb")


def ciphertext_bytes(points: int, length: int, *, ring: bool = False) -> int:
    """Bytes of the ``C`` an encryptor of ``points`` codes of ``length`` bits broadcasts, the
    frames' headers and tags left out: ``13 n (L + L')``, or with ``ring`` the packed
    ``13 (n L + ceil(n / P) L')`` (:func:`securefl.crypto.rlwe.ciphertext_elements`)."""
    elements = (rlwe.ciphertext_elements(points, length) if ring
                else int(points) * (int(length) + RERANDOMISATION))
    return ELEMENT_BYTES * elements


def check_session(sizes: list[int] | tuple[int, ...], length: int, *, ring: bool = False) -> None:
    """Refuse (``InputError`` on ``codes``) a session whose statistical bound exceeds 2^-40;
    with ``ring``, also parameters the ring structure cannot run (:func:`rlwe.check_ring_parameters`)."""
    check_parameters(length)
    if ring:
        rlwe.check_ring_parameters(length, LWE_DIMENSION, RERANDOMISATION, MODULUS_BITS)
    bound = statistical_distance(sizes, length)
    if bound > STATISTICAL_BOUND:
        raise InputError(
            "codes",
            f"{len(sizes)} parties, {sum(sizes)} points, L={length}",
            f"{cross_entries(sizes)} cross entries give a statistical bound 2^{np.log2(bound):.1f} "
            f"above 2^{np.log2(STATISTICAL_BOUND):.0f}; split the session",
        )


def check_exact_products(*, ring: bool = False, device: str = "cpu") -> None:
    """The self-test before every session, on ``device``: float64 GEMMs of 36-bit limbs by
    ternary matrices at inner dimension ``max(n, BLOCK_ROWS)``
    (:func:`~securefl.crypto.linalg.check_exact_gemm`) and, with ``ring``, the negacyclic FFT
    products (:func:`~securefl.crypto.linalg.check_exact_ring`); :class:`PlatformError`
    unless exact."""
    resolved = linalg.resolve_device(device)
    linalg.check_exact_gemm(resolved, max(LWE_DIMENSION, BLOCK_ROWS), max(LIMB_BITS))
    if ring:
        linalg.check_exact_ring(rlwe.RING_DIMENSION, rlwe.FFT_LIMB_BITS, resolved)


def _nonce(label: str) -> int:
    return int.from_bytes(hashlib.sha256(label.encode()).digest()[:8], "big")


def _stream(seed: bytes, label: str, shape: tuple[int, ...], dtype: type) -> np.ndarray:
    """An AES-CTR array under ``seed``, one independent stream per ``label``."""
    return prg.expand(seed, shape, dtype, nonce=_nonce(label))


def _ternary(seed: bytes, label: str, shape: tuple[int, ...]) -> np.ndarray:
    """Uniform on {-1, 0, 1}: AES-CTR bytes below 255 (exact rejection), mod 3, minus 1."""
    count = int(np.prod(shape, dtype=np.int64))
    out = np.empty(count, dtype=np.float64)
    filled, attempt = 0, 0
    while filled < count:
        need = count - filled
        raw = _stream(seed, f"{label}/{attempt}", (need + need // 128 + 64,), np.uint8)
        filled = kernels.ternary_fill(raw, out, filled)
        attempt += 1
    return out.reshape(shape)


def _binomial(seed: bytes, label: str, shape: tuple[int, ...]) -> np.ndarray:
    """CBD(eta): popcount of 21 AES-CTR bits minus popcount of 21 others (|e| <= 21), float64."""
    words = _stream(seed, label, (int(np.prod(shape, dtype=np.int64)),), np.uint64)
    out = np.empty(words.shape, dtype=np.float64)
    kernels.centered_binomial_into(words, ETA, out)
    return out.reshape(shape)


def _normalize(g0: np.ndarray, g1: np.ndarray, g2: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Integer limb sums ``g0 + 2^36 g1 + 2^72 g2`` (float64, exact, ``|g| < 2^53``) as the
    element mod 2^104 in canonical int64 limbs (36, 36, 32 bits)."""
    carry = g0.astype(np.int64)
    l0 = carry & _M36
    carry >>= 36
    carry += g1.astype(np.int64)
    l1 = carry & _M36
    carry >>= 36
    carry += g2.astype(np.int64)
    carry &= _M32
    return l0, l1, carry


Planes = tuple[np.ndarray, np.ndarray, np.ndarray]
"""Wire form of an ``(outer, inner)`` array of ``Z_(2^104)``: bits 0-63 (uint64), 72-103
(uint32), 64-71 (uint8); 13 bytes per element, every bit pattern a valid element."""
_PLANE_DTYPES = (np.uint64, np.uint32, np.uint8)


def _pack(g0: np.ndarray, g1: np.ndarray, g2: np.ndarray) -> Planes:
    """Exact integer limb sums (float64 ``(outer, inner)``) -> the wire planes of the elements mod 2^104."""
    planes = tuple(np.empty(g0.shape, dtype=dtype) for dtype in _PLANE_DTYPES)
    kernels.lwe_pack_into(g0, g1, g2, *planes)
    return planes


def _unpack(planes: Planes, *, limb_first: bool, out: np.ndarray | None = None) -> np.ndarray:
    """Wire planes ``(outer, inner)`` -> float64 limbs ``(3, outer, inner)`` if ``limb_first``
    else ``(outer, 3, inner)`` (into ``out`` when given)."""
    outer, inner = planes[0].shape
    if out is None:
        out = np.empty((3, outer, inner) if limb_first else (outer, 3, inner), dtype=np.float64)
    kernels.lwe_unpack_into(*(np.ascontiguousarray(p) for p in planes), out, limb_first)
    return out


def _uniform_planes(seed: bytes, nonce: int, shape: tuple[int, int], out: np.ndarray | None = None) -> Planes:
    """Uniform elements of ``Z_(2^104)``: 13 AES-CTR bytes each (into the byte buffer ``out``
    when given), cut into the three planes."""
    count = shape[0] * shape[1]
    raw = prg.expand(seed, 13 * count, np.uint8, nonce=nonce, out=None if out is None else out[: 13 * count])
    return (
        raw[: 8 * count].view(np.uint64).reshape(shape),
        raw[8 * count : 12 * count].view(np.uint32).reshape(shape),
        raw[12 * count :].reshape(shape),
    )


def _blocks(length: int, packing: int = 1) -> list[tuple[int, int]]:
    """The column ranges of ``C`` sent as one message each, at most :data:`BLOCK_ROWS` wide.
    With ``packing`` ``P >= 2`` (the ring backend's packed ``C``) no block straddles column
    ``L``: the message columns ``[0, L)`` have one row per point, the re-randomisation
    columns one row per ciphertext."""
    if packing == 1:
        columns = length + RERANDOMISATION
        return [(start, min(start + BLOCK_ROWS, columns)) for start in range(0, columns, BLOCK_ROWS)]
    return ([(start, min(start + BLOCK_ROWS, length)) for start in range(0, length, BLOCK_ROWS)]
            + [(length + start, length + min(start + BLOCK_ROWS, RERANDOMISATION))
               for start in range(0, RERANDOMISATION, BLOCK_ROWS)])


def progress_total(parties: int, length: int, *, ring: bool = False) -> int:
    """Units of work the all-pairs session (:func:`securefl.protocols.secure_hamming_matrix`)
    reports through ``progress``: one per broadcast
    (each block of ``C``, each hint) and one per pair's answer."""
    pairs = [pair_roles(a, b) for a in range(parties) for b in range(a + 1, parties)]
    encryptors, evaluators = {a for a, _ in pairs}, {b for _, b in pairs}
    blocks = _blocks(length, rlwe.packing(length) if ring else 1)
    return len(encryptors) * len(blocks) + len(evaluators) + len(pairs)


def _gmac(key: bytes, label: str, planes: tuple[np.ndarray, ...]) -> np.ndarray:
    """16-byte GMAC tag of ``planes`` under ``key`` with a nonce unique to ``label``."""
    nonce = hashlib.sha256(label.encode()).digest()[:12]
    buffers = [label.encode(), *(memoryview(np.ascontiguousarray(plane)).cast("B") for plane in planes)]
    return np.frombuffer(ghash.gmac(key, nonce, buffers), dtype=np.uint8)


def _parse(tag: str) -> tuple[str, int, int | None]:
    """``lwe/<kind>/<party>[/<block>]`` -> ``(kind, party, block or None)``; ProtocolError otherwise."""
    parts = tag.split("/")
    try:
        if parts[0] != "lwe" or parts[1] not in ("key", "C", "H") or len(parts) != (4 if parts[1] == "C" else 3):
            raise ValueError(tag)
        return parts[1], int(parts[2]), int(parts[3]) if len(parts) == 4 else None
    except (IndexError, ValueError):
        raise ProtocolError(f"malformed broadcast tag {tag!r}") from None


def _planes_spec(shape: tuple[int, int]) -> list[tuple[tuple[int, ...], type]]:
    """The arrays of a relayed broadcast: the three planes of ``shape`` and a 16-byte tag."""
    return [(shape, dtype) for dtype in _PLANE_DTYPES] + [((16,), np.uint8)]


def _expect(message: Message, arrays: list[tuple[tuple[int, ...], type]], what: str) -> tuple[np.ndarray, ...]:
    """Shape and dtype checks of a received message; :class:`ProtocolError` on any mismatch."""
    if len(message.arrays) != len(arrays):
        raise ProtocolError(f"{what}: expected {len(arrays)} arrays, got {len(message.arrays)}")
    for array, (shape, dtype) in zip(message.arrays, arrays):
        if array.shape != shape or array.dtype != dtype:
            raise ProtocolError(f"{what}: expected {shape} {np.dtype(dtype)}, got {array.shape} {array.dtype}")
    return message.arrays


@dataclass
class _PairKeys:
    mac: bytes
    seal: AESGCM


@dataclass
class LWEParty:
    """One party of an LWE Hamming session (sans-I/O): its own codes and state, nothing else.

    ``encrypts_for`` are the peers it encrypts its codes for (it is ``a`` of those pairs),
    ``evaluates_for`` the peers whose ciphertexts it evaluates (it is ``b``).  ``sizes``
    are every party's point counts (public); ``session`` the network session id.  Call
    :meth:`public_key`, :meth:`receive_keys`, iterate :meth:`broadcasts` (absorbing the
    peers' with :meth:`absorb`), then :meth:`answer` / :meth:`decrypt` per pair and
    :meth:`share` for the server.
    """

    index: int
    codes: np.ndarray
    encrypts_for: tuple[int, ...]
    evaluates_for: tuple[int, ...]
    sizes: dict[int, int]
    session: bytes
    rng: RandomSource
    binding: KeyBinding | None = None
    ring: bool = False
    device: str = "cpu"
    _seed: bytes = field(default=b"", repr=False)
    _private: X25519PrivateKey | None = field(default=None, repr=False)
    _public: dict[int, bytes] = field(default_factory=dict, repr=False)
    _pair: dict[int, _PairKeys] = field(default_factory=dict, repr=False)
    _m_seed: bytes = field(default=b"", repr=False)
    _secret: np.ndarray | None = field(default=None, repr=False)
    _group_secret: np.ndarray | None = field(default=None, repr=False)
    _evaluation: np.ndarray | None = field(default=None, repr=False)
    _accumulators: dict[int, np.ndarray] = field(default_factory=dict, repr=False)
    _next_block: dict[int, int] = field(default_factory=dict, repr=False)
    _hints: dict[int, np.ndarray] = field(default_factory=dict, repr=False)
    _shares: dict[int, np.ndarray] = field(default_factory=dict, repr=False)
    _buffers: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    _ring: rlwe.RingMatrix | None = field(default=None, repr=False)
    _ring_products: tuple[int, np.ndarray] | None = field(default=None, repr=False)

    @property
    def length(self) -> int:
        return self.codes.shape[1]

    @property
    def packing(self) -> int:
        """Points per ciphertext: :func:`rlwe.packing` with ``ring``, else 1."""
        return rlwe.packing(self.length) if self.ring else 1

    def _block_rows(self, start: int, points: int) -> int:
        """Rows of the ``C`` block starting at column ``start`` of a party of ``points`` points:
        one per point, or one per ciphertext in the packed re-randomisation columns."""
        if self.packing == 1 or start < self.length:
            return points
        return -(-points // self.packing)

    def _gemm(self, a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """``a @ b`` in float64 on this party's device (exact: :func:`check_exact_products`)."""
        return linalg.gemm(a, b, device=linalg.resolve_device(self.device), out=out)

    def _buffer(self, name: str, shape: tuple[int, ...], dtype: type = np.float64) -> np.ndarray:
        """A scratch array reused from block to block (fresh large arrays would page-fault anew)."""
        size = int(np.prod(shape, dtype=np.int64))
        buffer = self._buffers.get(name)
        if buffer is None or buffer.size < size or buffer.dtype != dtype:
            buffer = self._buffers[name] = np.empty(size, dtype=dtype)
        return buffer[:size].reshape(shape)

    def public_key(self) -> Message:
        """Round 0: draw this session's randomness; broadcast the X25519 public key, signed
        for this session and cohort (:mod:`securefl.crypto.lwe_keys`)."""
        binding = self._binding()
        self._seed = self.rng.bytes(prg.SEED_BYTES)
        self._private = X25519PrivateKey.from_private_bytes(self.rng.bytes(32))
        raw = self._private.public_key().public_bytes_raw()
        self._public[self.index] = raw
        signature = binding.sign(self.index, raw)
        return Message(self.index, SERVER, f"lwe/key/{self.index}",
                       (np.frombuffer(raw, dtype=np.uint8), np.frombuffer(signature, dtype=np.uint8)))

    def _binding(self) -> KeyBinding:
        if self.binding is None:
            raise InputError("binding", None, f"party {self.index}: LWE keys are signed; give the "
                             "party a KeyBinding (its credentials, the cohort, the session)")
        return self.binding

    def receive_keys(self, messages: list[Message]) -> None:
        """The other parties' public keys (relayed): each signature checked against the
        roster before the key is used; then ``M``'s seed and the pair keys."""
        binding = self._binding()
        for message in messages:
            kind, peer, _ = _parse(message.tag)
            if kind != "key" or peer == self.index or peer not in self.sizes or message.receiver != self.index:
                raise ProtocolError(f"party {self.index}: unexpected key message {message.tag!r}")
            if peer in self._public:
                raise ProtocolError(f"party {self.index}: second key of party {peer}")
            if len(message.arrays) == 1:
                raise ProtocolError(f"party {self.index}: the key of party {peer} is unsigned")
            key, signature = _expect(message, [((32,), np.uint8), ((SIGNATURE_BYTES,), np.uint8)],
                                     f"public key of party {peer}")
            binding.verify(peer, key.tobytes(), signature.tobytes())
            self._public[peer] = key.tobytes()
        if set(self._public) != set(self.sizes):
            raise ProtocolError(f"party {self.index}: missing public keys of {sorted(set(self.sizes) - set(self._public))}")
        self._derive()

    def saved(self) -> dict[str, np.ndarray]:
        """What this party keeps between the hops of a relayed session
        (:mod:`securefl.crypto.lwe_hops`): its seed, X25519 private key and the public keys;
        everything else is derived again from them by :meth:`restore`."""
        if self._private is None:
            raise ProtocolError(f"party {self.index}: nothing to save before public_key()")
        ids = sorted(self._public)
        return {"seed": np.frombuffer(self._seed, np.uint8).copy(),
                "private": np.frombuffer(self._private.private_bytes_raw(), np.uint8).copy(),
                "ids": np.array(ids, dtype=np.int64),
                "keys": np.stack([np.frombuffer(self._public[p], np.uint8) for p in ids])}

    def restore(self, saved: dict[str, np.ndarray], *, keys: bool = True,
                stage: str = "broadcast") -> None:
        """Resume from :meth:`saved`: the seed and private key, and with ``keys`` the
        public keys and every key derivation of :meth:`receive_keys`, redone, for the
        ``stage`` the party resumes at (:meth:`_prepare`)."""
        try:
            self._seed = bytes(np.asarray(saved["seed"], np.uint8))
            self._private = X25519PrivateKey.from_private_bytes(bytes(np.asarray(saved["private"], np.uint8)))
            ids, table = saved["ids"], saved["keys"]
        except (KeyError, ValueError) as exc:
            raise ProtocolError(f"party {self.index}: saved LWE state incomplete: {exc}") from None
        self._public = {int(p): bytes(np.asarray(k, np.uint8)) for p, k in zip(ids, table)}
        if keys:
            if set(self._public) != set(self.sizes):
                raise ProtocolError(f"party {self.index}: saved public keys of {sorted(self._public)}, "
                                    f"session of {sorted(self.sizes)}")
            self._derive(stage)

    def _derive(self, stage: str = "broadcast") -> None:
        """``M``'s seed and the pair keys from the public keys; then :meth:`_prepare`."""
        transcript = self.session + b"".join(self._public[p] for p in sorted(self._public))
        domain = rlwe.SEED_DOMAIN if self.ring else b"securefl/lwe/M/"
        self._m_seed = hashlib.sha256(domain + transcript).digest()[: prg.SEED_BYTES]
        for peer in set(self.encrypts_for) | set(self.evaluates_for):
            try:
                shared = self._private.exchange(X25519PublicKey.from_public_bytes(self._public[peer]))
            except ValueError as exc:
                raise ProtocolError(f"party {self.index}: invalid public key of party {peer}: {exc}") from None
            low, high = sorted((self.index, peer))
            keys = HKDF(
                algorithm=hashes.SHA256(), length=32, salt=self.session, info=f"securefl/lwe/pair/{low}-{high}".encode()
            ).derive(shared)
            self._pair[peer] = _PairKeys(mac=keys[:16], seal=AESGCM(keys[16:]))
        self._prepare(stage)

    def _prepare(self, stage: str) -> None:
        """What ``stage`` needs: for ``"broadcast"`` (:meth:`broadcasts`) all of it, for
        ``"evaluate"`` (:meth:`absorb` of ``C``, :meth:`answer`) ``Y'`` and the running
        products, for ``"decrypt"`` (:meth:`absorb` of hints, :meth:`decrypt`) ``S``.
        Draw ``S`` (encryptor) and ``R`` (evaluator); ``Y' = [Y | R]``; zero the running
        ``C Y'^T``; with ``ring``, expand the public polynomials of ``M``."""
        if stage not in ("broadcast", "evaluate", "decrypt"):
            raise InputError("stage", stage, "must be 'broadcast', 'evaluate' or 'decrypt'")
        n_own, length = self.codes.shape
        if self.ring and (self.encrypts_for or self.evaluates_for) and stage == "broadcast":
            self._ring = rlwe.RingMatrix(self._m_seed, length, device=linalg.resolve_device(self.device))
        if self.encrypts_for and stage != "evaluate":
            packing = self.packing
            self._group_secret = _ternary(self._seed, "S", (-(-n_own // packing), LWE_DIMENSION))
            self._secret = self._group_secret
            if packing > 1:
                self._secret = np.empty((n_own, LWE_DIMENSION), dtype=np.float64)
                for t in range(packing):
                    count = len(range(t, n_own, packing))
                    self._secret[t::packing] = rlwe.times_power(self._group_secret[:count], -t * length)
        if self.evaluates_for and stage != "decrypt":
            self._evaluation = np.empty((n_own, length + RERANDOMISATION), dtype=np.float64)
            self._evaluation[:, :length] = self.codes
            self._evaluation[:, length:] = _ternary(self._seed, "R", (n_own, RERANDOMISATION))
            for peer in self.evaluates_for:
                self._accumulators[peer] = np.zeros((3 * self.sizes[peer], n_own), dtype=np.float64)
                self._next_block[peer] = 0

    def broadcasts(self) -> Iterator[Message]:
        """Rounds 1-2: stream ``M`` block by block (with ``ring``: its polynomials); yield each
        block of ``C`` (if it encrypts for anyone) and, at the end, the hint ``H'`` (if it
        evaluates anyone's)."""
        n_own, length = self.codes.shape
        encrypting, evaluating = bool(self.encrypts_for), bool(self.evaluates_for)
        if encrypting:
            plaintext = self.codes.astype(np.float64) * float(((1 << SHARE_BITS) - 2) << (DELTA_BITS - 72))
        if evaluating and self._ring is None:
            hint = np.zeros((n_own, 3 * LWE_DIMENSION), dtype=np.float64)
        for block, (start, stop) in enumerate(_blocks(length, self.packing) if encrypting or evaluating else []):
            rows, outer = stop - start, self._block_rows(start, n_own)
            if self._ring is None:
                raw = self._buffer("M bytes", (13 * rows * LWE_DIMENSION,), np.uint8)
                public = _unpack(
                    _uniform_planes(self._m_seed, block, (rows, LWE_DIMENSION), out=raw),
                    limb_first=False,
                    out=self._buffer("M", (rows, 3, LWE_DIMENSION)),
                )
                if evaluating:
                    partial = self._buffer("hint block", hint.shape)
                    hint += self._gemm(self._evaluation[:, start:stop], public.reshape(rows, 3 * LWE_DIMENSION), out=partial)
            if encrypting:
                if self._ring is None:
                    products = self._buffer("C block", (outer, 3 * rows))
                    self._gemm(self._secret, public.reshape(3 * rows, LWE_DIMENSION).T, out=products)
                    products = products.reshape(outer, rows, 3)
                else:  # limb-major, so that each limb's rows are contiguous for the kernels
                    products = self._buffer("C block", (3, outer, rows)).transpose(1, 2, 0)
                    self._ring_columns(start, stop, products)
                products[..., 0] += _binomial(self._seed, f"E/{block}", (outer, rows))
                if start < length:
                    products[:, : min(stop, length) - start, 2] += plaintext[:, start : min(stop, length)]
                planes = _pack(products[..., 0], products[..., 1], products[..., 2])
                tags = np.stack([self._tag("C", self.index, peer, block, planes) for peer in self.encrypts_for])
                yield Message(self.index, SERVER, f"lwe/C/{self.index}/{block}", (*planes, tags))
        for name in ("M bytes", "M", "hint block", "C block"):
            self._buffers.pop(name, None)
        self._ring_products = None
        ring, self._ring = self._ring, None  # its tables and product scratch end with the broadcasts
        if evaluating:
            noise = _binomial(self._seed, "G", (n_own, LWE_DIMENSION))
            if ring is None:
                limbs = hint.reshape(n_own, 3, LWE_DIMENSION)
                top = (_pack(limbs[:, 0, :] + noise, limbs[:, 1, :], limbs[:, 2, :])[1],)
            else:
                top = (ring.hint_top(self._evaluation, noise),)
            tags = np.stack([self._tag("H", self.index, peer, 0, top) for peer in self.evaluates_for])
            yield Message(self.index, SERVER, f"lwe/H/{self.index}", (*top, tags))

    def _ring_columns(self, start: int, stop: int, out: np.ndarray) -> None:
        """Columns ``[start, stop)`` of the ring ciphertexts into ``out`` (``(rows, stop -
        start, 3)`` limb sums): coefficients of the products ``a_k s_g`` of the group secrets,
        each polynomial's products computed once (columns arrive in order).  With ``P = 1``
        row ``i`` is point ``i``'s ``S M^T``.  With ``P >= 2`` a message column ``c`` of point
        ``gP + t`` is coefficient ``tL + c`` of ``a_0 s_g`` (where ``Delta m(x_{gP+t})`` sits),
        and the re-randomisation rows are the ``G`` products ``a_{m-1} s_g``."""
        packing = self.packing
        column = start
        while column < stop:
            k, first = self._ring.polynomial_of_column(column)
            end = min(stop, self.length if column < self.length else stop, column - first + rlwe.RING_DIMENSION)
            if self._ring_products is None or self._ring_products[0] != k:
                self._ring_products = None
                self._ring_products = (k, self._ring.ciphertext_products(self._group_secret, k))
            products = self._ring_products[1]
            span = slice(column - start, end - start)
            if packing > 1 and column < self.length:
                for t in range(packing):
                    rows = out[t::packing, span]
                    kernels.rlwe_limbs_into(products[: rows.shape[0]], t * self.length + first,
                                            rows[..., 0], rows[..., 1], rows[..., 2])
            else:
                kernels.rlwe_limbs_into(products, first, out[:, span, 0], out[:, span, 1], out[:, span, 2])
            column = end

    def _tag(self, kind: str, sender: int, receiver: int, block: int, planes: tuple[np.ndarray, ...]) -> np.ndarray:
        peer = receiver if sender == self.index else sender
        return _gmac(self._pair[peer].mac, f"{kind}/{sender}->{receiver}/{block}/{planes[0].shape}", planes)

    def absorb(self, message: Message) -> None:
        """A relayed broadcast of a peer: a block of its ``C`` (evaluated into the running
        ``C Y'^T``) or its hint ``H'`` (kept for decryption)."""
        kind, peer, block = _parse(message.tag)
        if message.sender != SERVER or message.receiver != self.index:
            raise ProtocolError(f"party {self.index}: unexpected message {message.tag!r}")
        if kind == "C" and block is not None and peer in self._accumulators:
            if block != self._next_block[peer]:
                raise ProtocolError(f"party {self.index}: block {block} of party {peer}'s C, expected {self._next_block[peer]}")
            blocks = _blocks(self.length, self.packing)
            if block >= len(blocks):
                raise ProtocolError(f"party {self.index}: block {block} of party {peer}'s C, only {len(blocks)} exist")
            start, stop = blocks[block]
            rows = self._block_rows(start, self.sizes[peer])
            *planes, tag = _expect(message, _planes_spec((rows, stop - start)), message.tag)
            self._verify(tag, "C", peer, self.index, block, planes)
            limbs = _unpack(planes, limb_first=True, out=self._buffer("C limbs", (3, rows, stop - start)))
            accumulator = self._accumulators[peer]
            if self.packing == 1 or start < self.length:
                partial = self._buffer("C evaluated", accumulator.shape)
                accumulator += self._gemm(limbs.reshape(3 * rows, stop - start), self._evaluation[:, start:stop].T, out=partial)
            else:
                self._absorb_packed(accumulator.reshape(3, self.sizes[peer], -1), limbs, start, stop)
            self._next_block[peer] = block + 1
        elif kind == "H" and block is None and peer in self.encrypts_for and peer not in self._hints:
            top, tag = _expect(message, [((self.sizes[peer], LWE_DIMENSION), np.uint32), ((16,), np.uint8)],
                               message.tag)
            self._verify(tag, "H", peer, self.index, 0, (top,))
            self._hints[peer] = top
        else:
            raise ProtocolError(f"party {self.index}: unexpected or repeated broadcast {message.tag!r}")

    def _absorb_packed(self, sums: np.ndarray, limbs: np.ndarray, start: int, stop: int) -> None:
        """Re-randomisation columns ``[start, stop)`` of a packed ``C`` (``limbs``: ``(3, G,
        stop - start)``, row ``g`` the coefficients of ``p_g = a_{m-1} s_g + e'_g``) into the
        running ``C Y'^T`` (``sums``: ``(3, n_peer, n_own)``).  Point ``gP + t``'s row of ``C``
        is ``p_g X^(-tL)``; multiplying by ``X`` is an orthogonal signed permutation of the
        coefficients, so ``<p_g X^(-tL), r_j> = <p_g, r_j X^(tL)>``: the rows of point ``t`` of
        every group meet the re-randomisers shifted by ``tL`` (:func:`rlwe.times_power_columns`)."""
        packing, length, cols = self.packing, self.length, stop - start
        rerandomisers = self._evaluation[:, length:]
        for t in range(min(packing, sums.shape[1])):
            count = len(range(t, sums.shape[1], packing))
            shifted = rlwe.times_power_columns(rerandomisers, t * length, start - length, stop - length)
            partial = self._buffer("C evaluated", (3 * count, sums.shape[2]))
            self._gemm(np.ascontiguousarray(limbs[:, :count]).reshape(3 * count, cols), shifted.T, out=partial)
            sums[:, t::packing] += partial.reshape(3, count, sums.shape[2])

    def _verify(self, tag: np.ndarray, kind: str, sender: int, receiver: int, block: int,
                planes: tuple[np.ndarray, ...]) -> None:
        if not np.array_equal(tag, self._tag(kind, sender, receiver, block, planes)):
            raise ProtocolError(f"party {receiver}: end-to-end tag of {kind} from party {sender} does not verify")

    def answer(self, peer: int) -> Message:
        """Round 3 (evaluator): ``D = C Y'^T - U``, top 24 bits, sealed for ``peer``; keeps ``U_hi + |y|``."""
        accumulator = self._accumulators.pop(peer, None)
        if accumulator is None or self._next_block[peer] != len(_blocks(self.length, self.packing)):
            raise ProtocolError(f"party {self.index}: party {peer}'s ciphertext is incomplete")
        if not self._accumulators:
            self._buffers.clear()
            self._evaluation = None
        n_peer, n_own = self.sizes[peer], self.codes.shape[0]
        sums = accumulator.reshape(3, n_peer, n_own)
        l0, l1, l2 = _normalize(sums[0], sums[1], sums[2])
        del accumulator, sums
        words = _stream(self._seed, f"U/{peer}", (3, n_peer, n_own), np.uint64).view(np.int64)
        mask_top = (1 << (MASK_BITS - 72)) - 1
        u_hi = (words[2] >> 32) & ((1 << SHARE_BITS) - 1)
        u2 = (u_hi << (DELTA_BITS - 72)) | (words[2] & mask_top)
        difference = l0 - (words[0] & _M36)
        borrow = difference >> 36
        difference = l1 - (words[1] & _M36) + borrow
        borrow = difference >> 36
        top = ((l2 - u2 + borrow) & _M32) >> (DROPPED_BITS - 72)
        response = np.ascontiguousarray(top.astype(np.uint32).reshape(n_peer, n_own, 1).view(np.uint8)[..., :3])
        weights = self.codes.sum(axis=1, dtype=np.int64)
        self._shares[peer] = ((u_hi + weights[None, :]) & ((1 << SHARE_BITS) - 1)).astype(np.uint16)
        sealed = self._pair[peer].seal.encrypt(self.answer_nonce(self.index, peer), response.tobytes(), self.session)
        return Message(self.index, peer, "lwe/D", (np.frombuffer(sealed, dtype=np.uint8),))

    def answer_nonce(self, evaluator: int, encryptor: int) -> bytes:
        """The AES-GCM nonce of the answer ``D`` of ``evaluator`` to ``encryptor``: SHA-256 of
        the session and both parties' public keys (12 bytes).  The keys are drawn afresh for
        every session and each answer is made once per session (the evaluation hop runs
        once, :mod:`securefl.crypto.lwe_hops`), so no (key, nonce) ever seals two answers."""
        transcript = (b"securefl/lwe/D/" + self.session + struct.pack(">qq", evaluator, encryptor)
                      + self._public[evaluator] + self._public[encryptor])
        return hashlib.sha256(transcript).digest()[:12]

    def decrypt(self, message: Message) -> None:
        """Round 4 (encryptor): open ``D``, ``t = D' - 2^72 S H'_top + theta``, share ``floor(t / Delta) + |x|``."""
        peer = message.sender
        if message.receiver != self.index or message.tag != "lwe/D" or peer not in self.encrypts_for:
            raise ProtocolError(f"party {self.index}: unexpected answer {message.tag!r} from party {peer}")
        if peer not in self._hints or peer in self._shares:
            raise ProtocolError(f"party {self.index}: answer of party {peer} without its hint, or repeated")
        n_own, n_peer = self.codes.shape[0], self.sizes[peer]
        (sealed,) = _expect(message, [((3 * n_own * n_peer + 16,), np.uint8)], f"answer of party {peer}")
        try:
            opened = self._pair[peer].seal.decrypt(self.answer_nonce(peer, self.index), sealed.tobytes(), self.session)
        except InvalidTag:
            raise ProtocolError(f"party {self.index}: answer of party {peer} fails its AES-GCM tag") from None
        response = np.zeros((n_own, n_peer, 4), dtype=np.uint8)
        response[..., :3] = np.frombuffer(opened, dtype=np.uint8).reshape(n_own, n_peer, 3)
        response = response.view(np.uint32)[..., 0].astype(np.int64)
        hint_top = self._hints.pop(peer).astype(np.float64)
        products = self._gemm(self._secret, hint_top.T).astype(np.int64)
        del hint_top
        theta_top = (1 << (MASK_BITS - 72)) + (1 << (DROPPED_BITS - 72)) + LWE_DIMENSION + 1
        top = ((response << (DROPPED_BITS - 72)) + theta_top - products) & _M32
        weights = self.codes.sum(axis=1, dtype=np.int64)
        share = (top >> (DELTA_BITS - 72)) + weights[:, None]
        self._shares[peer] = (share & ((1 << SHARE_BITS) - 1)).astype(np.uint16)

    def share(self, peer: int) -> np.ndarray:
        """This party's uint16 share of the ``(encryptor, evaluator)`` block of the pair with ``peer``."""
        if peer not in self._shares:
            raise ProtocolError(f"party {self.index} holds no share for party {peer}")
        return self._shares.pop(peer)


@dataclass
class LWEServer:
    """The relay: forwards each broadcast to the peers that need it (each with its own
    end-to-end tag), then reconstructs the matrix from the shares.  It holds no key."""

    pairs: tuple[tuple[int, int], ...]
    parties: tuple[int, ...]

    def recipients(self, kind: str, sender: int) -> tuple[int, ...]:
        """Who needs ``sender``'s broadcast of ``kind`` (``key``, ``C`` or ``H``)."""
        if kind == "key":
            return tuple(p for p in self.parties if p != sender)
        if kind == "C":
            return tuple(sorted(b for a, b in self.pairs if a == sender))
        return tuple(sorted(a for a, b in self.pairs if b == sender))

    def relay(self, message: Message) -> list[Message]:
        """The forwards of one broadcast received from a party."""
        kind, sender, block = _parse(message.tag)
        if message.receiver != SERVER or sender != message.sender or (block is not None) != (kind == "C"):
            raise ProtocolError(f"server: unexpected broadcast {message.tag!r} from party {message.sender}")
        recipients = self.recipients(kind, message.sender)
        if kind == "key":
            return [Message(SERVER, peer, message.tag, message.arrays) for peer in recipients]
        if len(message.arrays) != (4 if kind == "C" else 2) or message.arrays[-1].shape != (len(recipients), 16):
            raise ProtocolError(f"server: broadcast {message.tag!r} must carry one tag per recipient {recipients}")
        *planes, tags = message.arrays
        return [Message(SERVER, peer, message.tag, (*planes, tags[i])) for i, peer in enumerate(recipients)]
