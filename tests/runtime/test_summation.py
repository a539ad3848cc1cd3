"""Every ``secure_sum`` backend agrees on degenerate inputs: the same result or the same error.

The backends are read from the registry (:func:`securefl.runtime.sum_backends.names`), so a
backend registered is held to the same contract without editing this file.  Two documented differences
of ``he`` (:mod:`securefl.runtime.summation`) are the only exceptions, and each is checked
exactly: it has no neighbour graph (``neighbours=`` is refused, naming the keyword), and it
finishes where pairwise masking stops for want of unmasking clients, with the exact sum of
the inputs that arrived.
"""

import numpy as np
from hypothesis import event, given, settings
from hypothesis import strategies as st

from securefl.crypto.fixed_point import ring_sum
from securefl.errors import InputError, SecureFLError
from securefl.runtime.sum_backends import names
from securefl.runtime.summation import make_encoding, secure_sum

DTYPES = [np.float64, np.float32, np.int64, np.int8, np.uint8, np.uint64]


@st.composite
def degenerate_cases(draw):
    n = draw(st.integers(1, 4))
    dim = draw(st.sampled_from([0, 0, 1, 2]))
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    if dtype.kind == "f":
        values = st.floats(-1e3, 1e3, allow_nan=False, width=dtype.itemsize * 8)
    else:
        info = np.iinfo(dtype)
        values = st.integers(int(info.min), int(info.max))
    inputs = [np.array(draw(st.lists(values, min_size=dim, max_size=dim)), dtype=dtype) for _ in range(n)]
    valid = [n // 2 + 1, n] * 3
    threshold = draw(st.sampled_from(valid + [0, 1, n // 2, n + 1, True, 2.0]))
    dropouts = draw(
        st.none() | st.dictionaries(st.integers(0, n - 1), st.integers(0, 3), max_size=n)
    )
    kwargs = {"threshold": threshold, "dropouts": dropouts}
    kwargs["modulus_bits"] = draw(st.sampled_from([None, 8, 16, 64]))
    if draw(st.booleans()):
        kwargs["neighbours"] = 2
    return inputs, kwargs


def _outcome(backend, inputs, kwargs):
    try:
        result = secure_sum(inputs, backend=backend, seed=3, **kwargs)
    except SecureFLError as exc:  # anything else (TypeError, ValueError, ...) fails the test
        return type(exc).__name__, getattr(exc, "parameter", None)
    return "ok", result.total.dtype.str, result.total.tobytes(), tuple(result.survivors)


@settings(max_examples=80, deadline=None)
@given(degenerate_cases())
def test_backends_agree_on_degenerate_inputs(case):
    inputs, kwargs = case
    outcomes = {backend: _outcome(backend, inputs, kwargs) for backend in names()}
    event(str(outcomes["plaintext"][:2]))
    oracle = outcomes["plaintext"]
    for backend, outcome in outcomes.items():
        if backend == "he" and "neighbours" in kwargs and oracle[0] != "InputError":
            assert outcome == ("InputError", "neighbours"), outcome
        elif backend == "he" and oracle[0] == "DropoutError" and outcome[0] == "ok":
            encoding = make_encoding(inputs, modulus_bits=kwargs["modulus_bits"])
            survivors = outcome[3]
            expected = encoding.decode(ring_sum([encoding.encode(inputs[u]) for u in survivors],
                                                encoding.modulus_bits))
            assert outcome[2] == expected.tobytes() and len(survivors) >= kwargs["threshold"]
        else:
            assert outcome == oracle, outcomes


def test_zero_length_vectors_sum_to_an_empty_total_in_every_backend():
    # Issue 10: TypeError in "secagg", [] in "plaintext".
    for backend in names():
        for dtype in (np.float64, np.int64):
            result = secure_sum([np.ones(0, dtype=dtype)] * 3, threshold=2, backend=backend)
            assert result.total.shape == (0,) and result.survivors == (0, 1, 2)


def test_one_client_and_threshold_one():
    for backend in names():
        assert secure_sum([np.arange(3.0)], threshold=1, backend=backend).total.tolist() == [0.0, 1.0, 2.0]
        try:
            secure_sum([np.arange(3.0)] * 3, threshold=1, backend=backend)
        except InputError as exc:
            assert exc.parameter == "threshold"
        else:
            raise AssertionError(f"{backend}: threshold=1 of 3 clients accepted silently")
