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


def test_update_into_on_reused_views_matches_aes_ecb():
    rng = np.random.default_rng(2)
    out = block_buffer(37)
    aes = FixedKeyAES()
    for count in (37, 5):
        blocks = rng.integers(0, 2**63, size=(count, 2), dtype=np.uint64)
        aes.update_into(memoryview(blocks).cast("B"), memoryview(out).cast("B"))
        np.testing.assert_array_equal(out[: 2 * count].reshape(count, 2), reference_pi(blocks))


def test_expander_reuses_its_buffers_and_returns_pi_and_inputs():
    from securefl.crypto.shade import _Expander

    expander = _Expander(blocks=3, rows=8)
    rng = np.random.default_rng(3)
    for count in (8, 5, 8):
        seeds = rng.integers(0, 2**63, size=(count, 2), dtype=np.uint64)
        permuted, inputs = expander.expand(seeds, 0)
        blocks = np.repeat(seeds[:, None, :], 3, axis=1)
        blocks[:, :, 0] ^= np.arange(3, dtype=np.uint64)
        np.testing.assert_array_equal(inputs.view(np.uint64).reshape(count, 3, 2), blocks)
        np.testing.assert_array_equal(permuted.view(np.uint64).reshape(count, 3, 2), reference_pi(blocks))
    assert len(expander._buffers) == 1 and len(expander._views) == 2


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
