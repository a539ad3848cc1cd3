"""Fixed-key AES permutation, TCCR hash and counter blocks."""

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from securefl.crypto.fixed_key import FIXED_KEY, FixedKeyAES, block_buffer
from securefl.errors import InputError


def reference_pi(blocks):
    raw = Cipher(algorithms.AES(FIXED_KEY), modes.ECB()).encryptor().update(blocks.tobytes())
    return np.frombuffer(raw, np.uint64).reshape(blocks.shape)


def test_permute_matches_aes_ecb_under_the_fixed_key():
    blocks = np.random.default_rng(0).integers(0, 2**63, size=(37, 2), dtype=np.uint64)
    aes = FixedKeyAES()
    np.testing.assert_array_equal(aes.permute(blocks), reference_pi(blocks))
    np.testing.assert_array_equal(aes.permute_into(blocks, block_buffer(37)), reference_pi(blocks))


def test_permute_into_needs_a_spare_block():
    with pytest.raises(InputError, match="out"):
        FixedKeyAES().permute_into(np.zeros((4, 2), np.uint64), np.zeros(8, np.uint64))


def test_tccr_definition_and_tweak_separation():
    x = np.random.default_rng(1).integers(0, 2**63, size=(5, 2), dtype=np.uint64)
    tweaks = np.arange(5, dtype=np.uint64)
    first = reference_pi(x)
    mixed = first.copy()
    mixed[:, 0] ^= tweaks
    expected = reference_pi(mixed) ^ first
    aes = FixedKeyAES()
    np.testing.assert_array_equal(aes.tccr(x, tweaks), expected)
    same = np.repeat(x[:1], 5, axis=0)
    assert len({bytes(row) for row in aes.tccr(same, tweaks)}) == 5


def test_tccr_high_tweak_enters_the_high_word():
    x = np.random.default_rng(2).integers(0, 2**63, size=(4, 2), dtype=np.uint64)
    tweaks = np.arange(4, dtype=np.uint64)
    first = reference_pi(x)
    mixed = first.copy()
    mixed[:, 0] ^= tweaks
    mixed[:, 1] ^= np.uint64(7)
    aes = FixedKeyAES()
    np.testing.assert_array_equal(aes.tccr(x, tweaks, high=7), reference_pi(mixed) ^ first)
    assert not (aes.tccr(x, tweaks, high=7) == aes.tccr(x, tweaks)).all(axis=1).any()
    with pytest.raises(InputError, match="high"):
        aes.tccr(x, tweaks, high=-1)


def test_tccr_bad_input():
    with pytest.raises(InputError, match="x"):
        FixedKeyAES().tccr(np.zeros((3, 3), np.uint64), np.arange(3))
    with pytest.raises(InputError, match="tweaks"):
        FixedKeyAES().tccr(np.zeros((3, 2), np.uint64), np.arange(2))
