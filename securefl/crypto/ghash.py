"""GMAC with GHASH through the CPU's 256-bit carry-less multiplier, reached from numba.

Every frame of :mod:`securefl.crypto.channel` carries a GMAC tag (AES-GCM with an empty
plaintext), computed by its sender and checked by its receiver, so SHADE's tens of GB a
round pass through GHASH twice.  OpenSSL's GHASH multiplies one 128-bit block per
``PCLMULQDQ`` triple; on a CPU with ``VPCLMULQDQ`` but without AVX-512 (AMD Zen 3) it ran
7.5 GB/s, and GHASH was a quarter of a digits SHADE round.  Here two blocks share each
256-bit instruction: 12–13.5 GB/s out of cache on that machine (16 in cache).

**What it computes.**  ``gmac(key, nonce, buffers)`` is the tag AES-GCM (NIST SP 800-38D)
gives for the associated data ``A = buffers[0] || buffers[1] || ...`` and no plaintext:

    tag = GHASH_H(A || 0-pad || [8|A|]_64 || [0]_64)  ^  AES_K(nonce || 0^31 || 1),   H = AES_K(0^128)

(12-byte nonces only).  GHASH is evaluated as POLYVAL (RFC 8452, Appendix A):
``GHASH(H, X_1..X_n) = ByteReverse(POLYVAL(H', ByteReverse(X_1), ..))`` with ``H' = x·ByteReverse(H)``
in POLYVAL's field ``GF(2)[x] / (x^128 + x^127 + x^126 + x^121 + 1)``, where a byte-reversed
block is a little-endian integer whose bit ``i`` is the coefficient of ``x^i``, so a
carry-less product is a polynomial product with no bit reflection.  POLYVAL's step is
``S_j = (S_{j-1} + X_j)·H'·x^-128``; with ``H_1 = H'`` and ``H_i = H_{i-1}·H'·x^-128``,
``W`` steps unroll to

    S_{j+W} = mont( sum_{i=1..W} (X'_i · H_{W+1-i}) ),    X'_1 = S_j + X_{j+1},  X'_i = X_{j+i},

``mont(T) = T·x^-128 mod P`` of the 256-bit sum: one Montgomery reduction (two 64-bit
carry-less products by ``0xC2..00``, the reflected tail of P) for ``W`` blocks.  Products are
Karatsuba (``lo = a0·b0``, ``hi = a1·b1``, ``mid = (a0^a1)(b0^b1) ^ lo ^ hi``, the sums of
``mid`` taken before the correction, which is linear), two blocks per ``VPCLMULQDQ``;
``W = 64`` (:data:`WIDTH`), then groups of 8 and single blocks for the tail (block ``i`` of a
group of ``w`` multiplies ``H_{w+1-i}``: the last ``w`` entries of one table).  The table of
``H_1 .. H_64`` (and their Karatsuba halves) is built per key in compiled code (64 products).

Who learns what: a GMAC tag hides nothing of the data and authenticates it under a key used
once.  The loops and the addresses read depend on the data's length only (the key enters as
the table of its powers, read in a fixed order; the products are single instructions);
timing side channels are otherwise outside securefl's model, as for the LWE backends.

**When it is used.**  :func:`available` is true only on x86-64 when numba's target has
``PCLMULQDQ``, ``VPCLMULQDQ`` and AVX2 (the host's, or ``NUMBA_CPU_NAME`` / ``NUMBA_CPU_FEATURES``),
after a known-answer test against ``cryptography`` (lengths 0-200 and 5,000 bytes, split at
odd places), and when, timed once per process on 4 MiB, it is faster than OpenSSL (an AVX-512
machine's OpenSSL may be: 28 GB/s was measured on an Intel Xeon), for data of at least
:data:`SMALL` bytes (below, OpenSSL's set-up is cheaper); ``SECUREFL_CLMUL=0`` turns it off.
Elsewhere :func:`gmac` is OpenSSL's.  Both give the same tag, so which one a
party runs never changes a message; the suite runs both.

Why by hand: OpenSSL has no 256-bit GHASH for CPUs without AVX-512, ``cryptography`` has no
other, and pycryptodome's GHASH ran 5.2 GB/s here.  What is written here is the aggregation
and the reduction; the multiplications are the CPU's instructions.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Iterable

import numba
import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from securefl.crypto import aesni
from securefl.errors import InputError

WIDTH = 64
"""Blocks per Montgomery reduction in the main loop (then groups of 8, then single blocks)."""
FEATURES = ("pclmul", "vpclmulqdq", "avx2")
"""The LLVM CPU features numba's target needs for the compiled GHASH (:func:`~securefl.crypto.aesni.target_has`)."""

_I8, _I32, _I64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
_PAIR, _QUAD = ir.VectorType(_I64, 2), ir.VectorType(_I64, 4)
_WORDS = types.Array(types.uint64, 1, "C")
_TAIL = 0xC200000000000000
"""``x^63 + x^62 + x^57``: P's terms below ``x^128`` other than 1, divided by ``x^64``."""


def _clmul(builder, vector, a, b, selector: int):
    """``PCLMULQDQ`` (two 64-bit words) or ``VPCLMULQDQ`` (per 128-bit lane) of ``a`` and ``b``;
    ``selector`` bit 0 picks ``a``'s word, bit 4 ``b``'s."""
    name = "llvm.x86.pclmulqdq.256" if vector is _QUAD else "llvm.x86.pclmulqdq"
    function = builder.module.declare_intrinsic(name, fnty=ir.FunctionType(vector, [vector, vector, _I8]))
    return builder.call(function, [a, b, ir.Constant(_I8, selector)])


def _word(builder, vector, index: int):
    return builder.extract_element(vector, ir.Constant(_I32, index))


def _montgomery(builder, lo, mid, hi):
    """``(lo ^ mid << 64 ^ hi << 128) · x^-128 mod P`` as its two 64-bit words (128-bit
    ``lo``, ``mid``, ``hi``): two rounds of 64-bit Montgomery reduction, each clearing the
    lowest word ``t`` by adding ``t·P`` (``P = 1 mod x^64``)."""
    t0 = _word(builder, lo, 0)
    t1 = builder.xor(_word(builder, lo, 1), _word(builder, mid, 0))
    t2 = builder.xor(_word(builder, hi, 0), _word(builder, mid, 1))
    t3 = _word(builder, hi, 1)
    tail = ir.Constant(_PAIR, [_TAIL, 0])
    for low, high in ((0, 1), (1, 2)):
        words = [t0, t1, t2, t3]
        product = _clmul(builder, _PAIR, builder.insert_element(ir.Constant(_PAIR, None), words[low],
                                                                 ir.Constant(_I32, 0)), tail, 0x00)
        words[high] = builder.xor(words[high], _word(builder, product, 0))
        words[high + 1] = builder.xor(words[high + 1], builder.xor(_word(builder, product, 1), words[low]))
        t0, t1, t2, t3 = words
    return t2, t3


def _pointer(context, builder, array_type, value, element):
    return builder.bitcast(context.make_array(array_type)(context, builder, value).data, element.as_pointer())


def _group_intrinsic(width: int):
    """An intrinsic ``(state, data, offset, table, entry) -> None``: ``state`` (two uint64
    words) becomes POLYVAL's state after the ``width`` blocks of ``data`` (uint8) at byte
    ``offset``, multiplied by the table's entries ``entry .. entry + width - 1`` (powers in the
    first ``2·WIDTH`` words, Karatsuba keys in the next).  Two blocks per 256-bit
    multiplication when ``width`` is even.  No bounds check: callers keep to the arrays."""
    lanes = 2 if width % 2 == 0 else 1
    vector = _QUAD if lanes == 2 else _PAIR
    raw = ir.VectorType(_I8, 16 * lanes)
    reverse = ir.Constant(ir.VectorType(_I32, 16 * lanes), [16 * l + 15 - i for l in range(lanes) for i in range(16)])
    swap = ir.Constant(ir.VectorType(_I32, 2 * lanes), [1, 0, 3, 2][: 2 * lanes])

    @intrinsic
    def group(typingctx, state, data, offset, table, entry):
        bytes_ = isinstance(data, types.Array) and data.dtype == types.uint8 and data.ndim == 1 and data.layout == "C"
        if state != _WORDS or table != _WORDS or not bytes_ or offset != types.intp or entry != types.intp:
            return None

        def codegen(context, builder, sig, args):
            words = _pointer(context, builder, sig.args[0], args[0], _I64)
            source = builder.gep(_pointer(context, builder, sig.args[1], args[1], _I8), [args[2]])
            powers = builder.gep(_pointer(context, builder, sig.args[3], args[3], _PAIR), [args[4]])
            keys = builder.gep(powers, [ir.Constant(_I64, WIDTH)])
            start = ir.Constant(vector, None)
            for w in (0, 1):
                start = builder.insert_element(start, builder.load(builder.gep(words, [ir.Constant(_I32, w)])),
                                               ir.Constant(_I32, w))
            sums = None
            for k in range(width // lanes):
                at = ir.Constant(_I64, k * lanes)
                text = builder.load(builder.bitcast(builder.gep(source, [ir.Constant(_I64, 16 * lanes * k)]),
                                                    raw.as_pointer()), align=1)
                x = builder.bitcast(builder.shuffle_vector(text, ir.Constant(raw, ir.Undefined), reverse), vector)
                if k == 0:
                    x = builder.xor(x, start)
                h = builder.load(builder.bitcast(builder.gep(powers, [at]), vector.as_pointer()), align=8)
                key = builder.load(builder.bitcast(builder.gep(keys, [at]), vector.as_pointer()), align=8)
                folded = builder.xor(x, builder.shuffle_vector(x, x, swap))
                terms = (_clmul(builder, vector, x, h, 0x00), _clmul(builder, vector, folded, key, 0x00),
                         _clmul(builder, vector, x, h, 0x11))
                sums = terms if sums is None else tuple(builder.xor(s, t) for s, t in zip(sums, terms))
            if lanes == 2:
                halves = [ir.Constant(ir.VectorType(_I32, 2), [0, 1]), ir.Constant(ir.VectorType(_I32, 2), [2, 3])]
                sums = tuple(builder.xor(*(builder.shuffle_vector(s, s, half) for half in halves)) for s in sums)
            lo, mid, hi = sums
            low, high = _montgomery(builder, lo, builder.xor(mid, builder.xor(lo, hi)), hi)
            builder.store(low, builder.gep(words, [ir.Constant(_I32, 0)]))
            builder.store(high, builder.gep(words, [ir.Constant(_I32, 1)]))
            return context.get_dummy_value()

        return types.none(state, data, offset, table, entry), codegen

    return group


@intrinsic
def _multiply(typingctx, table, target, a, b):
    """``table`` block ``target`` = ``a·b·x^-128 mod P`` of blocks ``a`` and ``b`` (schoolbook:
    only the key's 64 powers go through here)."""
    if table != _WORDS or any(v != types.intp for v in (target, a, b)):
        return None

    def codegen(context, builder, sig, args):
        blocks = _pointer(context, builder, sig.args[0], args[0], _PAIR)
        x, y = (builder.load(builder.gep(blocks, [i]), align=8) for i in (args[2], args[3]))
        lo, hi = _clmul(builder, _PAIR, x, y, 0x00), _clmul(builder, _PAIR, x, y, 0x11)
        mid = builder.xor(_clmul(builder, _PAIR, x, y, 0x01), _clmul(builder, _PAIR, x, y, 0x10))
        low, high = _montgomery(builder, lo, mid, hi)
        result = builder.insert_element(ir.Constant(_PAIR, None), low, ir.Constant(_I32, 0))
        builder.store(builder.insert_element(result, high, ir.Constant(_I32, 1)), builder.gep(blocks, [args[1]]),
                      align=8)
        return context.get_dummy_value()

    return types.none(table, target, a, b), codegen


_wide = _group_intrinsic(WIDTH)
_eight = _group_intrinsic(8)
_one = _group_intrinsic(1)


@numba.njit(nogil=True, cache=True)
def table_into(h_low, h_high, table):  # pragma: no cover - compiled
    """``table`` (``4·WIDTH`` uint64): entry ``i < WIDTH`` is ``H_{WIDTH-i}`` for ``H_1 = h_low |
    h_high << 64``; entry ``WIDTH + i`` is its Karatsuba key ``(low ^ high, 0)``."""
    last = WIDTH - 1
    table[2 * last] = h_low
    table[2 * last + 1] = h_high
    for i in range(last - 1, -1, -1):
        _multiply(table, i, i + 1, last)
    for i in range(WIDTH):
        table[2 * (WIDTH + i)] = table[2 * i] ^ table[2 * i + 1]
        table[2 * (WIDTH + i) + 1] = 0


@numba.njit(nogil=True, cache=True)
def absorb(state, data, table):  # pragma: no cover - compiled
    """POLYVAL's ``state`` after every whole 16-byte block of ``data`` (uint8, byte-reversed
    blocks as GHASH's): groups of ``WIDTH``, then of 8, then single blocks."""
    count = data.shape[0] // 16
    k = 0
    while k + WIDTH <= count:
        _wide(state, data, 16 * k, table, 0)
        k += WIDTH
    while k + 8 <= count:
        _eight(state, data, 16 * k, table, WIDTH - 8)
        k += 8
    while k < count:
        _one(state, data, 16 * k, table, WIDTH - 1)
        k += 1


_FIELD = (1 << 128) | (1 << 127) | (1 << 126) | (1 << 121) | 1


def _bytes(buffer) -> memoryview:
    view = memoryview(buffer)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def _ghash(hash_key: bytes, buffers: Iterable) -> int:
    """GHASH under ``H = hash_key`` of the concatenated ``buffers``, zero-padded, and the length
    block, as POLYVAL's state (RFC 8452): whole blocks through :func:`absorb` straight from
    each buffer, a block split across buffers through a 16-byte carry."""
    h = int.from_bytes(hash_key, "big") << 1  # H' = x · ByteReverse(H)
    h = h ^ _FIELD if h >> 128 else h
    table = np.empty(4 * WIDTH, dtype=np.uint64)
    table_into(np.uint64(h & (2**64 - 1)), np.uint64(h >> 64), table)
    state = np.zeros(2, dtype=np.uint64)
    pending, length = b"", 0
    for buffer in buffers:
        view = _bytes(buffer)
        length += len(view)
        if pending:
            need = 16 - len(pending)
            pending += bytes(view[:need])
            view = view[need:]
            if len(pending) < 16:
                continue
            absorb(state, np.frombuffer(pending, dtype=np.uint8), table)
        whole = len(view) - len(view) % 16
        if whole:
            absorb(state, np.frombuffer(view[:whole], dtype=np.uint8), table)
        pending = bytes(view[whole:])
    tail = pending + bytes(-len(pending) % 16) + (8 * length).to_bytes(8, "big") + bytes(8)
    absorb(state, np.frombuffer(tail, dtype=np.uint8), table)
    return int(state[0]) | int(state[1]) << 64


def _compiled_gmac(key: bytes, nonce: bytes, buffers: Iterable) -> bytes:
    """``GHASH ^ AES_K(J0)`` with ``H = AES_K(0)`` (one ECB call for both blocks)."""
    blocks = Cipher(algorithms.AES(key), modes.ECB()).encryptor().update(bytes(16) + nonce + b"\x00\x00\x00\x01")
    return (_ghash(blocks[:16], buffers) ^ int.from_bytes(blocks[16:], "big")).to_bytes(16, "big")


def _openssl_gmac(key: bytes, nonce: bytes, buffers: Iterable) -> bytes:
    encryptor = Cipher(algorithms.AES(key), modes.GCM(nonce)).encryptor()
    for buffer in buffers:
        encryptor.authenticate_additional_data(buffer)
    encryptor.finalize()
    return encryptor.tag


SMALL = 1 << 19
"""Below this many bytes :func:`gmac` takes OpenSSL's GHASH, whose set-up costs less (about 7
against 22 microseconds a tag: the compiled path builds a table of 64 powers per key and
calls into compiled code several times); on the AMD EPYC the two were level at ~300 KB
(47 against 44 microseconds at 256 KiB, 72 against 81 at 512 KiB, 114 against 150 at 1 MiB)."""


def gmac(key: bytes, nonce: bytes, buffers: Iterable) -> bytes:
    """The 16-byte GMAC tag of the concatenated ``buffers`` (bytes-like; the tag depends only
    on their bytes, not on how they are split) under the AES key ``key`` and the 12-byte
    ``nonce``: through :func:`absorb` where :func:`available` and the data has at least
    :data:`SMALL` bytes, OpenSSL's otherwise; the same tag either way."""
    if not isinstance(key, (bytes, bytearray)) or len(key) not in (16, 24, 32):
        raise InputError("key", key, "must be 16, 24 or 32 bytes")
    if not isinstance(nonce, (bytes, bytearray)) or len(nonce) != 12:
        raise InputError("nonce", nonce, "must be 12 bytes")
    buffers = [_bytes(buffer) for buffer in buffers]
    compiled = sum(len(buffer) for buffer in buffers) >= SMALL and available()
    return (_compiled_gmac if compiled else _openssl_gmac)(bytes(key), bytes(nonce), buffers)


def _self_test() -> bool:
    """Tags of 0-200 and 5,000 bytes under two keys, fed whole and in uneven pieces, against
    OpenSSL's."""
    rng = np.random.default_rng(20261128)
    for key in (bytes(range(16)), bytes(range(100, 132))):
        for length in (*range(201), 5000):
            data = rng.integers(0, 256, size=length, dtype=np.uint8).tobytes()
            nonce = bytes(range(length % 7, length % 7 + 12))
            expected = _openssl_gmac(key, nonce, [data])
            pieces = [data[:length // 3], data[length // 3: length // 3 + 17], data[length // 3 + 17:]]
            if _compiled_gmac(key, nonce, [data]) != expected or _compiled_gmac(key, nonce, pieces) != expected:
                return False
    return True


def _faster_than_openssl() -> bool:
    """One timing, best of three each, on 4 MiB: the compiled GHASH must be at least 10 % faster."""
    data = np.zeros(4 << 20, dtype=np.uint8)

    def best(function) -> float:
        times = []
        for _ in range(3):
            start = time.perf_counter()
            function(bytes(16), bytes(12), [data])
            times.append(time.perf_counter() - start)
        return min(times)

    return best(_compiled_gmac) < 0.9 * best(_openssl_gmac)


DISABLE_VARIABLE = "SECUREFL_CLMUL"
"""Set to ``0`` to keep OpenSSL's GHASH on a machine that could use the compiled one (an A/B,
or an escape hatch); read at every :func:`available` call."""


@functools.cache
def _usable() -> bool:
    return aesni.target_has(*FEATURES) and _self_test() and _faster_than_openssl()


def available() -> bool:
    """Whether :func:`gmac` runs the compiled GHASH here: not disabled by ``SECUREFL_CLMUL=0``,
    an x86-64 target with ``VPCLMULQDQ`` and AVX2, a passing known-answer test and a faster
    timing than OpenSSL's (both once per process)."""
    return os.environ.get(DISABLE_VARIABLE, "1") != "0" and _usable()


def path() -> str:
    """``"vpclmulqdq"`` or ``"openssl"``: the GHASH :func:`gmac` runs here (for records)."""
    return "vpclmulqdq" if available() else "openssl"
