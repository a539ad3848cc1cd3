"""ProtoFSSL prototype sharing: prototypes, withholding, noise + accounting, helpers,
pseudo-labels, secure aggregation."""

from __future__ import annotations

import numpy as np
import pytest

from securefl.crypto import dp
from securefl.errors import DropoutError, InputError
from securefl.protocols.prototype_sharing import (
    PrototypeStore,
    add_noise,
    aggregate_prototypes,
    class_prototypes,
    privacy_spent,
    pseudo_labels,
    share_prototypes,
)


def _embeddings(seed=0, n=60, classes=4, dim=5):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, dim)) * 4
    truth = rng.integers(0, classes, size=n)
    x = centres[truth] + rng.normal(size=(n, dim)) * 0.3
    return x, truth, centres


def test_prototypes_are_class_means_and_rare_classes_withheld():
    x, truth, _ = _embeddings()
    labels = truth.copy()
    labels[10:] = -1
    labels[labels == 3] = -1
    labels[0] = 3  # exactly one labeled sample of class 3
    p = class_prototypes(x, labels, num_classes=4, min_count=2)
    for c in range(3):
        members = labels == c
        if members.sum() >= 2:
            np.testing.assert_allclose(p.vectors[c], x[members].mean(0))
            assert p.mask[c]
    assert not p.mask[3] and np.all(p.vectors[3] == 0) and p.counts[3] == 1
    assert p.payload_bytes() == int(p.mask.sum()) * (5 * 8 + 8)


def test_clipping_bounds_every_contribution():
    x, truth, _ = _embeddings()
    p = class_prototypes(x * 100, truth, num_classes=4, clip_norm=1.0)
    assert np.all(np.linalg.norm(p.vectors, axis=1) <= 1.0 + 1e-12)


def test_fixed_sigma_noise_has_the_requested_spread_and_is_reproducible():
    x, truth, _ = _embeddings(n=400, dim=200)
    clean = class_prototypes(x, truth, num_classes=4)
    noisy = add_noise(clean, sigma=0.5, seed=3)
    residual = (noisy.vectors - clean.vectors)[clean.mask]
    assert abs(residual.std() - 0.5) < 0.03
    np.testing.assert_array_equal(noisy.vectors, add_noise(clean, sigma=0.5, seed=3).vectors)
    assert not np.array_equal(noisy.vectors, add_noise(clean, sigma=0.5, seed=4).vectors)


def test_dp_noise_calibrated_to_sensitivity_and_accounted():
    x, truth, _ = _embeddings(n=80)
    labels = truth.copy()
    labels[labels == 2] = -1
    labels[np.flatnonzero(truth == 2)[0]] = 2  # a single sample: sensitivity undefined -> withheld
    shared = share_prototypes(x, labels, num_classes=4, clip_norm=2.0, noise_multiplier=1.5, seed=1)
    assert not shared.mask[2]
    for c in (0, 1, 3):
        expected = 1.5 * dp.prototype_sensitivity(2.0, int(shared.counts[c]))
        assert shared.sigma[c] == pytest.approx(expected)
    one = privacy_spent(1.5, sampling_rate=0.05, rounds=1)
    many = privacy_spent(1.5, sampling_rate=0.05, rounds=200)
    assert 0 < one < many
    with pytest.raises(InputError, match="clip_norm"):
        add_noise(class_prototypes(x, truth, num_classes=4), noise_multiplier=1.0)
    clipped = class_prototypes(x, truth, num_classes=4, clip_norm=2.0)
    with pytest.raises(InputError, match="clip_norm"):
        add_noise(clipped, noise_multiplier=1.0, clip_norm=3.0)
    assert add_noise(clipped, noise_multiplier=1.0, seed=2).clip_norm == 2.0
    with pytest.raises(InputError, match="sigma"):
        add_noise(class_prototypes(x, truth, num_classes=4), sigma=1.0, noise_multiplier=1.0)


def test_helpers_come_from_previous_round_only():
    store = PrototypeStore()
    x, truth, _ = _embeddings()
    store.store(
        {
            3: class_prototypes(x, truth, num_classes=4),
            7: class_prototypes(x, truth, num_classes=4),
            9: class_prototypes(x, truth, num_classes=4),
        }
    )
    rng = np.random.default_rng(0)
    picks = {tuple(store.select_helpers(2, rng=rng)) for _ in range(30)}
    assert all(set(p) <= {3, 7, 9} and len(p) == 2 for p in picks) and len(picks) == 3
    assert store.select_helpers(5, rng=rng) == [3, 7, 9]
    assert store.select_helpers(5, rng=rng, exclude=[7]) == [3, 9]
    assert len(store.helper_prototypes([3, 9])) == 2
    with pytest.raises(InputError, match="helpers"):
        store.helper_prototypes([4])
    assert PrototypeStore().select_helpers(3, rng=rng) == []


def test_pseudo_labels_match_equations_5_to_7():
    x, truth, centres = _embeddings(seed=2, n=50)
    a = class_prototypes(x[:25], truth[:25], num_classes=4)
    b = class_prototypes(x[25:], np.where(truth[25:] == 1, -1, truth[25:]), num_classes=4)
    probs = pseudo_labels(x, [a, b], temperature=0.5, distance="euclidean")
    np.testing.assert_allclose(probs.sum(1), 1.0)
    assert (probs.argmax(1) == truth).mean() > 0.95

    def soft(h):
        d = np.sqrt(((x[:, None, :] - h.vectors[None, h.mask]) ** 2).sum(-1))
        e = np.exp(-d - (-d).max(1, keepdims=True))
        out = np.zeros((len(x), 4))
        out[:, h.mask] = e / e.sum(1, keepdims=True)
        return out

    p = (soft(a) + soft(b)) / 2
    sharpened = p**2 / (p**2).sum(1, keepdims=True)
    np.testing.assert_allclose(probs, sharpened, atol=1e-12)
    with pytest.raises(InputError, match="helpers"):
        pseudo_labels(x, [])


@pytest.mark.parametrize("weighting", ["count", "uniform"])
def test_secure_aggregation_equals_plaintext_weighted_mean(weighting):
    sets = []
    for seed in range(3):
        x, truth, _ = _embeddings(seed=seed, n=30)
        labels = np.where(truth == seed, -1, truth)  # client `seed` lacks class `seed`
        sets.append(class_prototypes(x, labels, num_classes=4))
    real = aggregate_prototypes(sets, threshold=2, weighting=weighting, backend="secagg", seed=1)
    plain = aggregate_prototypes(sets, threshold=2, weighting=weighting, backend="plaintext")
    np.testing.assert_array_equal(real.vectors, plain.vectors)
    for c in range(4):
        w = np.array(
            [(s.counts[c] if weighting == "count" else 1) * s.mask[c] for s in sets], dtype=float
        )
        expected = sum(wi * s.vectors[c] for wi, s in zip(w, sets)) / w.sum()
        np.testing.assert_allclose(real.vectors[c], expected, atol=1e-8)
    assert real.mask.all() and sum(real.bytes_sent.values()) > 0
    with pytest.raises(DropoutError):
        aggregate_prototypes(sets, threshold=3, dropouts={0: "masked_input"}, seed=1)


def test_bad_inputs_name_the_parameter():
    x, truth, _ = _embeddings()
    with pytest.raises(InputError, match="labels"):
        class_prototypes(x, truth + 10, num_classes=4)
    with pytest.raises(InputError, match="min_count"):
        class_prototypes(x, truth, num_classes=4, min_count=0)
    with pytest.raises(InputError, match="embeddings"):
        class_prototypes(x[:, :, None], truth, num_classes=4)
    with pytest.raises(InputError, match="weighting"):
        aggregate_prototypes(
            [class_prototypes(x, truth, num_classes=4)], threshold=1, weighting="median"
        )
