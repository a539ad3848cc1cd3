"""The secure Hamming matrix FedProp's server receives: its three backends' cost models.

:func:`securefl.protocols.secure_hamming_matrix` (the room above: it drives the deployed
protocol on a transport) takes per-party ``(n_j, L)`` 0/1 codes and returns the ``N x N``
matrix ``H[i, j] = HD(code_i, code_j)`` as the server reconstructs it; this module holds
what the crypto room knows of its backends (names, byte and time models, the choice of
``"auto"``, the plaintext oracle):

* ``"shade"`` (:mod:`securefl.crypto.shade`): SHADE over IKNP OT extension; traffic
  ``n_a n_b L 16`` bits per pair of parties.
* ``"lwe"`` (:mod:`securefl.crypto.lwe`): LWE linearly homomorphic encryption of one
  party's codes; traffic linear in the inputs plus the ``n_a n_b`` outputs.
* ``"rlwe"`` (:mod:`securefl.crypto.rlwe`): the same protocol and messages with a
  ring-structured public matrix (ring-LWE): the products with it become FFT polynomial
  products.
* ``"plaintext"``: the same matrix without cryptography (the oracle of the tests).

Both secure backends end the same way, which :mod:`securefl.crypto.hamming_shares` holds
(re-exported here; the backends import it from there, so nothing imports this entry point
back): for every pair of
parties ``a < b`` each of the two sends the server its share of the ``(a, b)`` block
(``n_a x n_b`` values in ``Z_(2^16)`` whose sum is ``HD``; each share alone is uniform),
every party sends its own in-party block (its own data, computed in the clear), and the
server adds the shares (:func:`securefl.protocols.hamming.relay.assemble`).  The server learns exactly ``H``.
Which party of a pair plays which role (OT sender or encryptor) alternates by
:func:`pair_roles` so that work and traffic spread evenly over the parties.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from securefl.crypto import rlwe
from securefl.crypto.channel import SERVER
from securefl.crypto.hamming_plain import hamming_matrix, pack_codes
from securefl.crypto.hamming_shares import (
    SHARE_BITS,
    HammingResult,
    check_codes,
    own_block,
    pair_roles,
)
from securefl.crypto.lwe import HINT_BYTES, LWE_DIMENSION, RERANDOMISATION, ciphertext_bytes
from securefl.errors import InputError

__all__ = ["BACKENDS", "SHARE_BITS", "HammingResult", "arithmetic", "check_codes", "choose_backend",
           "link_bytes_model", "modelled_seconds", "own_block", "pair_roles",
           "plaintext_hamming_matrix"]

BACKENDS = ("shade", "lwe", "rlwe", "plaintext")


def link_bytes_model(backend: str, sizes: Sequence[int], length: int) -> int:
    """Modelled bytes on the busiest client's link in its busier direction,
    ``max_j max(sent_j, received_j)`` (what ``bench hamming`` reports as ``link_bytes_max_party``),
    for ``backend`` ``"shade"``, ``"lwe"`` or ``"rlwe"`` on parties of ``sizes`` points and codes
    of ``length`` bits; frame headers, tags, keys and base OTs left out.

    SHADE, per pair (OT sender ``s``, receiver ``r``, :func:`pair_roles`): ``16 n_r L`` bytes of
    IKNP matrix ``r -> s`` and ``16 ceil(n_s / 8) n_r L`` bytes of corrections ``s -> r``.
    LWE, per party: its ``C`` (``13 n_j (L + 4096)``, if it encrypts for anyone; ring-LWE packs
    ``P = floor(4096 / L)`` points per ciphertext, ``13 (n_j L + ceil(n_j / P) 4096)``,
    :func:`securefl.crypto.rlwe.ciphertext_elements`) and hint top limb (``4 * 4096 n_j``, if it
    evaluates anyone) sent once, each peer's relayed ``C`` or hint received, ``3 n_a n_b + 16``
    bytes of ``D`` per pair.  Both: two bytes per share entry and per own-block entry to the
    server."""
    if backend not in ("shade", "lwe", "rlwe"):
        raise InputError("backend", backend, "must be 'shade', 'lwe' or 'rlwe'")
    sizes = [int(n) for n in sizes]
    ciphertext = [ciphertext_bytes(n, length, ring=backend == "rlwe") for n in sizes]
    sent = [2 * n * n for n in sizes]
    received = [0] * len(sizes)
    roles = [pair_roles(a, b) for a in range(len(sizes)) for b in range(a + 1, len(sizes))]
    for active, passive in roles:
        n_a, n_p = sizes[active], sizes[passive]
        sent[active] += 2 * n_a * n_p
        sent[passive] += 2 * n_a * n_p
        if backend == "shade":
            matrix, corrections = 16 * n_p * length, 16 * -(-n_a // 8) * n_p * length
            sent[passive] += matrix
            received[active] += matrix
            sent[active] += corrections
            received[passive] += corrections
        else:
            received[passive] += ciphertext[active] + 3 * n_a * n_p + 16
            received[active] += HINT_BYTES * LWE_DIMENSION * n_p + 3 * n_a * n_p + 16
            sent[passive] += 3 * n_a * n_p + 16
    if backend != "shade":
        for j, n in enumerate(sizes):
            if any(active == j for active, _ in roles):
                sent[j] += ciphertext[j]
            if any(passive == j for _, passive in roles):
                sent[j] += HINT_BYTES * LWE_DIMENSION * n
    return max((max(s, r) for s, r in zip(sent, received)), default=0)


AUTO_LINK_BITS_PER_SECOND = 1e8
"""The client link ``"auto"`` plans for: 100 Mbit/s (a broadband uplink)."""
SHADE_SECONDS_PER_BYTE = 0.85e-9
"""SHADE's CPU per byte its clients send, setups resumed (AMD EPYC Zen 3, 2026-11-28, one
sitting with the two constants below, ``benchmarks/results/shade-ghash``: 0.75-0.94 ns from
5 x 500, L = 4096, to 5 x 135, L = 1024; the first round's base OTs, ~0.1 s per pair, left
out)."""
RING_SECONDS_PER_POINT_POLYNOMIAL = 2.0e-4
"""Ring-LWE's fixed CPU per public polynomial and ciphertext of ``C`` (a point when
``P = 1``) or point of the hint (same sitting: 1.4-2.0e-4 s from 5 x 500 to 5 x 135 points,
3.7e-4 at 2 x 2500)."""
RING_SECONDS_PER_MULTIPLY_ADD = 5.7e-11
"""Ring-LWE's per-pair CPU per float64 multiply-add (same sitting: 4.9-8.4e-11 s from
2 x 2500 to 5 x 135 points).  With the three constants the modelled seconds of both backends
were within 7 % of the measured ones (steady rounds plus the link) at 5 x 135, 2 x 500,
5 x 500 and 2 x 2500 points over 100 Mbit/s, 1 Gbit/s and 10 Gbit/s links, and the faster
backend was picked at all twelve."""


def arithmetic(backend: str, sizes: Sequence[int], length: int) -> tuple[int, int]:
    """The float64 arithmetic of one LWE (``"lwe"``) or ring-LWE (``"rlwe"``) Hamming session:
    ``(multiply_adds, ffts)``, the multiply-adds of its matrix products and the complex FFTs of
    ``N / 2 = 2048`` points of its ring products, counted from the protocol
    (:mod:`securefl.crypto.lwe`, :mod:`securefl.crypto.rlwe`), the fewest its design allows.

    Per pair (encryptor ``a``, evaluator ``b``, :func:`pair_roles`): ``C Y'^T`` over three limbs,
    ``3 n_a n_b (L + 4096)`` (packed ring rows included: their ``P`` rotations meet ``n_a`` rows
    in all), and the decryption ``S H'_top^T``, ``4096 n_a n_b``.  Per party, plain LWE only:
    ``C = S M^T`` (``3 n_j 4096 K``, ``K = L + 4096``) if it encrypts and the hint ``M^T Y'^T``
    (``3 n_j K 4096``) if it evaluates.  Ring-LWE instead transforms, per party and session, the
    ``m = ceil(L / 4096) + 1`` public polynomials' four limbs (``4m`` FFTs for each of its two
    tables, ``a_k`` to encrypt and ``a_k*`` to evaluate); per ciphertext secret (``G_j``,
    :func:`securefl.crypto.rlwe.groups`) one forward and ``4m`` inverse FFTs; per hint point ``m``
    forward and 4 inverse (summed over ``k`` before the inverse)."""
    if backend not in ("lwe", "rlwe"):
        raise InputError("backend", backend, "the arithmetic count covers 'lwe' and 'rlwe'")
    sizes = [int(n) for n in sizes]
    roles = [pair_roles(a, b) for a in range(len(sizes)) for b in range(a + 1, len(sizes))]
    encrypting, evaluating = {a for a, _ in roles}, {b for _, b in roles}
    multiply_adds = sum(sizes[a] * sizes[b] * (3 * (length + RERANDOMISATION) + LWE_DIMENSION) for a, b in roles)
    if backend == "lwe":
        columns = length + RERANDOMISATION
        multiply_adds += sum(3 * sizes[j] * LWE_DIMENSION * columns for j in encrypting)
        multiply_adds += sum(3 * sizes[j] * columns * LWE_DIMENSION for j in evaluating)
        return multiply_adds, 0
    m = rlwe.polynomial_count(length)
    ffts = sum(4 * m + rlwe.groups(sizes[j], length) * (1 + 4 * m) for j in encrypting)
    ffts += sum(4 * m + sizes[j] * (m + 4) for j in evaluating)
    return multiply_adds, ffts


def modelled_seconds(backend: str, sizes: Sequence[int], length: int,
                     link_bits_per_second: float = AUTO_LINK_BITS_PER_SECOND) -> float:
    """Modelled seconds of one secure Hamming matrix: CPU (all parties, the constants above,
    measured on the project machine) plus the busiest client's link bytes
    (:func:`link_bytes_model`) at ``link_bits_per_second``, for ``"shade"`` or ``"rlwe"``.

    SHADE: ``SHADE_SECONDS_PER_BYTE`` times the bytes its clients send (the AES, GMAC and lane
    work all scale with them).  Ring-LWE: ``RING_SECONDS_PER_POINT_POLYNOMIAL`` per public
    polynomial (``ceil(L / 4096) + 1`` of them) and ciphertext of each party's ``C``
    (``ceil(n_j / P)`` ciphertexts, :func:`securefl.crypto.rlwe.groups`) and point of its hint, plus
    ``RING_SECONDS_PER_MULTIPLY_ADD`` per multiply-add of the pairs,
    ``3 n_a n_b (L + 4096) + 4096 n_a n_b``."""
    if backend not in ("shade", "rlwe"):
        raise InputError("backend", backend, "the cost model covers 'shade' and 'rlwe'")
    if not link_bits_per_second > 0:
        raise InputError("link_bits_per_second", link_bits_per_second, "must be positive")
    sizes = [int(n) for n in sizes]
    roles = [pair_roles(a, b) for a in range(len(sizes)) for b in range(a + 1, len(sizes))]
    if backend == "shade":
        sent = sum(16 * sizes[r] * length * (1 + -(-sizes[s] // 8)) for s, r in roles)
        cpu = SHADE_SECONDS_PER_BYTE * sent
    else:
        polynomials = -(-length // rlwe.RING_DIMENSION) + 1
        encrypting = sum(rlwe.groups(sizes[j], length) for j in {s for s, _ in roles})
        evaluating = sum(sizes[j] for j in {r for _, r in roles})
        products, _ = arithmetic("rlwe", sizes, length)
        cpu = (RING_SECONDS_PER_POINT_POLYNOMIAL * polynomials * (encrypting + evaluating)
               + RING_SECONDS_PER_MULTIPLY_ADD * products)
    return cpu + 8.0 * link_bytes_model(backend, sizes, length) / link_bits_per_second


def choose_backend(sizes: Sequence[int], length: int,
                   link_bits_per_second: float = AUTO_LINK_BITS_PER_SECOND) -> str:
    """The backend ``"auto"`` resolves to: ``"rlwe"`` or ``"shade"``, whichever has fewer
    :func:`modelled_seconds` (CPU plus the busiest client's bytes over a
    ``link_bits_per_second`` link, 100 Mbit/s by default).

    Ring-LWE's bytes are about ``13 (L + 4096 / P) + 4 * 4096`` per point whatever the peers (its
    packed ``C``, ``P = floor(4096 / L)`` points per ciphertext, and its hint's top limb),
    SHADE's ``n_a n_b L 16`` bits per pair; SHADE's CPU (setups resumed across rounds) is lower
    on small rounds.  At 100 Mbit/s this picks ring-LWE for FedProp's digits round (5 x ~121
    points, L = 1024: 1.3 s against 5.7 s modelled) and rounds down to 17 points per client
    there, SHADE for small rounds (3 x 40 points, L = 256); at 1 Gbit/s ring-LWE still takes
    the digits round (0.55 s against 0.83 s), SHADE those of 64 or fewer points per client at
    L = 1024, and ring-LWE those of 17 or more points per client at L = 4096.
    Deterministic in public facts (point counts, ``L``) and constants, so the server and every
    client resolve it alike."""
    if len(sizes) < 2:
        return "shade"
    shade = modelled_seconds("shade", sizes, length, link_bits_per_second)
    ring = modelled_seconds("rlwe", sizes, length, link_bits_per_second)
    return "rlwe" if ring < shade else "shade"


def plaintext_hamming_matrix(codes: Sequence[np.ndarray]) -> HammingResult:
    """The same matrix as :func:`securefl.protocols.secure_hamming_matrix` computed in the clear
    (no crypto)."""
    parties = check_codes(codes)
    start = time.perf_counter()
    packed = pack_codes(np.concatenate(parties, axis=0))
    matrix = hamming_matrix(packed)
    sizes = [p.shape[0] for p in parties]
    return HammingResult(
        matrix=matrix,
        bytes_sent={**{party: 0 for party in range(len(parties))}, SERVER: 0},
        backend="plaintext",
        seconds=time.perf_counter() - start,
        offsets=tuple(np.cumsum([0, *sizes])[:-1].tolist()),
    )
