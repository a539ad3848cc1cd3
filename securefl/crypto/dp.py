"""Gaussian release of per-class sums and counts, clipping, and (epsilon, delta) accounting.

**Privacy unit and adjacency.**  One labeled record (an embedding h and its class y) of one
client.  Neighbouring datasets differ by adding or removing one record (``"add_remove"``,
the default) or by replacing one (``"replace"``).  The embedding network that maps inputs
to h is an *input* of the mechanism, fixed before the release (a caller must use one that
does not depend on the client's records beyond what is released anyway; ProtoFSSL uses the
aggregated global model).

**Mechanism (:func:`noised_class_sums`).**  For every class k of K (all of them, whatever
the counts) with S_k = sum_{y_i = k} clip_C(h_i) in R^d and n_k = #{i : y_i = k}, the client
releases

    S~_k = S_k + N(0, sigma^2 I_d),        n~_k = n_k + N(0, sigma^2) / C,

i.e. the vector f(D) = (S_k, C n_k)_k in R^(K (d + 1)) plus N(0, sigma^2 I), with
sigma = z Delta for the noise multiplier z.

**Sensitivity (:func:`class_sum_sensitivity`).**  Adding or removing a record (h, k) changes
only block k, by (clip_C(h), C), of norm <= sqrt(C^2 + C^2):

    Delta_add/remove = sqrt(2) C.

Replacing (h, k) by (h', k'): for k = k' the change is (clip h - clip h', 0), norm <= 2 C; for
k != k' block k loses (clip h, C) and block k' gains (clip h', C), norm <= sqrt(2 C^2 + 2 C^2):

    Delta_replace = 2 C.

Both bounds are attained (a record with ||h|| >= C; for replace, h' = -h).  sigma = z Delta
depends on z, C and the relation only, all public configuration: the noise scale carries no
information about the data, and neither does anything the receiver computes from the
release (post-processing): prototypes c~_k = S~_k / n~_k, the choice to withhold classes with
n~_k below a public threshold, sums over clients.

Why the count is noised with weight C: a receiver needs a normaliser, and a per-class count
is private (under add/remove it *is* what changes).  Noise that scales with it leaks it.
The previous mechanism released the mean with sigma_k = z 2 C / n_k (the replace-one
sensitivity of a mean of n_k rows) next to n_k and sigma_k themselves; under add/remove the
noise scale alone reveals the record: C = 1, z = 1, d = 512, n_k = 5 vs 4 gives
sigma = 0.4 vs 0.5, ||noise||^2 ~ 82 +- 5 vs 128 +- 8, and a norm threshold separates one
release with true-positive rate ~1 at false-positive rate 0.01, where the mechanism's
(epsilon, delta) profile allows 0.092 (tests).  Weight C is the largest weight whose count
costs nothing under replace-one (sqrt(2) sqrt(C^2 + beta^2) <= 2 C iff beta <= C); under
add/remove it costs sqrt(2) in sigma against the sum alone (Delta = C), and buys a count
with standard deviation sqrt(2) z records, which per-class counts of a few labels need.

**Accounting (:func:`epsilon_for`, :class:`PrivacyAccountant`).**  One release with
multiplier z is dominated by the pair N(0, 1) vs N(1/z, 1).  k releases of one client, each
with multiplier z (adaptively chosen inputs allowed), compose to N(0, I_k) vs
N((1/z) 1_k, I_k), which is exactly the single pair N(0, 1) vs N(sqrt(k)/z, 1): mu-GDP with
mu = sqrt(k) / z (Dong, Roth & Su 2019, Cor. 3.3).  Its exact privacy profile is the
analytic Gaussian mechanism of Balle & Wang (2018) with multiplier z / sqrt(k):

    delta(eps) = Phi(1/(2 z') - eps z') - e^eps Phi(-1/(2 z') - eps z'),   z' = z / sqrt(k).

``dp_accounting`` (Google's maintained library) is the accountant: its privacy-loss
distribution (PLD) accountant on ``GaussianDpEvent(z / sqrt(k))`` is what we report (equal
to PLD on ``SelfComposedDpEvent(GaussianDpEvent(z), k)``, tested; the reduction keeps the
cost from growing with k); its discretisation (1e-3 by default) rounds the loss up, so the
value is an upper bound, within 1e-6 of the analytic one for these events.  The Renyi DP
accountant is a fast, looser upper bound.

No amplification by sampling: the server chooses each round's participants and sees who
they are, and the unit is a record of a client, so the adversary knows in which rounds the
record's holder released.  Poisson-subsampling amplification needs participation that is
random *and hidden*; neither holds, so epsilon is composed over the k rounds the client
actually released in, never over a sampling rate.

Regression values (tests): one release, z = 1, delta = 1e-5: eps = 4.377.  The previous
docstring's example (z = 1.5, participation q = 0.04 over T = 2,250 rounds, delta = 1e-5)
reported PLD eps = 6.77 (RDP 7.33) by amplifying with q; a client that joins its expected
k = qT = 90 rounds has eps = 46.21 (exact = PLD; RDP bound 48.80), and eps = 57.03 at
k = 120 (the 99.9 % quantile of Binomial(2250, 0.04)).

**Noise.**  Gaussian samples come from AES-CTR uniforms (:mod:`securefl.crypto.prg`),
seeded from the OS CSPRNG (``seed=None``), or from an explicit ``seed`` so a
``--secure plaintext`` run reproduces a ``--secure real`` run exactly; never from numpy's
or Python's Mersenne Twister.  Each uniform has 53 random bits and is mapped through the
inverse normal CDF.  Known limitation: like every float64 sampler, this is not hardened
against the floating-point attacks of Mironov (2012).

Who learns what: anyone receiving a release learns it (S~, n~ for every class, and the
public sigma); given the embedding network, (epsilon, delta) bounds what it, and everything
computed from it, reveals about one labeled record.
"""

from __future__ import annotations

import functools
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
METHODS = ("pld", "rdp")


def clip_rows(x: np.ndarray, clip_norm: float) -> np.ndarray:
    """Scale each row of ``x`` (or the vector ``x``) to L2 norm at most ``clip_norm``."""
    x = np.asarray(x, dtype=np.float64)
    _check_positive("clip_norm", clip_norm)
    if not np.all(np.isfinite(x)):
        raise InputError("x", x, "contains NaN or infinity")
    rows = x.reshape(1, -1) if x.ndim == 1 else x
    if rows.ndim != 2:
        raise InputError("x", x, "must be 1-D or 2-D")
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    factors = np.minimum(1.0, clip_norm / np.maximum(norms, np.finfo(np.float64).tiny))
    return (rows * factors).reshape(x.shape)


def class_sum_sensitivity(clip_norm: float, *, relation: str = "add_remove") -> float:
    """L2 sensitivity of the per-class (sum, C * count) vector: sqrt(2) C under add/remove-one,
    2 C under replace-one (module docstring)."""
    if relation not in RELATIONS:
        raise InputError("relation", relation, f"must be one of {RELATIONS}")
    _check_positive("clip_norm", clip_norm)
    return math.sqrt(2.0) * clip_norm if relation == "add_remove" else 2.0 * clip_norm


def noised_class_sums(
    sums: np.ndarray,
    counts: np.ndarray,
    *,
    clip_norm: float,
    noise_multiplier: float,
    relation: str = "add_remove",
    seed: int | bytes | None = None,
) -> tuple[np.ndarray, np.ndarray, float]:
    """The Gaussian release of the module docstring: ``(S~, n~, sigma)``.

    ``sums`` is ``(K, d)``, row k the sum of the class-k rows clipped to ``clip_norm``;
    ``counts`` ``(K,)`` the number of those rows.  Every class is released, whatever its
    count; ``sigma = noise_multiplier * class_sum_sensitivity(clip_norm, relation)`` is
    the same for every class and every dataset.
    """
    sums = np.asarray(sums, dtype=np.float64)
    counts = np.asarray(counts)
    if sums.ndim != 2 or not np.all(np.isfinite(sums)):
        raise InputError("sums", sums, "must be a finite (K, d) array")
    if counts.shape != (sums.shape[0],) or counts.dtype.kind not in "iu" or (counts < 0).any():
        raise InputError("counts", counts, f"must be {sums.shape[0]} non-negative integers")
    _check_positive("noise_multiplier", noise_multiplier)
    sigma = noise_multiplier * class_sum_sensitivity(clip_norm, relation=relation)
    norms = np.linalg.norm(sums, axis=1)
    if (norms > counts * clip_norm * (1 + 1e-9) + 1e-12).any():
        raise InputError("sums", sums, f"a class sum exceeds count * clip_norm = count * {clip_norm}: rows not clipped")
    noise = gaussian_noise((sums.shape[0], sums.shape[1] + 1), sigma, seed=seed)
    return sums + noise[:, :-1], counts + noise[:, -1] / clip_norm, sigma


def _seed_bytes(seed: int | bytes | None) -> bytes:
    if seed is None:
        return prg.random_seed()
    raw = seed if isinstance(seed, bytes) else str(int(seed)).encode()
    return hashlib.sha256(b"securefl-dp-noise" + raw).digest()[: prg.SEED_BYTES]


def gaussian_noise(shape: int | tuple[int, ...], sigma: float, *, seed: int | bytes | None = None) -> np.ndarray:
    """N(0, sigma^2) samples of ``shape`` from an AES-CTR stream.

    ``seed=None`` seeds the stream from the OS CSPRNG (a deployment); an explicit ``seed``
    (int or bytes) makes it reproducible (tests, ``--secure both``).
    """
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
    if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0):
        raise InputError(name, value, "must be a positive finite number")


def _check_delta(delta: float) -> None:
    if not (isinstance(delta, float) and 0 < delta < 1):
        raise InputError("delta", delta, "must be a float in (0, 1)")


def _check_releases(releases: int) -> None:
    if not isinstance(releases, (int, np.integer)) or isinstance(releases, bool) or releases < 0:
        raise InputError("releases", releases, "must be a non-negative integer")


def releases_event(noise_multiplier: float, releases: int) -> dp_accounting.DpEvent:
    """The ``dp_accounting`` event of ``releases`` Gaussian releases with multiplier z, each
    composed in full (no sampling): ``SelfComposedDpEvent(GaussianDpEvent(z), k)``."""
    _check_positive("noise_multiplier", noise_multiplier)
    _check_releases(releases)
    return dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(float(noise_multiplier)), int(releases))


@functools.lru_cache(maxsize=4096)
def _epsilon(noise_multiplier: float, releases: int, delta: float, method: str, interval: float) -> float:
    if method == "rdp":
        accountant = rdp.RdpAccountant()
        accountant.compose(releases_event(noise_multiplier, releases))
    else:
        accountant = pld.PLDAccountant(value_discretization_interval=interval)
        # k Gaussian releases with multiplier z are exactly one with z / sqrt(k) (docstring)
        accountant.compose(dp_accounting.GaussianDpEvent(noise_multiplier / math.sqrt(releases)))
    return float(accountant.get_epsilon(delta))


def epsilon_for(
    noise_multiplier: float,
    releases: int,
    delta: float,
    *,
    method: str = "pld",
    value_discretization_interval: float = 1e-3,
) -> float:
    """eps at ``delta`` of ``releases`` Gaussian releases with multiplier z, composed (no
    amplification): ``"pld"`` (tight, reported) or ``"rdp"`` (upper bound).  Cached."""
    _check_positive("noise_multiplier", noise_multiplier)
    _check_releases(releases)
    _check_delta(delta)
    if method not in METHODS:
        raise InputError("method", method, f"must be one of {METHODS}")
    _check_positive("value_discretization_interval", value_discretization_interval)
    if releases == 0:
        return 0.0
    return _epsilon(float(noise_multiplier), int(releases), float(delta), method, float(value_discretization_interval))


@dataclass
class PrivacyAccountant:
    """(eps, delta) of one party's Gaussian releases, all with multiplier z = sigma / Delta.

    Call :meth:`step` once per release the party makes (in ProtoFSSL: once per round the
    client joins, never per round of the run); :meth:`epsilon` composes them, with no
    amplification by sampling (module docstring).
    """

    noise_multiplier: float
    delta: float = 1e-5
    releases: int = 0

    def step(self, count: int = 1) -> "PrivacyAccountant":
        """Record ``count`` more releases."""
        _check_releases(count)
        self.releases += int(count)
        return self

    def epsilon(self, method: str = "pld", *, value_discretization_interval: float = 1e-3) -> float:
        """eps at ``delta``: ``"pld"`` (tight, reported) or ``"rdp"`` (upper bound)."""
        return epsilon_for(
            self.noise_multiplier,
            self.releases,
            self.delta,
            method=method,
            value_discretization_interval=value_discretization_interval,
        )


def calibrate_sigma(
    target_epsilon: float,
    delta: float,
    releases: int,
    *,
    method: str = "pld",
    tolerance: float = 1e-3,
) -> float:
    """Smallest noise multiplier z (to relative ``tolerance``) whose eps after ``releases``
    releases is <= ``target_epsilon``.

    Bisection in z with a coarse (pessimistic) PLD grid, then a check at the reporting
    grid (1e-3); the returned z is on the safe side.  Multiply by the sensitivity
    (:func:`class_sum_sensitivity`) to get sigma.
    """
    _check_positive("target_epsilon", target_epsilon)
    _check_positive("tolerance", tolerance)
    _check_releases(releases)
    if releases == 0:
        raise InputError("releases", releases, "must be positive to calibrate noise")

    def eps(z: float, interval: float = 1e-2) -> float:
        return epsilon_for(z, releases, delta, method=method, value_discretization_interval=interval)

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
    while eps(high, 1e-3) > target_epsilon:
        high *= 1.0 + tolerance
    return high
