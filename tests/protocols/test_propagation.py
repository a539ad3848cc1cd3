"""Label propagation (FedProp Algorithm 1): solvers, closed form, scikit-learn, edge cases."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.semi_supervised import LabelSpreading

from securefl.errors import InputError
from securefl.protocols import label_propagation
from securefl.protocols.propagation import (
    knn_graph_from_features,
    knn_graph_from_similarity,
    labels_from_scores,
    normalize_graph,
    one_hot,
    propagate,
)


def _clusters(seed: int, n: int, classes: int, dim: int = 6, spread: float = 1.2, labeled: int = 3):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, dim)) * 3
    truth = rng.integers(0, classes, size=n)
    x = centres[truth] + rng.normal(size=(n, dim)) * spread
    labels = np.full(n, -1)
    for c in range(classes):
        members = np.flatnonzero(truth == c)
        picked = members[: min(labeled, members.size)]
        labels[picked] = c
    return x, labels, truth


def _closed_form(
    x: np.ndarray, labels: np.ndarray, classes: int, k: int, alpha: float
) -> np.ndarray:
    """Algorithm 1 written out literally with dense numpy (the reference)."""
    n = x.shape[0]
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    a = unit @ unit.T
    b = np.zeros_like(a)
    for i in range(n):
        others = [j for j in np.argsort(-a[i], kind="stable") if j != i][:k]
        b[i, others] = np.maximum(a[i, others], 0)
    w = b + b.T
    d = w.sum(1)
    inv = np.where(d > 0, 1 / np.sqrt(np.where(d > 0, d, 1)), 0)
    wn = inv[:, None] * w * inv[None, :]
    z = np.linalg.inv(np.eye(n) - alpha * wn) @ one_hot(labels, classes)
    zhat = z / z.sum(1, keepdims=True)
    return zhat


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(12, 80),
    classes=st.integers(2, 6),
    k=st.integers(1, 12),
    alpha=st.sampled_from([0.5, 0.9, 0.99]),
)
def test_dense_and_sparse_solvers_agree(seed, n, classes, k, alpha):
    x, labels, _ = _clusters(seed, n, classes)
    dense = label_propagation(x, labels, num_classes=classes, k=k, alpha=alpha, solver="dense")
    sparse = label_propagation(x, labels, num_classes=classes, k=k, alpha=alpha, solver="sparse")
    gap = np.max(np.abs(dense.scores - sparse.scores))
    assert gap <= 1e-6
    # w = 1 - H(p) / log C amplifies a score error e by at most sum_c e (|log p_c| + 1) / log C
    # (first order, at the smaller of the two scores): near-certain rows can move more than e.
    low = np.clip(np.minimum(dense.scores, sparse.scores), 1e-300, None)
    bound = (gap * (np.abs(np.log(low)) + 1)).sum(axis=1) / np.log(classes)
    assert np.all(np.abs(dense.weights - sparse.weights) <= 2 * bound + 1e-12)
    informed = dense.weights > 1e-6
    np.testing.assert_array_equal(dense.pseudo_labels[informed], sparse.pseudo_labels[informed])


def test_matches_literal_closed_form():
    x, labels, _ = _clusters(3, 70, 4, spread=2.5)
    result = label_propagation(x, labels, num_classes=4, k=6, alpha=0.99, solver="sparse")
    reference = _closed_form(x, labels, 4, 6, 0.99)
    assert np.max(np.abs(result.scores - reference)) <= 1e-6
    np.testing.assert_array_equal(result.pseudo_labels, reference.argmax(1))
    entropy = -(reference * np.log(np.where(reference > 0, reference, 1))).sum(1)
    np.testing.assert_allclose(result.weights, 1 - entropy / np.log(4), atol=1e-6)


def test_matches_sklearn_label_spreading_on_the_same_graph():
    x, labels, _ = _clusters(11, 60, 3, spread=2.0)
    w = knn_graph_from_features(x, k=5).toarray()
    alpha = 0.9
    model = LabelSpreading(kernel=lambda a, b: w, alpha=alpha, max_iter=20_000, tol=1e-14)
    model.fit(x, labels)
    ours = label_propagation(x, labels, num_classes=3, k=5, alpha=alpha, solver="dense")
    assert np.max(np.abs(model.label_distributions_ - ours.scores)) <= 1e-6
    np.testing.assert_array_equal(model.transduction_, ours.pseudo_labels)


def test_good_clusters_are_recovered():
    x, labels, truth = _clusters(5, 300, 5, spread=0.8)
    result = label_propagation(x, labels, num_classes=5, k=10)
    assert (result.pseudo_labels == truth).mean() > 0.95
    assert result.weights.min() >= 0 and result.weights.max() <= 1


def test_knn_graph_excludes_self_has_k_neighbours_and_is_symmetric():
    x, _, _ = _clusters(2, 40, 3)
    w = knn_graph_from_features(x, k=4)
    assert (w != w.T).nnz == 0
    assert w.diagonal().max() == 0
    assert ((w > 0).sum(axis=1) >= 4).all()
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    w_pre = knn_graph_from_similarity(unit @ unit.T, k=4)
    assert abs(w - w_pre).max() < 1e-5


def test_duplicates_still_exclude_self_and_negative_similarities_clip():
    x = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [-1.0, 0.1], [-1.0, -0.1]])
    w = knn_graph_from_features(x, k=2)
    assert w.diagonal().max() == 0
    assert w.min() >= 0
    similarity = np.array([[1.0, -0.5, -0.2], [-0.5, 1.0, 0.3], [-0.2, 0.3, 1.0]])
    assert knn_graph_from_similarity(similarity, k=2).min() >= 0


def test_component_without_labels_gets_minus_one_and_zero_weight():
    # two far-apart groups; only the first holds a label
    rng = np.random.default_rng(0)
    x = np.vstack([rng.normal(size=(10, 3)) + [20, 0, 0], rng.normal(size=(10, 3)) + [0, 0, 20]])
    labels = np.full(20, -1)
    labels[0] = 1
    result = label_propagation(x, labels, num_classes=3, k=3)
    assert (result.pseudo_labels[:10] == 1).all()
    assert (result.pseudo_labels[10:] == -1).all()
    assert (result.weights[10:] == 0).all()
    np.testing.assert_allclose(result.scores[10:], 1 / 3)


def test_precomputed_similarity_and_unpacking():
    x, labels, _ = _clusters(8, 30, 2)
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    pseudo, weights = label_propagation(
        unit @ unit.T, labels, num_classes=2, k=4, metric="precomputed"
    )
    direct = label_propagation(x, labels, num_classes=2, k=4)
    np.testing.assert_array_equal(pseudo, direct.pseudo_labels)
    np.testing.assert_allclose(weights, direct.weights, atol=1e-5)


def test_k_is_capped_for_tiny_inputs():
    x = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]])
    result = label_propagation(x, np.array([0, -1, 1]), num_classes=2, k=10)
    assert result.pseudo_labels.shape == (3,)


@pytest.mark.parametrize(
    "kwargs, parameter",
    [
        ({"num_classes": 1}, "num_classes"),
        ({"num_classes": 3, "alpha": 1.0}, "alpha"),
        ({"num_classes": 3, "k": 0}, "k"),
        ({"num_classes": 3, "solver": "magic"}, "solver"),
        ({"num_classes": 3, "metric": "l1"}, "metric"),
        ({"num_classes": 2}, "labels"),
    ],
)
def test_bad_arguments_raise_input_error(kwargs, parameter):
    x = np.random.default_rng(0).normal(size=(10, 3))
    labels = np.array([0, 1, 2, -1, -1, -1, -1, -1, -1, -1])
    with pytest.raises(InputError, match=parameter):
        label_propagation(x, labels, **kwargs)


def test_propagate_shapes_and_rhs_validation():
    w = normalize_graph(sp.csr_matrix(np.array([[0, 1.0], [1.0, 0]])))
    assert propagate(w, np.zeros((2, 0)), alpha=0.5).shape == (2, 0)
    with pytest.raises(InputError, match="rhs"):
        propagate(w, np.zeros((3, 1)), alpha=0.5)
    with pytest.raises(InputError, match="z"):
        labels_from_scores(np.zeros((2, 3)), 2)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(2, 40),
    k=st.integers(1, 45),
    levels=st.integers(1, 6),
)
def test_knn_select_equals_stable_sort_even_with_many_ties(seed, n, k, levels):
    from securefl.protocols.propagation import knn_select

    similarity = np.random.default_rng(seed).integers(0, levels, size=(n, n)).astype(float)
    masked = similarity.copy()
    np.fill_diagonal(masked, -np.inf)
    expected = np.sort(np.argsort(-masked, axis=1, kind="stable")[:, : min(k, n - 1)], axis=1)
    np.testing.assert_array_equal(knn_select(similarity, k=k), expected)


def test_client_without_any_label_gets_no_pseudo_labels():
    x, _, _ = _clusters(4, 25, 3)
    result = label_propagation(x, np.full(25, -1), num_classes=3, k=4)
    assert (result.pseudo_labels == -1).all() and (result.weights == 0).all()
