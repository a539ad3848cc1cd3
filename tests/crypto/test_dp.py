"""Gaussian mechanism, clipping, prototype sensitivity and privacy accounting."""

import numpy as np
import pytest
from scipy import stats

from securefl.crypto import dp
from securefl.errors import InputError


def test_accountant_regression_values():
    accountant = dp.PrivacyAccountant(noise_multiplier=1.5, sampling_rate=0.04, delta=1e-5).step(2250)
    assert accountant.epsilon("rdp") == pytest.approx(7.33, abs=0.01)
    assert accountant.epsilon("pld") == pytest.approx(6.77, abs=0.01)


def test_single_gaussian_release_is_exact():
    exact = dp.analytic_gaussian_epsilon(1.0, 1e-5)
    assert exact == pytest.approx(4.38, abs=0.005)
    assert dp.analytic_gaussian_delta(1.0, exact) == pytest.approx(1e-5, rel=1e-6)
    assert dp.epsilon_for(1.0, 1.0, 1, 1e-5) == pytest.approx(exact, abs=0.01)
    assert dp.epsilon_for(1.0, 1.0, 1, 1e-5, method="rdp") > exact


def test_calibrated_sigma_meets_the_target_tightly():
    z = dp.calibrate_sigma(2.0, 1e-5, 0.1, 20, method="rdp", tolerance=1e-2)
    assert dp.epsilon_for(z, 0.1, 20, 1e-5, method="rdp") <= 2.0
    assert dp.epsilon_for(z / 1.02, 0.1, 20, 1e-5, method="rdp") > 2.0
    z_pld = dp.calibrate_sigma(2.0, 1e-5, 0.1, 20, tolerance=1e-2)
    assert dp.epsilon_for(z_pld, 0.1, 20, 1e-5) <= 2.0
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


def test_prototype_sensitivity_bound_is_attained():
    clip, n = 1.5, 8
    rows = np.zeros((n, 3))
    rows[:-1, 0], rows[-1, 0] = clip, -clip
    removed = np.linalg.norm(rows.mean(axis=0) - rows[:-1].mean(axis=0))
    assert removed == pytest.approx(dp.prototype_sensitivity(clip, n))
    rng = np.random.default_rng(0)
    for _ in range(200):
        data = dp.clip_rows(rng.normal(size=(n, 3)) * 3, clip)
        for neighbour in (data[1:], np.vstack([data, dp.clip_rows(rng.normal(size=3) * 3, clip)])):
            gap = np.linalg.norm(data.mean(axis=0) - neighbour.mean(axis=0))
            assert gap <= dp.prototype_sensitivity(clip, n) + 1e-12
    with pytest.raises(InputError, match="class_count"):
        dp.prototype_sensitivity(clip, 1)


def test_mechanism_and_accountant_reject_bad_parameters():
    with pytest.raises(InputError, match="sensitivity"):
        dp.gaussian_mechanism(np.zeros(3), sensitivity=0.0, noise_multiplier=1.0)
    with pytest.raises(InputError, match="delta"):
        dp.epsilon_for(1.0, 0.1, 10, 2.0)
    with pytest.raises(InputError, match="method"):
        dp.epsilon_for(1.0, 0.1, 10, 1e-5, method="magic")
    noisy = dp.gaussian_mechanism(np.zeros(4), sensitivity=0.5, noise_multiplier=2.0, seed=3)
    assert np.array_equal(noisy, dp.gaussian_noise(4, 1.0, seed=3))
