"""ProtoFSSL's episode and prototype math (Kim et al., protofssl.md §3–4), as pure functions.

* episodes: per class ``k`` a support set ``S_k`` of ``n_support`` labeled samples and a
  disjoint query set ``Q_k`` of ``n_query`` labeled samples; an unlabeled query set
  ``Q^U`` of ``n_unlabeled`` samples (Algorithm 1).
* eq. (2)  prototype ``c_k = mean_{x in S_k} f(x)``.
* eq. (6)  ``p_k(x) = softmax_k(-d(f(x), c_k))``; classes without a prototype are masked
  out.  ``d`` is the squared Euclidean distance ``||f(x) - c_k||^2`` by default: eq. (3)
  is the loss of prototypical networks (Snell et al. [42]), whose ``d`` is the squared
  distance (it makes the prototype, a class mean, the Bregman centroid), and the
  authors' code uses it too (averaged over the ``d`` coordinates, a constant temperature
  tied to their 512-d ResNet8 that we do not copy).  ``distance="euclidean"`` gives the
  plain distance ``||f(x) - c_k||`` of the paper's wording; its logits grow only
  linearly with the embedding scale, and on digits it trains markedly worse.
* eqs. (5)-(7)  the helpers' soft pseudo-label ``pbar(u)``: per helper ``j``
  ``p_j(u) = softmax_k(-d(f(u), c_{j,k}))``, averaged over helpers, sharpened with ``T``
  (:func:`helper_pseudo_labels`).
* eq. (8)  ``CE(labeled query) + lambda_U * CE(pbar(u), own prediction p_{i,i}(u))``.

These are the differentiable (torch) pieces of a client's local step.  Algorithm 1 steps
``theta <- theta - eta grad_theta loss_i`` with ``pbar(u)`` itself a function of
``f_theta(u)`` (eq. 6), so the gradient of eq. (8) also flows through the pseudo-label
(as in the authors' code, which stops the gradient of the true labels only): the
consistency term pulls ``f(u)`` towards the helpers' prototype of the class the local
prototypes predict.  :func:`securefl.protocols.prototype_sharing.pseudo_labels` is the
same eqs. (5)-(7) in numpy without gradient (the oracle in tests).  Hand-written
because prototypical losses with class masks are not in torch.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from securefl.errors import InputError
from securefl.protocols.prototype_sharing import Prototypes

DISTANCES = ("squared", "euclidean")


def split_episode(
    labels: np.ndarray,
    unlabeled_count: int,
    *,
    num_classes: int,
    n_support: int,
    n_query: int,
    n_unlabeled: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Draw one episode.

    ``labels``: the labels of the client's labeled samples (positions ``0..n_L-1``).
    Returns ``(support, support_classes, query, unlabeled)``: index arrays into the
    labeled samples (support, query) and into the unlabeled ones.  A class with fewer
    than ``n_support + 1`` labeled samples gets ``min(n_support, count)`` support samples
    and the rest as queries; a class with none is absent (``support_classes`` lists the
    classes that have a prototype).
    """
    if n_support < 1 or n_query < 0 or n_unlabeled < 0:
        raise InputError("n_support/n_query/n_unlabeled", (n_support, n_query, n_unlabeled),
                         "need n_support >= 1 and counts >= 0")
    labels = np.asarray(labels)
    support: list[np.ndarray] = []
    query: list[np.ndarray] = []
    classes: list[int] = []
    for k in range(num_classes):
        members = np.flatnonzero(labels == k)
        if members.size == 0:
            continue
        members = rng.permutation(members)
        s = min(n_support, members.size)
        support.append(members[:s])
        query.append(members[s : s + n_query])
        classes.append(k)
    unlabeled = rng.choice(unlabeled_count, size=min(n_unlabeled, unlabeled_count), replace=False)
    empty = np.empty(0, dtype=np.int64)
    return (
        np.concatenate(support) if support else empty,
        np.asarray(classes, dtype=np.int64),
        np.concatenate(query) if query else empty,
        np.asarray(unlabeled, dtype=np.int64),
    )


def class_prototypes(embeddings: torch.Tensor, labels: torch.Tensor, num_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. (2): per-class mean embedding ``(C, d)`` and a presence mask ``(C,)``.

    Absent classes get a zero row and ``False``.  Differentiable in ``embeddings``.
    """
    one_hot = F.one_hot(labels.long(), num_classes).to(embeddings.dtype)
    counts = one_hot.sum(dim=0)
    sums = one_hot.T @ embeddings
    present = counts > 0
    return sums / counts.clamp(min=1).unsqueeze(1), present


def prototype_logits(
    embeddings: torch.Tensor, prototypes: torch.Tensor, present: torch.Tensor | None = None, *, distance: str = "squared"
) -> torch.Tensor:
    """``-d(f(x), c_k)`` for every sample and class (``d`` squared or plain Euclidean);
    withheld classes get ``-inf``."""
    if distance == "squared":
        dist = ((embeddings.unsqueeze(1) - prototypes.unsqueeze(0)) ** 2).sum(dim=2)
    elif distance == "euclidean":
        dist = torch.cdist(embeddings, prototypes)
    else:
        raise InputError("distance", distance, f"must be one of {DISTANCES}")
    logits = -dist
    if present is not None:
        logits = logits.masked_fill(~present.bool().unsqueeze(0), float("-inf"))
    return logits


def helper_pseudo_labels(
    embeddings: torch.Tensor, helpers: Sequence[Prototypes], *, temperature: float, distance: str = "squared"
) -> torch.Tensor:
    """Eqs. (5)-(7), differentiable in ``embeddings`` ``(n, d)``: ``(n, C)`` soft pseudo-labels

        p_{j,k}(u) = softmax_k(-d(u, c_{j,k}))   over the classes helper j shares (0 elsewhere),
        p_k(u)     = (1/|H|) sum_j p_{j,k}(u)    over the helpers sharing at least one class,
        pbar_k(u)  = p_k(u)^(1/T) / sum_k' p_k'(u)^(1/T).

    A class no helper shares gets probability 0 (and no gradient).
    """
    if temperature <= 0:
        raise InputError("temperature", temperature, "must be positive")
    shared = [h for h in helpers if h.mask.any()]
    if not shared:
        raise InputError("helpers", helpers, "no helper shares any class")
    average = embeddings.new_zeros((embeddings.shape[0], shared[0].num_classes))
    for helper in shared:
        vectors = torch.from_numpy(helper.vectors).to(device=embeddings.device, dtype=embeddings.dtype)
        mask = torch.from_numpy(helper.mask).to(embeddings.device)
        logits = prototype_logits(embeddings, vectors, mask, distance=distance)
        average = average + torch.softmax(logits, dim=1)
    average = average / len(shared)
    positive = average > 0
    sharpened = torch.where(positive, torch.where(positive, average, torch.ones_like(average)) ** (1.0 / temperature),
                            torch.zeros_like(average))
    return sharpened / sharpened.sum(dim=1, keepdim=True)


def soft_cross_entropy(target: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """Mean over samples of ``-sum_k target_k log softmax(logits)_k``.

    Classes masked out of ``logits`` (``-inf``: no local prototype) are dropped from the
    target, which is renormalised over the remaining classes (a sample whose whole target
    mass is masked contributes 0).  Gradients reach both ``logits`` and ``target`` and are
    finite: the masked entries are zeroed before any product with ``-inf``.
    """
    if logits.shape[0] == 0:
        return logits.sum() * 0.0
    log_p = F.log_softmax(logits, dim=1)
    finite = torch.isfinite(log_p)
    target = torch.where(finite, target, torch.zeros_like(target))
    total = target.sum(dim=1, keepdim=True)
    kept = total > 0
    target = torch.where(kept, target / torch.where(kept, total, torch.ones_like(total)), torch.zeros_like(target))
    return -(target * torch.where(finite, log_p, torch.zeros_like(log_p))).sum(dim=1).mean()


def protofssl_loss(
    query_logits: torch.Tensor,
    query_labels: torch.Tensor,
    unlabeled_logits: torch.Tensor | None,
    pseudo_targets: torch.Tensor | None,
    *,
    lambda_u: float,
) -> torch.Tensor:
    """Eq. (8) for one episode."""
    loss = F.cross_entropy(query_logits, query_labels) if query_logits.shape[0] else query_logits.sum() * 0.0
    if unlabeled_logits is not None and pseudo_targets is not None and unlabeled_logits.shape[0]:
        loss = loss + lambda_u * soft_cross_entropy(pseudo_targets, unlabeled_logits)
    return loss
