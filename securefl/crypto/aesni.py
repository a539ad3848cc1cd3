"""AES-128 as a function inside compiled loops: the CPU's AES instructions reached from numba.

SHADE's round at small shapes is bound not by AES but by the passes around it.  Each OT's
two messages are expanded with the fixed-key permutation, ``G(seed)_k = pi(seed ^ k) ^
(seed ^ k)`` (:mod:`securefl.crypto.fixed_key`): OpenSSL writes ``pi`` of a tile of inputs
into memory, then the share arithmetic reads it back (:func:`~securefl.crypto.kernels.shade_sender_rows`).
Profiled at the digits shape (five parties of 135 points, ``L = 1024``): the AES calls take
0.155 s a round, the input pass 0.08 s and the arithmetic over the tiles 0.20 s.  Here
``pi`` runs inside the loop that consumes it, so an expanded block goes from the AES unit
to the lane arithmetic without a round trip through memory
(:func:`~securefl.crypto.kernels.shade_sender_fused`).

**What it computes.**  :func:`expand_row` writes the fixed-key expansion of one seed,
``G(seed)_k = AES_K(seed ^ k) ^ (seed ^ k)`` for every block ``k`` (blocks as two
little-endian uint64 halves, ``k`` XORed into the low half: the layout and the function of
:mod:`securefl.crypto.fixed_key`).  ``AES_K`` is AES-128 encryption (FIPS-197) under a
round-key schedule from :func:`round_keys`: ``AddRoundKey`` with ``w[0]``, nine ``AESENC``
and one ``AESENCLAST`` (the x86 AES-NI instructions, through LLVM's
``llvm.x86.aesni.aesenc`` intrinsics), eight blocks side by side (:data:`WIDTH`; a row's
last ``blocks mod 8`` blocks one at a time, or, for the sender's two messages of an OT, two
at a time: :func:`expand_rows`, 5 of its 84 ns a digits row); the round
keys ``w[0..10]`` are expanded once in Python (FIPS-197 §5.2; the key is public,
:data:`~securefl.crypto.fixed_key.FIXED_KEY`).  So the expansion is the one that
``cryptography`` (OpenSSL) computes through :class:`~securefl.crypto.fixed_key.FixedKeyAES`:
which path a party takes never changes a message or a share.  :func:`tccr_into` is OT
extension's TCCR hash, ``H(x, t) = pi(pi(x) ^ t) ^ pi(x)``
(:meth:`~securefl.crypto.fixed_key.FixedKeyAES.tccr`), both layers eight blocks at a time
with the XORs in registers (:func:`securefl.crypto.ot._hash_blocks`; 4.7 against OpenSSL's
6.1 ns a hash, about 2 % of a digits SHADE round).  :func:`encrypt_rows_into` is IKNP's 128 row
PRGs (:class:`securefl.crypto.ot.RowPRG`): AES-ECB of shared counter blocks under each row's
key, one call for all rows, under schedules made by :func:`schedules_into` (``AESKEYGENASSIST``,
no table lookup on the secret seeds; equal to :func:`round_keys`).

**When it is used.**  :func:`available` is true only on x86-64 when the code numba emits
targets a CPU with AES-NI (the host's features, or ``NUMBA_CPU_NAME`` /
``NUMBA_CPU_FEATURES`` when set, since an instruction the target lacks aborts code
generation), and after a known-answer test passes: FIPS-197 Appendix C.1 and a batch of
expansions, TCCR hashes and row PRGs against ``cryptography``; ``SECUREFL_AESNI=0`` turns
it off.
Elsewhere (other architectures, a portable numba target, a failed check) callers keep the
OpenSSL tile path; the test suite runs both.  AES-NI runs in constant time (no table
lookups), like OpenSSL's.

Why by hand: no library exposes AES as a function that a compiled loop can call per block;
``cryptography`` and pycryptodome take buffers.  The cipher rounds are the CPU's
instructions; what is written here is the key schedule (checked against FIPS-197
Appendix A.1) and the loop around them.
"""

from __future__ import annotations

import functools
import os
import platform

import llvmlite.binding
import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from securefl.errors import InputError

ROUNDS = 10
"""AES-128 rounds; :func:`round_keys` gives ``ROUNDS + 1`` round keys."""

_VECTOR = ir.VectorType(ir.IntType(64), 2)
_INDEX = ir.IntType(32)
_WORD = ir.IntType(64)


def _sbox() -> list[int]:
    """The AES S-box (FIPS-197 §5.1.1): multiplicative inverse in GF(2^8), then the affine map."""
    box = [0x63] * 256
    p = q = 1
    while True:
        p ^= ((p << 1) & 0xFF) ^ (0x1B if p & 0x80 else 0)  # p *= 3
        q ^= q << 1
        q ^= q << 2
        q ^= q << 4
        q &= 0xFF
        if q & 0x80:  # q /= 3
            q ^= 0x09
        rotated = q
        for shift in (1, 2, 3, 4):
            rotated ^= ((q << shift) | (q >> (8 - shift))) & 0xFF
        box[p] = rotated ^ 0x63
        if p == 1:
            return box


def round_keys(key: bytes) -> np.ndarray:
    """The AES-128 key schedule ``w[0..10]`` of ``key`` (FIPS-197 §5.2) as ``(11, 2)`` uint64,
    each round key as two little-endian halves (bytes 0-7, 8-15)."""
    if not isinstance(key, (bytes, bytearray)) or len(key) != 16:
        raise InputError("key", key, "must be 16 bytes")
    box = _sbox()
    words = [list(key[4 * i: 4 * i + 4]) for i in range(4)]
    rcon = 1
    for i in range(4, 4 * (ROUNDS + 1)):
        word = list(words[i - 1])
        if i % 4 == 0:
            word = [box[b] for b in word[1:] + word[:1]]  # SubWord(RotWord(w))
            word[0] ^= rcon
            rcon = ((rcon << 1) ^ (0x1B if rcon & 0x80 else 0)) & 0xFF
        words.append([a ^ b for a, b in zip(words[i - 4], word)])
    flat = bytes(byte for word in words for byte in word)
    return np.frombuffer(flat, dtype="<u8").astype(np.uint64).reshape(ROUNDS + 1, 2)


def _rounds(builder, key, states):
    """AES-128 of every 128-bit vector of ``states`` under the round keys ``key``: AddRoundKey,
    nine ``AESENC``, one ``AESENCLAST``, all blocks side by side (AES-NI has a latency of
    several cycles and more than one unit: independent blocks fill the pipeline)."""
    function_type = ir.FunctionType(_VECTOR, [_VECTOR, _VECTOR])
    rounds = builder.module.declare_intrinsic("llvm.x86.aesni.aesenc", fnty=function_type)
    last = builder.module.declare_intrinsic("llvm.x86.aesni.aesenclast", fnty=function_type)
    states = [builder.xor(state, key[0]) for state in states]
    for r in range(1, ROUNDS):
        states = [builder.call(rounds, [state, key[r]]) for state in states]
    return [builder.call(last, [state, key[ROUNDS]]) for state in states]


def _round_keys(builder, keys):
    return [builder.load(builder.gep(keys, [ir.Constant(_INDEX, r)]), align=8) for r in range(ROUNDS + 1)]


def _block(builder, low, high):
    """The 128-bit vector ``low | high << 64``."""
    value = builder.insert_element(ir.Constant(_VECTOR, ir.Undefined), low, ir.Constant(_INDEX, 0))
    return builder.insert_element(value, high, ir.Constant(_INDEX, 1))


def _encrypt_side_by_side(builder, keys, items):
    """Emit ``out[block] = AES(x) ^ x`` for every ``(out, block, low, high)`` of ``items``
    (``x = (low ^ block) | high << 64``), all blocks through the rounds together."""
    inputs = [_block(builder, builder.xor(low, block), high) for _, block, low, high in items]
    states = _rounds(builder, _round_keys(builder, keys), inputs)
    for (target, block, _, _), state, value in zip(items, states, inputs):
        builder.store(builder.xor(state, value), builder.gep(target, [block]), align=8)


def _vectors(context, builder, array_type, value):
    """The data of a uint64 array argument as a pointer to 128-bit blocks."""
    return builder.bitcast(context.make_array(array_type)(context, builder, value).data, _VECTOR.as_pointer())


_WORDS = types.Array(types.uint64, 1, "C")
_SCHEDULE = types.Array(types.uint64, 2, "C")


def _expansion_intrinsic(width: int):
    """An intrinsic ``(out, first, low, high, keys) -> None`` that writes the ``width`` blocks
    ``G(seed)_k = AES(seed ^ k) ^ (seed ^ k)``, ``k = first .. first + width - 1`` (``seed =
    low | high << 64``, ``k`` XORed into the low half), as blocks ``k`` of the flat uint64
    array ``out``, side by side.  Other argument types do not compile (a typing error); there
    is no bounds check: callers pass ``first + width <= out.size / 2``."""

    @intrinsic
    def expansion(typingctx, out, first, low, high, keys):
        if out != _WORDS or keys != _SCHEDULE or any(v != types.uint64 for v in (first, low, high)):
            return None

        def codegen(context, builder, sig, args):
            target = _vectors(context, builder, sig.args[0], args[0])
            blocks = [builder.add(args[1], ir.Constant(_WORD, w)) for w in range(width)]
            _encrypt_side_by_side(builder, _vectors(context, builder, sig.args[4], args[4]),
                                  [(target, block, args[2], args[3]) for block in blocks])
            return context.get_dummy_value()

        return types.none(out, first, low, high, keys), codegen

    return expansion


@intrinsic
def expand_pair_one(typingctx, out0, out1, block, low0, high0, low1, high1, keys):
    """An intrinsic writing block ``block`` of two seeds' expansions at once (``G(seed0)``
    into ``out0``, ``G(seed1)`` into ``out1``): the rows' tail blocks, two in flight instead
    of one.  Typed and unchecked as :func:`_expansion_intrinsic`'s."""
    if out0 != _WORDS or out1 != _WORDS or keys != _SCHEDULE \
            or any(v != types.uint64 for v in (block, low0, high0, low1, high1)):
        return None

    def codegen(context, builder, sig, args):
        targets = [_vectors(context, builder, sig.args[i], args[i]) for i in (0, 1)]
        _encrypt_side_by_side(builder, _vectors(context, builder, sig.args[7], args[7]),
                              [(targets[0], args[2], args[3], args[4]), (targets[1], args[2], args[5], args[6])])
        return context.get_dummy_value()

    return types.none(out0, out1, block, low0, high0, low1, high1, keys), codegen


def _tccr_intrinsic(width: int):
    """An intrinsic ``(out, first, x, delta_low, delta_high, tweak, high, keys) -> None``: for the
    ``width`` blocks ``i = first ..``, ``y = x_i ^ delta``, ``a = AES(y)``, ``out_i = AES(a ^
    t_i) ^ a`` with the tweak ``t_i = (tweak + i) | high << 64``: the TCCR hash of
    :meth:`securefl.crypto.fixed_key.FixedKeyAES.tccr` (``pi`` is AES under ``keys``), both
    layers of ``width`` blocks side by side.  Typed and unchecked as :func:`_expansion_intrinsic`'s."""

    @intrinsic
    def tccr(typingctx, out, first, x, delta_low, delta_high, tweak, high, keys):
        if out != _WORDS or x != _WORDS or keys != _SCHEDULE \
                or any(v != types.uint64 for v in (first, delta_low, delta_high, tweak, high)):
            return None

        def codegen(context, builder, sig, args):
            target, source = (_vectors(context, builder, sig.args[i], args[i]) for i in (0, 2))
            key = _round_keys(builder, _vectors(context, builder, sig.args[7], args[7]))
            delta = _block(builder, args[3], args[4])
            blocks = [builder.add(args[1], ir.Constant(_WORD, w)) for w in range(width)]
            inputs = [builder.xor(builder.load(builder.gep(source, [b]), align=8), delta) for b in blocks]
            first_layer = _rounds(builder, key, inputs)
            mixed = [builder.xor(a, _block(builder, builder.add(args[5], b), args[6]))
                     for a, b in zip(first_layer, blocks)]
            for block, a, b in zip(blocks, first_layer, _rounds(builder, key, mixed)):
                builder.store(builder.xor(a, b), builder.gep(target, [block]), align=8)
            return context.get_dummy_value()

        return types.none(out, first, x, delta_low, delta_high, tweak, high, keys), codegen

    return tccr


_RCON = (0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80, 0x1B, 0x36)
"""The round constants of the AES-128 key schedule (FIPS-197 §5.2)."""


@intrinsic
def _schedule(typingctx, out, low, high):
    """An intrinsic writing the AES-128 key schedule of the key ``low | high << 64`` into the
    ``(11, 2)`` uint64 ``out``: ``w[r] = w[r-1] ^ w[r-1] << 32 ^ w[r-1] << 64 ^ w[r-1] << 96 ^
    broadcast(word 3 of AESKEYGENASSIST(w[r-1], rcon_r))`` (Intel's AES-NI white paper, §
    key expansion), no table lookup.  Typed and unchecked as :func:`_expansion_intrinsic`'s."""
    if out != _SCHEDULE or low != types.uint64 or high != types.uint64:
        return None

    def codegen(context, builder, sig, args):
        target = _vectors(context, builder, sig.args[0], args[0])
        byte, bytes16, words4 = ir.IntType(8), ir.VectorType(ir.IntType(8), 16), ir.VectorType(ir.IntType(32), 4)
        assist = builder.module.declare_intrinsic("llvm.x86.aesni.aeskeygenassist",
                                                  fnty=ir.FunctionType(_VECTOR, [_VECTOR, byte]))
        left_word = ir.Constant(ir.VectorType(_INDEX, 16), [j if j < 4 else 12 + j for j in range(16)])
        broadcast = ir.Constant(ir.VectorType(_INDEX, 4), [3, 3, 3, 3])
        key = _block(builder, args[1], args[2])
        builder.store(key, builder.gep(target, [ir.Constant(_INDEX, 0)]), align=8)
        for r, rcon in enumerate(_RCON, 1):
            words = builder.bitcast(builder.call(assist, [key, ir.Constant(byte, rcon)]), words4)
            mixed = builder.bitcast(builder.shuffle_vector(words, words, broadcast), _VECTOR)
            shifted = key
            for _ in range(3):  # shifted = key << 32, << 64, << 96 (bytes toward higher addresses)
                shifted = builder.bitcast(builder.shuffle_vector(
                    ir.Constant(bytes16, None), builder.bitcast(shifted, bytes16), left_word), _VECTOR)
                key = builder.xor(key, shifted)
            key = builder.xor(key, mixed)
            builder.store(key, builder.gep(target, [ir.Constant(_INDEX, r)]), align=8)
        return context.get_dummy_value()

    return types.none(out, low, high), codegen


def _ecb_intrinsic(width: int):
    """An intrinsic ``(out, first, source, keys) -> None``: blocks ``first .. first + width - 1``
    of ``out`` become ``AES(block of source)`` under ``keys``, side by side.  Typed and
    unchecked as :func:`_expansion_intrinsic`'s."""

    @intrinsic
    def ecb(typingctx, out, first, source, keys):
        if out != _WORDS or source != _WORDS or keys != _SCHEDULE or first != types.uint64:
            return None

        def codegen(context, builder, sig, args):
            target, plain = (_vectors(context, builder, sig.args[i], args[i]) for i in (0, 2))
            blocks = [builder.add(args[1], ir.Constant(_WORD, w)) for w in range(width)]
            states = _rounds(builder, _round_keys(builder, _vectors(context, builder, sig.args[3], args[3])),
                             [builder.load(builder.gep(plain, [b]), align=8) for b in blocks])
            for block, state in zip(blocks, states):
                builder.store(state, builder.gep(target, [block]), align=8)
            return context.get_dummy_value()

        return types.none(out, first, source, keys), codegen

    return ecb


WIDTH = 8
"""Blocks per :func:`expand_wide` call (eight AES states in flight)."""
ecb_wide = _ecb_intrinsic(WIDTH)
ecb_one = _ecb_intrinsic(1)
tccr_wide = _tccr_intrinsic(WIDTH)
tccr_one = _tccr_intrinsic(1)
expand_wide = _expansion_intrinsic(WIDTH)
expand_one = _expansion_intrinsic(1)


@numba.njit(nogil=True, inline="always")
def expand_row(low, high, keys, words):  # pragma: no cover - compiled
    """``words`` (flat uint64, two per block) receives ``G(seed)_k`` for every block ``k``:
    the fixed-key expansion of :mod:`securefl.crypto.fixed_key` for one seed."""
    count = words.shape[0] // 2
    k = 0
    while k + WIDTH <= count:
        expand_wide(words, np.uint64(k), low, high, keys)
        k += WIDTH
    while k < count:
        expand_one(words, np.uint64(k), low, high, keys)
        k += 1


@numba.njit(nogil=True, inline="always")
def expand_rows(low0, high0, low1, high1, keys, words0, words1):  # pragma: no cover - compiled
    """:func:`expand_row` of two seeds of one length at once (``words0``, ``words1``), their
    tail blocks side by side."""
    count = words0.shape[0] // 2
    k = 0
    while k + WIDTH <= count:
        expand_wide(words0, np.uint64(k), low0, high0, keys)
        expand_wide(words1, np.uint64(k), low1, high1, keys)
        k += WIDTH
    while k < count:
        expand_pair_one(words0, words1, np.uint64(k), low0, high0, low1, high1, keys)
        k += 1


@numba.njit(nogil=True, cache=True)
def tccr_into(x, delta_low, delta_high, tweak, high, keys, out):  # pragma: no cover - compiled
    """``out[i] = H(x[i] ^ delta, tweak + i)`` for the ``(m, 2)`` uint64 blocks ``x`` (the
    tweak's high half ``high``): TCCR through AES-NI, eight blocks at a time (``out`` the same
    shape, C-contiguous)."""
    flat, target = x.reshape(-1), out.reshape(-1)
    count = x.shape[0]
    i = 0
    while i + WIDTH <= count:
        tccr_wide(target, np.uint64(i), flat, delta_low, delta_high, tweak, high, keys)
        i += WIDTH
    while i < count:
        tccr_one(target, np.uint64(i), flat, delta_low, delta_high, tweak, high, keys)
        i += 1


@numba.njit(nogil=True, cache=True)
def schedules_into(keys, out):  # pragma: no cover - compiled
    """``out[r]`` (``(rows, 11, 2)`` uint64) receives the AES-128 key schedule of ``keys[r]``
    (``(rows, 2)`` uint64, each key's bytes 0-7 and 8-15 little-endian): :func:`round_keys`
    through AESKEYGENASSIST, about 0.1 against 220 microseconds a key."""
    for r in range(keys.shape[0]):
        _schedule(out[r], keys[r, 0], keys[r, 1])


@numba.njit(nogil=True, cache=True)
def encrypt_rows_into(blocks, keys, out):  # pragma: no cover - compiled
    """``out[r]`` block ``i`` (words ``2i, 2i + 1``) receives ``AES_{keys[r]}(blocks[i])`` for
    every row ``r`` of the ``(rows, 11, 2)`` schedules ``keys`` and block ``i`` of the ``(m,
    2)`` uint64 ``blocks`` (``out`` at least ``2m`` words a row, C-contiguous): one row PRG per
    key over shared counter blocks, eight blocks at a time."""
    flat = blocks.reshape(-1)
    count = blocks.shape[0]
    for r in range(keys.shape[0]):
        row, key = out[r], keys[r]
        i = 0
        while i + WIDTH <= count:
            ecb_wide(row, np.uint64(i), flat, key)
            i += WIDTH
        while i < count:
            ecb_one(row, np.uint64(i), flat, key)
            i += 1


@numba.njit(nogil=True, cache=True)
def expand_into(seeds, keys, out):  # pragma: no cover - compiled
    """``out[r]`` (``(rows, 2 * blocks)`` uint64) receives ``G(seeds[r])_0 .. G(seeds[r])_{blocks-1}``."""
    for r in range(seeds.shape[0]):
        expand_row(seeds[r, 0], seeds[r, 1], keys, out[r])


def target_has(*features: str) -> bool:
    """Whether the machine code numba generates may use every one of the LLVM CPU
    ``features`` (``"aes"``, ``"vpclmulqdq"``, ...): x86-64, numba generating code at all (with
    ``NUMBA_DISABLE_JIT`` the kernels run as Python, where an intrinsic cannot), and the
    target's features (``NUMBA_CPU_FEATURES`` when set, else the host's unless
    ``NUMBA_CPU_NAME`` names another CPU), since an instruction the target lacks aborts code
    generation."""
    if numba.config.DISABLE_JIT or platform.machine().lower() not in {"x86_64", "amd64"}:
        return False
    if numba.config.CPU_FEATURES:
        listed = numba.config.CPU_FEATURES.split(",")
        return all(f"+{name}" in listed for name in features)
    if numba.config.CPU_NAME not in (None, "", "host"):
        return False
    host = llvmlite.binding.get_host_cpu_features()
    return all(bool(host.get(name, False)) for name in features)


def expand(seeds: np.ndarray, keys: np.ndarray, blocks: int) -> np.ndarray:
    """``G(seed)_k`` for ``(rows, 2)`` uint64 seeds and ``k < blocks`` as ``(rows, blocks, 2)``
    uint64, through the compiled path (the self-test's and the tests' entry point)."""
    seeds = np.ascontiguousarray(seeds, dtype=np.uint64)
    out = np.empty((seeds.shape[0], 2 * blocks), dtype=np.uint64)
    expand_into(seeds, keys, out)
    return out.reshape(seeds.shape[0], blocks, 2)


def _self_test() -> bool:
    """FIPS-197 Appendix C.1 (``AES(p) = G(p)_0 ^ p``), then ``G`` of eight seeds, 19 blocks
    each (both widths), the TCCR hash of 19 blocks (both widths) and, under two compiled key
    schedules (checked against :func:`round_keys`), the row PRGs' AES of 19 blocks, under a
    second key against ``cryptography``."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    plain = np.frombuffer(bytes.fromhex("00112233445566778899aabbccddeeff"), dtype="<u8").astype(np.uint64)
    fips = expand(plain.reshape(1, 2), round_keys(bytes(range(16))), 1)[0, 0] ^ plain
    if fips.astype("<u8").tobytes() != bytes.fromhex("69c4e0d86a7b0430d8cdb78070b4c55a"):
        return False
    key = bytes(range(16, 32))
    seeds = np.frombuffer(bytes(range(128)), dtype="<u8").astype(np.uint64).reshape(8, 2)
    inputs = np.repeat(seeds[:, None, :], 19, axis=1)
    inputs[:, :, 0] ^= np.arange(19, dtype=np.uint64)
    encryptor = Cipher(algorithms.AES(key), modes.ECB()).encryptor()
    permuted = encryptor.update(inputs.astype("<u8").tobytes()) + encryptor.finalize()
    expected = np.frombuffer(permuted, dtype="<u8").astype(np.uint64).reshape(inputs.shape) ^ inputs
    if not np.array_equal(expand(seeds, round_keys(key), 19), expected):
        return False
    if not np.array_equal(_tccr(inputs[0], round_keys(key)), _openssl_tccr(inputs[0], key)):
        return False
    return _rows_match_openssl(np.stack([np.frombuffer(k, dtype="<u8") for k in (key, bytes(range(16)))]), inputs[0])


def _rows_match_openssl(keys: np.ndarray, blocks: np.ndarray) -> bool:
    """The compiled key schedules equal :func:`round_keys`, and :func:`encrypt_rows_into`
    under them equals OpenSSL's AES-ECB of ``blocks`` under each key."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    keys = np.ascontiguousarray(keys, dtype=np.uint64)
    schedules = np.empty((keys.shape[0], ROUNDS + 1, 2), dtype=np.uint64)
    schedules_into(keys, schedules)
    raw = [k.astype("<u8").tobytes() for k in keys]
    if not all(np.array_equal(schedule, round_keys(key)) for schedule, key in zip(schedules, raw)):
        return False
    out = np.empty((keys.shape[0], 2 * blocks.shape[0]), dtype=np.uint64)
    encrypt_rows_into(np.ascontiguousarray(blocks), schedules, out)
    for row, key in zip(out, raw):
        expected = Cipher(algorithms.AES(key), modes.ECB()).encryptor().update(blocks.astype("<u8").tobytes())
        if row.astype("<u8").tobytes() != expected:
            return False
    return True


_SELF_TEST_DELTA, _SELF_TEST_TWEAK, _SELF_TEST_HIGH = (0x0123456789ABCDEF, 0xFEDCBA9876543210), 5 << 32, 7


def _tccr(x: np.ndarray, keys: np.ndarray) -> np.ndarray:
    out = np.empty_like(x)
    tccr_into(x, *(np.uint64(v) for v in (*_SELF_TEST_DELTA, _SELF_TEST_TWEAK, _SELF_TEST_HIGH)), keys, out)
    return out


def _openssl_tccr(x: np.ndarray, key: bytes) -> np.ndarray:
    """``H(x ^ delta, t) = pi(pi(x ^ delta) ^ t) ^ pi(x ^ delta)`` through ``cryptography``."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    def permute(blocks: np.ndarray) -> np.ndarray:
        encrypted = Cipher(algorithms.AES(key), modes.ECB()).encryptor().update(blocks.astype("<u8").tobytes())
        return np.frombuffer(encrypted, dtype="<u8").astype(np.uint64).reshape(blocks.shape)

    first = permute(x ^ np.array(_SELF_TEST_DELTA, dtype=np.uint64))
    tweaks = np.stack([np.uint64(_SELF_TEST_TWEAK) + np.arange(x.shape[0], dtype=np.uint64),
                       np.full(x.shape[0], _SELF_TEST_HIGH, dtype=np.uint64)], axis=1)
    return permute(first ^ tweaks) ^ first


DISABLE_VARIABLE = "SECUREFL_AESNI"
"""Set to ``0`` to keep the OpenSSL tile path on a machine that could use AES-NI (an A/B, or
an escape hatch); read at every :func:`available` call."""


@functools.cache
def _usable() -> bool:
    return target_has("aes") and _self_test()


def available() -> bool:
    """Whether compiled AES-NI may be used here: not disabled by ``SECUREFL_AESNI=0``, an
    x86-64 target with AES-NI, and a passing known-answer test (run once per process; it
    compiles :func:`expand_into` or loads it from numba's cache)."""
    return os.environ.get(DISABLE_VARIABLE, "1") != "0" and _usable()
