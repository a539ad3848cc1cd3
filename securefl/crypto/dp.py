"""Gaussian noising of shared prototypes, clipping, and (epsilon, delta) accounting.

**Mechanism.** A client releases M(D) = f(D) + N(0, sigma^2 I) where f has L2
sensitivity Delta = max ||f(D) - f(D')|| over neighbouring datasets; sigma = z Delta
with noise multiplier z.

**Sensitivity of a ProtoFSSL prototype.** The prototype of class c is the mean of the
client's n_c embeddings of that class, each first clipped to L2 norm C
(:func:`clip_rows`): p_c = (1/n_c) sum_i clip(h_i).  We use the **add/remove-one**
neighbouring relation (the one the accountant below uses for Poisson subsampling).
Removing a record v from the n = n_c records with sum S changes p_c by
(S - n v) / (n (n - 1)) = (S_rest - (n - 1) v) / (n (n - 1)) with ||S_rest|| <= (n-1) C, so
by at most 2 C / n; adding one (to n records) changes it by (n v - S) / (n (n + 1)),
at most 2 C / (n + 1).  Hence

    Delta_add/remove = 2 C / n_c        (n_c >= 2, so the class stays present;
                                         which classes are shared and n_c are public)

and the same value under replace-one ((v' - v) / n_c).  The bound is tight: n_c - 1
rows equal to C e_1 and one row -C e_1 attain it.  A per-class *sum* (not mean) has
Delta = C (add/remove) or 2 C (replace).
:func:`prototype_sensitivity` returns these.

**Accounting.** Over T rounds in which a client takes part with probability q (Poisson
participation, kept secret from the observer), the releases compose as T
Poisson-subsampled Gaussian mechanisms with multiplier z.  ``dp_accounting`` (Google's
maintained library) gives the epsilon for a target delta: the privacy-loss
distribution (PLD) accountant is tight and is what we report; the Renyi DP accountant
is a fast upper bound.  A single Gaussian release is accounted exactly with the
analytic Gaussian mechanism of Balle & Wang (2018):

    delta(eps) = Phi(1/(2z) - eps z) - e^eps Phi(-1/(2z) - eps z).

Regression values (tests): z = 1.5, q = 0.04, T = 2250, delta = 1e-5 gives RDP
eps ~ 7.33 and PLD eps ~ 6.77; z = 1, one release, delta = 1e-5 gives eps ~ 4.38.

**Noise.** Gaussian samples come from AES-CTR uniforms (:mod:`securefl.crypto.prg`),
seeded from the OS CSPRNG, or from an explicit ``seed`` so a ``--secure plaintext`` run
reproduces a ``--secure real`` run exactly; never from numpy's or Python's Mersenne
Twister.  Each uniform has 53 random bits and is mapped through the inverse normal
CDF.  Known limitation: like every float64 sampler, this is not hardened against the
floating-point attacks of Mironov (2012).

Who learns what: anyone receiving a noised prototype learns it; the (epsilon, delta)
bounds what it reveals about any single record.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import dp_accounting
import numpy as np
from dp_accounting import pld, rdp
from scipy.optimize import brentq
from scipy.special import log_ndtr, ndtri

from securefl.crypto import prg
from securefl.errors import InputError

RELATIONS = ("add_remove", "replace")


def clip_rows(x: np.ndarray, clip_norm: float) -> np.ndarray:
    """Scale each row of ``x`` (or the vector ``x``) to L2 norm at most ``clip_norm``."""
    x = np.asarray(x, dtype=np.float64)
    if not (isinstance(clip_norm, (int, float)) and math.isfinite(clip_norm) and clip_norm > 0):
        raise InputError("clip_norm", clip_norm, "must be a positive finite number")
    if not np.all(np.isfinite(x)):
        raise InputError("x", x, "contains NaN or infinity")
    rows = x.reshape(1, -1) if x.ndim == 1 else x
    if rows.ndim != 2:
        raise InputError("x", x, "must be 1-D or 2-D")
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    factors = np.minimum(1.0, clip_norm / np.maximum(norms, np.finfo(np.float64).tiny))
    return (rows * factors).reshape(x.shape)


def prototype_sensitivity(clip_norm: float, class_count: int, *, relation: str = "add_remove") -> float:
    """L2 sensitivity 2 C / n_c of a mean of ``class_count`` rows clipped to ``clip_norm``
    (add/remove-one needs n_c >= 2 so the class does not vanish; replace-one n_c >= 1)."""
    if relation not in RELATIONS:
        raise InputError("relation", relation, f"must be one of {RELATIONS}")
    if not (isinstance(clip_norm, (int, float)) and math.isfinite(clip_norm) and clip_norm > 0):
        raise InputError("clip_norm", clip_norm, "must be a positive finite number")
    minimum = 2 if relation == "add_remove" else 1
    if not isinstance(class_count, (int, np.integer)) or class_count < minimum:
        raise InputError("class_count", class_count, f"must be an integer >= {minimum} for {relation}")
    return 2.0 * clip_norm / class_count


def _seed_bytes(seed: int | bytes | None) -> bytes:
    if seed is None:
        return prg.random_seed()
    raw = seed if isinstance(seed, bytes) else str(int(seed)).encode()
    return hashlib.sha256(b"securefl-dp-noise" + raw).digest()[: prg.SEED_BYTES]


def gaussian_noise(shape: int | tuple[int, ...], sigma: float, *, seed: int | bytes | None = None) -> np.ndarray:
    """N(0, sigma^2) samples of ``shape`` from an AES-CTR stream (CSPRNG seed unless ``seed``)."""
    if not (isinstance(sigma, (int, float)) and math.isfinite(sigma) and sigma >= 0):
        raise InputError("sigma", sigma, "must be a non-negative finite number")
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    count = int(np.prod(shape, dtype=np.int64))
    bits = prg.expand(_seed_bytes(seed), count, np.uint64) >> np.uint64(11)
    uniforms = (bits.astype(np.float64) + 0.5) * 2.0**-53
    return (sigma * ndtri(uniforms)).reshape(shape)


def gaussian_mechanism(
    value: np.ndarray, *, sensitivity: float, noise_multiplier: float, seed: int | bytes | None = None
) -> np.ndarray:
    """``value + N(0, (noise_multiplier * sensitivity)^2)`` elementwise."""
    if not (math.isfinite(sensitivity) and sensitivity > 0):
        raise InputError("sensitivity", sensitivity, "must be a positive finite number")
    if not (math.isfinite(noise_multiplier) and noise_multiplier >= 0):
        raise InputError("noise_multiplier", noise_multiplier, "must be a non-negative finite number")
    value = np.asarray(value, dtype=np.float64)
    return value + gaussian_noise(value.shape, noise_multiplier * sensitivity, seed=seed)


def analytic_gaussian_delta(noise_multiplier: float, epsilon: float) -> float:
    """Exact delta(eps) of one Gaussian release with multiplier z (Balle & Wang 2018)."""
    z = noise_multiplier
    first = math.exp(log_ndtr(1 / (2 * z) - epsilon * z))
    second = math.exp(epsilon + log_ndtr(-1 / (2 * z) - epsilon * z))
    return max(0.0, first - second)


def analytic_gaussian_epsilon(noise_multiplier: float, delta: float) -> float:
    """Smallest eps with delta(eps) <= ``delta`` for one Gaussian release (exact)."""
    _check_positive("noise_multiplier", noise_multiplier)
    _check_delta(delta)
    if analytic_gaussian_delta(noise_multiplier, 0.0) <= delta:
        return 0.0
    high = 1.0
    while analytic_gaussian_delta(noise_multiplier, high) > delta:
        high *= 2.0
    return brentq(lambda e: analytic_gaussian_delta(noise_multiplier, e) - delta, 0.0, high, xtol=1e-12)


def _check_positive(name: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise InputError(name, value, "must be a positive finite number")


def _check_delta(delta: float) -> None:
    if not (isinstance(delta, float) and 0 < delta < 1):
        raise InputError("delta", delta, "must be a float in (0, 1)")


@dataclass
class PrivacyAccountant:
    """(eps, delta) of ``steps`` Poisson-subsampled Gaussian releases.

    Parameters: ``noise_multiplier`` z = sigma / sensitivity, ``sampling_rate`` q (the
    participation rate), ``delta``.  Call :meth:`step` once per round a client may
    release; :meth:`epsilon` evaluates the composition so far.
    """

    noise_multiplier: float
    sampling_rate: float
    delta: float = 1e-5
    steps: int = 0

    def step(self, count: int = 1) -> "PrivacyAccountant":
        """Record ``count`` more rounds."""
        if not isinstance(count, (int, np.integer)) or count < 0:
            raise InputError("count", count, "must be a non-negative integer")
        self.steps += int(count)
        return self

    def epsilon(self, method: str = "pld", *, value_discretization_interval: float = 1e-4) -> float:
        """eps at ``delta``: ``"pld"`` (tight, reported) or ``"rdp"`` (fast upper bound)."""
        return epsilon_for(
            self.noise_multiplier,
            self.sampling_rate,
            self.steps,
            self.delta,
            method=method,
            value_discretization_interval=value_discretization_interval,
        )


def _event(noise_multiplier: float, sampling_rate: float, steps: int) -> dp_accounting.DpEvent:
    release = dp_accounting.GaussianDpEvent(noise_multiplier)
    if sampling_rate < 1.0:
        release = dp_accounting.PoissonSampledDpEvent(sampling_rate, release)
    return dp_accounting.SelfComposedDpEvent(release, steps)


def epsilon_for(
    noise_multiplier: float,
    sampling_rate: float,
    steps: int,
    delta: float,
    *,
    method: str = "pld",
    value_discretization_interval: float = 1e-4,
) -> float:
    """eps of ``steps`` Poisson-subsampled Gaussian releases with multiplier z at ``delta``."""
    _check_positive("noise_multiplier", noise_multiplier)
    if not (isinstance(sampling_rate, (int, float)) and 0 < sampling_rate <= 1):
        raise InputError("sampling_rate", sampling_rate, "must be in (0, 1]")
    if not isinstance(steps, (int, np.integer)) or steps < 0:
        raise InputError("steps", steps, "must be a non-negative integer")
    _check_delta(delta)
    if steps == 0:
        return 0.0
    if method == "rdp":
        accountant = rdp.RdpAccountant()
    elif method == "pld":
        accountant = pld.PLDAccountant(value_discretization_interval=value_discretization_interval)
    else:
        raise InputError("method", method, "must be 'pld' or 'rdp'")
    accountant.compose(_event(float(noise_multiplier), float(sampling_rate), int(steps)))
    return float(accountant.get_epsilon(delta))


def calibrate_sigma(
    target_epsilon: float,
    delta: float,
    sampling_rate: float,
    steps: int,
    *,
    method: str = "pld",
    tolerance: float = 1e-3,
) -> float:
    """Smallest noise multiplier z (to relative ``tolerance``) whose eps <= target.

    Bisection in z with a coarse (pessimistic) PLD grid, then a check at the reporting
    grid (1e-4); the returned z is on the safe side (its eps does not exceed the
    target).  Multiply by the sensitivity to get sigma.
    """
    _check_positive("target_epsilon", target_epsilon)
    _check_positive("tolerance", tolerance)

    def eps(z: float, interval: float = 1e-3) -> float:
        return epsilon_for(z, sampling_rate, steps, delta, method=method, value_discretization_interval=interval)

    low, high = 0.5, 1.0
    while eps(high) > target_epsilon:
        low, high = high, high * 2.0
        if high > 1e6:
            raise InputError("target_epsilon", target_epsilon, "unreachable with a noise multiplier <= 1e6")
    while eps(low) <= target_epsilon:
        high, low = low, low / 2.0
        if low < 1e-3:
            return high
    while high / low > 1.0 + tolerance:
        middle = math.sqrt(low * high)
        if eps(middle) <= target_epsilon:
            high = middle
        else:
            low = middle
    while eps(high, 1e-4) > target_epsilon:
        high *= 1.0 + tolerance
    return high
