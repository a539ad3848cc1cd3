"""FedAnchor's label-contrastive loss and anchor pseudo-labelling (Qiu et al., fedanchor.md §4,
Appendix B), as pure functions.

* cosine similarity ``s(z_i, z_j) = z_i.z_j / (|z_i| |z_j|)``.
* eq. (1)  ``l(c) = -log( sum_{i != j, y_i = y_j = c} e^{s_ij/tau} / sum_{y_i != y_j} e^{s_ij/tau} )``
  over ordered pairs of a batch of anchors; self-pairs are excluded from the numerator
  (they are the constant ``e^{1/tau}``).
* eq. (2)  ``L_c = mean_c l(c)`` over the classes with at least one positive pair in the
  batch (the paper's ``1/C`` sum is undefined for a class without pairs).
* eq. (3)  ``s_c^avg(z) = mean_{z_k in Z_c^anchor} s(z, z_k)``;  eq. (4) ``y_hat = argmax_c``.
* Appendix B: the *fix* set (``max_c s_c^avg > t``), the *mix* set drawn with replacement
  from all pseudo-labelled samples, and mixup with ``lambda ~ Beta(a, a)``.

Hand-written because the paper's loss (class-wise positives over *all* cross-label
negatives) is not a standard library loss.  Nothing here crosses a party boundary; the
anchor embeddings a client receives are sent by :mod:`securefl.methods.fedanchor.server`.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from securefl.errors import InputError


def cosine_matrix(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``(n, m)`` cosine similarities between the rows of ``a`` and ``b``."""
    return F.normalize(a, dim=1) @ F.normalize(b, dim=1).T


def label_contrastive_loss(z: torch.Tensor, labels: torch.Tensor, *, temperature: float = 0.5) -> torch.Tensor:
    """Eqs. (1)–(2) on a batch of anchor-head outputs ``z`` ``(n, d)`` with labels ``(n,)``."""
    if temperature <= 0:
        raise InputError("temperature", temperature, "must be positive")
    if z.ndim != 2 or labels.shape != (z.shape[0],):
        raise InputError("z", tuple(z.shape), "must be (n, d) with n labels")
    logits = cosine_matrix(z, z) / temperature
    same = labels.unsqueeze(0) == labels.unsqueeze(1)
    eye = torch.eye(len(labels), dtype=torch.bool, device=labels.device)
    negative = ~same
    if not bool(negative.any()):
        raise InputError("labels", "one class", "the batch needs two classes for negatives")
    log_denominator = torch.logsumexp(logits[negative], dim=0)
    losses = []
    for c in torch.unique(labels).tolist():
        in_c = labels == c
        positive = in_c.unsqueeze(0) & in_c.unsqueeze(1) & ~eye
        if bool(positive.any()):
            losses.append(log_denominator - torch.logsumexp(logits[positive], dim=0))
    if not losses:
        raise InputError("labels", "no repeated class", "the batch needs two anchors of one class")
    return torch.stack(losses).mean()


def anchor_class_scores(z: torch.Tensor, anchor_z: torch.Tensor, anchor_labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Eq. (3): ``(n, C)`` mean cosine similarity to each class's anchors (``-inf`` if none)."""
    sims = cosine_matrix(z, anchor_z)
    one_hot = F.one_hot(anchor_labels.long(), num_classes).to(sims.dtype)
    counts = one_hot.sum(dim=0)
    scores = (sims @ one_hot) / counts.clamp(min=1)
    return scores.masked_fill((counts == 0).unsqueeze(0), float("-inf"))


def anchor_pseudo_labels(
    z: torch.Tensor, anchor_z: torch.Tensor, anchor_labels: torch.Tensor, num_classes: int
) -> tuple[np.ndarray, np.ndarray]:
    """Eq. (4): pseudo-labels and their scores ``max_c s_c^avg`` (numpy, int64 / float32)."""
    scores = anchor_class_scores(z, anchor_z, anchor_labels, num_classes)
    best, labels = scores.max(dim=1)
    return labels.cpu().numpy().astype(np.int64), best.cpu().numpy().astype(np.float32)


def fix_and_mix(scores: np.ndarray, threshold: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Appendix B eqs. (5)–(6): indices of the fix set and a same-size mix set.

    The mix set is drawn with replacement from all pseudo-labelled samples; both are
    empty when no score exceeds ``threshold`` (the client then skips training).
    """
    fix = np.flatnonzero(np.asarray(scores) > threshold)
    if fix.size == 0:
        return fix, fix
    mix = rng.integers(0, len(scores), size=fix.size)
    return fix, mix


def mixup_loss(logits: torch.Tensor, labels_a: torch.Tensor, labels_b: torch.Tensor, lam: float) -> torch.Tensor:
    """Appendix B eq. (9): ``lam CE(f(x_mix), y_a) + (1 - lam) CE(f(x_mix), y_b)``."""
    return lam * F.cross_entropy(logits, labels_a) + (1.0 - lam) * F.cross_entropy(logits, labels_b)
