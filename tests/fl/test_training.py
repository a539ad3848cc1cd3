"""ClientUpdate helpers: weighted CE, FedProx, mixed batches, evaluation, seeding."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from securefl.errors import InputError
from securefl.fl import (
    SimulationRNG,
    evaluate,
    extract_features,
    model_vector,
    prox_term,
    train_mixed,
    train_supervised,
    weighted_cross_entropy,
)
from securefl.models import build_model


def blobs(n=120, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    centers = np.eye(3, 16) * 3
    x = (centers[y] + 0.3 * rng.normal(size=(n, 16))).astype(np.float32)
    return x, y.astype(np.int64)


def test_weighted_cross_entropy_matches_definition():
    logits = torch.randn(6, 4, generator=torch.Generator().manual_seed(0))
    y = torch.tensor([0, 1, 2, 3, 0, 1])
    w = torch.tensor([1.0, 0.0, 0.5, 2.0, 1.0, 0.25])
    expected = (F.cross_entropy(logits, y, reduction="none") * w).mean()
    torch.testing.assert_close(weighted_cross_entropy(logits, y, w), expected)
    torch.testing.assert_close(weighted_cross_entropy(logits, y), F.cross_entropy(logits, y))


def test_prox_term_value():
    model = torch.nn.Linear(3, 2)
    anchor = [p.detach().clone() + 1.0 for p in model.parameters()]
    assert prox_term(model, anchor, 0.5).item() == pytest.approx(0.25 * 8)


def test_supervised_training_learns_and_is_seeded():
    x, y = blobs()
    runs = []
    for _ in range(2):
        model = build_model("mlp", input_shape=(16,), num_classes=3, seed=1)
        rng = SimulationRNG.from_seed(7)
        steps = train_supervised(model, x, y, epochs=3, batch_size=16, lr=0.1,
                                 generator=rng.torch)
        assert steps == 3 * 8
        runs.append(model_vector(model))
        assert evaluate(model, x, y) > 0.95
    assert np.array_equal(runs[0], runs[1])


def test_zero_weights_mean_no_learning_signal():
    x, y = blobs()
    model = build_model("mlp", input_shape=(16,), num_classes=3, seed=1)
    before = model_vector(model)
    train_supervised(model, x, y, weights=np.zeros(len(y)), epochs=1, batch_size=16, lr=0.1,
                     momentum=0.0, generator=torch.Generator().manual_seed(0))
    assert np.array_equal(before, model_vector(model))


def test_prox_keeps_model_closer_to_start():
    x, y = blobs()
    distances = []
    for mu in (0.0, 10.0):
        model = build_model("mlp", input_shape=(16,), num_classes=3, seed=1)
        start = model_vector(model)
        train_supervised(model, x, y, epochs=2, batch_size=16, lr=0.05, prox_mu=mu,
                         generator=torch.Generator().manual_seed(0))
        distances.append(np.linalg.norm(model_vector(model) - start))
    assert distances[1] < distances[0]


def test_mixed_batches_follow_fedprop_sizes():
    x, y = blobs(n=100)
    seen = []

    class Spy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = build_model("mlp", input_shape=(16,), num_classes=3, seed=0)

        def forward(self, batch):
            seen.append(len(batch))
            return self.inner(batch)

    model = Spy()
    steps = train_mixed(model, x[:7], y[:7], x[7:], y[7:], np.ones(93), epochs=2,
                        batch_size=50, lr=0.05, generator=torch.Generator().manual_seed(0))
    assert steps == 2 * 14
    assert seen[0] == 14 and max(seen) == 14
    only_unlabeled = train_mixed(model, x[:0], y[:0], x, y, np.ones(100), epochs=1,
                                 batch_size=30, lr=0.05,
                                 generator=torch.Generator().manual_seed(0))
    assert only_unlabeled == 4


def test_extract_features_and_eval_restore_mode():
    x, y = blobs(n=10)
    model = build_model("mlp", input_shape=(16,), num_classes=3, seed=0)
    model.train()
    feats = extract_features(model, x)
    assert feats.shape == (10, model.feature_dim) and feats.dtype == np.float32
    assert model.training
    assert 0.0 <= evaluate(model, x, y) <= 1.0


def test_simulation_rng_state_roundtrip():
    rng = SimulationRNG.from_seed(3)
    rng.numpy.random(5)
    state = rng.state_dict()
    a = (rng.numpy.random(3), torch.randn(3, generator=rng.torch))
    rng.load_state_dict(state)
    b = (rng.numpy.random(3), torch.randn(3, generator=rng.torch))
    assert np.array_equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_bad_inputs():
    x, y = blobs(n=10)
    model = build_model("mlp", input_shape=(16,), num_classes=3)
    gen = torch.Generator()
    with pytest.raises(InputError, match="lr"):
        train_supervised(model, x, y, epochs=1, batch_size=4, lr=0.0, generator=gen)
    with pytest.raises(InputError, match="batch_size"):
        train_supervised(model, x, y, epochs=1, batch_size=0, lr=0.1, generator=gen)
    with pytest.raises(InputError, match="y"):
        train_supervised(model, x, y[:5], epochs=1, batch_size=4, lr=0.1, generator=gen)
    with pytest.raises(InputError, match="y"):
        evaluate(model, x[:0], y[:0])


def test_augment_is_applied_to_every_training_batch():
    x, y = blobs(n=40)
    model = build_model("mlp", input_shape=(16,), num_classes=3, seed=0)
    augmented = []

    def augment(batch):
        augmented.append(batch.clone())
        return torch.zeros_like(batch)

    steps = train_mixed(model, x[:10], y[:10], x[10:], y[10:], np.ones(30), epochs=1,
                        batch_size=10, lr=0.05, generator=torch.Generator().manual_seed(0),
                        augment=augment)
    assert len(augmented) == steps == 3
    assert all(len(batch) == 20 for batch in augmented)
