"""Fixed-point encoding into Z_(2^k): round trip, clipping, overflow detection, error bound."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from securefl.crypto.fixed_point import FixedPoint, container_dtype, ring_sum
from securefl.errors import InputError

finite = st.floats(min_value=-1e3, max_value=1e3, allow_nan=False)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 12),
    st.lists(st.lists(finite, min_size=5, max_size=5), min_size=1, max_size=12),
    st.sampled_from([2.0**16, 2.0**24, 2.0**32]),
)
def test_sum_within_stated_bound(parties, rows, scale):
    parties = max(parties, len(rows))
    encoding = FixedPoint(parties, 64, scale)
    xs = [np.array(r) for r in rows]
    total = encoding.decode(ring_sum([encoding.encode(x) for x in xs], 64))
    exact = np.array([math.fsum(col) for col in zip(*rows)])
    abs_sum = sum(np.abs(x) for x in xs)
    assert np.all(np.abs(total - exact) <= encoding.error_bound(len(xs), abs_sum))


def test_clipping_and_narrow_ring():
    encoding = FixedPoint(4, 32, 2.0**8, clip=10.0)
    assert encoding.dtype == np.uint32
    x = np.array([-50.0, -10.0, 0.5, 10.0, 1e9])
    assert np.array_equal(encoding.decode(encoding.encode(x)), [-10.0, -10.0, 0.5, 10.0, 10.0])


def test_overflow_is_detected_not_wrapped():
    with pytest.raises(InputError, match="clip"):
        FixedPoint(1000, 32, 2.0**16, clip=100.0)
    encoding = FixedPoint(10, 32, 2.0**16)
    assert encoding.bound == pytest.approx((2**31 - 1) // 10 / 2**16)
    encoding.encode(np.array([encoding.bound]))
    with pytest.raises(InputError, match="overflow-safe bound"):
        encoding.encode(np.array([0.0, encoding.bound * 1.001]))
    with pytest.raises(InputError, match="NaN"):
        encoding.encode(np.array([np.nan]))


def test_bad_parameters_name_themselves():
    with pytest.raises(InputError, match="scale"):
        FixedPoint(3, 64, 3.0)
    with pytest.raises(InputError, match="modulus_bits"):
        FixedPoint(3, 65)
    with pytest.raises(InputError, match="parties"):
        FixedPoint(0)
    assert container_dtype(12) == np.uint16


@settings(max_examples=30, deadline=None)
@given(st.sampled_from([8, 16, 33, 64]), st.lists(st.integers(-100, 100), min_size=1, max_size=9))
def test_integers_wrap_mod_2k(bits, values):
    encoding = FixedPoint(len(values), bits, 1.0, integer=True, signed=True)
    encoded = [encoding.encode(np.array([v], dtype=np.int64)) for v in values]
    total = int(encoding.decode(ring_sum(encoded, bits))[0])
    wrapped = sum(values) % (1 << bits)
    expected = wrapped - (1 << bits) if wrapped >= 1 << (bits - 1) else wrapped
    assert total == expected


def test_integer_range_checked():
    encoding = FixedPoint(2, 8, 1.0, integer=True, signed=False)
    with pytest.raises(InputError, match="outside"):
        encoding.encode(np.array([256]))
    assert encoding.decode(ring_sum([encoding.encode(np.array([200])), encoding.encode(np.array([100]))], 8))[0] == 44
