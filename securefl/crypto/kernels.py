"""Compiled inner loops of OT extension, SHADE and the LWE wire format (numba, ``nogil``).

Everything cryptographic here is done elsewhere: AES comes from ``cryptography``
(OpenSSL, AES-NI) in :mod:`securefl.crypto.fixed_key` and :mod:`securefl.crypto.prg`, or,
inside the fused SHADE kernels, from :mod:`securefl.crypto.aesni` (the same permutation,
compiled into the loop).  These kernels are the glue *around* AES that numpy can only
express as many separate passes over memory, each with its own Python call:

* :func:`transpose_bits_into` — the IKNP bit-matrix transpose.  ``r x 64w`` bits held as
  ``(r, w)`` uint64 words become ``(64w, r / 64)`` words: bit ``i`` of output row ``j`` is bit
  ``j`` of input row ``i``.  Each 64 x 64 bit block is transposed by the recursive
  block swap of Hacker's Delight §7-3 (for ``j = 32, 16, ..., 1`` the ``j x j``
  off-diagonal sub-blocks of every ``2j x 2j`` tile are exchanged with one
  shift/xor/mask "delta swap"), on tiles of ``_TILE_WORDS`` blocks side by side so the
  innermost loop runs over contiguous words and vectorises; all ``r / 64`` row groups of a
  tile column go before the next column, so each output row's words are written together
  (group by group over the whole width wrote every output cache line ``r / 64`` times:
  1.4x the time for IKNP's 128 rows).  Measured on the project
  machine: ~3.7 ms per million 128-bit rows, against ~22 ms for the same algorithm as
  numpy calls and ~400 ms for ``unpackbits -> .T -> packbits``.
* :func:`xor_tweak_into`, :func:`xor_block_into`, :func:`xor_rows_where`,
  :func:`xor_masked_into` — the input mixing of the TCCR hash (``pi(x) XOR tweak`` with a
  128-bit tweak, ``q XOR s``), IKNP's ``Q = G(k^s) XOR s * U`` and its receiver's
  ``U = G(k^1) XOR T XOR r``, in one pass each.
* :func:`expansion_inputs_into` — the fixed-key expansion inputs ``seed XOR k``.
* :func:`shade_sender_rows`, :func:`shade_receiver_rows` — SHADE's per-OT arithmetic
  mod 2^16, fused: feed-forward of the AES outputs, the correction, and the running
  share sums, in one pass over the tile instead of six numpy passes.
  :func:`shade_sender_fused`, :func:`shade_receiver_fused` are the same with the expansion
  itself inside (AES-NI where :func:`securefl.crypto.aesni.available`): each OT's
  messages are made in an L1-resident row buffer and consumed at once.
* :func:`lwe_unpack_into`, :func:`lwe_pack_into` — the LWE backend's 13-byte wire form of
  ``Z_(2^104)`` (three planes: 8 + 4 + 1 bytes) to and from float64 limbs, with carry
  propagation, one pass each instead of a dozen numpy passes (:mod:`securefl.crypto.lwe`).
* :func:`rlwe_limbs_into`, :func:`rlwe_hint_top_into` — the ring backend's 26-bit product
  limbs regrouped into the 36/36/32-bit limb sums that :func:`lwe_pack_into` takes, or
  straight into the top 32 bits of the hint that is sent (:mod:`securefl.crypto.rlwe`).
* :func:`untwist_round_into` — the last pass of a negacyclic FFT product, untwist and
  rounding (:mod:`securefl.crypto.linalg`).
* :func:`centered_binomial_into`, :func:`ternary_fill` — the LWE noise (CBD(21) from one
  AES-CTR word) and the ternary secrets (bytes below 255, mod 3) in one pass each, where
  numpy needs five passes (CBD) or a boolean gather (rejection) over arrays of the same size.

Why by hand: these loops exist in no library; with numpy they cost more than the AES
they surround.  ``nogil`` lets two worker threads run them in parallel; ``cache`` keeps
the compiled code between processes.  No secret-dependent branches or indices are used
except where noted (the receiver's choice bit selects whether ``u`` is added, as in
every OT-based protocol: timing is not in the semi-honest model claimed here).
"""

from __future__ import annotations

import numba
import numpy as np

from securefl.crypto import aesni

_TILE_WORDS = 32
"""64 x 64 bit blocks transposed side by side (a 16 KiB tile, L1 resident)."""

_MASKS = np.array(
    [
        0x00000000FFFFFFFF,
        0x0000FFFF0000FFFF,
        0x00FF00FF00FF00FF,
        0x0F0F0F0F0F0F0F0F,
        0x3333333333333333,
        0x5555555555555555,
    ],
    dtype=np.uint64,
)

_jit = numba.njit(nogil=True, cache=True)


@_jit
def _transpose_kernel(words, out, masks, tile_words):  # pragma: no cover - compiled
    rows, width = words.shape
    tile = np.empty((64, tile_words), np.uint64)
    for w0 in range(0, width, tile_words):
        cols = min(tile_words, width - w0)
        for group in range(rows // 64):  # every group of a tile column: output rows written whole
            for r in range(64):
                for w in range(cols):
                    tile[r, w] = words[64 * group + r, w0 + w]
            j = 32
            for level in range(6):
                mask = masks[level]
                shift = np.uint64(j)
                for base in range(0, 64, 2 * j):
                    for r in range(base, base + j):
                        for w in range(cols):
                            low = tile[r, w]
                            high = tile[r + j, w]
                            delta = ((low >> shift) ^ high) & mask
                            tile[r + j, w] = high ^ delta
                            tile[r, w] = low ^ (delta << shift)
                j //= 2
            for w in range(cols):
                for i in range(64):
                    out[64 * (w0 + w) + i, group] = tile[i, w]


def transpose_bits_into(words: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Bit-transpose ``(r, w)`` uint64 ``words`` (``r`` a multiple of 64) into ``(64w, r/64)`` ``out``."""
    _transpose_kernel(words, out, _MASKS, _TILE_WORDS)
    return out


@_jit
def xor_tweak_into(blocks, tweaks, high, out):  # pragma: no cover - compiled
    """``out[k] = blocks[k] XOR (high * 2^64 + tweaks[k])`` for ``(m, 2)`` uint64 blocks: the
    per-row ``tweaks`` enter the low 64 bits, the scalar ``high`` the high 64 bits."""
    for k in range(blocks.shape[0]):
        out[k, 0] = blocks[k, 0] ^ tweaks[k]
        out[k, 1] = blocks[k, 1] ^ high


@_jit
def xor_block_into(blocks, delta, out):  # pragma: no cover - compiled
    """``out[k] = blocks[k] XOR delta`` for ``(m, 2)`` uint64 blocks and one ``(2,)`` block."""
    d0, d1 = delta[0], delta[1]
    for k in range(blocks.shape[0]):
        out[k, 0] = blocks[k, 0] ^ d0
        out[k, 1] = blocks[k, 1] ^ d1
    return out


@_jit
def xor_masked_into(a, b, mask, out):  # pragma: no cover - compiled
    """``out[i] = a[i] XOR b[i] XOR mask`` for ``(rows, w)`` uint64 ``a``, ``b`` (any strides)
    and one ``(w,)`` row ``mask``: IKNP's ``U = PRG(k^1) XOR T XOR r`` in one pass."""
    for i in range(out.shape[0]):
        for w in range(out.shape[1]):
            out[i, w] = a[i, w] ^ b[i, w] ^ mask[w]


@_jit
def xor_rows_where(target, source, bits):  # pragma: no cover - compiled
    """``target[i] ^= source[i]`` for every row ``i`` with ``bits[i] = 1`` (IKNP's ``Q = T XOR s * U``)."""
    for i in range(target.shape[0]):
        mask = np.uint64(0) - np.uint64(bits[i])
        for w in range(target.shape[1]):
            target[i, w] ^= source[i, w] & mask


@_jit
def expansion_inputs_into(seeds, out):  # pragma: no cover - compiled
    """``out[r, k] = seeds[r] XOR k`` (``k`` in the low 64 bits): ``(rows, 2)`` -> ``(rows, blocks, 2)``."""
    for r in range(seeds.shape[0]):
        low, high = seeds[r, 0], seeds[r, 1]
        for k in range(out.shape[1]):
            out[r, k, 0] = low ^ np.uint64(k)
            out[r, k, 1] = high


_inline = numba.njit(nogil=True, inline="always")


@_inline
def _sender_lanes(p0, p1, correlation, u, sums):  # pragma: no cover - compiled
    """One OT of the SHADE sender, over its uint16 lanes mod 2^16: ``u = p0 - p1 + correlation``
    (the correction sent) and ``sums += p0`` (its running share)."""
    for k in range(u.shape[0]):
        u[k] = p0[k] - p1[k] + correlation[k]
        sums[k] += p0[k]


@_inline
def _receiver_lanes(chosen, u, choice, sums):  # pragma: no cover - compiled
    """One OT of the SHADE receiver: ``sums += p_c + c u`` (``m_c``, mod 2^16), ``c u`` as
    ``u & -c`` (no branch on the choice bit, which is random)."""
    mask = np.uint16(0) - np.uint16(choice)
    for k in range(u.shape[0]):
        sums[k] += chosen[k] + (u[k] & mask)


@_inline
def _feed_forward(raw, inputs, out):  # pragma: no cover - compiled
    """``out = raw ^ inputs``: the expansion's feed-forward ``pi(x) ^ x`` on lanes."""
    for k in range(out.shape[0]):
        out[k] = raw[k] ^ inputs[k]


@_jit
def shade_sender_rows(raw0, in0, raw1, in1, correlation, first, u, sums):  # pragma: no cover - compiled
    """SHADE sender, one tile of OTs; all arrays are uint16 lanes, arithmetic mod 2^16.

    Row ``r`` is OT ``g = first + r`` = (receiver point ``g // L``, bit ``g % L``), with the
    sender's two expanded messages ``p_b = raw_b XOR in_b`` (fixed-key feed-forward).
    Writes the correction ``u[r] = p0 - p1 + correlation[bit]`` and adds ``p0`` to
    ``sums[point]`` (``sums`` is the pair's whole ``(n_b, lanes)`` array).
    """
    rows, lanes = u.shape
    length = correlation.shape[0]
    p0 = np.empty(lanes, dtype=np.uint16)
    p1 = np.empty(lanes, dtype=np.uint16)
    for r in range(rows):
        point, bit = divmod(first + r, length)
        _feed_forward(raw0[r], in0[r], p0)
        _feed_forward(raw1[r], in1[r], p1)
        _sender_lanes(p0, p1, correlation[bit], u[r], sums[point])


@_jit
def shade_receiver_rows(raw, inp, u, choices, first, length, sums):  # pragma: no cover - compiled
    """SHADE receiver, one tile of OTs; uint16 lanes, arithmetic mod 2^16.

    Row ``r`` is OT ``g = first + r`` with choice ``c = choices[g]``; the receiver holds
    ``p_c = raw XOR inp`` and adds ``m_c = p_c + c * u[r]`` to ``sums[g // length]``.
    """
    rows, lanes = u.shape
    chosen = np.empty(lanes, dtype=np.uint16)
    for r in range(rows):
        _feed_forward(raw[r], inp[r], chosen)
        _receiver_lanes(chosen, u[r], choices[first + r], sums[(first + r) // length])


@_jit
def shade_sender_fused(seeds0, seeds1, keys, correlation, first, u, sums):  # pragma: no cover - compiled
    """:func:`shade_sender_rows` with the expansion inside: row ``r``'s messages ``p_b =
    G(seeds_b[r])`` are computed block by block into a row buffer (AES-NI, L1-resident) and
    consumed at once; same ``u`` and ``sums``, no tile of AES outputs in memory."""
    rows, lanes = u.shape
    length = correlation.shape[0]
    words0 = np.empty(lanes // 4, dtype=np.uint64)
    words1 = np.empty(lanes // 4, dtype=np.uint64)
    p0, p1 = words0.view(np.uint16), words1.view(np.uint16)
    point, bit = divmod(first, length)
    for r in range(rows):
        aesni.expand_rows(seeds0[r, 0], seeds0[r, 1], seeds1[r, 0], seeds1[r, 1], keys, words0, words1)
        _sender_lanes(p0, p1, correlation[bit], u[r], sums[point])
        bit += 1
        if bit == length:
            point, bit = point + 1, 0


@_jit
def shade_receiver_fused(seeds, keys, u, choices, first, length, sums):  # pragma: no cover - compiled
    """:func:`shade_receiver_rows` with the expansion ``p_c = G(seeds[r])`` inside (AES-NI)."""
    words = np.empty(u.shape[1] // 4, dtype=np.uint64)
    chosen = words.view(np.uint16)
    point, bit = divmod(first, length)
    for r in range(u.shape[0]):
        aesni.expand_row(seeds[r, 0], seeds[r, 1], keys, words)
        _receiver_lanes(chosen, u[r], choices[first + r], sums[point])
        bit += 1
        if bit == length:
            point, bit = point + 1, 0


@_jit
def lwe_unpack_into(low, top, middle, out, limb_first):  # pragma: no cover - compiled
    """LWE wire planes -> float64 limbs.

    An element of ``Z_(2^104)`` travels as three planes of the same ``(outer, inner)``
    shape: ``low`` uint64 (bits 0-63), ``top`` uint32 (bits 72-103), ``middle`` uint8
    (bits 64-71).  The limbs (36, 36, 32 bits) go to ``out[l, o, i]`` if ``limb_first``
    else ``out[o, l, i]``.
    """
    mask36 = np.uint64((1 << 36) - 1)
    if limb_first:  # one pass per limb: three interleaved streams 2^k bytes apart alias in the caches
        for o in range(low.shape[0]):
            for i in range(low.shape[1]):
                out[0, o, i] = low[o, i] & mask36
        for o in range(low.shape[0]):
            for i in range(low.shape[1]):
                out[1, o, i] = (low[o, i] >> np.uint64(36)) | (np.uint64(middle[o, i]) << np.uint64(28))
        for o in range(low.shape[0]):
            for i in range(low.shape[1]):
                out[2, o, i] = top[o, i]
        return
    for o in range(low.shape[0]):
        for i in range(low.shape[1]):
            word = low[o, i]
            out[o, 0, i] = word & mask36
            out[o, 1, i] = (word >> np.uint64(36)) | (np.uint64(middle[o, i]) << np.uint64(28))
            out[o, 2, i] = top[o, i]


@_jit
def lwe_pack_into(g0, g1, g2, low, top, middle):  # pragma: no cover - compiled
    """Exact integer limb sums ``g0 + 2^36 g1 + 2^72 g2`` (float64 ``(outer, inner)``,
    ``|g| < 2^53``) -> the element mod 2^104 as the wire planes of :func:`lwe_unpack_into`
    (carries propagated with arithmetic shifts, i.e. floor division)."""
    mask36 = (np.int64(1) << 36) - 1
    mask32 = (np.int64(1) << 32) - 1
    for o in range(g0.shape[0]):
        for i in range(g0.shape[1]):
            carry = np.int64(g0[o, i])
            l0 = carry & mask36
            carry = (carry >> 36) + np.int64(g1[o, i])
            l1 = carry & mask36
            l2 = ((carry >> 36) + np.int64(g2[o, i])) & mask32
            low[o, i] = np.uint64(l0) | (np.uint64(l1) << np.uint64(36))
            middle[o, i] = np.uint8(l1 >> 28)
            top[o, i] = np.uint32(l2)


@_jit
def rlwe_limbs_into(products, first, g0, g1, g2):  # pragma: no cover - compiled
    """Ring products in 26-bit limbs -> limb sums of the element mod 2^104 (:mod:`securefl.crypto.rlwe`).

    ``products[i, t, first + j]`` (float64, exact integers, ``|c| < 2^47``) are the limbs of
    ``c0 + 2^26 c1 + 2^52 c2 + 2^78 c3``; writes ``g0 + 2^36 g1 + 2^72 g2`` of the same value
    into ``g*[i, j]`` (float64, ``|g| < 2^53``, the input of :func:`lwe_pack_into`):
    ``g0 = c0 + 2^26 (c1 mod 2^10)``, ``g1 = floor(c1 / 2^10) + 2^16 (c2 mod 2^20)``,
    ``g2 = floor(c2 / 2^20) + 2^6 c3``.  In float64 throughout, exactly: scaling by a power
    of two, ``floor`` and the sums of integers below ``2^53`` round nothing, and unlike the
    int64 conversions (scalar without AVX-512) the loop vectorises.
    """
    for i in range(g0.shape[0]):
        c0, c1, c2, c3 = products[i, 0], products[i, 1], products[i, 2], products[i, 3]
        r0, r1, r2 = g0[i], g1[i], g2[i]
        for j in range(r0.shape[0]):
            high1 = np.floor(c1[first + j] * 0.0009765625)  # 2^-10
            high2 = np.floor(c2[first + j] * 9.5367431640625e-07)  # 2^-20
            r0[j] = c0[first + j] + (c1[first + j] - high1 * 1024.0) * 67108864.0  # 2^26
            r1[j] = high1 + (c2[first + j] - high2 * 1048576.0) * 65536.0  # 2^20, 2^16
            r2[j] = high2 + c3[first + j] * 64.0


@_jit
def rlwe_hint_top_into(products, noise, top):  # pragma: no cover - compiled
    """The ring backend's hint on the wire (:mod:`securefl.crypto.rlwe`): ``top[i, j] =
    floor(h / 2^72)`` for the element ``h = c0 + g + 2^26 c1 + 2^52 c2 + 2^78 c3`` mod
    ``2^104``, with ``c_t = products[i, t, j]`` (float64, exact integers, ``|c| < 2^47``) and the
    noise ``g = noise[i, j]``: the carries are propagated in float64, exactly (floors of
    quotients by powers of two), and nothing below bit 72 is kept."""
    for i in range(top.shape[0]):
        c0, c1, c2, c3, g, out = products[i, 0], products[i, 1], products[i, 2], products[i, 3], noise[i], top[i]
        for j in range(out.shape[0]):
            carry = np.floor((c0[j] + g[j]) * 1.4901161193847656e-08)  # 2^-26
            carry = np.floor((c1[j] + carry) * 1.4901161193847656e-08)
            limb2 = c2[j] + carry
            carry = np.floor(limb2 * 1.4901161193847656e-08)
            limb2 -= carry * 67108864.0
            limb3 = c3[j] + carry
            limb3 -= np.floor(limb3 * 1.4901161193847656e-08) * 67108864.0
            out[j] = np.uint32(np.floor(limb2 * 9.5367431640625e-07) + limb3 * 64.0)


@_jit
def untwist_round_into(folded, untwist, out):  # pragma: no cover - compiled
    """The last step of a negacyclic product (:class:`securefl.crypto.linalg.NegacyclicProducts`):
    ``v = folded[..., j] * untwist[j]`` (complex128 ``(rows, T, N/2)``), then
    ``out[..., j] = round(Re v)`` and ``out[..., N/2 + j] = round(Im v)`` (float64
    ``(rows, T, N)``), in one pass where torch takes four (multiply, two strided copies, round)."""
    half = untwist.shape[0]
    for i in range(folded.shape[0]):
        for t in range(folded.shape[1]):
            source, target = folded[i, t], out[i, t]
            for j in range(half):
                value = source[j] * untwist[j]
                target[j] = np.round(value.real)
                target[half + j] = np.round(value.imag)


@_jit
def _popcount(word):  # pragma: no cover - compiled
    """Set bits of a uint64 (the SWAR count of Hacker's Delight §5-1; vectorises, unlike a loop)."""
    word = word - ((word >> np.uint64(1)) & np.uint64(0x5555555555555555))
    word = (word & np.uint64(0x3333333333333333)) + ((word >> np.uint64(2)) & np.uint64(0x3333333333333333))
    word = (word + (word >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return (word * np.uint64(0x0101010101010101)) >> np.uint64(56)


@_jit
def centered_binomial_into(words, bits, out):  # pragma: no cover - compiled
    """``out[i] = popcount(w_i mod 2^bits) - popcount(floor(w_i / 2^bits) mod 2^bits)`` for the
    uint64 ``words`` (``2 bits <= 64``): the centred binomial CBD(``bits``) of the LWE noise,
    as float64, in one pass (:mod:`securefl.crypto.lwe`)."""
    mask = (np.uint64(1) << np.uint64(bits)) - np.uint64(1)
    shift = np.uint64(bits)
    for i in range(words.shape[0]):
        word = words[i]
        out[i] = np.float64(np.int64(_popcount(word & mask)) - np.int64(_popcount((word >> shift) & mask)))


@_jit
def ternary_fill(raw, out, filled):  # pragma: no cover - compiled
    """Uniform ``{-1, 0, 1}`` by exact rejection: each byte of ``raw`` below 255 in turn gives
    ``out[filled] = b mod 3 - 1`` until ``out`` is full; returns the new ``filled``.  Which
    bytes are rejected is data-dependent control flow over discarded bytes (255 only),
    independent of the kept values (:mod:`securefl.crypto.lwe`)."""
    for i in range(raw.shape[0]):
        if filled == out.shape[0]:
            break
        byte = raw[i]
        if byte < 255:
            out[filled] = np.float64(byte % 3) - 1.0
            filled += 1
    return filled
