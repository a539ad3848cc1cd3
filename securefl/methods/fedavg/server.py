"""FedAvg baselines and the shared FedAvg round machinery of FedProp.

* ``fedavg-labeled`` (:class:`FedAvgLabeled`): FedAvg on the clients' labeled data only
  -- the lower bound every SSL method must beat.  Rounds sample among label-holding
  clients only (the others have nothing to train on).
* ``fedavg-supervised`` (:class:`FedAvgSupervised`): FedAvg with every training label
  revealed -- the upper bound.
* ``fedavg-locallp`` (:class:`FedAvgLocalLP`): FedProp's key ablation FedAvg+PL(localLP):
  identical to FedProp except that each client runs label propagation on its *own*
  features only (:func:`securefl.protocols.label_propagation`), so no cross-client graph
  and no protocol traffic.
* ``fedavg-pl`` (:class:`FedAvgPL`): FedProp Table 1's FedAvg+PL(network), which
  "repeatedly uses network predictions to pseudo-label sampled client data" (§5.1):
  Algorithm 2 with the pseudo-labels of a round taken from the broadcast model,
  ``y^_i = argmax_c softmax(f_theta(x_i))_c``, instead of label propagation.  The paper
  gives no threshold, weighting or warm-up for it; ours: the labeled-only warm-up of
  FedProp (``warmup_rounds``), weight 1 per pseudo-label (§5.1 names entropy weights as
  what FedSem+ adds), every prediction kept (Lee 2013).  ``threshold`` (keep only points
  whose top probability exceeds it) and ``entropy_weights`` (FedProp's
  ``omega = 1 - H(p)/log C`` on the softmax) are there to be chosen on validation, as the
  paper chose each method's hyper-parameters.
* ``fedavg-mt`` (:class:`FedAvgMT`): FedProp Table 1's FedAvg+MT (§5.1): "the server
  broadcasts both a global (student) model and a teacher model to the clients. Clients
  locally train the student model and update the teacher model as the empirical moving
  average of the student. Clients then return both models to the server which separately
  averages the local students and teachers."  The client loss is Mean Teacher's
  (Tarvainen & Valpola 2017): cross-entropy on the labeled part of each batch ``B_L u B_U``
  (summed and divided by ``|B|``, as their code does) plus
  ``w_t mean_i ||softmax(student(eta(x_i))) - softmax(teacher(eta'(x_i)))||^2 / C`` over the
  whole batch, ``eta, eta'`` independent perturbations as theirs (a random translation by the
  augmentation's range, then Gaussian noise of std ``noise_std``), the sigmoid ramp-up
  ``w_t = consistency_weight exp(-5 (1 - t/T)^2)`` over ``T = consistency_rampup`` rounds,
  EMA decay ``ema_decay`` after every step; the teacher is evaluated.  FedProp gives no
  values; ours are Tarvainen & Valpola's (consistency weight 100, EMA 0.99 during the
  ramp-up) and the same as FedProp+MT's, so that FedProp+MT = FedProp + FedAvg+MT exactly.
* ``fedavg-fixmatch`` (:class:`FedAvgFixMatch`): FedAvg with FixMatch (Sohn et al. 2020)
  as each client's local training -- FedSemi Table 1's FedFixMatch (after FedMatch, Jeong
  et al. 2021): per step a labeled batch of ``batch_size`` and an unlabeled batch of
  ``unlabeled_ratio * batch_size`` (mu); the current local model's prediction on a weak
  view (the translation below) is the pseudo-label where its probability is at least
  ``threshold`` (tau), and the cross-entropy to it on a strong view (RandAugment with
  ``num_ops`` random operations at random magnitudes, then Cutout of side up to
  ``cutout``; :mod:`securefl.methods.randaugment`) is added with weight
  ``unlabeled_weight`` (lambda_u).  Defaults are FixMatch's (tau = 0.95, mu = 7,
  lambda_u = 1, 2 operations, Cutout 0.5); FedSemi gives none of its own.  No warm-up
  (the threshold keeps early pseudo-labels out), and clients without labels train on the
  unlabeled term alone.

Every round: the server samples clients (:func:`securefl.fl.sample_clients`), broadcasts
the model, the clients run ClientUpdate (E epochs SGD, momentum, weight decay, optional
FedProx mu), and ServerUpdate is FedAvg weighted by |D_k|: the clients upload
``[|D_k| theta_k, |D_k|]`` to a secure sum when ``secure="real"``
(:mod:`securefl.fl.uploads`; bit-identical to :func:`securefl.fl.aggregate`).

**Server half and client half** (:mod:`securefl.methods.halves`).  The classes here are
the server halves: sampling, the round's inputs (learning rate, consistency weight,
warm-up flag), aggregation; they read only public facts of the federation (number of
clients, which hold labels, classes, input shape).  Each names its client half in
:mod:`securefl.methods.fedavg.client` (``client_half``), where ClientUpdate, local
pseudo-labelling and the upload happen; a round is the exchange ``train`` (+ the three
secure-sum exchanges in real mode) on the method's transport.  The learning
rate follows FedProp's cosine annealing ``lr_t = lr (1 + cos(pi t / lr_decay_rounds)) / 2``
(``lr_decay_rounds=None`` or ``0``: constant).

Augmentation: every method here trains on randomly translated batches
(:func:`securefl.methods.common.translation`, ``max_shift``), the labeled-only warm-up
and the baselines included: FedProp's Appendix A.1 applies its augmentation to all the
methods it compares, and §5.1 calls FedAvg+PL(localLP) "otherwise identical" to FedProp.
``max_shift=0`` turns it off (FedSemi Table 1's plain "FedAvg" row is without
augmentation, its "FedAvg+" row with); ``hflip=True`` adds a random horizontal flip
after the translation (FedProp App. A's CIFAR augmentation).  Models with dropout (``cnn13``,
``cnn_cifar``) draw their masks from the client's generator
(:func:`securefl.models.dropout_generator`).

Randomness: the server's :class:`~securefl.fl.SimulationRNG` draws the sampled clients
(warm-up rounds included) and nothing else; every draw of a client's local update (batch
order, translations, dropout masks, mean-teacher noise) comes from that client's
generators for the round, :func:`securefl.fl.client_rng` ``(seed, round, client)``, so a
round's result does not depend on the order in which its clients run.  Warm-up round
``w`` (0-based) is round ``-(w + 1)``.

Defaults are FedProp's Appendix A (CIFAR-10): 5 clients per round, E = 5, |B| = 50,
lr 0.1, momentum 0.9, weight decay 2e-4, cosine decay to 0 at 2000 rounds.  FedSemi's
MNIST setting uses clients_per_round=10, batch_size=10, lr=0.01, weight_decay=1e-4,
lr_decay_rounds=0.

Who learns what: the server sees only the aggregate of the sampled clients' models (with
``secure="real"``) and the sampled client ids; clients see the global model.  FedAvg+MT
sums students and teachers in two secure aggregations (in the same exchanges).
FedAvg+PL's and FedAvg+PL(localLP)'s pseudo-labels are made at the client and leave it
only as the simulation's report (run config ``reports``; :mod:`securefl.methods.halves`),
which the server half never uses.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from torch import nn

from securefl.data.federation import Federation
from securefl.errors import InputError
from securefl.fl import (
    SimulationRNG,
    load_model_vector,
    model_bytes,
    model_vector,
    predict_labels,
    sample_clients,
)
from securefl.fl.uploads import UploadPlan
from securefl.methods.base import Method, RoundResult, round_bookkeeping
from securefl.methods.fedavg.client import (
    TRAIN,
    FedAvgMTClient,
    FixMatchClient,
    LabeledClient,
    LocalLPClient,
    NetworkPLClient,
    SupervisedClient,
)
from securefl.methods.fedavg.hyper import (
    FedAvgHyper,
    FedAvgMTHyper,
    FixMatchHyper,
    LocalLPHyper,
    NetworkPLHyper,
    PseudoLabelHyper,
)
from securefl.methods.halves import collect_pseudo_labels
from securefl.models import build_model
from securefl.runtime.costs import RoundMeter
from securefl.runtime.transport import Exchange, Transport


@dataclass
class FedAvgRound:
    """What one FedAvg round over the transport cost and who took part."""

    compute_seconds: float
    crypto_seconds: float
    protocol_bytes: float
    bookkeeping: dict[str, Any]
    """:func:`~securefl.methods.base.round_bookkeeping` of the round."""
    train: Exchange = field(repr=False)


class FedAvgMethod(Method):
    """FedAvg's server half with pluggable client halves (``client_half``)."""

    hyper = FedAvgHyper
    uses_pseudo_labels: ClassVar[bool] = False

    # ----------------------------------------------------------------- lifecycle
    def setup(self, federation: Federation, *, transport: Transport | None = None) -> None:
        """Build the global model, connect to ``transport`` (default: in process over
        ``federation``'s clients) and run any warm-up.  The server half reads only the
        federation's public facts (number of clients, which hold labels, shape)."""
        self.check_hyper()
        self.federation = federation
        self.rng = SimulationRNG.from_seed(self.seed)
        self.network = build_model(self.model, input_shape=tuple(federation.input_shape),
                                   num_classes=federation.num_classes, seed=self.seed,
                                   device=self.torch_device)
        self.rounds_done = 0
        self._connect(federation, transport)
        self._setup_extra()

    def _setup_extra(self) -> None:
        """Warm-up or extra models (subclasses)."""

    def learning_rate(self, round_index: int) -> float:
        if not self.lr_decay_rounds:
            return self.lr
        t = min(round_index, self.lr_decay_rounds)
        return self.lr * 0.5 * (1.0 + math.cos(math.pi * t / self.lr_decay_rounds))

    def _eligible_clients(self) -> list[int] | None:
        """Clients a round samples from (None: all, with FedProp's labeled/unlabeled rule)."""
        return None

    def _sample(self) -> np.ndarray:
        fed = self.federation
        eligible = self._eligible_clients()
        if eligible is not None:
            if not eligible:
                raise InputError("federation", fed.name, f"{self.name} needs labeled clients")
            count = min(self.clients_per_round, len(eligible))
            picked = self.rng.numpy.choice(np.asarray(eligible), size=count, replace=False)
            return np.sort(picked)
        return sample_clients(self.rng.numpy, fed.num_clients,
                              min(self.clients_per_round, fed.num_clients),
                              labeled=fed.labeled_clients)

    # ----------------------------------------------------------------- a round
    def _prepare_round(self, selected: np.ndarray, round_index: int) -> dict[str, Any]:
        """Server-side work before the clients train; returns the round's context
        (``crypto_seconds`` and ``protocol_bytes`` it cost, anything the requests carry)."""
        return {"crypto_seconds": 0.0, "protocol_bytes": 0.0}

    def _round_models(self, context: dict[str, Any]) -> dict[str, nn.Module]:
        """The global models a round broadcasts and averages, by upload name."""
        return {"model": self.network}

    def _request_config(self, context: dict[str, Any]) -> dict[str, Any]:
        """Round inputs every client of the round gets (besides round, lr, warmup)."""
        return {}

    def _request_arrays(self, client: int, context: dict[str, Any]) -> dict[str, np.ndarray]:
        """Per-client arrays of the train request (besides the models)."""
        return {}

    def _fedavg_round(self, selected: np.ndarray, lr: float, context: dict[str, Any],
                      round_index: int) -> FedAvgRound:
        """The exchange ``train`` to ``selected`` (local training + upload) and the secure
        FedAvg of its uploads into the round's models."""
        members = [int(k) for k in selected]
        meter = RoundMeter(self.transport, members)
        models = self._round_models(context)
        vectors = {name: model_vector(model) for name, model in models.items()}
        plan = UploadPlan.new(secure=self.secure, sum_backend=self.sum_backend, members=members,
                              dims={name: v.size for name, v in vectors.items()})
        shared = {"round": int(round_index), "lr": float(lr),
                  "warmup": bool(context.get("warmup", False)), **self._request_config(context)}
        requests = {}
        for k in members:
            arrays = {**vectors, **self._request_arrays(k, context)}
            requests[k] = plan.request(k, arrays, shared)
        train = self.transport.exchange(TRAIN, requests)
        meter.add(train)
        outcome = plan.collect(self.transport, train)
        meter.add(outcome.exchanges)
        for name, model in models.items():
            load_model_vector(model, outcome.averages[name])
        bookkeeping = round_bookkeeping(meter, members=members, survivors=outcome.survivors,
                                        dropped=outcome.dropped, failed=outcome.failed)
        return FedAvgRound(meter.compute_seconds, outcome.crypto_seconds,
                           outcome.protocol_bytes_per_client, bookkeeping, train)

    def run_round(self, round_index: int) -> RoundResult:
        start = time.perf_counter()
        selected = self._sample()
        context = self._prepare_round(selected, round_index)
        lr = self.learning_rate(round_index)
        done = self._fedavg_round(selected, lr, context, round_index)
        self.rounds_done = round_index + 1
        digest, accuracy = (collect_pseudo_labels(done.train.replies, [int(k) for k in selected])
                            if self.uses_pseudo_labels else (None, None))
        return RoundResult(
            round=round_index, seconds=time.perf_counter() - start,
            train_seconds=done.compute_seconds,
            crypto_seconds=context["crypto_seconds"] + done.crypto_seconds,
            bytes_model_per_client=2.0 * sum(model_bytes(m) for m in self._models().values()),
            bytes_protocol_per_client=context["protocol_bytes"] + done.protocol_bytes,
            pseudo_label_accuracy=accuracy, pseudo_label_digest=digest, **done.bookkeeping)

    def _eval_model(self) -> nn.Module:
        """The model :meth:`predict` uses (the one the method deploys)."""
        return self.network

    def predict(self, x: np.ndarray) -> np.ndarray:
        return predict_labels(self._eval_model(), x)

    # ----------------------------------------------------------------- state
    def _models(self) -> dict[str, nn.Module]:
        return {"network": self.network}

    def state_dict(self) -> dict[str, Any]:
        return {"round": self.rounds_done, "rng": self.rng.state_dict(),
                "models": {k: copy.deepcopy(m.state_dict()) for k, m in self._models().items()},
                "clients": self._client_states()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rounds_done = state["round"]
        self.rng.load_state_dict(state["rng"])
        for key, model in self._models().items():
            model.load_state_dict(state["models"][key])
        self._adopt_client_states(state.get("clients", {}))


class FedAvgLabeled(FedAvgMethod):
    """FedAvg on labeled data only (lower bound)."""

    name = "fedavg-labeled"
    client_half = LabeledClient

    def _eligible_clients(self) -> list[int] | None:
        return self.federation.labeled_clients


class FedAvgSupervised(FedAvgMethod):
    """FedAvg with all training labels revealed (upper bound)."""

    name = "fedavg-supervised"
    client_half = SupervisedClient

    def _eligible_clients(self) -> list[int] | None:
        return list(range(self.federation.num_clients))


class PseudoLabelMethod(FedAvgMethod):
    """FedAvg whose clients train on labels plus weighted pseudo-labels (FedProp family).

    Setup runs ``warmup_rounds`` of labeled-only FedAvg (Algorithm 2, line 2).  The
    pseudo-labels are made at the clients, by the subclass's client half (FedAvg+PL,
    FedAvg+PL(localLP): locally; FedProp: CrossClientLP's client parties), which reports
    them.  A round's ``crypto_seconds`` is the pseudo-labelling protocol's (FedProp) plus
    the secure aggregation's; points whose pseudo-label is ``-1`` (no label reached them)
    are left out of training.
    """

    hyper = PseudoLabelHyper
    uses_pseudo_labels: ClassVar[bool] = True

    def _setup_extra(self) -> None:
        labeled = self.federation.labeled_clients
        if not labeled:
            raise InputError("federation", self.federation.name,
                             f"{self.name} needs clients holding labels")
        self.warmup_seconds = 0.0
        start = time.perf_counter()
        for warmup_round in range(self.warmup_rounds):
            self._phase(f"warm-up round {warmup_round + 1}/{self.warmup_rounds} (labeled only)")
            count = min(self.clients_per_round, len(labeled))
            selected = np.sort(self.rng.numpy.choice(np.asarray(labeled), size=count,
                                                     replace=False))
            self._fedavg_round(selected, self.lr, {"warmup": True}, -(warmup_round + 1))
        self.warmup_seconds = time.perf_counter() - start


class FedAvgLocalLP(PseudoLabelMethod):
    """FedAvg+PL(localLP): per-client label propagation on plaintext local features."""

    name = "fedavg-locallp"
    hyper = LocalLPHyper
    client_half = LocalLPClient


class FedAvgPL(PseudoLabelMethod):
    """FedAvg+PL(network): pseudo-labels from the broadcast model's own predictions."""

    name = "fedavg-pl"
    hyper = NetworkPLHyper
    client_half = NetworkPLClient


class FedAvgFixMatch(FedAvgMethod):
    """FedAvg+FixMatch: FixMatch as the clients' local training (module docstring)."""

    name = "fedavg-fixmatch"
    hyper = FixMatchHyper
    client_half = FixMatchClient


class MeanTeacherRounds:
    """Mean-teacher rounds for a :class:`FedAvgMethod` subclass (FedAvg+MT, FedProp+MT).

    The subclass's dataclass has the fields of
    :class:`~securefl.methods.fedavg.hyper.MeanTeacherHyper` (``ema_decay``,
    ``consistency_weight``, ``consistency_rampup``, ``noise_std``); after any warm-up the
    server broadcasts the student (``model``) and the teacher (``teacher``) with the
    round's consistency weight; clients train the student with :func:`train_mixed` plus
    the consistency term and an EMA teacher update after every step
    (:class:`securefl.methods.fedavg.client.MeanTeacherClient`) and upload both, which the
    server averages separately (two secure sums in the same exchanges).  The teacher is
    evaluated.
    """

    ema_decay: float
    consistency_weight: float
    consistency_rampup: int
    noise_std: float

    def _setup_extra(self) -> None:
        super()._setup_extra()
        self.teacher = teacher_copy(self.network)
        self._round_weight = 0.0

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

    def _round_models(self, context: dict[str, Any]) -> dict[str, nn.Module]:
        models = super()._round_models(context)
        if not context.get("warmup"):
            models["teacher"] = self.teacher
        return models

    def _request_config(self, context: dict[str, Any]) -> dict[str, Any]:
        config = super()._request_config(context)
        if not context.get("warmup"):
            config["consistency_weight"] = float(self._round_weight)
        return config

    def _eval_model(self) -> nn.Module:
        return self.teacher

    def run_round(self, round_index: int) -> RoundResult:
        self._round_weight = self.consistency_weight * self.consistency_ramp(round_index)
        return super().run_round(round_index)


class FedAvgMT(MeanTeacherRounds, FedAvgMethod):
    """FedAvg+MT: FedAvg of a mean-teacher student and teacher (FedProp §5.1)."""

    name = "fedavg-mt"
    hyper = FedAvgMTHyper
    client_half = FedAvgMTClient


def teacher_copy(model: nn.Module) -> nn.Module:
    """A frozen copy of ``model`` to serve as mean teacher."""
    teacher = copy.deepcopy(model)
    for param in teacher.parameters():
        param.requires_grad_(False)
    return teacher
