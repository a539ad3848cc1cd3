"""Compiled AES-NI expansion: the key schedule against FIPS-197, the expansion against OpenSSL
(known answers apart), when it may be used, and that its self-test can fail."""

import numba
import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from hypothesis import given, settings
from hypothesis import strategies as st

from securefl.crypto import aesni
from securefl.crypto.fixed_key import FIXED_KEY
from securefl.errors import InputError

needs_aesni = pytest.mark.skipif(not aesni.available(), reason="no AES-NI target on this machine")


def _bytes(words: np.ndarray) -> bytes:
    return np.asarray(words, dtype=np.uint64).astype("<u8").tobytes()


def test_key_schedule_matches_fips_197_appendix_a1():
    keys = aesni.round_keys(bytes.fromhex("2b7e151628aed2a6abf7158809cf4f3c"))
    assert keys.shape == (11, 2) and keys.dtype == np.uint64
    assert _bytes(keys[0]) == bytes.fromhex("2b7e151628aed2a6abf7158809cf4f3c")
    assert _bytes(keys[1]) == bytes.fromhex("a0fafe1788542cb123a339392a6c7605")
    assert _bytes(keys[10]) == bytes.fromhex("d014f9a8c9ee2589e13f0cc8b6630ca6")


@pytest.mark.parametrize("key", [b"short", bytes(17), "0123456789abcdef", None])
def test_round_keys_names_a_bad_key(key):
    with pytest.raises(InputError, match="key") as info:
        aesni.round_keys(key)
    assert info.value.parameter == "key"


@needs_aesni
def test_fips_197_appendix_c1_through_the_compiled_rounds():
    plain = np.frombuffer(bytes.fromhex("00112233445566778899aabbccddeeff"), dtype="<u8").astype(np.uint64)
    expanded = aesni.expand(plain.reshape(1, 2), aesni.round_keys(bytes(range(16))), 1)[0, 0]
    assert _bytes(expanded ^ plain) == bytes.fromhex("69c4e0d86a7b0430d8cdb78070b4c55a")


@needs_aesni
@settings(max_examples=25, deadline=None)
@given(key=st.binary(min_size=16, max_size=16), rows=st.integers(1, 5), blocks=st.integers(1, 40),
       seed=st.integers(0, 2**32))
def test_expansion_equals_openssl_feed_forward(key, rows, blocks, seed):
    """G(seed)_k = AES(seed ^ k) ^ (seed ^ k) for every k, across the eight-wide body and the tail."""
    seeds = np.random.default_rng(seed).integers(0, 2**64, size=(rows, 2), dtype=np.uint64)
    inputs = np.repeat(seeds[:, None, :], blocks, axis=1)
    inputs[:, :, 0] ^= np.arange(blocks, dtype=np.uint64)
    permuted = Cipher(algorithms.AES(key), modes.ECB()).encryptor().update(_bytes(inputs))
    expected = np.frombuffer(permuted, dtype="<u8").astype(np.uint64).reshape(inputs.shape) ^ inputs
    np.testing.assert_array_equal(aesni.expand(seeds, aesni.round_keys(key), blocks), expected)


@numba.njit
def _expand_two(seeds0, seeds1, keys, out0, out1):
    for r in range(seeds0.shape[0]):
        aesni.expand_rows(seeds0[r, 0], seeds0[r, 1], seeds1[r, 0], seeds1[r, 1], keys, out0[r], out1[r])


@needs_aesni
@settings(max_examples=15, deadline=None)
@given(key=st.binary(min_size=16, max_size=16), blocks=st.integers(1, 26), seed=st.integers(0, 2**32))
def test_two_seeds_at_once_expand_as_each_alone(key, blocks, seed):
    """expand_rows (the sender's two messages, tail blocks side by side) writes each seed's
    own expansion, as expand_row does one seed at a time (checked against OpenSSL above)."""
    seeds = np.random.default_rng(seed).integers(0, 2**64, size=(2, 3, 2), dtype=np.uint64)
    keys = aesni.round_keys(key)
    out0, out1 = (np.zeros((3, 2 * blocks), np.uint64) for _ in range(2))
    _expand_two(seeds[0], seeds[1], keys, out0, out1)
    for out, alone in ((out0, seeds[0]), (out1, seeds[1])):
        np.testing.assert_array_equal(out.reshape(3, blocks, 2), aesni.expand(alone, keys, blocks))


@needs_aesni
@settings(max_examples=20, deadline=None)
@given(count=st.integers(1, 40), chunk=st.integers(0, 2**32 - 1), session=st.integers(0, 2**64 - 1),
       masked=st.booleans(), seed=st.integers(0, 2**32))
def test_compiled_tccr_equals_the_openssl_tccr(count, chunk, session, masked, seed):
    """OT extension's hashes H(x ^ delta, session * 2^64 + chunk * 2^32 + i) through AES-NI
    (ot._hash_blocks' compiled pass) equal FixedKeyAES.tccr's, across the eight-wide body and tail."""
    from securefl.crypto.fixed_key import FIXED_ROUND_KEYS, FixedKeyAES
    from securefl.crypto.ot import ot_tweaks

    generator = np.random.default_rng(seed)
    x = generator.integers(0, 2**64, size=(count, 2), dtype=np.uint64)
    delta = generator.integers(0, 2**64, size=2, dtype=np.uint64) if masked else np.zeros(2, np.uint64)
    tweaks = ot_tweaks(chunk, count)
    expected = FixedKeyAES().tccr(x ^ delta, tweaks, high=session)
    out = np.empty_like(x)
    aesni.tccr_into(x, delta[0], delta[1], np.uint64(chunk << 32), np.uint64(session), FIXED_ROUND_KEYS, out)
    np.testing.assert_array_equal(out, expected)


def test_availability_follows_the_code_target(monkeypatch):
    """An instruction the target lacks would abort code generation: AES-NI is used only when
    numba's target has it, whatever the host can do."""
    monkeypatch.setattr(aesni.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(numba.config, "CPU_FEATURES", "+sse2,-aes")
    assert not aesni.target_has("aes")
    monkeypatch.setattr(numba.config, "CPU_FEATURES", "+sse2,+aes")
    assert aesni.target_has("aes")
    monkeypatch.setattr(numba.config, "CPU_FEATURES", None)
    monkeypatch.setattr(numba.config, "CPU_NAME", "generic")
    assert not aesni.target_has("aes")
    monkeypatch.setattr(numba.config, "CPU_NAME", None)
    monkeypatch.setattr(aesni.llvmlite.binding, "get_host_cpu_features", lambda: {"aes": False})
    assert not aesni.target_has("aes")
    monkeypatch.setattr(aesni.llvmlite.binding, "get_host_cpu_features", lambda: {"aes": True})
    assert aesni.target_has("aes")
    monkeypatch.setattr(numba.config, "DISABLE_JIT", 1)
    assert not aesni.target_has("aes")
    monkeypatch.setattr(numba.config, "DISABLE_JIT", 0)
    monkeypatch.setattr(aesni.platform, "machine", lambda: "aarch64")
    monkeypatch.setattr(numba.config, "CPU_FEATURES", "+aes")
    assert not aesni.target_has("aes")


@needs_aesni
def test_the_self_test_rejects_a_wrong_cipher(monkeypatch):
    """The known-answer test is what stands between a miscompiled AES and the protocol: it
    passes here and fails when the schedule is off by one bit."""
    assert aesni._self_test()
    schedule = aesni.round_keys

    def flipped(key):
        keys = schedule(key)
        keys[5, 1] ^= np.uint64(1)
        return keys

    monkeypatch.setattr(aesni, "round_keys", flipped)
    assert not aesni._self_test()


@needs_aesni
def test_the_self_test_checks_the_compiled_tccr_too(monkeypatch):
    """OT extension's hashes take the compiled path only if it passes the same test: a TCCR
    pass that drops one tweak bit is caught although the expansion is right."""
    compiled = aesni.tccr_into

    def off_by_one_tweak(x, delta_low, delta_high, tweak, high, keys, out):
        compiled(x, delta_low, delta_high, tweak ^ np.uint64(1), high, keys, out)

    monkeypatch.setattr(aesni, "tccr_into", off_by_one_tweak)
    assert not aesni._self_test()


def test_the_fixed_key_schedule_is_the_fixed_key():
    from securefl.crypto.fixed_key import FIXED_ROUND_KEYS

    assert _bytes(FIXED_ROUND_KEYS[0]) == FIXED_KEY
    np.testing.assert_array_equal(FIXED_ROUND_KEYS, aesni.round_keys(FIXED_KEY))


def test_the_variable_turns_it_off(monkeypatch):
    monkeypatch.setattr(aesni, "_usable", lambda: True)
    monkeypatch.setenv(aesni.DISABLE_VARIABLE, "0")
    assert not aesni.available()
    monkeypatch.setenv(aesni.DISABLE_VARIABLE, "1")
    assert aesni.available()
    monkeypatch.delenv(aesni.DISABLE_VARIABLE)
    assert aesni.available()


@needs_aesni
def test_the_expansion_does_not_compile_for_other_array_types():
    """The intrinsic writes 16-byte blocks through a raw pointer: anything but a flat uint64
    buffer and a uint64 schedule is refused when it is compiled, not written through."""

    @numba.njit
    def wrong(out, keys):
        aesni.expand_wide(out, np.uint64(0), np.uint64(1), np.uint64(2), keys)

    @numba.njit
    def wrong_pair(out, keys):
        aesni.expand_pair_one(out, out, np.uint64(0), np.uint64(1), np.uint64(2), np.uint64(3), np.uint64(4), keys)

    keys = aesni.round_keys(FIXED_KEY)
    with pytest.raises(numba.core.errors.TypingError):
        wrong_pair(np.zeros(16, np.uint32), keys)
    with pytest.raises(numba.core.errors.TypingError):
        wrong(np.zeros(16, np.uint16), keys)
    with pytest.raises(numba.core.errors.TypingError):
        wrong(np.zeros(16, np.uint64), keys.astype(np.int64))


@needs_aesni
def test_compiled_key_schedule_matches_fips_197_appendix_a1():
    """AESKEYGENASSIST's schedule, word for word as FIPS-197 A.1 lists it (w[4..7], w[40..43])."""
    key = np.frombuffer(bytes.fromhex("2b7e151628aed2a6abf7158809cf4f3c"), dtype="<u8").astype(np.uint64)
    out = np.zeros((1, 11, 2), np.uint64)
    aesni.schedules_into(key.reshape(1, 2), out)
    assert _bytes(out[0, 1]) == bytes.fromhex("a0fafe1788542cb123a339392a6c7605")
    assert _bytes(out[0, 10]) == bytes.fromhex("d014f9a8c9ee2589e13f0cc8b6630ca6")


@needs_aesni
@settings(max_examples=20, deadline=None)
@given(rows=st.integers(1, 6), blocks=st.integers(1, 40), seed=st.integers(0, 2**32))
def test_row_encryption_equals_openssl_under_each_compiled_schedule(rows, blocks, seed):
    """encrypt_rows_into under schedules_into's schedules is each key's AES-ECB of the shared
    blocks (OpenSSL's), across the eight-wide body and the tail; the schedules are round_keys'."""
    generator = np.random.default_rng(seed)
    keys = generator.integers(0, 2**64, size=(rows, 2), dtype=np.uint64)
    plain = generator.integers(0, 2**64, size=(blocks, 2), dtype=np.uint64)
    schedules = np.empty((rows, 11, 2), np.uint64)
    aesni.schedules_into(keys, schedules)
    out = np.zeros((rows, 2 * blocks + 2), np.uint64)
    aesni.encrypt_rows_into(plain, schedules, out)
    for row, key, schedule in zip(out, keys, schedules):
        np.testing.assert_array_equal(schedule, aesni.round_keys(_bytes(key)))
        expected = Cipher(algorithms.AES(_bytes(key)), modes.ECB()).encryptor().update(_bytes(plain))
        assert _bytes(row[: 2 * blocks]) == expected
        assert not row[2 * blocks:].any()


@needs_aesni
@pytest.mark.parametrize("words", [1, 2, 15, 64, 1000])
def test_row_prg_rows_are_each_seeds_ctr_stream_on_both_paths(monkeypatch, words):
    """IKNP's row PRG, compiled or through OpenSSL contexts: row i is prg.expand(k_i, nonce)."""
    from securefl.crypto import prg
    from securefl.crypto.ot import RowPRG

    seeds = np.random.default_rng(words).integers(0, 256, size=(128, 16), dtype=np.uint8)
    compiled = RowPRG(seeds).fill(7 << 40, words).copy()
    monkeypatch.setenv(aesni.DISABLE_VARIABLE, "0")
    openssl = RowPRG(seeds).fill(7 << 40, words)
    np.testing.assert_array_equal(compiled, openssl)
    for i in (0, 77, 127):
        np.testing.assert_array_equal(compiled[i], prg.expand(seeds[i], words, np.uint64, nonce=7 << 40))


@needs_aesni
def test_the_self_test_checks_the_compiled_row_prg_too(monkeypatch):
    """The row PRGs take the compiled path only if it passes the same test: a schedule off by
    one bit in its last round key is caught although the expansion and TCCR are right."""
    compiled = aesni.schedules_into

    def off_by_one_bit(keys, out):
        compiled(keys, out)
        out[:, 10, 0] ^= np.uint64(1)

    monkeypatch.setattr(aesni, "schedules_into", off_by_one_bit)
    assert not aesni._self_test()
