"""ProtoFSSL prototype sharing (Kim et al., §4.2-4.4, §7.1, Appendix B.4), numpy only.

**Prototypes (§4.4).**  After local training, client i embeds *all* its labeled data and
releases, per class k, the mean c_{i,k} = (1/n_k) sum_{x in D^L_{i,k}} clip(f(x)), where
clip scales a row to L2 norm at most ``clip_norm`` (no clipping if ``None``).  Classes
with fewer than ``min_count`` labeled samples are withheld (§7.1: a prototype of very few
samples is unreliable and the most revealing); a withheld class has ``mask`` False and a
zero vector.  :func:`class_prototypes` computes them with the exact counts: that object
stays at the client; :func:`share_prototypes` returns what is sent.

**Sending (:func:`share_prototypes`), three modes.**

* No noise: the exact prototypes of the shared classes and which classes are shared.  No
  privacy guarantee; the counts are not sent.
* ``sigma=s``: N(0, s^2) added to every coordinate of the shared prototypes (exactly the
  experiment of Table 9).  ``s`` is public configuration; **not differentially private**
  (no sensitivity bound, the withholding decision uses exact counts).
* ``noise_multiplier=z`` with ``clip_norm=C``: the Gaussian release of
  :func:`securefl.crypto.dp.noised_class_sums` (:func:`private_prototypes`): for *every*
  class the noised clipped sum S~_k = S_k + N(0, sigma^2 I) and the noised count
  n~_k = n_k + N(0, sigma^2) / C, with one sigma = z sqrt(2) C (add/remove-one labeled
  sample; 2 C for replace-one) that depends on no count.  The client sends
  c~_k = S~_k / n~_k for the classes with n~_k >= ``min_count`` and the n~_k (``counts``):
  all post-processing of the release, so the withholding decision and the normaliser cost
  no privacy.  Each call is **one** release with multiplier z; a client that releases k
  times has the (epsilon, delta) of :func:`privacy_spent` (``releases=k``, composed
  exactly, no amplification by sampling; derivation in :mod:`securefl.crypto.dp`).  The
  guarantee is per labeled sample *given the embedding network*: the caller must embed
  with a network that is released anyway (ProtoFSSL: the aggregated global model), not
  one trained on the client's records alone.

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
:func:`securefl.runtime.secure_sum`, then divides.  Fed with DP releases (n~_k c~_k = S~_k),
the sums are post-processing of those releases and cost no further privacy; fed with
exact prototypes they are **not** differentially private.

**Who learns what.**  The server and the helpers' recipients learn each sent prototype
set: without noise, the exact prototypes and which classes a client withholds (hence that
it has fewer than ``min_count`` labels of them); with ``sigma``, the noised prototypes and
the same withholding pattern; with ``noise_multiplier``, the release (c~, n~, mask, the
public sigma) and nothing else, bounded per labeled sample by :func:`privacy_spent`.  With
:func:`aggregate_prototypes` the server learns only the per-class totals over the
surviving clients (Bonawitz et al. 2017 guarantee of the secure sum).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
from scipy.special import logsumexp

from securefl.crypto import dp
from securefl.errors import InputError

DISTANCES = ("euclidean", "squared")
WEIGHTINGS = ("count", "uniform")


@dataclass(frozen=True)
class Prototypes:
    """One client's prototypes.

    ``vectors``: ``(C, d)`` float64, zero rows where withheld; ``mask``: ``(C,)`` bool, True
    where shared; ``counts``: ``(C,)`` float64 class sizes, exact in the client's own
    :func:`class_prototypes`, noised in a DP release, ``None`` in what a client sends
    without DP (never sent in the clear); ``noise_std``: the standard deviation of the
    noise (public configuration: the fixed sigma, or z times the sensitivity; 0 without
    noise); ``clip_norm``: the L2 bound the embeddings were clipped to (``None``: not
    clipped).
    """

    vectors: np.ndarray
    mask: np.ndarray
    counts: np.ndarray | None
    noise_std: float = 0.0
    clip_norm: float | None = None

    @property
    def num_classes(self) -> int:
        return self.vectors.shape[0]

    def payload_bytes(self) -> int:
        """Bytes a client sends for these prototypes: shared vectors + class ids, and one
        float per class where (noised) counts travel."""
        count_bytes = 0 if self.counts is None else 8 * self.num_classes
        return int(self.mask.sum()) * (self.vectors.shape[1] * 8 + 8) + count_bytes


def _class_sums(
    embeddings: np.ndarray, labels: np.ndarray, *, num_classes: int, clip_norm: float | None
) -> tuple[np.ndarray, np.ndarray]:
    """Per-class sums of the (clipped) labeled rows and the exact counts (``-1``: unlabeled)."""
    embeddings = np.asarray(embeddings)
    if embeddings.ndim != 2 or embeddings.dtype.kind not in "fiu":
        raise InputError("embeddings", embeddings, "must be a real (n, d) array")
    if not np.all(np.isfinite(embeddings)):
        raise InputError("embeddings", embeddings, "contains NaN or infinity")
    if not isinstance(num_classes, (int, np.integer)) or num_classes < 1:
        raise InputError("num_classes", num_classes, "must be a positive integer")
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
    return sums, counts


def _check_min_count(min_count: int) -> None:
    if not isinstance(min_count, (int, np.integer)) or min_count < 1:
        raise InputError("min_count", min_count, "must be a positive integer")


def class_prototypes(
    embeddings: np.ndarray,
    labels: np.ndarray,
    *,
    num_classes: int,
    min_count: int = 1,
    clip_norm: float | None = None,
) -> Prototypes:
    """Per-class means of (clipped) labeled embeddings; classes below ``min_count`` withheld.

    ``labels`` uses ``-1`` for unlabeled rows (ignored).  The result carries the exact
    counts: it is the client's own view (secure-sum input), not what it sends.
    """
    _check_min_count(min_count)
    sums, counts = _class_sums(embeddings, labels, num_classes=num_classes, clip_norm=clip_norm)
    mask = counts >= min_count
    vectors = np.zeros_like(sums)
    vectors[mask] = sums[mask] / counts[mask, None]
    return Prototypes(vectors=vectors, mask=mask, counts=counts.astype(np.float64), clip_norm=clip_norm)


def add_noise(prototypes: Prototypes, *, sigma: float, seed: int | bytes | None = None) -> Prototypes:
    """Fixed-sigma Gaussian noise on the shared prototypes (Table 9's experiment; not DP).

    Returns what is sent: noised shared vectors and the mask, no counts.  ``seed`` makes
    the noise reproducible; ``None`` draws it from the OS CSPRNG.
    """
    if not (isinstance(sigma, (int, float)) and np.isfinite(sigma) and sigma >= 0):
        raise InputError("sigma", sigma, "must be a non-negative finite number")
    noise = dp.gaussian_noise(prototypes.vectors.shape, float(sigma), seed=seed)
    vectors = np.where(prototypes.mask[:, None], prototypes.vectors + noise, 0.0)
    return replace(prototypes, vectors=vectors, counts=None, noise_std=float(sigma))


def private_prototypes(
    embeddings: np.ndarray,
    labels: np.ndarray,
    *,
    num_classes: int,
    clip_norm: float,
    noise_multiplier: float,
    min_count: int = 1,
    relation: str = "add_remove",
    seed: int | bytes | None = None,
) -> Prototypes:
    """One DP release (module docstring): c~_k = S~_k / n~_k where n~_k >= ``min_count``.

    ``counts`` holds the noised n~ (every class), ``noise_std`` the public sigma.
    """
    _check_min_count(min_count)
    if clip_norm is None:
        raise InputError("clip_norm", clip_norm, "noise_multiplier needs clip_norm (clipping bounds the sensitivity)")
    sums, counts = _class_sums(embeddings, labels, num_classes=num_classes, clip_norm=clip_norm)
    noised_sums, noised_counts, sigma = dp.noised_class_sums(
        sums, counts, clip_norm=clip_norm, noise_multiplier=noise_multiplier, relation=relation, seed=seed
    )
    mask = noised_counts >= min_count
    vectors = np.zeros_like(noised_sums)
    vectors[mask] = noised_sums[mask] / noised_counts[mask, None]
    return Prototypes(vectors=vectors, mask=mask, counts=noised_counts, noise_std=sigma, clip_norm=clip_norm)


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
    """What a client sends at the end of a round (§4.4), in one of the three modes of the
    module docstring (``sigma`` and ``noise_multiplier`` exclude each other)."""
    if sigma is not None and noise_multiplier is not None:
        raise InputError("sigma", sigma, "give at most one of sigma or noise_multiplier")
    if noise_multiplier is not None:
        return private_prototypes(
            embeddings, labels, num_classes=num_classes, clip_norm=clip_norm,
            noise_multiplier=noise_multiplier, min_count=min_count, seed=seed,
        )
    prototypes = class_prototypes(
        embeddings, labels, num_classes=num_classes, min_count=min_count, clip_norm=clip_norm
    )
    if sigma is not None:
        return add_noise(prototypes, sigma=sigma, seed=seed)
    return replace(prototypes, counts=None)


def privacy_spent(noise_multiplier: float, *, releases: int, delta: float = 1e-5) -> float:
    """epsilon at ``delta`` of a client that made ``releases`` DP releases with multiplier
    z, composed in full (the server sees who releases: no amplification by sampling)."""
    return dp.PrivacyAccountant(noise_multiplier, delta).step(releases).epsilon()


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
    float64 (summed counts, noised where the inputs are DP releases, or sharing clients, as
    decoded from the fixed-point sum), and the secure sum's costs and survivors."""

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
    """Global per-class prototypes through :func:`securefl.runtime.secure_sum`.

    Client i inputs [w_{i,k} c_{i,k} for all k (flattened), w_{i,k} for all k] with
    w = n_k (``"count"``: the client's exact counts, or the noised n~_k of a DP release, for
    which w c = S~) or 1 (``"uniform"``) where class k is shared, 0 elsewhere; the server
    obtains only the sums and divides.  ``dropouts`` and ``threshold`` are the
    secure sum's (fewer survivors than ``threshold`` raise DropoutError).
    """
    from securefl.runtime.summation import secure_sum

    if not prototype_sets:
        raise InputError("prototype_sets", prototype_sets, "need at least one client")
    shape = prototype_sets[0].vectors.shape
    inputs = []
    for i, p in enumerate(prototype_sets):
        if p.vectors.shape != shape:
            raise InputError(f"prototype_sets[{i}]", p.vectors, f"must have shape {shape}")
        inputs.append(prototype_sum_input(p, weighting=weighting, name=f"prototype_sets[{i}]"))
    summed = secure_sum(inputs, threshold=threshold, backend=backend, seed=seed, dropouts=dropouts)
    return prototypes_from_sum(summed.total, shape, survivors=summed.survivors,
                               bytes_sent=summed.bytes_sent)


def prototype_sum_input(prototypes: Prototypes, *, weighting: str = "count",
                        name: str = "prototypes") -> np.ndarray:
    """One client's input to the global prototypes' secure sum (:func:`aggregate_prototypes`):
    ``[w_k c_k for all k (flattened), w_k for all k]``."""
    if weighting not in WEIGHTINGS:
        raise InputError("weighting", weighting, f"must be one of {WEIGHTINGS}")
    if weighting == "count" and prototypes.counts is None:
        raise InputError(f"{name}.counts", None, "weighting='count' needs counts (the client's own or noised)")
    weight = np.where(prototypes.mask, prototypes.counts if weighting == "count" else 1, 0).astype(np.float64)
    return np.concatenate([(prototypes.vectors * weight[:, None]).ravel(), weight])


def prototypes_from_sum(total: np.ndarray, shape: tuple[int, int], *, survivors: tuple[int, ...],
                        bytes_sent: dict[int, int]) -> GlobalPrototypes:
    """The global prototypes from the decoded sum of :func:`prototype_sum_input` vectors
    (the server's division; a class is present where its total weight exceeds 1/2)."""
    classes, dim = shape
    total = np.asarray(total, dtype=np.float64)
    if total.shape != (classes * (dim + 1),):
        raise InputError("total", total.shape, f"must have {classes * (dim + 1)} entries for {shape}")
    totals = total[classes * dim :]
    mask = totals > 0.5
    vectors = np.zeros(shape)
    vectors[mask] = total[: classes * dim].reshape(shape)[mask] / totals[mask, None]
    return GlobalPrototypes(
        vectors=vectors,
        mask=mask,
        totals=totals,
        survivors=tuple(survivors),
        bytes_sent=dict(bytes_sent),
    )
