"""Weighted FedAvg through secure_sum: correct average, real == plaintext bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from securefl.errors import InputError
from securefl.fl import (
    aggregate,
    load_model_vector,
    model_bytes,
    model_vector,
    state_to_vector,
    vector_to_state,
)
from securefl.models import build_model


@settings(max_examples=15, deadline=None)
@given(clients=st.integers(1, 6), dim=st.integers(1, 50), seed=st.integers(0, 10_000))
def test_plaintext_average_is_the_weighted_mean(clients, dim, seed):
    rng = np.random.default_rng(seed)
    vectors = [rng.normal(scale=3.0, size=dim) for _ in range(clients)]
    weights = rng.integers(1, 700, clients).astype(float)
    average, report = aggregate(vectors, weights, secure="plaintext")
    expected = np.average(np.stack(vectors), axis=0, weights=weights)
    bound = clients * 2.0**-33 / weights.sum() + 1e-12 * np.abs(expected).max()
    assert np.abs(average - expected).max() <= bound + 1e-12
    assert report.protocol_bytes_per_client == 0.0 and report.payload_bytes == 4 * (dim + 1)


def test_real_equals_plaintext_bitwise():
    rng = np.random.default_rng(0)
    vectors = [rng.normal(size=300) for _ in range(4)]
    weights = [30.0, 40.0, 40.0, 25.0]
    plain, _ = aggregate(vectors, weights, secure="plaintext")
    real, report = aggregate(vectors, weights, secure="real", seed=1)
    assert np.array_equal(plain, real)
    assert report.protocol_bytes_per_client > 0 and report.crypto_seconds > 0


def test_state_dicts_roundtrip_and_average():
    a = build_model("cnn", input_shape=(1, 28, 28), num_classes=10, seed=0)
    b = build_model("cnn", input_shape=(1, 28, 28), num_classes=10, seed=1)
    average, _ = aggregate([a.state_dict(), b.state_dict()], [1.0, 3.0], secure="plaintext")
    assert set(average) == set(a.state_dict())
    expected = 0.25 * a.state_dict()["classifier.weight"] + 0.75 * b.state_dict()["classifier.weight"]
    torch.testing.assert_close(average["classifier.weight"], expected)
    vector = model_vector(a)
    load_model_vector(b, vector)
    assert np.array_equal(model_vector(b), vector)
    assert model_bytes(a) == 4 * 21840


def test_batchnorm_buffers_are_averaged_and_counters_kept():
    model = build_model("resnet9", input_shape=(3, 32, 32), num_classes=10)
    state = model.state_dict()
    vector = state_to_vector(state)
    restored = vector_to_state(vector, state)
    assert all(torch.equal(restored[k], v) for k, v in state.items())
    with pytest.raises(InputError, match="vector"):
        vector_to_state(vector[:-1], state)


def test_bad_weights():
    with pytest.raises(InputError, match="weights"):
        aggregate([np.zeros(3), np.ones(3)], [1.0], secure="plaintext")
    with pytest.raises(InputError, match="weights"):
        aggregate([np.zeros(3)], [-1.0], secure="plaintext")
    with pytest.raises(InputError, match="secure"):
        aggregate([np.zeros(3)], [1.0], secure="maybe")
