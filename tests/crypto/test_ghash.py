"""GMAC through the compiled 256-bit GHASH: known answers (RFC 8452's POLYVAL, the GCM
specification's first test case), equality with OpenSSL's tag however the data is split,
when it may be used, misuse, and that its self-test can fail."""

import itertools

import numba
import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from hypothesis import given, settings
from hypothesis import strategies as st

from securefl.crypto import aesni, ghash
from securefl.errors import InputError

needs_clmul = pytest.mark.skipif(not aesni.target_has(*ghash.FEATURES),
                                 reason="no VPCLMULQDQ target on this machine")


def _openssl(key: bytes, nonce: bytes, data: bytes) -> bytes:
    encryptor = Cipher(algorithms.AES(key), modes.GCM(nonce)).encryptor()
    encryptor.authenticate_additional_data(data)
    encryptor.finalize()
    return encryptor.tag


def _polyval(key: bytes, blocks: list[bytes]) -> bytes:
    """POLYVAL (RFC 8452) through the compiled table and absorb (which take GHASH's byte order)."""
    h = int.from_bytes(key, "little")
    table = np.empty(4 * ghash.WIDTH, dtype=np.uint64)
    ghash.table_into(np.uint64(h & (2**64 - 1)), np.uint64(h >> 64), table)
    state = np.zeros(2, dtype=np.uint64)
    ghash.absorb(state, np.frombuffer(b"".join(block[::-1] for block in blocks), dtype=np.uint8), table)
    return (int(state[0]) | int(state[1]) << 64).to_bytes(16, "little")


@needs_clmul
def test_polyval_of_rfc_8452_appendix_a():
    key = bytes.fromhex("25629347589242761d31f826ba4b757b")
    blocks = [bytes.fromhex("4f4f95668c83dfb6401762bb2d01a262"),
              bytes.fromhex("d1a24ddd2721d006bbe45f20d3c9f362")]
    assert _polyval(key, blocks).hex() == "f7a3b47b846119fae5b7866cf5e5b77e"


@needs_clmul
def test_gcm_specification_test_case_1():
    """McGrew and Viega's test case 1: the zero key, the zero nonce, nothing to authenticate."""
    assert ghash._compiled_gmac(bytes(16), bytes(12), []).hex() == "58e2fccefa7e3061367f1d57a4e7455a"


@needs_clmul
@settings(max_examples=60, deadline=None)
@given(key=st.sampled_from([16, 24, 32]).flatmap(lambda n: st.binary(min_size=n, max_size=n)),
       nonce=st.binary(min_size=12, max_size=12), length=st.integers(0, 3 * 16 * ghash.WIDTH + 200),
       cuts=st.lists(st.integers(0, 3 * 16 * ghash.WIDTH + 200), max_size=5), seed=st.integers(0, 2**32))
def test_tag_equals_openssls_however_the_data_is_split(key, nonce, length, cuts, seed):
    """Lengths across the 64-block groups, the groups of 8, single blocks and a partial last
    block; pieces cut anywhere (empty ones included): the tag is OpenSSL's for the bytes."""
    data = np.random.default_rng(seed).integers(0, 256, size=length, dtype=np.uint8).tobytes()
    bounds = [0, *sorted(min(c, length) for c in cuts), length]
    pieces = [data[a:b] for a, b in itertools.pairwise(bounds)]
    assert ghash._compiled_gmac(key, nonce, pieces) == _openssl(key, nonce, data)


@needs_clmul
@pytest.mark.parametrize("position", [0, 5, 16 * 63 + 15, 16 * 64, 16 * 64 + 16 * 8 + 3, 16 * 64 + 16 * 9 + 7])
def test_one_flipped_bit_changes_the_tag(position):
    """A flip in a wide group, a group of eight, a single block and the partial tail each
    changes the tag (1,181 bytes: one group of 64, one of 8, one block and 13 bytes)."""
    data = bytearray(np.random.default_rng(position).integers(0, 256, size=16 * 73 + 13, dtype=np.uint8).tobytes())
    tag = ghash._compiled_gmac(bytes(range(16)), bytes(12), [bytes(data)])
    data[position] ^= 0x10
    assert ghash._compiled_gmac(bytes(range(16)), bytes(12), [bytes(data)]) != tag


@pytest.mark.parametrize("clmul", ["0", "1"])
def test_gmac_gives_openssls_tag_on_either_path(monkeypatch, clmul):
    """``gmac`` as callers see it (small data through OpenSSL, large through the compiled path
    where available): the tag of numpy arrays and bytes is OpenSSL's of their bytes."""
    monkeypatch.setenv(ghash.DISABLE_VARIABLE, clmul)
    body = np.random.default_rng(1).integers(0, 2**16, size=(ghash.SMALL // 240 + 1, 120), dtype=np.uint16)
    for buffers in ([b"header"], [b"header", memoryview(body)], [memoryview(body[:2])]):
        joined = b"".join(bytes(memoryview(b).cast("B")) for b in buffers)
        assert ghash.gmac(bytes(16), bytes(range(12)), buffers) == _openssl(bytes(16), bytes(range(12)), joined)


@pytest.mark.parametrize(("name", "key", "nonce"), [
    ("key", b"short", bytes(12)), ("key", bytes(17), bytes(12)), ("key", "0123456789abcdef", bytes(12)),
    ("nonce", bytes(16), bytes(16)), ("nonce", bytes(16), None)])
def test_gmac_names_a_bad_key_or_nonce(name, key, nonce):
    with pytest.raises(InputError, match=name) as info:
        ghash.gmac(key, nonce, [b"data"])
    assert info.value.parameter == name


def test_availability_follows_the_code_target(monkeypatch):
    """VPCLMULQDQ on a target without it would abort code generation: the compiled GHASH is
    used only when numba's target has it, AVX2 and PCLMULQDQ, whatever the host can do."""
    monkeypatch.setattr(aesni.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(numba.config, "CPU_FEATURES", "+avx2,+pclmul,-vpclmulqdq")
    assert not aesni.target_has(*ghash.FEATURES)
    monkeypatch.setattr(numba.config, "CPU_FEATURES", "+avx2,+pclmul,+vpclmulqdq")
    assert aesni.target_has(*ghash.FEATURES)
    monkeypatch.setattr(numba.config, "CPU_FEATURES", None)
    monkeypatch.setattr(numba.config, "CPU_NAME", "generic")
    assert not aesni.target_has(*ghash.FEATURES)
    monkeypatch.setattr(numba.config, "CPU_NAME", None)
    host = {"avx2": True, "pclmul": True, "vpclmulqdq": False}
    monkeypatch.setattr(aesni.llvmlite.binding, "get_host_cpu_features", lambda: host)
    assert not aesni.target_has(*ghash.FEATURES)
    host["vpclmulqdq"] = True
    assert aesni.target_has(*ghash.FEATURES)
    monkeypatch.setattr(numba.config, "DISABLE_JIT", 1)
    assert not aesni.target_has(*ghash.FEATURES)
    monkeypatch.setattr(numba.config, "DISABLE_JIT", 0)
    monkeypatch.setattr(aesni.platform, "machine", lambda: "aarch64")
    assert not aesni.target_has(*ghash.FEATURES)


def test_the_variable_turns_it_off(monkeypatch):
    monkeypatch.setattr(ghash, "_usable", lambda: True)
    monkeypatch.setenv(ghash.DISABLE_VARIABLE, "0")
    assert not ghash.available() and ghash.path() == "openssl"
    monkeypatch.setenv(ghash.DISABLE_VARIABLE, "1")
    assert ghash.available() and ghash.path() == "vpclmulqdq"


@needs_clmul
def test_the_self_test_rejects_a_wrong_reduction(monkeypatch):
    """The known-answer test is what stands between a miscompiled GHASH and every link's
    MAC: it passes here and fails when one Karatsuba key of the wide groups is off by a bit
    (data of fewer than 64 blocks is untouched by it)."""
    assert ghash._self_test()
    compiled = ghash.table_into

    def off_by_one_bit(h_low, h_high, table):
        compiled(h_low, h_high, table)
        table[2 * ghash.WIDTH] ^= np.uint64(1)

    monkeypatch.setattr(ghash, "table_into", off_by_one_bit)
    assert ghash._compiled_gmac(bytes(16), bytes(12), [bytes(1000)]) == _openssl(bytes(16), bytes(12), bytes(1000))
    assert not ghash._self_test()


@needs_clmul
def test_the_kernels_do_not_compile_for_other_array_types():
    """The intrinsics read 16-byte blocks through raw pointers: anything but uint8 data and
    a flat uint64 state and table is refused when it is compiled."""
    table = np.zeros(4 * ghash.WIDTH, np.uint64)
    with pytest.raises(numba.core.errors.TypingError):
        ghash.absorb(np.zeros(2, np.uint64), np.zeros(64, np.uint16), table)
    with pytest.raises(numba.core.errors.TypingError):
        ghash.absorb(np.zeros(2, np.int64), np.zeros(64, np.uint8), table)
