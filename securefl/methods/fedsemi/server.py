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
aggregation of :func:`securefl.runtime.secure_sum`, and each layer group ``j`` of the
student deltas is securely summed among its uploaders ``U_j``; the server learns the
sums, ``|D_k|``, the ``FSM`` vectors (as in the paper) and who uploaded which layer, never a
client's weights.  A layer chosen by fewer than ``min_group`` clients is not uploaded by
anyone (a secure sum over one client would reveal it); this rule is applied in both
modes, so ``secure="plaintext"`` (same fixed-point sums, computed directly) gives
bit-identical models.

**Server half and client half** (:mod:`securefl.methods.halves`).  The class here is the
server half: sampling, the history ``Lambda``, the boundary, which client sums which layer,
and the new global networks; it reads only public facts of the federation.  Its client
half, :class:`securefl.methods.fedsemi.client.FedSemiClient`, trains and contributes.  A
round is the exchange ``train`` (global student and teacher down, the FSM vector up), then
``upload`` (boundary and the sums' parameters down; the teacher and the chosen layers'
deltas up as secure-sum inputs, :mod:`securefl.fl.group_sums`: one sum for the teachers
and one per chosen layer among its uploaders ``U_j``, all in the same four secure-sum
exchanges in real mode).  A client keeps its own count of rounds trained (the ``x`` of
eqs. 7 and 9) in its state Record.  Dropouts: a client lost in ``train`` sends no FSM and
joins no sum; after that every sum follows secure aggregation (lost before its masked
input: in none of its sums, so neither its teacher nor its layers count, and the total
weight ``sum_k w_k`` is over the teacher sum's survivors; lost at unmask: in all of them);
a sum left below its threshold (a majority of its members) raises
:class:`~securefl.errors.DropoutError`.

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

from securefl.errors import ConfigError, DropoutError, ProtocolError
from securefl.fl.group_sums import GroupSumPlan
from securefl.fl.rng import SimulationRNG
from securefl.fl.sampling import sample_clients
from securefl.fl.training import predict_labels
from securefl.methods.base import Method, RoundResult, round_bookkeeping
from securefl.methods.common import build_network, layer_groups
from securefl.methods.consistency import (
    alpha_ramp,
    select_layers,
    tau_linear,
    tau_rectangle,
    upload_boundary,
)
from securefl.methods.fedsemi.client import TEACHER, TRAIN, UPLOAD, FedSemiClient, flat, layer_sum
from securefl.methods.fedsemi.hyper import FedSemiDHyper, FedSemiHyper, tipping_point
from securefl.runtime.costs import RoundMeter
from securefl.runtime.transport import Record, Transport


class FedSemi(Method):
    """FedSemi with ``variant`` "pi", "mt" or "d" (see the module docstring).

    Defaults are the paper's (§4.1, Tables 4 and 6): ``R_G = 50`` rounds, ``B = 10``
    clients per round, ``R_L = 5`` local epochs, batch 10, SGD lr 0.01, momentum 0.9,
    weight decay 1e-4, MSE consistency, ``phi_l = 10``, ``alpha_max = 0.999``,
    ``mu = 0.5``, linear curve with ``phi_g = 3`` (rectangle: ``phi_g = 10``,
    ``phi_end = 40``).
    """

    name: ClassVar[str] = "fedsemi"
    hyper = FedSemiHyper
    variant: ClassVar[str] = "d"
    client_half = FedSemiClient

    # ------------------------------------------------------------------ setup
    @property
    def tipping_point(self) -> float:
        """``phi_g`` (:func:`securefl.methods.fedsemi.hyper.tipping_point`)."""
        return tipping_point(self.phi_g, self.curve)

    def setup(self, federation: Any, *, transport: Transport | None = None) -> None:
        """Build the global networks and connect to ``transport`` (default: in process over
        ``federation``'s clients).  The server half reads only the federation's public
        facts (number of clients, which hold labels, classes, input shape)."""
        self.check_hyper()
        if not federation.labeled_clients:
            raise ConfigError(f"{self.name}: no client holds labels (labels at the server?); FedSemi needs labels at clients")
        self.federation = federation
        self.num_classes = federation.num_classes
        self.rng = SimulationRNG.from_seed(self.seed)
        self.student = build_network(self.model, federation, seed=self.seed, device=self.torch_device)
        self.teacher = copy.deepcopy(self.student)
        self.groups = layer_groups(self.student)
        self.history: list[np.ndarray] = []
        self.last_upload_rate = 0.0
        self._connect(federation, transport)

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

    # ------------------------------------------------------------------ round
    def run_round(self, round_index: int) -> RoundResult:
        """One round of the server half: ``train`` (FSM vectors up), the boundary, then
        ``upload`` (+ the four secure-sum exchanges in real mode) into the new teacher and
        student (module docstring)."""
        start = time.perf_counter()
        global_round = round_index + 1
        m = min(self.clients_per_round, self.federation.num_clients)
        chosen = [int(k) for k in sample_clients(self.rng.numpy, self.federation.num_clients, m)]
        meter = RoundMeter(self.transport, chosen)
        networks = {"student": flat(self.groups.arrays(self.student)),
                    "teacher": flat(self.groups.arrays(self.teacher))}
        train = self.transport.exchange(TRAIN, {k: Record(dict(networks), {"round": int(round_index)})
                                                for k in chosen})
        meter.add(train)
        trained = [k for k in chosen if k in train.replies]
        if not trained:
            raise DropoutError(f"round {round_index}: no client of {chosen} finished training")
        width = len(self.groups.names)
        fsms = []
        for k in trained:
            fsm = np.asarray(train.replies[k].arrays.get("fsm"), dtype=np.float64)
            if fsm.shape != (width,):
                raise ProtocolError(f"client {k}: FSM vector must have shape ({width},)")
            fsms.append(fsm)
        # server: boundary from the FSM history of the last phi_g rounds, this one included
        self.history.append(np.stack(fsms))
        keep = max(1, int(self.tipping_point))
        self.history = self.history[-keep:]
        tau = self.tau(global_round)
        boundary = upload_boundary(np.concatenate([h.ravel() for h in self.history]), tau)
        masks = np.stack([select_layers(f, boundary) for f in fsms])  # (m, V)
        uploaders = masks.sum(axis=0)
        masks[:, uploaders < self.min_group] = False

        sizes = [a.size for a in self.groups.split(networks["teacher"])]
        groups = {TEACHER: trained}
        dims = {TEACHER: int(networks["teacher"].size)}
        layers = np.flatnonzero(masks.any(axis=0))
        for j in layers:
            groups[layer_sum(j)] = [trained[i] for i in np.flatnonzero(masks[:, j])]
            dims[layer_sum(j)] = int(sizes[j])
        plan = GroupSumPlan.new(secure=self.secure, sum_backend=self.sum_backend, groups=groups, dims=dims)
        requests = {k: plan.request(k, config={"round": int(round_index), "boundary": float(boundary)})
                    for k in trained}
        upload = self.transport.exchange(UPLOAD, requests)
        meter.add(upload)
        outcome = plan.collect(self.transport, upload)
        meter.add(outcome.exchanges)

        total_size = outcome.weights[TEACHER]
        new_teacher = self.groups.split(outcome.totals[TEACHER] / total_size)
        new_student = [layer.copy() for layer in new_teacher]
        model_bytes = 2.0 * outcome.payload_bytes[TEACHER] * len(trained)  # teacher down and up
        protocol_bytes = outcome.protocol_bytes_per_member[TEACHER] * len(trained)
        for j in layers:
            name = layer_sum(j)
            count = len(groups[name])
            protocol_bytes += outcome.protocol_bytes_per_member[name] * count
            model_bytes += 2.0 * outcome.payload_bytes[name] * count  # student layer up, and down next round
            new_student[j] = new_teacher[j] + outcome.totals[name] / total_size
        protocol_bytes += len(trained) * (fsms[0].nbytes + 8)  # FSM vector up, boundary down
        self.groups.load(self.teacher, new_teacher)
        self.groups.load(self.student, new_student)
        self.last_upload_rate = float(masks.mean())

        survivors = sorted(set.intersection(*(set(v) for v in outcome.survivors.values())))
        dropped = {"train": tuple(k for k in chosen if k not in train.replies), **outcome.dropped}
        return RoundResult(
            round=round_index,
            seconds=time.perf_counter() - start,
            train_seconds=meter.compute_seconds,
            crypto_seconds=outcome.crypto_seconds,
            bytes_model_per_client=model_bytes / len(trained),
            bytes_protocol_per_client=protocol_bytes / len(trained),
            **round_bookkeeping(meter, members=chosen, survivors=survivors, dropped=dropped,
                                failed={**train.failed, **outcome.failed}),
        )

    def predict(self, x: np.ndarray) -> np.ndarray:
        """The global teacher's labels (the model FedSemi evaluates)."""
        return predict_labels(self.teacher, x)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        return {
            "teacher": copy.deepcopy(self.teacher.state_dict()),
            "student": copy.deepcopy(self.student.state_dict()),
            "history": [h.copy() for h in self.history],
            "rng": self.rng.state_dict(),
            "clients": self._client_states(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.teacher.load_state_dict(state["teacher"])
        self.student.load_state_dict(state["student"])
        self.history = [h.copy() for h in state["history"]]
        self.rng.load_state_dict(state["rng"])
        self._adopt_client_states(state.get("clients", {}))


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
    hyper = FedSemiDHyper
    variant: ClassVar[str] = "d"
