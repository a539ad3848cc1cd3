"""Local training (ClientUpdate) and evaluation.

ClientUpdate is E epochs of SGD with momentum on the per-sample weighted cross-entropy

    L(theta) = (1/|B|) sum_{i in B} omega_i * CE(f_theta(x_i), y_i)  +  (mu/2) ||theta - theta_g||^2

(FedProp's loss with weights omega from label propagation; omega = 1 for true labels;
the second term is FedProx's proximal term, off when mu = 0).  Weight decay is the
optimiser's L2 term.

:func:`train_supervised` runs over one set of samples.  :func:`train_mixed` follows
FedProp's batching: each step draws a labeled batch B_L (``|B_L| = min(batch_size, n_L)``)
and a pseudo-labeled batch B_U of the same size; an epoch is one pass over the larger of
the two sets while the smaller one cycles.  An optional ``extra_loss(model, x_l, x_u)`` adds
a term (the mean-teacher consistency of FedProp+MT).  :func:`train_fixmatch` is FixMatch's
local objective (:func:`fixmatch_loss`) over labeled batches of ``batch_size`` and
unlabeled batches of ``unlabeled_ratio * batch_size``, with the same epoch rule.

All shuffling uses the caller's ``torch.Generator``; no global RNG is touched.

**Device.**  Every function computes where the model's parameters live
(:func:`securefl.fl.device.model_device`): NumPy inputs are copied there, index batches
are drawn there by the caller's generator (which must live on the same device: a CUDA
model takes a CUDA generator, :func:`securefl.fl.rng.client_rng` with ``device``), and
what returns as NumPy is copied back to the CPU first.  On the CPU the calls and their
order are those of a CPU-only build, so CPU results are unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from securefl.errors import InputError
from securefl.fl.device import model_device

ExtraLoss = Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]


def make_optimizer(model: nn.Module, *, lr: float, momentum: float = 0.9,
                   weight_decay: float = 0.0) -> torch.optim.SGD:
    """SGD with (heavy-ball) momentum and L2 weight decay."""
    if lr <= 0:
        raise InputError("lr", lr, "must be > 0")
    if not 0 <= momentum < 1:
        raise InputError("momentum", momentum, "must lie in [0, 1)")
    if weight_decay < 0:
        raise InputError("weight_decay", weight_decay, "must be >= 0")
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum,
                           weight_decay=weight_decay)


def weighted_cross_entropy(logits: torch.Tensor, targets: torch.Tensor,
                           weights: torch.Tensor | None = None) -> torch.Tensor:
    """Mean over the batch of ``weights_i * CE(logits_i, targets_i)``."""
    losses = F.cross_entropy(logits, targets, reduction="none")
    if weights is not None:
        losses = losses * weights
    return losses.mean()


def prox_term(model: nn.Module, anchor: list[torch.Tensor], mu: float) -> torch.Tensor:
    """FedProx: (mu/2) * ||theta - theta_global||^2 over the trainable parameters."""
    total = torch.zeros((), device=model_device(model))
    for param, ref in zip(model.parameters(), anchor):
        total = total + (param - ref).pow(2).sum()
    return 0.5 * mu * total


def batches(n: int, batch_size: int, generator: torch.Generator) -> Iterator[torch.Tensor]:
    """Index batches of one shuffled pass over ``n`` samples (on ``generator``'s device)."""
    order = torch.randperm(n, generator=generator, device=generator.device)
    for start in range(0, n, batch_size):
        yield order[start: start + batch_size]


def _as_tensor(array: np.ndarray | torch.Tensor, dtype: torch.dtype,
               device: torch.device) -> torch.Tensor:
    if isinstance(array, torch.Tensor):
        return array.to(device=device, dtype=dtype)
    return torch.from_numpy(np.ascontiguousarray(array)).to(device=device, dtype=dtype)


def _check_training(epochs: int, batch_size: int, prox_mu: float) -> None:
    if epochs < 0:
        raise InputError("epochs", epochs, "must be >= 0")
    if batch_size < 1:
        raise InputError("batch_size", batch_size, "must be >= 1")
    if prox_mu < 0:
        raise InputError("prox_mu", prox_mu, "must be >= 0")


def train_supervised(model: nn.Module, x: np.ndarray, y: np.ndarray, *,
                     weights: np.ndarray | None = None, epochs: int, batch_size: int,
                     lr: float, momentum: float = 0.9, weight_decay: float = 0.0,
                     prox_mu: float = 0.0, generator: torch.Generator,
                     augment: Callable[[torch.Tensor], torch.Tensor] | None = None) -> int:
    """E epochs of (weighted) cross-entropy SGD on ``(x, y)``; returns the step count.

    ``augment`` maps each batch to an augmented copy before the forward pass."""
    _check_training(epochs, batch_size, prox_mu)
    if len(x) != len(y) or (weights is not None and len(weights) != len(y)):
        raise InputError("y", y, f"length must match x ({len(x)}) and weights")
    if len(y) == 0 or epochs == 0:
        return 0
    device = model_device(model)
    xt, yt = _as_tensor(x, torch.float32, device), _as_tensor(y, torch.int64, device)
    wt = None if weights is None else _as_tensor(weights, torch.float32, device)
    optimizer = make_optimizer(model, lr=lr, momentum=momentum, weight_decay=weight_decay)
    anchor = [p.detach().clone() for p in model.parameters()] if prox_mu > 0 else []
    model.train()
    steps = 0
    for _ in range(epochs):
        for idx in batches(len(yt), batch_size, generator):
            xb = xt[idx] if augment is None else augment(xt[idx])
            loss = weighted_cross_entropy(model(xb), yt[idx],
                                          None if wt is None else wt[idx])
            if prox_mu > 0:
                loss = loss + prox_term(model, anchor, prox_mu)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            steps += 1
    return steps


def train_mixed(model: nn.Module, x_labeled: np.ndarray, y_labeled: np.ndarray,
                x_unlabeled: np.ndarray, y_pseudo: np.ndarray, w_pseudo: np.ndarray, *,
                epochs: int, batch_size: int, lr: float, momentum: float = 0.9,
                weight_decay: float = 0.0, prox_mu: float = 0.0,
                generator: torch.Generator, extra_loss: ExtraLoss | None = None,
                after_step: Callable[[], None] | None = None,
                augment: Callable[[torch.Tensor], torch.Tensor] | None = None) -> int:
    """FedProp's ClientUpdate over B = B_L u B_U batches; returns the step count.

    Labeled samples have weight 1, pseudo-labeled ones ``w_pseudo``.  ``after_step`` runs
    after every optimiser step (the mean teacher's EMA update); ``augment`` maps each
    training batch to an augmented copy before the cross-entropy term.
    """
    _check_training(epochs, batch_size, prox_mu)
    n_l, n_u = len(y_labeled), len(y_pseudo)
    if len(x_labeled) != n_l or len(x_unlabeled) != n_u or len(w_pseudo) != n_u:
        raise InputError("y_pseudo", y_pseudo, "lengths of x/y/w must match")
    if epochs == 0 or n_l + n_u == 0:
        return 0
    size_l = min(batch_size, n_l)
    size_u = size_l if n_l > 0 else batch_size
    size_u = min(size_u, n_u)
    device = model_device(model)
    xl, yl = _as_tensor(x_labeled, torch.float32, device), _as_tensor(y_labeled, torch.int64, device)
    xu, yu = _as_tensor(x_unlabeled, torch.float32, device), _as_tensor(y_pseudo, torch.int64, device)
    wu = _as_tensor(w_pseudo, torch.float32, device)
    steps_per_epoch, labeled_stream, unlabeled_stream = _paired_batches(n_l, size_l, n_u, size_u,
                                                                        generator)
    optimizer = make_optimizer(model, lr=lr, momentum=momentum, weight_decay=weight_decay)
    anchor = [p.detach().clone() for p in model.parameters()] if prox_mu > 0 else []
    model.train()
    steps = 0
    empty = torch.zeros((0,) + tuple(xl.shape[1:] if n_l else xu.shape[1:]), device=device)
    for _ in range(epochs * steps_per_epoch):
        il = next(labeled_stream)
        iu = next(unlabeled_stream)
        x_b = torch.cat([xl[il], xu[iu]])
        y_b = torch.cat([yl[il], yu[iu]])
        w_b = torch.cat([torch.ones(len(il), device=device), wu[iu]])
        if augment is not None:
            x_b = augment(x_b)
        loss = weighted_cross_entropy(model(x_b), y_b, w_b)
        if extra_loss is not None:
            loss = loss + extra_loss(model, xl[il] if n_l else empty, xu[iu])
        if prox_mu > 0:
            loss = loss + prox_term(model, anchor, prox_mu)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if after_step is not None:
            after_step()
        steps += 1
    return steps


def fixmatch_loss(logits_labeled: torch.Tensor, y_labeled: torch.Tensor,
                  logits_weak: torch.Tensor, logits_strong: torch.Tensor, *, threshold: float,
                  unlabeled_weight: float) -> tuple[torch.Tensor, torch.Tensor]:
    """FixMatch's loss for one step (Sohn et al. 2020, eqs. 2-4); returns (loss, mask).

        l_s  = (1/B) sum_b CE(y_b, f(alpha(x_b)))
        q_b  = softmax(f(alpha(u_b))) (no gradient),   y^_b = argmax_c q_b,c
        l_u  = (1/(mu B)) sum_b 1[max_c q_b,c >= tau] CE(y^_b, f(A(u_b)))
        loss = l_s + lambda_u l_u

    ``logits_labeled`` are on the weakly augmented labeled batch, ``logits_weak`` /
    ``logits_strong`` on the weak / strong views of the unlabeled batch; ``mask`` marks the
    unlabeled points whose pseudo-label counted.  An empty batch contributes 0.
    """
    zero = logits_strong.new_zeros(())
    supervised = F.cross_entropy(logits_labeled, y_labeled) if len(y_labeled) else zero
    if not len(logits_weak):
        return supervised, torch.zeros(0, dtype=torch.bool, device=logits_weak.device)
    confidence, pseudo = F.softmax(logits_weak.detach(), dim=1).max(dim=1)
    mask = confidence >= threshold
    unlabeled = F.cross_entropy(logits_strong, pseudo, reduction="none")
    return supervised + unlabeled_weight * (unlabeled * mask.to(unlabeled.dtype)).mean(), mask


def train_fixmatch(model: nn.Module, x_labeled: np.ndarray, y_labeled: np.ndarray,
                   x_unlabeled: np.ndarray, *, epochs: int, batch_size: int,
                   unlabeled_ratio: int, threshold: float, unlabeled_weight: float, lr: float,
                   momentum: float = 0.9, weight_decay: float = 0.0, prox_mu: float = 0.0,
                   generator: torch.Generator,
                   weak: Callable[[torch.Tensor], torch.Tensor] | None = None,
                   strong: Callable[[torch.Tensor], torch.Tensor]) -> int:
    """FixMatch on a client (FedAvg+FixMatch's ClientUpdate); returns the step count.

    Each step draws a labeled batch of ``min(batch_size, n_L)`` and an unlabeled batch of
    ``min(unlabeled_ratio * batch_size, n_U)`` (FixMatch's mu); an epoch is one pass over
    whichever set needs more steps while the other cycles.  The labeled batch and the
    unlabeled batch's weak view go through ``weak``, its strong view through ``strong``;
    the three go through the model in one forward pass (as FixMatch's reference code, so
    that batch statistics see all three) and :func:`fixmatch_loss` is minimised by SGD.
    The pseudo-labels are the current local model's, remade at every step.
    """
    _check_training(epochs, batch_size, prox_mu)
    if not isinstance(unlabeled_ratio, (int, np.integer)) or unlabeled_ratio < 1:
        raise InputError("unlabeled_ratio", unlabeled_ratio, "must be an integer >= 1")
    n_l, n_u = len(y_labeled), len(x_unlabeled)
    if len(x_labeled) != n_l:
        raise InputError("y_labeled", y_labeled, f"length must match x_labeled ({len(x_labeled)})")
    if epochs == 0 or n_l + n_u == 0:
        return 0
    size_l, size_u = min(batch_size, n_l), min(int(unlabeled_ratio) * batch_size, n_u)
    device = model_device(model)
    xl, yl = _as_tensor(x_labeled, torch.float32, device), _as_tensor(y_labeled, torch.int64, device)
    xu = _as_tensor(x_unlabeled, torch.float32, device)
    steps_per_epoch, labeled_stream, unlabeled_stream = _paired_batches(n_l, size_l, n_u, size_u,
                                                                        generator)
    optimizer = make_optimizer(model, lr=lr, momentum=momentum, weight_decay=weight_decay)
    anchor = [p.detach().clone() for p in model.parameters()] if prox_mu > 0 else []
    identity = (lambda batch: batch) if weak is None else weak
    model.train()
    for _ in range(epochs * steps_per_epoch):
        il, iu = next(labeled_stream), next(unlabeled_stream)
        x_l, u = identity(xl[il]), xu[iu]
        u_weak, u_strong = identity(u), strong(u)
        logits = model(torch.cat([x_l, u_weak, u_strong]))
        logits_l, logits_w, logits_s = torch.split(logits, [len(x_l), len(u), len(u)])
        loss, _ = fixmatch_loss(logits_l, yl[il], logits_w, logits_s, threshold=threshold,
                                unlabeled_weight=unlabeled_weight)
        if prox_mu > 0:
            loss = loss + prox_term(model, anchor, prox_mu)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return epochs * steps_per_epoch


def _paired_batches(n_l: int, size_l: int, n_u: int, size_u: int, generator: torch.Generator
                    ) -> tuple[int, Iterator[torch.Tensor], Iterator[torch.Tensor]]:
    """Steps per epoch (one pass over whichever set needs more batches) and the endless
    labeled and unlabeled index streams of :func:`train_mixed` and :func:`train_fixmatch`."""
    steps = max(-(-n_l // size_l) if size_l else 0, -(-n_u // size_u) if size_u else 0)
    return steps, _cycle(n_l, size_l, generator), _cycle(n_u, size_u, generator)


def _cycle(n: int, size: int, generator: torch.Generator) -> Iterator[torch.Tensor]:
    """Endless stream of index batches of ``size`` over ``n`` samples, reshuffled per pass
    (empty batches when n == 0), on ``generator``'s device."""
    while True:
        if n == 0 or size == 0:
            yield torch.zeros(0, dtype=torch.int64, device=generator.device)
            continue
        order = torch.randperm(n, generator=generator, device=generator.device)
        for start in range(0, n - size + 1, size):
            yield order[start: start + size]
        if n % size:
            yield order[n - n % size:]


@torch.no_grad()
def predict_logits(model: nn.Module, x: np.ndarray, *, batch_size: int = 1024) -> torch.Tensor:
    """Logits for ``x`` in eval mode (training mode restored afterwards), on the model's
    device; ``x`` is copied there one batch at a time."""
    was_training = model.training
    model.eval()
    device = model_device(model)
    out = torch.cat([model(_as_tensor(x[i: i + batch_size], torch.float32, device))
                     for i in range(0, len(x), batch_size)]) \
        if len(x) else torch.zeros((0, 0), device=device)
    model.train(was_training)
    return out


@torch.no_grad()
def extract_features(model: nn.Module, x: np.ndarray, *, batch_size: int = 1024) -> np.ndarray:
    """f_phi(x) as a float32 ``(n, d)`` array, in eval mode."""
    was_training = model.training
    model.eval()
    device = model_device(model)
    parts = [model.features(_as_tensor(x[i: i + batch_size], torch.float32, device))
             for i in range(0, len(x), batch_size)]
    model.train(was_training)
    return torch.cat(parts).cpu().numpy().astype(np.float32) if parts else \
        np.zeros((0, model.feature_dim), np.float32)


def predict_labels(model: nn.Module, x: np.ndarray, *, batch_size: int = 1024) -> np.ndarray:
    """Top-1 class ``(n,)`` int64 of ``model`` for ``x``, in eval mode."""
    return predict_logits(model, x, batch_size=batch_size).argmax(dim=1).cpu().numpy()


def evaluate(model: nn.Module, x: np.ndarray, y: np.ndarray, *, batch_size: int = 1024) -> float:
    """Top-1 accuracy of ``model`` on ``(x, y)``."""
    if len(x) != len(y) or len(y) == 0:
        raise InputError("y", y, f"must be non-empty and match x ({len(x)} samples)")
    return float((predict_labels(model, x, batch_size=batch_size) == np.asarray(y)).mean())
