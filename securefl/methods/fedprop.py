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
the same Hamming matrix and sums directly.  The clients' shares of the LSH seed (agreed
by key exchange, unknown to the server) come from ``crypto_seed_for("lsh", round)``:
the OS CSPRNG in real mode without a crypto seed, never the simulation seed; real and
plaintext runs given one ``crypto_seed`` use the same hyperplanes and give identical
pseudo-labels (:mod:`securefl.methods.base`).

Who learns what (semi-honest): the server learns the Hamming matrix H between the
selected clients' LSH codes (an approximation of their features' cosine similarities)
and the aggregate model; client j learns the columns S_L^(j) of the propagation matrix
for its own labeled points and its own pseudo-labels.  No party sees another's data,
labels or individual model.

FedProp+MT (:class:`FedPropMT`): FedProp combined with FedAvg+MT
(:class:`securefl.methods.baselines.MeanTeacherRounds`): the server broadcasts a student
and a mean teacher; clients train the student on FedProp's loss plus the mean-teacher
consistency ``w_t * mean_i ||softmax(student(eta(x_i))) - softmax(teacher(eta'(x_i)))||^2 / C``
(Tarvainen & Valpola 2017: independent random translations and Gaussian input noise, sigmoid
ramp-up of w_t over ``consistency_rampup`` rounds), update the teacher as an EMA of the student after every
step, and return both; the server averages students and teachers separately (two secure
sums).  Pseudo-labels come from the teacher's features and the teacher is evaluated.

Defaults: FedProp Appendix A (L = 4096, k = 10, alpha = 0.99, E = 5, |B_L| <= 50,
lr 0.1, momentum 0.9, weight decay 2e-4, 5 clients per round, cosine decay over 2000
rounds, random translations as augmentation: ``max_shift``, applied to the warm-up too).
The paper does not state the number of warm-up rounds; ``warmup_rounds=10``.

Split into halves (:mod:`securefl.methods.halves`): ClientUpdate and the model's secure
aggregation run on the method's transport (client halves
:class:`~securefl.methods.fedavg_clients.PseudoLabelClient` and
:class:`~securefl.methods.fedavg_clients.PseudoLabelMTClient`: the round's
pseudo-labels and weights travel down in the ``train`` request).  CrossClientLP itself
still runs every party in this process (:meth:`FedProp._prepare_round` reads the selected
clients' features and calls :func:`securefl.protocols.cross_client_lp`): a simulation
step, so FedProp runs in process only (``deployable = False``) until CrossClientLP is
converted into exchanges (``docs/transport-phase2.md``).
"""

from __future__ import annotations

import time

import numpy as np
import torch
from torch import nn

from typing import Any, ClassVar

from securefl.crypto.projection import seconds_at_bandwidth
from securefl.errors import InputError
from securefl.fl import extract_features
from securefl.methods.base import RoundResult, label_digest
from securefl.methods.baselines import MeanTeacherRounds, PseudoLabelMethod
from securefl.methods.fedavg_clients import PseudoLabelClient, PseudoLabelMTClient


class FedProp(PseudoLabelMethod):
    """FedProp: cross-client label propagation pseudo-labels (Algorithm 2)."""

    name = "fedprop"
    client_half = PseudoLabelClient
    deployable: ClassVar[bool] = False

    def __init__(self, *, secure: str = "plaintext", seed: int = 0, crypto_seed: int | None = None,
                 sum_backend: str = "secagg", model: str = "auto",
                 clients_per_round: int = 5, local_epochs: int = 5, batch_size: int = 50,
                 lr: float = 0.1, momentum: float = 0.9, weight_decay: float = 2e-4,
                 lr_decay_rounds: int | None = 2000, prox_mu: float = 0.0,
                 warmup_rounds: int = 10, k: int = 10, alpha: float = 0.99,
                 L: int = 4096, max_shift: int | None = None,
                 hamming_backend: str = "shade") -> None:
        super().__init__(secure=secure, seed=seed, crypto_seed=crypto_seed,
                         sum_backend=sum_backend, model=model,
                         clients_per_round=clients_per_round, local_epochs=local_epochs,
                         batch_size=batch_size, lr=lr, momentum=momentum,
                         weight_decay=weight_decay, lr_decay_rounds=lr_decay_rounds,
                         prox_mu=prox_mu, max_shift=max_shift, warmup_rounds=warmup_rounds)
        self.k = k
        self.alpha = alpha
        self.L = L
        self.hamming_backend = hamming_backend

    def _feature_model(self) -> nn.Module:
        return self.network

    def _prepare_round(self, selected: np.ndarray, round_index: int) -> dict[str, Any]:
        """CrossClientLP on the selected clients' features (in process, every party here):
        per-client pseudo-labels and weights for the train requests, and the round's
        pseudo-label digest and accuracy."""
        clients = [self.federation.clients[int(k)] for k in selected]
        features = [extract_features(self._feature_model(), c.x) for c in clients]
        labels = [c.observed_labels() for c in clients]
        start = time.perf_counter()
        pseudo, weights, protocol_bytes = self._pseudo_labels(features, labels)
        seconds = time.perf_counter() - start
        hits = total = 0
        for client, pl in zip(clients, pseudo):
            unl = ~client.labeled
            hits += int((pl[unl] == client.y[unl]).sum())
            total += int(unl.sum())
        return {"crypto_seconds": seconds, "protocol_bytes": protocol_bytes,
                "pseudo": dict(zip((int(k) for k in selected), zip(pseudo, weights))),
                "pseudo_label_accuracy": hits / total if total else None,
                "pseudo_label_digest": label_digest([np.asarray(p) for p in pseudo])}

    def _pseudo_labels(self, features: list[np.ndarray], labels: list[np.ndarray]
                       ) -> tuple[list[np.ndarray], list[np.ndarray], float]:
        """Per-client pseudo-labels and weights, plus protocol bytes per client."""
        from securefl.protocols.crossclient import cross_client_lp

        if not isinstance(self.L, (int, np.integer)) or self.L < 1:
            raise InputError("L", self.L, "must be a positive integer")
        self._phase(f"CrossClientLP ({self.secure})")
        result = cross_client_lp(features, labels, num_classes=self.federation.num_classes,
                                 k=self.k, alpha=self.alpha, L=self.L, backend=self.secure,
                                 seed=self.crypto_seed_for("lsh", self.rounds_done),
                                 workers=torch.get_num_threads(),
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


class FedPropMT(MeanTeacherRounds, FedProp):
    """FedProp + mean teacher (§5.1)."""

    name = "fedprop-mt"
    client_half = PseudoLabelMTClient

    def __init__(self, *, secure: str = "plaintext", seed: int = 0, crypto_seed: int | None = None,
                 sum_backend: str = "secagg", model: str = "auto",
                 clients_per_round: int = 5, local_epochs: int = 5, batch_size: int = 50,
                 lr: float = 0.1, momentum: float = 0.9, weight_decay: float = 2e-4,
                 lr_decay_rounds: int | None = 2000, prox_mu: float = 0.0,
                 warmup_rounds: int = 10, k: int = 10, alpha: float = 0.99, L: int = 4096,
                 max_shift: int | None = None, ema_decay: float = 0.99, consistency_weight: float = 100.0,
                 consistency_rampup: int = 5, noise_std: float = 0.1,
                 hamming_backend: str = "shade") -> None:
        super().__init__(secure=secure, seed=seed, crypto_seed=crypto_seed,
                         sum_backend=sum_backend, model=model,
                         clients_per_round=clients_per_round, local_epochs=local_epochs,
                         batch_size=batch_size, lr=lr, momentum=momentum,
                         weight_decay=weight_decay, lr_decay_rounds=lr_decay_rounds,
                         prox_mu=prox_mu, warmup_rounds=warmup_rounds, k=k, alpha=alpha, L=L,
                         max_shift=max_shift, hamming_backend=hamming_backend)
        self.ema_decay = ema_decay
        self.consistency_weight = consistency_weight
        self.consistency_rampup = consistency_rampup
        self.noise_std = noise_std

    def _feature_model(self) -> nn.Module:
        return self.teacher
