"""ProtoFSSL prototype sharing (Kim et al., §4.2-4.4, §7.1, Appendix B.4), numpy only.

**Prototypes (§4.4).**  After local training, client i embeds *all* its labeled data and
releases, per class k, the mean c_{i,k} = (1/n_k) sum_{x in D^L_{i,k}} clip(f(x)), where
clip scales a row to L2 norm at most ``clip_norm`` (no clipping if ``None``).  Classes
with fewer than ``min_count`` labeled samples are withheld (§7.1: a prototype of very few
samples is unreliable and the most revealing); a withheld class has ``mask`` False and a
zero vector.

**Noise (§7.1, B.4).**  Two ways to perturb before sending:

* ``sigma=s``: add N(0, s^2) to every coordinate (exactly the experiment of Table 9;
  no formal guarantee unless embeddings are clipped).
* ``noise_multiplier=z`` with ``clip_norm=C``: the Gaussian mechanism with
  sigma_k = z * Delta_k, Delta_k = 2 C / (n_k - 1) under add/remove-one
  (:func:`securefl.crypto.dp.prototype_sensitivity`; the counts n_k are treated as
  public).  A record influences only its own class's prototype, so one round's release
  of all class prototypes is one Gaussian mechanism with multiplier z (parallel
  composition over classes); over rounds, account with
  ``securefl.crypto.dp.PrivacyAccountant(z, q).step(rounds)`` (q = participation rate),
  see :func:`privacy_spent`.  Classes with n_k < 2 are always withheld in this mode
  (their sensitivity is unbounded).

**Helpers (Algorithm 1, §4.1).**  The server stores the prototypes of round r's clients
(:class:`PrototypeStore`) and at round r + 1 picks ``num_helpers`` of them uniformly
without replacement (:meth:`PrototypeStore.select_helpers`); their prototype sets go to
every active client.

**Pseudo-labels (§4.2, Eq. 5-7).**  For an unlabeled embedding u and helper j,
p_{j,k}(u) = softmax_k(-d(u, c_{j,k})) over the classes helper j shares (a withheld class
gets probability 0), averaged over helpers, then sharpened with temperature T:
pbar_k = p_k^(1/T) / sum_k' p_k'^(1/T) (:func:`pseudo_labels`).

**Global prototypes (optional, B.1 and §7.1 "multi-party aggregation").**
:func:`aggregate_prototypes` securely sums, per class, n_k c_k and n_k (``weighting=
"count"``) or c_k and the share indicator (``"uniform"``) with
:func:`securefl.crypto.secure_sum`, then divides.

**Who learns what.**  Without aggregation: the server and the helpers' recipients learn
each shared (noised) prototype, which class it belongs to, and which classes a client
withholds (hence that it has fewer than ``min_count`` labels of them); with
``noise_multiplier`` the (epsilon, delta) of :func:`privacy_spent` bounds what a
prototype reveals about one labeled sample.  With :func:`aggregate_prototypes` the server
learns only the per-class totals over the surviving clients (Bonawitz et al. 2017
guarantee of the secure sum), i.e. the global prototypes and total counts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.special import logsumexp

from securefl.crypto import dp
from securefl.errors import InputError

DISTANCES = ("euclidean", "squared")
WEIGHTINGS = ("count", "uniform")


@dataclass(frozen=True)
class Prototypes:
    """One client's shared prototypes.

    ``vectors``: ``(C, d)`` float64, zero rows where withheld; ``mask``: ``(C,)`` bool, True
    where shared; ``counts``: ``(C,)`` int64 labeled samples per class; ``sigma``: ``(C,)``
    standard deviation of the noise added per class (0 where none); ``clip_norm``: the L2
    bound the embeddings were clipped to (``None``: not clipped).
    """

    vectors: np.ndarray
    mask: np.ndarray
    counts: np.ndarray
    sigma: np.ndarray
    clip_norm: float | None = None

    @property
    def num_classes(self) -> int:
        return self.vectors.shape[0]

    def payload_bytes(self) -> int:
        """Bytes a client sends for these prototypes (shared vectors + class ids)."""
        return int(self.mask.sum()) * (self.vectors.shape[1] * 8 + 8)


def class_prototypes(
    embeddings: np.ndarray,
    labels: np.ndarray,
    *,
    num_classes: int,
    min_count: int = 1,
    clip_norm: float | None = None,
) -> Prototypes:
    """Per-class means of (clipped) labeled embeddings; classes below ``min_count`` withheld.

    ``labels`` uses ``-1`` for unlabeled rows (ignored).
    """
    embeddings = np.asarray(embeddings)
    if embeddings.ndim != 2 or embeddings.dtype.kind not in "fiu":
        raise InputError("embeddings", embeddings, "must be a real (n, d) array")
    if not np.all(np.isfinite(embeddings)):
        raise InputError("embeddings", embeddings, "contains NaN or infinity")
    if not isinstance(num_classes, (int, np.integer)) or num_classes < 1:
        raise InputError("num_classes", num_classes, "must be a positive integer")
    if not isinstance(min_count, (int, np.integer)) or min_count < 1:
        raise InputError("min_count", min_count, "must be a positive integer")
    labels = np.asarray(labels)
    if labels.shape != (embeddings.shape[0],) or (labels.size and labels.dtype.kind not in "iu"):
        raise InputError(
            "labels", labels, f"must be an integer array of length {embeddings.shape[0]}"
        )
    if labels.size and (labels.min() < -1 or labels.max() >= num_classes):
        raise InputError("labels", labels, f"values must be -1 or in [0, {num_classes})")
    rows = embeddings.astype(np.float64)
    if clip_norm is not None:
        rows = dp.clip_rows(rows, clip_norm)
    known = labels >= 0
    counts = np.bincount(labels[known], minlength=num_classes).astype(np.int64)
    sums = np.zeros((num_classes, rows.shape[1]))
    np.add.at(sums, labels[known], rows[known])
    mask = counts >= min_count
    vectors = np.zeros_like(sums)
    vectors[mask] = sums[mask] / counts[mask, None]
    return Prototypes(
        vectors=vectors, mask=mask, counts=counts, sigma=np.zeros(num_classes), clip_norm=clip_norm
    )


def add_noise(
    prototypes: Prototypes,
    *,
    sigma: float | None = None,
    noise_multiplier: float | None = None,
    clip_norm: float | None = None,
    relation: str = "add_remove",
    seed: int | bytes | None = None,
) -> Prototypes:
    """Gaussian noise on the shared prototypes: fixed ``sigma`` or DP ``noise_multiplier``.

    With ``noise_multiplier`` the prototypes must have been computed with clipping
    (``class_prototypes(..., clip_norm=C)``); ``clip_norm``, if given, must equal that C.
    Classes whose sensitivity is undefined (n_k < 2 under add/remove) are withheld.
    ``seed`` makes the noise reproducible (tests); ``None`` uses the CSPRNG.
    """
    if (sigma is None) == (noise_multiplier is None):
        raise InputError("sigma", sigma, "give exactly one of sigma or noise_multiplier")
    mask = prototypes.mask.copy()
    if sigma is not None:
        if not (isinstance(sigma, (int, float)) and np.isfinite(sigma) and sigma >= 0):
            raise InputError("sigma", sigma, "must be a non-negative finite number")
        per_class = np.where(mask, float(sigma), 0.0)
    else:
        if prototypes.clip_norm is None:
            raise InputError(
                "clip_norm",
                clip_norm,
                "noise_multiplier needs prototypes of clipped embeddings (clip bounds sensitivity)",
            )
        if clip_norm is not None and clip_norm != prototypes.clip_norm:
            raise InputError(
                "clip_norm",
                clip_norm,
                f"differs from the prototypes' clip_norm {prototypes.clip_norm}",
            )
        clip_norm = prototypes.clip_norm
        if not (
            isinstance(noise_multiplier, (int, float))
            and np.isfinite(noise_multiplier)
            and noise_multiplier > 0
        ):
            raise InputError(
                "noise_multiplier", noise_multiplier, "must be a positive finite number"
            )
        minimum = 2 if relation == "add_remove" else 1
        mask &= prototypes.counts >= minimum
        per_class = np.zeros(prototypes.num_classes)
        for k in np.flatnonzero(mask):
            sensitivity = dp.prototype_sensitivity(
                clip_norm, int(prototypes.counts[k]), relation=relation
            )
            per_class[k] = noise_multiplier * sensitivity
    noise = dp.gaussian_noise(prototypes.vectors.shape, 1.0, seed=seed) * per_class[:, None]
    vectors = np.where(mask[:, None], prototypes.vectors + noise, 0.0)
    return Prototypes(
        vectors=vectors,
        mask=mask,
        counts=prototypes.counts,
        sigma=per_class,
        clip_norm=prototypes.clip_norm,
    )


def share_prototypes(
    embeddings: np.ndarray,
    labels: np.ndarray,
    *,
    num_classes: int,
    min_count: int = 1,
    clip_norm: float | None = None,
    sigma: float | None = None,
    noise_multiplier: float | None = None,
    seed: int | bytes | None = None,
) -> Prototypes:
    """What a client sends at the end of a round (§4.4): prototypes, noised if asked."""
    prototypes = class_prototypes(
        embeddings, labels, num_classes=num_classes, min_count=min_count, clip_norm=clip_norm
    )
    if sigma is None and noise_multiplier is None:
        return prototypes
    return add_noise(
        prototypes, sigma=sigma, noise_multiplier=noise_multiplier, clip_norm=clip_norm, seed=seed
    )


def privacy_spent(
    noise_multiplier: float, *, sampling_rate: float, rounds: int, delta: float = 1e-5
) -> float:
    """epsilon after a client released noised prototypes in rounds it joined with rate q."""
    return dp.PrivacyAccountant(noise_multiplier, sampling_rate, delta).step(rounds).epsilon()


def pseudo_labels(
    embeddings: np.ndarray,
    helpers: Sequence[Prototypes],
    *,
    temperature: float = 0.5,
    distance: str = "euclidean",
) -> np.ndarray:
    """Soft pseudo-labels (Eq. 5-7): mean over helpers of softmax(-distance), sharpened.

    Returns ``(n, C)`` rows summing to 1.  A class no helper shares gets probability 0.
    """
    embeddings = np.asarray(embeddings, dtype=np.float64)
    if embeddings.ndim != 2:
        raise InputError("embeddings", embeddings, "must be an (n, d) array")
    if not helpers:
        raise InputError("helpers", helpers, "need at least one helper's prototypes")
    if distance not in DISTANCES:
        raise InputError("distance", distance, f"must be one of {DISTANCES}")
    if not (isinstance(temperature, (int, float)) and temperature > 0):
        raise InputError("temperature", temperature, "must be positive")
    classes = helpers[0].num_classes
    average = np.zeros((embeddings.shape[0], classes))
    used = 0
    for j, helper in enumerate(helpers):
        if helper.num_classes != classes or helper.vectors.shape[1] != embeddings.shape[1]:
            raise InputError(
                f"helpers[{j}]",
                helper.vectors,
                f"must hold ({classes}, {embeddings.shape[1]}) prototypes",
            )
        if not helper.mask.any():
            continue
        diff = embeddings[:, None, :] - helper.vectors[None, helper.mask, :]
        dist = np.einsum("nkd,nkd->nk", diff, diff)
        if distance == "euclidean":
            dist = np.sqrt(dist)
        logits = -dist
        probs = np.exp(logits - logsumexp(logits, axis=1, keepdims=True))
        average[:, helper.mask] += probs
        used += 1
    if used == 0:
        raise InputError("helpers", helpers, "no helper shares any class")
    average /= used
    logp = np.log(np.where(average > 0, average, 1.0)) / temperature
    logp = np.where(average > 0, logp, -np.inf)
    return np.exp(logp - logsumexp(logp, axis=1, keepdims=True))


@dataclass
class PrototypeStore:
    """Server state: the prototypes sent by the previous round's clients.

    :meth:`store` replaces the contents with this round's senders; :meth:`select_helpers`
    samples the next round's helpers H_r from them.
    """

    previous: dict[int, Prototypes] = field(default_factory=dict)

    def store(self, round_prototypes: Mapping[int, Prototypes]) -> None:
        """Keep the prototypes of the clients active in the round just finished."""
        self.previous = dict(round_prototypes)

    def select_helpers(
        self, num_helpers: int, *, rng: np.random.Generator, exclude: Sequence[int] = ()
    ) -> list[int]:
        """Up to ``num_helpers`` previous-round clients, uniformly without replacement."""
        if not isinstance(num_helpers, (int, np.integer)) or num_helpers < 0:
            raise InputError("num_helpers", num_helpers, "must be a non-negative integer")
        pool = sorted(set(self.previous) - set(exclude))
        take = min(int(num_helpers), len(pool))
        return sorted(int(c) for c in rng.choice(pool, size=take, replace=False)) if take else []

    def helper_prototypes(self, helpers: Sequence[int]) -> list[Prototypes]:
        """The stored prototype sets of ``helpers`` (what each active client receives)."""
        missing = [h for h in helpers if h not in self.previous]
        if missing:
            raise InputError(
                "helpers", list(helpers), f"clients {missing} sent no prototypes last round"
            )
        return [self.previous[h] for h in helpers]


@dataclass(frozen=True)
class GlobalPrototypes:
    """Securely aggregated prototypes: ``vectors`` (C, d), ``mask`` (C,), ``totals`` (C,)
    (summed counts or sharing clients), and the secure sum's costs and survivors."""

    vectors: np.ndarray
    mask: np.ndarray
    totals: np.ndarray
    survivors: tuple[int, ...]
    bytes_sent: dict[int, int]


def aggregate_prototypes(
    prototype_sets: Sequence[Prototypes],
    *,
    threshold: int,
    weighting: str = "count",
    backend: str = "secagg",
    seed: int | bytes | None = None,
    dropouts: Mapping[int, int | str] | None = None,
) -> GlobalPrototypes:
    """Global per-class prototypes through :func:`securefl.crypto.secure_sum`.

    Client i inputs [w_{i,k} c_{i,k} for all k (flattened), w_{i,k} for all k] with
    w = n_k (``"count"``) or 1 (``"uniform"``) where class k is shared, 0 elsewhere; the
    server obtains only the sums and divides.  ``dropouts`` and ``threshold`` are the
    secure sum's (fewer survivors than ``threshold`` raise DropoutError).
    """
    from securefl.crypto.summation import secure_sum

    if weighting not in WEIGHTINGS:
        raise InputError("weighting", weighting, f"must be one of {WEIGHTINGS}")
    if not prototype_sets:
        raise InputError("prototype_sets", prototype_sets, "need at least one client")
    shape = prototype_sets[0].vectors.shape
    inputs = []
    for i, p in enumerate(prototype_sets):
        if p.vectors.shape != shape:
            raise InputError(f"prototype_sets[{i}]", p.vectors, f"must have shape {shape}")
        weight = np.where(p.mask, p.counts if weighting == "count" else 1, 0).astype(np.float64)
        inputs.append(np.concatenate([(p.vectors * weight[:, None]).ravel(), weight]))
    summed = secure_sum(inputs, threshold=threshold, backend=backend, seed=seed, dropouts=dropouts)
    classes, dim = shape
    totals = summed.total[classes * dim :]
    mask = totals > 0.5
    vectors = np.zeros(shape)
    vectors[mask] = summed.total[: classes * dim].reshape(shape)[mask] / totals[mask, None]
    return GlobalPrototypes(
        vectors=vectors,
        mask=mask,
        totals=np.rint(totals).astype(np.int64),
        survivors=summed.survivors,
        bytes_sent=summed.bytes_sent,
    )
