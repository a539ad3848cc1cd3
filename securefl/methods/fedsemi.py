"""FedSemi (Long et al., fedsemi.md): teacher–student FSSL with adaptive layer selection.

Each client ``k`` holds a student ``theta_s`` and a teacher ``theta_t`` (both downloaded
from the global model).  Local update (§3.1), for ``R_L`` epochs of mini-batches of size
``B`` drawn from all local data:

* the student sees ``x + eta`` and the teacher ``x + eta'`` (independent weak
  perturbations: Gaussian noise and a random shift of up to ``max_shift`` pixels);
* ``L`` (eq. 4): cross-entropy of the student on the clean and the perturbed labeled
  samples of the batch; ``J`` (eqs. 5/6): MSE or KL between teacher and student
  probabilities on every sample of the batch; loss ``L + beta^k J`` with the ramp eq. (7);
* after every SGD step the teacher follows the EMA eq. (8) with ``alpha^k`` from eq. (9).

Upload (§3.2): the client sends the per-layer divergences ``FSM^k`` (eq. 10); the server
keeps ``Lambda`` (the last ``phi_g`` rounds of them), computes the boundary
``quantile_{1 - tau}(Lambda)`` with ``tau`` from eq. (11) or (12) and sends it back; the
client uploads its teacher and the student layers whose ``FSM`` reaches the boundary.
The server builds the global teacher as the ``|D_k|``-weighted mean of the teachers and
each global student layer from the uploaded student layers, borrowing the teacher's
layer from clients that did not upload it:

    theta_s^G[j] = theta_t^G[j] + sum_{k in U_j} w_k (theta_s^k[j] - theta_t^k[j]),
    w_k = |D_k| / sum_k' |D_k'|  (k, k' over the round's clients),

which equals the paper's "borrow then average" exactly while needing only sums.

Variants: FedSemi-Pi (``tau = 0``, ``alpha = 0``: the teacher *is* the student, one
network crosses the link), FedSemi-MT (``tau = 1``, ``alpha`` from eq. 9 without the
``phi_g`` gate), FedSemi-D (both dynamic, eqs. 9 and 11/12).

Security (``secure="real"``): the teachers are summed with the pairwise-mask secure
aggregation of :func:`securefl.crypto.secure_sum`, and each layer group ``j`` of the
student deltas is securely summed among its uploaders ``U_j``; the server learns the
sums, ``|D_k|``, the ``FSM`` vectors (as in the paper) and who uploaded which layer, never a
client's weights.  A layer chosen by fewer than ``min_group`` clients is not uploaded by
anyone (a secure sum over one client would reveal it); this rule is applied in both
modes, so ``secure="plaintext"`` (same fixed-point sums, computed directly) gives
bit-identical models.

Randomness: the server's :class:`~securefl.fl.SimulationRNG` samples the round's clients;
a client's batch order and perturbations come from its own generator for the round,
:func:`securefl.fl.client_rng` ``(seed, round, client)``, so a round's result does not
depend on the order in which its clients run.
"""

from __future__ import annotations

import copy
import time
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from securefl.errors import ConfigError, InputError
from securefl.methods.base import Method, RoundResult
from securefl.methods.consistency import (
    CONSISTENCY_LOSSES,
    CURVES,
    alpha_ramp,
    beta_ramp,
    consistency_loss,
    ema_update,
    fsm_divergence,
    select_layers,
    tau_linear,
    tau_rectangle,
    upload_boundary,
)
from securefl.fl.rng import SimulationRNG, client_rng
from securefl.fl.sampling import sample_clients
from securefl.fl.training import make_optimizer, predict_labels
from securefl.fl.aggregation import secure_weighted_sum
from securefl.methods.common import build_network, layer_groups, perturb


class FedSemi(Method):
    """FedSemi with ``variant`` "pi", "mt" or "d" (see the module docstring).

    Defaults are the paper's (§4.1, Tables 4 and 6): ``R_G = 50`` rounds, ``B = 10``
    clients per round, ``R_L = 5`` local epochs, batch 10, SGD lr 0.01, momentum 0.9,
    weight decay 1e-4, MSE consistency, ``phi_l = 10``, ``alpha_max = 0.999``,
    ``mu = 0.5``, linear curve with ``phi_g = 3`` (rectangle: ``phi_g = 10``,
    ``phi_end = 40``).
    """

    name: ClassVar[str] = "fedsemi"
    variant: ClassVar[str] = "d"

    def __init__(
        self,
        *,
        secure: str = "plaintext",
        seed: int = 0,
        crypto_seed: int | None = None,
        sum_backend: str = "secagg",
        model: str = "auto",
        rounds: int = 50,
        clients_per_round: int = 10,
        local_epochs: int = 5,
        batch_size: int = 10,
        lr: float = 0.01,
        momentum: float = 0.9,
        weight_decay: float = 1e-4,
        consistency: str = "mse",
        phi_l: float = 10.0,
        phi_g: float | None = None,
        phi_end: float = 40.0,
        mu: float = 0.5,
        alpha_max: float = 0.999,
        curve: str = "linear",
        noise_std: float = 0.15,
        max_shift: int | None = None,
        min_group: int = 2,
    ) -> None:
        super().__init__(secure=secure, seed=seed, crypto_seed=crypto_seed, sum_backend=sum_backend)
        self.model = model
        self.rounds = rounds
        self.clients_per_round = clients_per_round
        self.local_epochs = local_epochs
        self.batch_size = batch_size
        self.lr = lr
        self.momentum = momentum
        self.weight_decay = weight_decay
        self.consistency = consistency
        self.phi_l = phi_l
        self.phi_g = phi_g
        self.phi_end = phi_end
        self.mu = mu
        self.alpha_max = alpha_max
        self.curve = curve
        self.noise_std = noise_std
        self.max_shift = max_shift
        self.min_group = min_group

    # ------------------------------------------------------------------ setup
    def _validate(self) -> None:
        if self.consistency not in CONSISTENCY_LOSSES:
            raise InputError("consistency", self.consistency, f"must be one of {CONSISTENCY_LOSSES}")
        if self.curve not in CURVES:
            raise InputError("curve", self.curve, f"must be one of {CURVES}")
        for key in ("rounds", "clients_per_round", "local_epochs", "batch_size", "min_group"):
            value = getattr(self, key)
            if not isinstance(value, (int, np.integer)) or value < 1:
                raise InputError(key, value, "must be a positive integer")
        if self.lr <= 0:
            raise InputError("lr", self.lr, "must be positive")
        if self.noise_std < 0:
            raise InputError("noise_std", self.noise_std, "must be non-negative")
        if self.variant == "d" and self.rounds <= self.tipping_point:
            raise InputError("rounds", self.rounds, f"FedSemi-D needs more rounds (R_G) than phi_g={self.tipping_point}")

    @property
    def tipping_point(self) -> float:
        """``phi_g``: Table 6 gives 3 for the linear curve and 10 for the rectangle."""
        if self.phi_g is not None:
            return float(self.phi_g)
        return 3.0 if self.curve == "linear" else 10.0

    def setup(self, federation: Any) -> None:
        self._validate()
        if not federation.labeled_clients:
            raise ConfigError(f"{self.name}: no client holds labels (labels at the server?); FedSemi needs labels at clients")
        self.federation = federation
        self.num_classes = federation.num_classes
        self.rng = SimulationRNG.from_seed(self.seed)
        self.student = build_network(self.model, federation, seed=self.seed)
        self.teacher = copy.deepcopy(self.student)
        self.groups = layer_groups(self.student)
        self.clients = [
            (torch.from_numpy(np.ascontiguousarray(c.x, dtype=np.float32)),
             torch.from_numpy(np.where(c.labeled, c.y, -1).astype(np.int64)))
            for c in federation.clients
        ]
        self.sizes = np.array([len(c) for c in federation.clients], dtype=np.float64)
        self.selections = np.zeros(federation.num_clients, dtype=np.int64)
        self.history: list[np.ndarray] = []
        self.last_upload_rate = 0.0
        shape = federation.input_shape
        self.shift = self.max_shift if self.max_shift is not None else (int(round(0.07 * shape[-1])) if len(shape) == 3 else 0)

    # ------------------------------------------------------------------ schedules
    def tau(self, global_round: int) -> float:
        """Communication rate of the student at 1-based round ``global_round``."""
        if self.variant == "pi":
            return 0.0
        if self.variant == "mt":
            return 1.0
        if self.curve == "linear":
            return tau_linear(global_round, total_rounds=self.rounds, phi_g=self.tipping_point, mu=self.mu)
        return tau_rectangle(global_round, total_rounds=self.rounds, phi_g=self.tipping_point, phi_end=self.phi_end, mu=self.mu)

    def alpha(self, global_round: int, local_epochs: float) -> float:
        """EMA decay for the epoch that brings the client's count to ``local_epochs``."""
        if self.variant == "pi":
            return 0.0
        gate = 0.0 if self.variant == "mt" else self.tipping_point
        return alpha_ramp(global_round, local_epochs, phi_g=gate, alpha_max=self.alpha_max)

    # ------------------------------------------------------------------ local update
    def _local_update(self, client: int, global_round: int,
                      generator: torch.Generator) -> tuple[torch.nn.Module, torch.nn.Module]:
        """Client ``client``'s local update in 1-based round ``global_round``, drawing from
        ``generator`` (its generator for the round) only; returns (teacher, student)."""
        x, y = self.clients[client]
        student = copy.deepcopy(self.student)
        teacher = copy.deepcopy(self.teacher)
        teacher.eval()
        student.train()
        optimizer = make_optimizer(student, lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay)
        done = int(self.selections[client]) * self.local_epochs
        for epoch in range(self.local_epochs):
            beta = beta_ramp(done + epoch, phi_l=self.phi_l)
            alpha = self.alpha(global_round, done + epoch + 1)
            order = torch.randperm(len(y), generator=generator)
            for start in range(0, len(order), self.batch_size):
                batch = order[start : start + self.batch_size]
                xb, yb = x[batch], y[batch]
                labeled = yb >= 0
                x_student = perturb(xb, self.noise_std, self.shift, generator)
                x_teacher = perturb(xb, self.noise_std, self.shift, generator)
                n_lab = int(labeled.sum())
                logits = student(torch.cat([x_student, xb[labeled]]) if n_lab else x_student)
                student_logits = logits[: len(yb)]
                loss = student_logits.sum() * 0.0
                if n_lab:
                    targets = yb[labeled]
                    loss = F.cross_entropy(torch.cat([student_logits[labeled], logits[len(yb):]]), torch.cat([targets, targets]))
                if beta > 0:
                    with torch.no_grad():
                        teacher_logits = teacher(x_teacher)
                    loss = loss + beta * consistency_loss(teacher_logits, student_logits, self.consistency)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                ema_update(teacher, student, alpha)
        return teacher, student

    # ------------------------------------------------------------------ round
    def run_round(self, round_index: int) -> RoundResult:
        start = time.perf_counter()
        global_round = round_index + 1
        m = min(self.clients_per_round, self.federation.num_clients)
        chosen = sample_clients(self.rng.numpy, self.federation.num_clients, m)
        def local_update(client: int) -> tuple[float, list[np.ndarray], list[np.ndarray]]:
            t0 = time.perf_counter()
            teacher, student = self._local_update(client, global_round,
                                                  client_rng(self.seed, round_index, client).torch)
            seconds = time.perf_counter() - t0
            self.selections[client] += 1
            return seconds, self.groups.arrays(teacher), self.groups.arrays(student)

        updates = self._per_client(chosen, local_update)
        train_seconds = float(sum(u[0] for u in updates))
        teachers, students = [u[1] for u in updates], [u[2] for u in updates]
        fsms = [fsm_divergence(t, s) for t, s in zip(teachers, students)]
        # server: boundary from the FSM history of the last phi_g rounds, this one included
        self.history.append(np.stack(fsms))
        keep = max(1, int(self.tipping_point))
        self.history = self.history[-keep:]
        tau = self.tau(global_round)
        boundary = upload_boundary(np.concatenate([h.ravel() for h in self.history]), tau)
        masks = np.stack([select_layers(f, boundary) for f in fsms])  # (m, V)
        uploaders = masks.sum(axis=0)
        masks[:, uploaders < self.min_group] = False

        sizes = self.sizes[chosen]
        teacher_vectors = [np.concatenate([a.ravel() for a in t]) for t in teachers]
        teacher_sum, total_size, report = secure_weighted_sum(teacher_vectors, sizes, secure=self.secure,
                                                                sum_backend=self.sum_backend)
        crypto_seconds = report.crypto_seconds
        protocol_bytes = report.protocol_bytes_per_client * m
        model_bytes = 2.0 * report.payload_bytes * m  # teacher down and up
        new_teacher = self.groups.split(teacher_sum / total_size)
        new_student = [layer.copy() for layer in new_teacher]
        for j in np.flatnonzero(masks.any(axis=0)):
            members = np.flatnonzero(masks[:, j])
            deltas = [students[i][j] - teachers[i][j] for i in members]
            delta_sum, _, group_report = secure_weighted_sum(deltas, sizes[members], secure=self.secure,
                                                        sum_backend=self.sum_backend)
            crypto_seconds += group_report.crypto_seconds
            protocol_bytes += group_report.protocol_bytes_per_client * len(members)
            model_bytes += 2.0 * group_report.payload_bytes * len(members)  # student layer up, and down next round
            new_student[j] = new_teacher[j] + delta_sum / total_size
        protocol_bytes += m * (fsms[0].nbytes + 8)  # FSM vector up, boundary down
        self.groups.load(self.teacher, new_teacher)
        self.groups.load(self.student, new_student)
        self.last_upload_rate = float(masks.mean())

        return RoundResult(
            round=round_index,
            seconds=time.perf_counter() - start,
            train_seconds=train_seconds,
            crypto_seconds=crypto_seconds,
            bytes_model_per_client=model_bytes / m,
            bytes_protocol_per_client=protocol_bytes / m,
        )

    def predict(self, x: np.ndarray) -> np.ndarray:
        """The global teacher's labels (the model FedSemi evaluates)."""
        return predict_labels(self.teacher, x)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        return {
            "teacher": copy.deepcopy(self.teacher.state_dict()),
            "student": copy.deepcopy(self.student.state_dict()),
            "selections": self.selections.copy(),
            "history": [h.copy() for h in self.history],
            "rng": self.rng.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.teacher.load_state_dict(state["teacher"])
        self.student.load_state_dict(state["student"])
        self.selections = state["selections"].copy()
        self.history = [h.copy() for h in state["history"]]
        self.rng.load_state_dict(state["rng"])


class FedSemiPi(FedSemi):
    """FedSemi-Pi: ``tau = 0``, ``alpha = 0`` (Pi-model; one network on the link)."""

    name: ClassVar[str] = "fedsemi-pi"
    variant: ClassVar[str] = "pi"


class FedSemiMT(FedSemi):
    """FedSemi-MT: ``tau = 1`` (every student layer uploaded), ``alpha`` from eq. (9)."""

    name: ClassVar[str] = "fedsemi-mt"
    variant: ClassVar[str] = "mt"


class FedSemiD(FedSemi):
    """FedSemi-D: ``tau`` from eq. (11)/(12) and ``alpha`` from eq. (9)."""

    name: ClassVar[str] = "fedsemi-d"
    variant: ClassVar[str] = "d"
