"""Blocked 64x64 bit-matrix transpose and packing helpers."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from securefl.crypto.bits import pack_rows, transpose_bits, unpack_rows
from securefl.errors import InputError


@settings(max_examples=25, deadline=None)
@given(groups=st.integers(1, 3), width=st.integers(1, 20), seed=st.integers(0, 2**32 - 1))
def test_transpose_matches_unpacked_transpose(groups, width, seed):
    bits = np.random.default_rng(seed).integers(0, 2, size=(64 * groups, 64 * width), dtype=np.uint8)
    transposed = transpose_bits(pack_rows(bits))
    assert transposed.shape == (64 * width, groups)
    np.testing.assert_array_equal(unpack_rows(transposed, 64 * groups), bits.T)


def test_transpose_spans_several_cache_chunks():
    words = np.random.default_rng(1).integers(0, 2**63, size=(128, 1500), dtype=np.uint64)
    bits = unpack_rows(words, 64 * 1500)
    np.testing.assert_array_equal(unpack_rows(transpose_bits(words), 128), bits.T)


def test_transpose_is_an_involution_on_square_blocks():
    words = np.random.default_rng(2).integers(0, 2**63, size=(64, 1), dtype=np.uint64)
    np.testing.assert_array_equal(transpose_bits(transpose_bits(words)), words)


def test_single_bit_lands_in_transposed_position():
    bits = np.zeros((128, 128), dtype=np.uint8)
    bits[70, 5] = 1
    out = unpack_rows(transpose_bits(pack_rows(bits)), 128)
    assert out[5, 70] == 1 and out.sum() == 1


@settings(max_examples=20, deadline=None)
@given(rows=st.integers(1, 5), cols=st.integers(1, 200), seed=st.integers(0, 1000))
def test_pack_unpack_roundtrip(rows, cols, seed):
    bits = np.random.default_rng(seed).integers(0, 2, size=(rows, cols), dtype=np.uint8)
    words = pack_rows(bits)
    assert words.shape == (rows, -(-cols // 64))
    np.testing.assert_array_equal(unpack_rows(words, cols), bits)


@pytest.mark.parametrize(
    "words",
    [
        np.zeros((63, 2), dtype=np.uint64),
        np.zeros((64, 2), dtype=np.uint32),
        np.zeros(64, dtype=np.uint64),
    ],
)
def test_transpose_rejects_bad_shapes(words):
    with pytest.raises(InputError, match="words"):
        transpose_bits(words)


def test_transpose_rejects_bad_out():
    with pytest.raises(InputError, match="out"):
        transpose_bits(np.zeros((64, 2), dtype=np.uint64), out=np.zeros((128, 2), dtype=np.uint64))
