"""Shamir sharing over F_(2^61 - 1): reconstruction from any t shares, t - 1 shares uniform."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from securefl.crypto import shamir
from securefl.errors import InputError


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 12), st.data())
def test_any_t_shares_reconstruct(n, data):
    t = data.draw(st.integers(1, n))
    secrets = shamir.random_field_elements(data.draw(st.integers(1, 20)))
    points = [3 * j + 1 for j in range(n)]
    shares = shamir.share(secrets, threshold=t, points=points)
    subset = sorted(data.draw(st.lists(st.integers(0, n - 1), min_size=t, max_size=n, unique=True)))
    recovered = shamir.reconstruct([points[j] for j in subset], shares[subset])
    assert np.array_equal(recovered, secrets)


def test_t_minus_one_shares_are_uniform_whatever_the_secret():
    # 2 shares of a 3-of-5 sharing: joint top-4-bit histogram (256 cells) must be uniform,
    # for secret 0 and for secret p - 1 alike.
    for secret in (0, shamir.PRIME - 1):
        shares = shamir.share(np.full(40_000, secret, dtype=np.uint64), threshold=3, points=[1, 2, 3, 4, 5])
        top = shares[[1, 3]] >> np.uint64(57)
        cells = np.bincount((top[0] * 16 + top[1]).astype(np.int64), minlength=256)
        assert stats.chisquare(cells).pvalue > 1e-5


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 6), st.integers(1, 40), st.integers(1, 6))
def test_matmul_mod_matches_python_integers(rows, inner, cols):
    a = shamir.random_field_elements((rows, inner))
    b = shamir.random_field_elements((inner, cols))
    expected = [[sum(int(a[i, k]) * int(b[k, j]) for k in range(inner)) % shamir.PRIME for j in range(cols)] for i in range(rows)]
    assert shamir.matmul_mod(a, b).tolist() == expected


def test_byte_strings_and_share_bytes_round_trip():
    data = np.frombuffer(bytes(range(64)), dtype=np.uint8).reshape(2, 32)
    elements = shamir.bytes_to_elements(data)
    assert elements.shape == (2, 5)
    assert np.array_equal(shamir.elements_to_bytes(elements, 32), data)
    shares = shamir.share(elements.ravel(), threshold=2, points=[1, 2, 3])
    raw = shamir.shares_to_bytes(shares[0])
    assert np.array_equal(shamir.shares_from_bytes(raw, 10), shares[0])
    with pytest.raises(InputError, match="not below p"):
        shamir.shares_from_bytes(np.full(10, shamir.PRIME, dtype="<u8").tobytes(), 10)


def test_errors_name_parameters():
    with pytest.raises(InputError, match="threshold"):
        shamir.share(np.array([1], dtype=np.uint64), threshold=4, points=[1, 2, 3])
    with pytest.raises(InputError, match="points"):
        shamir.share(np.array([1], dtype=np.uint64), threshold=2, points=[1, 1, 2])
    with pytest.raises(InputError, match="points"):
        shamir.reconstruct([0, 1], np.zeros((2, 1), dtype=np.uint64))
    with pytest.raises(InputError, match="secrets"):
        shamir.share(np.array([shamir.PRIME], dtype=np.uint64), threshold=1, points=[1])
