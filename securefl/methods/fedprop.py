"""FedProp (fedprop.md Algorithm 2) and FedProp+MT (§5.1).

FedProp:

1. theta <- random init; FederatedOptimization on labeled data only (``warmup_rounds``
   of labeled-only FedAvg, run by :meth:`setup`).
2. Each round t: the server samples clients P (tau m_L labeled + tau (m - m_L)
   unlabeled when m_L < m) and broadcasts theta; client j embeds all its data
   V_j = f_phi(X_j); :func:`securefl.protocols.cross_client_lp` computes pseudo-labels
   y^_j and entropy weights omega_j on the graph of *all* selected clients' points;
   ClientUpdate is E epochs of SGD on the weighted cross-entropy over batches
   B_L u B_U (|B_U| = |B_L| = min(batch_size, #labels)); ServerUpdate is FedAvg
   (secure aggregation when ``secure="real"``).

With ``secure="real"`` CrossClientLP runs secure Hamming distances on the LSH codes (SHADE,
or the linear-communication LWE backend with ``hamming_backend="lwe"``; the same H either
way) and secure sums of the label scores; with ``secure="plaintext"`` its placeholder computes
the same Hamming matrix and sums directly.  The LSH hyperplane seed -- which the clients
agree on by key exchange in a deployment -- is drawn from the method's simulation RNG so
that both modes use the same hyperplanes and give identical pseudo-labels.

Who learns what (semi-honest): the server learns the Hamming matrix H between the
selected clients' LSH codes (an approximation of their features' cosine similarities)
and the aggregate model; client j learns the columns S_L^(j) of the propagation matrix
for its own labeled points and its own pseudo-labels.  No party sees another's data,
labels or individual model.

FedProp+MT (:class:`FedPropMT`): the server broadcasts a student and a mean teacher;
clients train the student on FedProp's loss plus the mean-teacher consistency
``w_t * mean_i ||softmax(student(x_i + n)) - softmax(teacher(x_i + n'))||^2 / C``
(Tarvainen & Valpola 2017: Gaussian input noise, sigmoid ramp-up of w_t over
``consistency_rampup`` rounds), update the teacher as an EMA of the student after every
step, and return both; the server averages students and teachers separately (two secure
sums).  Pseudo-labels come from the teacher's features and the teacher is evaluated.

Defaults: FedProp Appendix A (L = 4096, k = 10, alpha = 0.99, E = 5, |B_L| <= 50,
lr 0.1, momentum 0.9, weight decay 2e-4, 5 clients per round, cosine decay over 2000
rounds, random translations as augmentation: ``max_shift``).  The paper does not state the
number of warm-up rounds; ``warmup_rounds=10``.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from securefl.crypto.projection import seconds_at_bandwidth
from securefl.errors import InputError
from securefl.fl import aggregate, load_model_vector, model_vector
from securefl.methods.baselines import PseudoLabelMethod, teacher_copy
from securefl.methods.base import RoundResult
from securefl.methods.common import perturb
from securefl.methods.consistency import ema_update


class FedProp(PseudoLabelMethod):
    """FedProp: cross-client label propagation pseudo-labels (Algorithm 2)."""

    name = "fedprop"

    def __init__(self, *, secure: str = "plaintext", seed: int = 0, model: str = "auto",
                 clients_per_round: int = 5, local_epochs: int = 5, batch_size: int = 50,
                 lr: float = 0.1, momentum: float = 0.9, weight_decay: float = 2e-4,
                 lr_decay_rounds: int | None = 2000, prox_mu: float = 0.0,
                 warmup_rounds: int = 10, k: int = 10, alpha: float = 0.99,
                 L: int = 4096, max_shift: int | None = None,
                 hamming_backend: str = "shade") -> None:
        super().__init__(secure=secure, seed=seed, model=model,
                         clients_per_round=clients_per_round, local_epochs=local_epochs,
                         batch_size=batch_size, lr=lr, momentum=momentum,
                         weight_decay=weight_decay, lr_decay_rounds=lr_decay_rounds,
                         prox_mu=prox_mu, warmup_rounds=warmup_rounds, k=k, alpha=alpha)
        self.L = L
        self.max_shift = max_shift
        self.hamming_backend = hamming_backend

    def _augmentation(self) -> Callable[[torch.Tensor], torch.Tensor] | None:
        """Random translations of up to ``max_shift`` pixels (Appendix A: "standard data
        augmentation following Tarvainen & Valpola"); ``None`` means 2 pixels on images of
        side >= 28 and none on smaller ones (the 8x8 digits).  Horizontal flips are not applied."""
        shape = self.federation.input_shape
        shift = self.max_shift
        if shift is None:
            shift = 2 if len(shape) == 3 and min(shape[1:]) >= 28 else 0
        if not isinstance(shift, (int, np.integer)) or shift < 0:
            raise InputError("max_shift", self.max_shift, "must be a non-negative integer or None")
        if shift == 0:
            return None
        generator = self.rng.torch
        return lambda batch: perturb(batch, 0.0, int(shift), generator)

    def _pseudo_labels(self, features: list[np.ndarray], labels: list[np.ndarray]
                       ) -> tuple[list[np.ndarray], list[np.ndarray], float]:
        from securefl.protocols.crossclient import cross_client_lp

        if not isinstance(self.L, (int, np.integer)) or self.L < 1:
            raise InputError("L", self.L, "must be a positive integer")
        result = cross_client_lp(features, labels, num_classes=self.federation.num_classes,
                                 k=self.k, alpha=self.alpha, L=self.L, backend=self.secure,
                                 seed=self.rng.draw_seed(), workers=torch.get_num_threads(),
                                 hamming_backend=self.hamming_backend)
        self._round_link_bytes = result.link_bytes()
        pseudo = [np.asarray(p, dtype=np.int64) for p, _ in result]
        weights = [np.asarray(w, dtype=np.float64) for _, w in result]
        traffic = result.bytes_per_client()
        return pseudo, weights, float(np.mean(list(traffic.values()))) if traffic else 0.0

    def run_round(self, round_index: int) -> RoundResult:
        """A round, with its projection onto real links (:class:`RoundResult`)."""
        self._round_link_bytes = 0
        cpu_start = time.process_time()
        result = super().run_round(round_index)
        link_bytes = self._round_link_bytes + result.bytes_model_per_client / 2
        result.seconds_at_bandwidth = seconds_at_bandwidth(time.process_time() - cpu_start, link_bytes)
        return result


class FedPropMT(FedProp):
    """FedProp + mean teacher (§5.1)."""

    name = "fedprop-mt"

    def __init__(self, *, secure: str = "plaintext", seed: int = 0, model: str = "auto",
                 clients_per_round: int = 5, local_epochs: int = 5, batch_size: int = 50,
                 lr: float = 0.1, momentum: float = 0.9, weight_decay: float = 2e-4,
                 lr_decay_rounds: int | None = 2000, prox_mu: float = 0.0,
                 warmup_rounds: int = 10, k: int = 10, alpha: float = 0.99, L: int = 4096,
                 max_shift: int | None = None, ema_decay: float = 0.99, consistency_weight: float = 100.0,
                 consistency_rampup: int = 5, noise_std: float = 0.1,
                 hamming_backend: str = "shade") -> None:
        super().__init__(secure=secure, seed=seed, model=model,
                         clients_per_round=clients_per_round, local_epochs=local_epochs,
                         batch_size=batch_size, lr=lr, momentum=momentum,
                         weight_decay=weight_decay, lr_decay_rounds=lr_decay_rounds,
                         prox_mu=prox_mu, warmup_rounds=warmup_rounds, k=k, alpha=alpha, L=L,
                         max_shift=max_shift, hamming_backend=hamming_backend)
        self.ema_decay = ema_decay
        self.consistency_weight = consistency_weight
        self.consistency_rampup = consistency_rampup
        self.noise_std = noise_std

    def _setup_extra(self) -> None:
        if not 0.0 <= self.ema_decay < 1.0:
            raise InputError("ema_decay", self.ema_decay, "must lie in [0, 1)")
        if self.consistency_weight < 0 or self.noise_std < 0 or self.consistency_rampup < 0:
            raise InputError("consistency_weight", self.consistency_weight,
                             "consistency_weight, consistency_rampup, noise_std must be >= 0")
        super()._setup_extra()
        self.teacher = teacher_copy(self.network)
        self._round_weight = 0.0

    def _feature_model(self) -> nn.Module:
        return self.teacher

    def _models(self) -> dict[str, nn.Module]:
        models = {"network": self.network}
        if hasattr(self, "teacher"):
            models["teacher"] = self.teacher
        return models

    def consistency_ramp(self, round_index: int) -> float:
        """Tarvainen's sigmoid ramp-up exp(-5 (1 - t/T)^2), 1 after T rounds."""
        if self.consistency_rampup == 0:
            return 1.0
        phase = 1.0 - min(round_index, self.consistency_rampup) / self.consistency_rampup
        return math.exp(-5.0 * phase * phase)

    def _mixed_extras(self, model: nn.Module, lr: float) -> dict[str, Any]:
        teacher = self._local_teacher
        generator = self.rng.torch
        weight = self._round_weight
        noise = self.noise_std
        classes = self.federation.num_classes

        def consistency(student: nn.Module, x_l: torch.Tensor, x_u: torch.Tensor) -> torch.Tensor:
            x = torch.cat([x_l, x_u])
            noisy_s = x + noise * torch.randn(x.shape, generator=generator)
            noisy_t = x + noise * torch.randn(x.shape, generator=generator)
            with torch.no_grad():
                target = F.softmax(teacher(noisy_t), dim=1)
            probs = F.softmax(student(noisy_s), dim=1)
            return weight * ((probs - target) ** 2).sum(dim=1).mean() / classes

        return {"extra_loss": consistency,
                "after_step": lambda: ema_update(teacher, model, self.ema_decay)}

    def _fedavg_round(self, selected: np.ndarray, lr: float, context: dict[str, Any]
                      ) -> tuple[float, float, float]:
        if context.get("warmup"):
            return super()._fedavg_round(selected, lr, context)
        train_start = time.perf_counter()
        students, teachers, sizes = [], [], []
        for k in selected:
            local = copy.deepcopy(self.network)
            self._local_teacher = copy.deepcopy(self.teacher)
            self._client_update(local, int(k), lr, context)
            students.append(model_vector(local))
            teachers.append(model_vector(self._local_teacher))
            sizes.append(float(len(self.federation.clients[int(k)])))
        train_seconds = time.perf_counter() - train_start
        student_avg, report_s = aggregate(students, sizes, secure=self.secure)
        teacher_avg, report_t = aggregate(teachers, sizes, secure=self.secure)
        load_model_vector(self.network, student_avg)
        load_model_vector(self.teacher, teacher_avg)
        return (train_seconds, report_s.crypto_seconds + report_t.crypto_seconds,
                report_s.protocol_bytes_per_client + report_t.protocol_bytes_per_client)

    def _eval_model(self) -> nn.Module:
        return self.teacher

    def run_round(self, round_index: int) -> RoundResult:
        self._round_weight = self.consistency_weight * self.consistency_ramp(round_index)
        return super().run_round(round_index)
