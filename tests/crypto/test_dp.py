"""Gaussian release of class sums, clipping, sensitivity and privacy accounting."""

import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting import pld
from scipy import stats

from securefl.crypto import dp
from securefl.errors import InputError


def test_accountant_regression_values():
    """Issue 11, finding 2: the docstring's example (z = 1.5, q = 0.04, T = 2,250,
    delta = 1e-5) was reported as PLD eps 6.77 (RDP 7.33) with amplification by q.  The
    server sees who participates: a client's releases compose in full, and one that joins
    its expected qT = 90 rounds has eps = 46.21 (RDP bound 48.80)."""
    accountant = dp.PrivacyAccountant(noise_multiplier=1.5, delta=1e-5).step(90)
    assert accountant.epsilon("pld") == pytest.approx(46.21, abs=0.01)
    assert accountant.epsilon("rdp") == pytest.approx(48.80, abs=0.01)
    assert dp.PrivacyAccountant(1.5, 1e-5).step(120).epsilon() == pytest.approx(57.03, abs=0.01)


def test_composition_of_gaussian_releases_is_exact():
    """k releases with multiplier z are one release with z / sqrt(k): the reported PLD
    value equals dp_accounting's PLD of the self-composed event and the analytic value."""
    for z, k in ((1.5, 3), (0.8, 7)):
        full = pld.PLDAccountant(value_discretization_interval=1e-3)
        full.compose(dp.releases_event(z, k))
        reported = dp.epsilon_for(z, k, 1e-5)
        assert reported == pytest.approx(full.get_epsilon(1e-5), abs=1e-3)
        assert reported == pytest.approx(dp.analytic_gaussian_epsilon(z / math.sqrt(k), 1e-5), abs=1e-3)
    event = dp.releases_event(1.5, 4)
    assert event == dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(1.5), 4)
    assert dp.epsilon_for(1.5, 0, 1e-5) == 0.0


def test_single_gaussian_release_is_exact():
    exact = dp.analytic_gaussian_epsilon(1.0, 1e-5)
    assert exact == pytest.approx(4.38, abs=0.005)
    assert dp.analytic_gaussian_delta(1.0, exact) == pytest.approx(1e-5, rel=1e-6)
    assert dp.epsilon_for(1.0, 1, 1e-5) == pytest.approx(exact, abs=0.001)
    assert dp.epsilon_for(1.0, 1, 1e-5, method="rdp") > exact


def test_calibrated_sigma_meets_the_target_tightly():
    z = dp.calibrate_sigma(8.0, 1e-5, 20, method="rdp", tolerance=1e-2)
    assert dp.epsilon_for(z, 20, 1e-5, method="rdp") <= 8.0
    assert dp.epsilon_for(z / 1.02, 20, 1e-5, method="rdp") > 8.0
    z_pld = dp.calibrate_sigma(8.0, 1e-5, 20, tolerance=1e-2)
    assert dp.epsilon_for(z_pld, 20, 1e-5) <= 8.0
    assert z_pld < z  # PLD is tighter than the RDP bound, so less noise suffices


def test_noise_is_gaussian_and_reproducible_only_with_a_seed():
    a = dp.gaussian_noise(50_000, 2.0, seed=11)
    assert np.array_equal(a, dp.gaussian_noise(50_000, 2.0, seed=11))
    assert not np.array_equal(dp.gaussian_noise(50, 2.0), dp.gaussian_noise(50, 2.0))
    assert stats.kstest(a / 2.0, "norm").pvalue > 1e-5


def test_clip_rows():
    x = np.array([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0]])
    clipped = dp.clip_rows(x, 1.0)
    assert np.allclose(np.linalg.norm(clipped, axis=1), [1.0, 0.5, 0.0])
    assert np.array_equal(clipped[1], x[1])
    with pytest.raises(InputError, match="clip_norm"):
        dp.clip_rows(x, -1.0)


def _release_vector(rows, labels, clip, classes=3):
    """f(D) = (S_k, C n_k)_k of the module docstring, flattened."""
    sums = np.zeros((classes, rows.shape[1]))
    np.add.at(sums, labels, rows)
    return np.concatenate([sums, clip * np.bincount(labels, minlength=classes)[:, None]], axis=1).ravel()


def test_class_sum_sensitivity_holds_and_is_attained():
    clip = 1.5
    assert dp.class_sum_sensitivity(clip) == pytest.approx(math.sqrt(2) * clip)
    assert dp.class_sum_sensitivity(clip, relation="replace") == pytest.approx(2 * clip)
    rng = np.random.default_rng(0)
    worst = {"add_remove": 0.0, "replace": 0.0}
    for _ in range(300):
        n = int(rng.integers(1, 8))
        rows = dp.clip_rows(rng.normal(size=(n, 4)) * 3, clip)
        labels = rng.integers(0, 3, size=n)
        base = _release_vector(rows, labels, clip)
        new_row = dp.clip_rows(rng.normal(size=(1, 4)) * 3, clip)
        new_label = rng.integers(0, 3, size=1)
        neighbours = {
            "add_remove": [_release_vector(rows[1:], labels[1:], clip),
                           _release_vector(np.vstack([rows, new_row]), np.concatenate([labels, new_label]), clip)],
            "replace": [_release_vector(np.vstack([rows[1:], new_row]), np.concatenate([labels[1:], new_label]), clip)],
        }
        for relation, vectors in neighbours.items():
            for vector in vectors:
                gap = np.linalg.norm(base - vector)
                assert gap <= dp.class_sum_sensitivity(clip, relation=relation) + 1e-12
                worst[relation] = max(worst[relation], gap)
    assert worst["add_remove"] > 0.999 * math.sqrt(2) * clip  # attained: ||h|| = C
    edge = np.array([[clip, 0, 0, 0]])
    opposite = _release_vector(-edge, np.array([0]), clip) - _release_vector(edge, np.array([0]), clip)
    assert np.linalg.norm(opposite) == pytest.approx(dp.class_sum_sensitivity(clip, relation="replace"))
    with pytest.raises(InputError, match="relation"):
        dp.class_sum_sensitivity(clip, relation="swap")


def test_noised_class_sums_noise_depends_on_no_count():
    sums = np.array([[1.0, 0.0], [0.0, 0.0], [0.5, 0.5]])
    counts = np.array([1, 0, 3])
    noised, noised_counts, sigma = dp.noised_class_sums(sums, counts, clip_norm=1.0, noise_multiplier=2.0, seed=5)
    noise = dp.gaussian_noise((3, 3), sigma, seed=5)
    assert sigma == pytest.approx(2.0 * math.sqrt(2))
    np.testing.assert_array_equal(noised, sums + noise[:, :2])
    np.testing.assert_array_equal(noised_counts, counts + noise[:, 2])
    _, _, other = dp.noised_class_sums(sums * 0, np.array([7, 9, 0]), clip_norm=1.0, noise_multiplier=2.0, seed=5)
    assert other == sigma
    with pytest.raises(InputError, match="counts"):
        dp.noised_class_sums(sums, np.array([1, -1, 3]), clip_norm=1.0, noise_multiplier=2.0)


def test_mechanism_and_accountant_reject_bad_parameters():
    with pytest.raises(InputError, match="sensitivity"):
        dp.gaussian_mechanism(np.zeros(3), sensitivity=0.0, noise_multiplier=1.0)
    with pytest.raises(InputError, match="delta"):
        dp.epsilon_for(1.0, 10, 2.0)
    with pytest.raises(InputError, match="method"):
        dp.epsilon_for(1.0, 10, 1e-5, method="magic")
    with pytest.raises(InputError, match="releases"):
        dp.epsilon_for(1.0, -1, 1e-5)
    with pytest.raises(InputError, match="releases"):
        dp.PrivacyAccountant(1.0).step(1.5)
    noisy = dp.gaussian_mechanism(np.zeros(4), sensitivity=0.5, noise_multiplier=2.0, seed=3)
    assert np.array_equal(noisy, dp.gaussian_noise(4, 1.0, seed=3))
