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


def _smallest_float_above(value: int) -> float:
    result = float(value + 1)
    return result if result > value else float(np.nextafter(result, np.inf))


def _signed(ring_value: int, bits: int) -> int:
    return ring_value - (1 << bits) if ring_value >= 1 << (bits - 1) else ring_value


@pytest.mark.parametrize("bits", [8, 16, 32, 33, 53, 54, 63, 64])
@pytest.mark.parametrize("parties", [1, 2, 3, 7])
@pytest.mark.parametrize("scale", [1.0, 2.0**32])
def test_inputs_at_the_bound_sum_exactly_and_beyond_it_are_refused(bits, parties, scale):
    """Exact integer bound at every k: n inputs at +-bound never wrap; the next value is refused."""
    encoding = FixedPoint(parties, bits, scale)
    limit = ((1 << (bits - 1)) - 1) // parties
    assert encoding.scaled_bound == limit
    top = encoding.bound
    assert int(top * scale) <= limit
    encoded = encoding.encode(np.array([top, -top]))
    total = ring_sum([encoded] * parties, bits)
    expected = parties * int(np.rint(top * scale))
    assert [_signed(int(v), bits) for v in total] == [expected, -expected]
    assert np.array_equal(encoding.decode(total), [expected / scale, -expected / scale])
    beyond = _smallest_float_above(limit) / scale
    for value in (beyond, -beyond):
        with pytest.raises(InputError, match="overflow-safe bound"):
            encoding.encode(np.array([0.0, value]))


def test_k64_regressions_two_clients_at_2_30_and_one_client_at_2_31_are_refused():
    # float64 rounded floor((2^63 - 1) / 2) / 2^32 up to 2^30: two such inputs decoded to -2^31.
    with pytest.raises(InputError, match="overflow-safe bound"):
        FixedPoint(2, 64, 2.0**32).encode(np.array([2.0**30]))
    # and for one client 2^31 * 2^32 = 2^63 overflowed the int64 cast.
    with pytest.raises(InputError, match="overflow-safe bound"):
        FixedPoint(1, 64, 2.0**32).encode(np.array([-(2.0**31), 2.0**31]))
    with pytest.raises(InputError, match="clip"):
        FixedPoint(2, 64, 2.0**32, clip=2.0**30)
    with pytest.raises(InputError, match="clip"):
        FixedPoint(2, 64, 2.0**1000, clip=2.0**100)


def test_secure_sum_at_k64_never_wraps_in_any_backend():
    from securefl.runtime.sum_backends import names
    from securefl.runtime.summation import secure_sum

    top = FixedPoint(2, 64, 2.0**32).bound
    for backend in names():
        with pytest.raises(InputError, match="overflow-safe bound"):
            secure_sum([np.array([2.0**30])] * 2, threshold=2, backend=backend, seed=1)
        total = secure_sum([np.array([top, -top])] * 2, threshold=2, backend=backend, seed=1).total
        assert np.array_equal(total, [2 * top, -2 * top])
