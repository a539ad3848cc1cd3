"""Label mass sum_c Z_ic (what Algorithm 1's row normalisation discards) and the
label-mass option of FedProp's pseudo-labels (:func:`gate_by_mass`)."""

from __future__ import annotations

import numpy as np
import pytest

from securefl.errors import InputError
from securefl.protocols import label_propagation
from securefl.protocols.crossclient import cross_client_lp
from securefl.protocols.propagation import (
    gate_by_mass,
    label_mass,
    labels_from_scores,
    normalize_graph,
)

ALPHA = 0.9


def _three_clusters() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Similarity of 3 clusters of 4 points (within 0.9, between 0.02), labels on clusters 0
    and 1 only: class 2 has no labeled point."""
    truth = np.repeat([0, 1, 2], 4)
    similarity = np.where(truth[:, None] == truth[None, :], 0.9, 0.02)
    labels = np.full(12, -1)
    labels[[0, 4]] = [0, 1]
    return similarity, labels, truth


def _closed_form_mass(similarity: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """m = (I - alpha W_n)^-1 E_L 1 on the full graph (k = n - 1 keeps every edge)."""
    w = similarity.copy()
    np.fill_diagonal(w, 0.0)
    w_n = normalize_graph(w + w.T).toarray()
    inverse = np.linalg.inv(np.eye(len(labels)) - ALPHA * w_n)
    return inverse[:, labels >= 0].sum(axis=1)


def test_points_of_a_class_nobody_labelled_get_less_mass_and_the_closed_form():
    similarity, labels, truth = _three_clusters()
    result = label_propagation(similarity, labels, num_classes=3, k=11, alpha=ALPHA,
                               metric="precomputed", solver="dense")
    np.testing.assert_allclose(result.mass, _closed_form_mass(similarity, labels), rtol=1e-10)
    unlabeled = labels < 0
    covered = result.mass[unlabeled & (truth < 2)]
    starved = result.mass[unlabeled & (truth == 2)]
    assert starved.max() < 0.5 * covered.min()
    # the normalisation hides it: the starved points still get a confident-looking weight
    assert result.weights[unlabeled & (truth == 2)].min() > 0


def test_mass_is_the_row_sum_of_z_before_normalisation():
    z = np.array([[0.2, 0.6, 0.0], [0.0, 0.0, 0.0], [-1e-18, 0.3, 0.3]])
    result = labels_from_scores(z, 3)
    np.testing.assert_array_equal(result.mass, [0.8, 0.0, 0.6])
    np.testing.assert_array_equal(label_mass(z), result.mass)


def test_the_server_computes_each_clients_mass_from_its_columns():
    """sum_l S_il over the survivors' labeled columns = sum_c Z_ic at the client, with no label."""
    rng = np.random.default_rng(0)
    features = [rng.normal(size=(12, 5)) + 3 * (j % 2) for j in range(3)]
    labels = [np.where(rng.random(12) < 0.3, rng.integers(0, 4, 12), -1) for _ in range(3)]
    kwargs = {"num_classes": 4, "k": 4, "alpha": 0.95, "L": 256, "backend": "plaintext", "seed": 1}
    result = cross_client_lp(features, labels, **kwargs)
    fewer = cross_client_lp(features, labels, dropouts={"during_sum": {2: "masked_input"}}, **kwargs)
    for run in (result, fewer):
        assert sorted(run.round.label_mass) == [j for j, o in enumerate(run.outputs) if o is not None]
        for j, mass in run.round.label_mass.items():
            np.testing.assert_allclose(mass, run.outputs[j].mass, rtol=1e-6, atol=1e-7)
    assert not np.allclose(fewer.round.label_mass[0], result.round.label_mass[0])


def _gate(**options):
    labels = np.array([2, 0, 1, 1, -1])
    weights = np.array([1.0, 0.5, 0.8, 0.4, 0.0])
    mass = np.array([9.0, 4.0, 1.0, 0.5, 0.0])
    unlabeled = np.array([False, True, True, True, True])
    return gate_by_mass(labels, weights, mass, unlabeled=unlabeled, **options)


def test_the_option_off_returns_the_pseudo_labels_unchanged():
    labels, weights = _gate(min_label_mass=0.0, mass_weighting=False)
    np.testing.assert_array_equal(labels, [2, 0, 1, 1, -1])
    np.testing.assert_array_equal(weights, [1.0, 0.5, 0.8, 0.4, 0.0])


def test_min_label_mass_drops_starved_unlabeled_points_only():
    labels, weights = _gate(min_label_mass=1.0, mass_weighting=False)
    np.testing.assert_array_equal(labels, [2, 0, 1, -1, -1])
    np.testing.assert_array_equal(weights, [1.0, 0.5, 0.8, 0.0, 0.0])


def test_mass_weighting_scales_by_mass_over_the_largest_unlabeled_mass():
    labels, weights = _gate(min_label_mass=0.0, mass_weighting=True)
    np.testing.assert_array_equal(labels, [2, 0, 1, 1, -1])
    np.testing.assert_allclose(weights, [1.0, 0.5, 0.8 / 4, 0.4 * 0.5 / 4, 0.0])


@pytest.mark.parametrize("options, parameter", [
    ({"min_label_mass": -0.1, "mass_weighting": False}, "min_label_mass"),
    ({"min_label_mass": float("nan"), "mass_weighting": False}, "min_label_mass"),
    ({"min_label_mass": True, "mass_weighting": False}, "min_label_mass"),
    ({"min_label_mass": "1", "mass_weighting": False}, "min_label_mass"),
    ({"min_label_mass": 0.0, "mass_weighting": 1}, "mass_weighting"),
])
def test_bad_option_values_are_refused_by_name(options, parameter):
    with pytest.raises(InputError, match=parameter):
        _gate(**options)
