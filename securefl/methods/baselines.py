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

Every round: the server samples clients (:func:`securefl.fl.sample_clients`), broadcasts
the model, the clients run ClientUpdate (E epochs SGD, momentum, weight decay, optional
FedProx mu), and ServerUpdate is FedAvg weighted by |D_k| through
:func:`securefl.fl.aggregate` (secure aggregation when ``secure="real"``).  The learning
rate follows FedProp's cosine annealing ``lr_t = lr (1 + cos(pi t / lr_decay_rounds)) / 2``
(``lr_decay_rounds=None`` or ``0``: constant).

Augmentation: every method here trains on randomly translated batches
(:func:`securefl.methods.common.translation`, ``max_shift``), the labeled-only warm-up
and the baselines included: FedProp's Appendix A.1 applies its augmentation to all the
methods it compares, and §5.1 calls FedAvg+PL(localLP) "otherwise identical" to FedProp.
``max_shift=0`` turns it off (FedSemi Table 1's plain "FedAvg" row is without
augmentation, its "FedAvg+" row with).  Models with dropout (``cnn13``) draw their masks
from the client's generator (:func:`securefl.models.dropout_generator`).

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
sums students and teachers in two secure aggregations; FedAvg+PL's pseudo-labels never
leave a client.
"""

from __future__ import annotations

import copy
import math
import time
from abc import abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from securefl.data.federation import ClientData, Federation
from securefl.errors import InputError
from securefl.fl import (
    SimulationRNG,
    aggregate,
    client_rng,
    extract_features,
    load_model_vector,
    model_bytes,
    model_vector,
    predict_labels,
    sample_clients,
    train_mixed,
    train_supervised,
)
from securefl.methods.base import Method, RoundResult, label_digest
from securefl.methods.common import default_shift, perturb, translation
from securefl.methods.consistency import ema_update
from securefl.models import build_model, dropout_generator


class FedAvgMethod(Method):
    """FedAvg with pluggable client data; subclasses define :meth:`_client_update`."""

    uses_pseudo_labels: ClassVar[bool] = False

    def __init__(self, *, secure: str = "plaintext", seed: int = 0, crypto_seed: int | None = None,
                 sum_backend: str = "secagg", model: str = "auto",
                 clients_per_round: int = 5, local_epochs: int = 5, batch_size: int = 50,
                 lr: float = 0.1, momentum: float = 0.9, weight_decay: float = 2e-4,
                 lr_decay_rounds: int | None = 2000, prox_mu: float = 0.0,
                 max_shift: int | None = None) -> None:
        super().__init__(secure=secure, seed=seed, crypto_seed=crypto_seed, sum_backend=sum_backend)
        self.model = model
        self.clients_per_round = clients_per_round
        self.local_epochs = local_epochs
        self.batch_size = batch_size
        self.lr = lr
        self.momentum = momentum
        self.weight_decay = weight_decay
        self.lr_decay_rounds = lr_decay_rounds
        self.prox_mu = prox_mu
        self.max_shift = max_shift

    # ----------------------------------------------------------------- lifecycle
    def setup(self, federation: Federation) -> None:
        self._validate()
        self.federation = federation
        self.rng = SimulationRNG.from_seed(self.seed)
        self.network = build_model(self.model, input_shape=tuple(federation.input_shape),
                                   num_classes=federation.num_classes, seed=self.seed)
        self.rounds_done = 0
        self._setup_extra()

    def _setup_extra(self) -> None:
        """Warm-up or extra models (subclasses)."""

    def _validate(self) -> None:
        for name, least in (("clients_per_round", 1), ("local_epochs", 0), ("batch_size", 1)):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or value < least:
                raise InputError(name, value, f"must be an integer >= {least}")
        if self.lr <= 0:
            raise InputError("lr", self.lr, "must be > 0")
        if self.lr_decay_rounds is not None and self.lr_decay_rounds < 0:
            raise InputError("lr_decay_rounds", self.lr_decay_rounds, "must be >= 0 or None")

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

    @abstractmethod
    def _client_update(self, model: nn.Module, client_index: int, lr: float,
                       context: dict[str, Any], rng: SimulationRNG) -> None:
        """ClientUpdate of client ``client_index`` on ``model`` (a copy of the global one),
        drawing from ``rng`` (the client's generators for the round) only."""

    def _prepare_round(self, selected: np.ndarray, round_index: int) -> dict[str, Any]:
        """Per-round work before local training (pseudo-labelling); returns a context."""
        return {"crypto_seconds": 0.0, "protocol_bytes": 0.0}

    def _fedavg_round(self, selected: np.ndarray, lr: float, context: dict[str, Any],
                      round_index: int) -> tuple[float, float, float]:
        """Local training of ``selected`` then secure FedAvg; returns (train s, crypto s,
        protocol bytes per client of the aggregation)."""
        train_start = time.perf_counter()

        def local_update(k: int) -> np.ndarray:
            local = copy.deepcopy(self.network)
            rng = client_rng(self.seed, round_index, k)
            with dropout_generator(local, rng.torch):
                self._client_update(local, k, lr, context, rng)
            return model_vector(local)

        vectors = self._per_client(selected, local_update)
        sizes = [float(len(self.federation.clients[int(k)])) for k in selected]
        train_seconds = time.perf_counter() - train_start
        average, report = aggregate(vectors, sizes, secure=self.secure, sum_backend=self.sum_backend)
        load_model_vector(self.network, average)
        return train_seconds, report.crypto_seconds, report.protocol_bytes_per_client

    def run_round(self, round_index: int) -> RoundResult:
        start = time.perf_counter()
        selected = self._sample()
        context = self._prepare_round(selected, round_index)
        lr = self.learning_rate(round_index)
        train_s, agg_s, agg_bytes = self._fedavg_round(selected, lr, context, round_index)
        self.rounds_done = round_index + 1
        return RoundResult(
            round=round_index, seconds=time.perf_counter() - start,
            train_seconds=train_s, crypto_seconds=context["crypto_seconds"] + agg_s,
            bytes_model_per_client=2.0 * sum(model_bytes(m) for m in self._models().values()),
            bytes_protocol_per_client=context["protocol_bytes"] + agg_bytes,
            pseudo_label_accuracy=context.get("pseudo_label_accuracy"),
            pseudo_label_digest=context.get("pseudo_label_digest"))

    def _train_labeled(self, model: nn.Module, client: ClientData, lr: float,
                       generator: torch.Generator) -> None:
        mask = client.labeled
        train_supervised(model, client.x[mask], client.y[mask], epochs=self.local_epochs,
                         batch_size=self.batch_size, lr=lr, momentum=self.momentum,
                         weight_decay=self.weight_decay, prox_mu=self.prox_mu,
                         generator=generator, augment=self._augmentation(generator))

    def _augmentation(self, generator: torch.Generator) -> Callable[[torch.Tensor], torch.Tensor] | None:
        """Random translations of up to ``max_shift`` pixels drawn from ``generator`` (see
        the module docstring)."""
        return translation(self.federation.input_shape, self.max_shift, generator)

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
                "models": {k: copy.deepcopy(m.state_dict()) for k, m in self._models().items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rounds_done = state["round"]
        self.rng.load_state_dict(state["rng"])
        for key, model in self._models().items():
            model.load_state_dict(state["models"][key])


class FedAvgLabeled(FedAvgMethod):
    """FedAvg on labeled data only (lower bound)."""

    name = "fedavg-labeled"

    def _eligible_clients(self) -> list[int] | None:
        return self.federation.labeled_clients

    def _client_update(self, model: nn.Module, client_index: int, lr: float,
                       context: dict[str, Any], rng: SimulationRNG) -> None:
        self._train_labeled(model, self.federation.clients[client_index], lr, rng.torch)


class FedAvgSupervised(FedAvgMethod):
    """FedAvg with all training labels revealed (upper bound)."""

    name = "fedavg-supervised"

    def _eligible_clients(self) -> list[int] | None:
        return list(range(self.federation.num_clients))

    def _client_update(self, model: nn.Module, client_index: int, lr: float,
                       context: dict[str, Any], rng: SimulationRNG) -> None:
        client = self.federation.clients[client_index]
        train_supervised(model, client.x, client.y, epochs=self.local_epochs,
                         batch_size=self.batch_size, lr=lr, momentum=self.momentum,
                         weight_decay=self.weight_decay, prox_mu=self.prox_mu,
                         generator=rng.torch, augment=self._augmentation(rng.torch))


class PseudoLabelMethod(FedAvgMethod):
    """FedAvg whose clients train on labels plus weighted pseudo-labels (FedProp family).

    Subclasses implement :meth:`_pseudo_labels` (features per selected client ->
    (pseudo-labels, weights) per client).  Setup runs ``warmup_rounds`` of labeled-only
    FedAvg (Algorithm 2, line 2).  A round's ``crypto_seconds`` is the wall time of the
    pseudo-labelling protocol (its plaintext placeholder in plaintext mode) plus the
    secure aggregation; points whose pseudo-label is ``-1`` (no label reached them) are
    left out of training.
    """

    uses_pseudo_labels: ClassVar[bool] = True

    def __init__(self, *, secure: str = "plaintext", seed: int = 0, crypto_seed: int | None = None,
                 sum_backend: str = "secagg", model: str = "auto",
                 clients_per_round: int = 5, local_epochs: int = 5, batch_size: int = 50,
                 lr: float = 0.1, momentum: float = 0.9, weight_decay: float = 2e-4,
                 lr_decay_rounds: int | None = 2000, prox_mu: float = 0.0,
                 max_shift: int | None = None, warmup_rounds: int = 10) -> None:
        super().__init__(secure=secure, seed=seed, crypto_seed=crypto_seed,
                         sum_backend=sum_backend, model=model,
                         clients_per_round=clients_per_round, local_epochs=local_epochs,
                         batch_size=batch_size, lr=lr, momentum=momentum,
                         weight_decay=weight_decay, lr_decay_rounds=lr_decay_rounds,
                         prox_mu=prox_mu, max_shift=max_shift)
        self.warmup_rounds = warmup_rounds

    def _setup_extra(self) -> None:
        if self.warmup_rounds < 0:
            raise InputError("warmup_rounds", self.warmup_rounds, "must be >= 0")
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

    @abstractmethod
    def _pseudo_labels(self, features: list[np.ndarray], labels: list[np.ndarray]
                       ) -> tuple[list[np.ndarray], list[np.ndarray], float]:
        """Per-client pseudo-labels and weights, plus protocol bytes per client."""

    def _feature_model(self) -> nn.Module:
        return self.network

    def _prepare_round(self, selected: np.ndarray, round_index: int) -> dict[str, Any]:
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

    def _client_update(self, model: nn.Module, client_index: int, lr: float,
                       context: dict[str, Any], rng: SimulationRNG) -> None:
        client = self.federation.clients[client_index]
        if context.get("warmup"):
            self._train_labeled(model, client, lr, rng.torch)
            return
        pseudo, weights = context["pseudo"][client_index]
        lab = client.labeled
        usable = ~lab & (pseudo >= 0)
        train_mixed(model, client.x[lab], client.y[lab], client.x[usable], pseudo[usable],
                    weights[usable], epochs=self.local_epochs, batch_size=self.batch_size,
                    lr=lr, momentum=self.momentum, weight_decay=self.weight_decay,
                    prox_mu=self.prox_mu, generator=rng.torch,
                    augment=self._augmentation(rng.torch), **self._mixed_extras(model, lr, rng.torch))

    def _mixed_extras(self, model: nn.Module, lr: float, generator: torch.Generator) -> dict[str, Any]:
        """Extra keywords of :func:`train_mixed` (mean-teacher hooks, drawing from ``generator``)."""
        return {}


class FedAvgLocalLP(PseudoLabelMethod):
    """FedAvg+PL(localLP): per-client label propagation on plaintext local features."""

    name = "fedavg-locallp"

    def __init__(self, *, secure: str = "plaintext", seed: int = 0, crypto_seed: int | None = None,
                 sum_backend: str = "secagg", model: str = "auto",
                 clients_per_round: int = 5, local_epochs: int = 5, batch_size: int = 50,
                 lr: float = 0.1, momentum: float = 0.9, weight_decay: float = 2e-4,
                 lr_decay_rounds: int | None = 2000, prox_mu: float = 0.0,
                 max_shift: int | None = None, warmup_rounds: int = 10, k: int = 10,
                 alpha: float = 0.99) -> None:
        super().__init__(secure=secure, seed=seed, crypto_seed=crypto_seed,
                         sum_backend=sum_backend, model=model,
                         clients_per_round=clients_per_round, local_epochs=local_epochs,
                         batch_size=batch_size, lr=lr, momentum=momentum,
                         weight_decay=weight_decay, lr_decay_rounds=lr_decay_rounds,
                         prox_mu=prox_mu, max_shift=max_shift, warmup_rounds=warmup_rounds)
        self.k = k
        self.alpha = alpha

    def _pseudo_labels(self, features: list[np.ndarray], labels: list[np.ndarray]
                       ) -> tuple[list[np.ndarray], list[np.ndarray], float]:
        from securefl.protocols.propagation import label_propagation

        pseudo, weights = [], []
        for feats, lab in zip(features, labels):
            if (lab >= 0).any() and len(lab) > 1:
                result = label_propagation(feats, lab, num_classes=self.federation.num_classes,
                                           k=min(self.k, len(lab) - 1), alpha=self.alpha)
                pseudo.append(result.pseudo_labels)
                weights.append(result.weights)
            else:
                pseudo.append(np.full(len(lab), -1, dtype=np.int64))
                weights.append(np.zeros(len(lab)))
        return pseudo, weights, 0.0


class FedAvgPL(PseudoLabelMethod):
    """FedAvg+PL(network): pseudo-labels from the broadcast model's own predictions."""

    name = "fedavg-pl"

    def __init__(self, *, secure: str = "plaintext", seed: int = 0, crypto_seed: int | None = None,
                 sum_backend: str = "secagg", model: str = "auto",
                 clients_per_round: int = 5, local_epochs: int = 5, batch_size: int = 50,
                 lr: float = 0.1, momentum: float = 0.9, weight_decay: float = 2e-4,
                 lr_decay_rounds: int | None = 2000, prox_mu: float = 0.0,
                 max_shift: int | None = None, warmup_rounds: int = 10,
                 threshold: float = 0.0, entropy_weights: bool = False) -> None:
        super().__init__(secure=secure, seed=seed, crypto_seed=crypto_seed,
                         sum_backend=sum_backend, model=model,
                         clients_per_round=clients_per_round, local_epochs=local_epochs,
                         batch_size=batch_size, lr=lr, momentum=momentum,
                         weight_decay=weight_decay, lr_decay_rounds=lr_decay_rounds,
                         prox_mu=prox_mu, max_shift=max_shift, warmup_rounds=warmup_rounds)
        self.threshold = threshold
        self.entropy_weights = entropy_weights

    def _setup_extra(self) -> None:
        if not 0.0 <= self.threshold < 1.0:
            raise InputError("threshold", self.threshold, "a probability threshold must lie in [0, 1)")
        super()._setup_extra()

    def _pseudo_labels(self, features: list[np.ndarray], labels: list[np.ndarray]
                       ) -> tuple[list[np.ndarray], list[np.ndarray], float]:
        """Each client's own computation: softmax of the head on its (eval-mode) features."""
        pseudo, weights = [], []
        classes = self.federation.num_classes
        for feats in features:
            with torch.no_grad():
                probs = F.softmax(self._feature_model().head(torch.from_numpy(feats)), dim=1).double().numpy()
            confident = probs.max(axis=1) > self.threshold
            pseudo.append(np.where(confident, probs.argmax(axis=1), -1).astype(np.int64))
            if self.entropy_weights:
                entropy = -(probs * np.log(np.clip(probs, 1e-300, None))).sum(axis=1)
                weights.append(np.clip(1.0 - entropy / np.log(classes), 0.0, 1.0))
            else:
                weights.append(np.ones(len(feats)))
        return pseudo, weights, 0.0


class MeanTeacherRounds:
    """Mean-teacher rounds for a :class:`FedAvgMethod` subclass (FedAvg+MT, FedProp+MT).

    The subclass sets ``ema_decay``, ``consistency_weight``, ``consistency_rampup`` and
    ``noise_std``; clients train the student with :func:`train_mixed` plus the consistency
    term and an EMA teacher update after every step, and return both models, which the
    server averages separately (two secure sums).  The teacher is evaluated.
    """

    ema_decay: float
    consistency_weight: float
    consistency_rampup: int
    noise_std: float

    def _setup_extra(self) -> None:
        if not 0.0 <= self.ema_decay < 1.0:
            raise InputError("ema_decay", self.ema_decay, "must lie in [0, 1)")
        if self.consistency_weight < 0 or self.noise_std < 0 or self.consistency_rampup < 0:
            raise InputError("consistency_weight", self.consistency_weight,
                             "consistency_weight, consistency_rampup, noise_std must be >= 0")
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

    def _mixed_extras(self, model: nn.Module, lr: float, generator: torch.Generator) -> dict[str, Any]:
        teacher = self._local_teacher
        weight = self._round_weight
        noise = self.noise_std
        shift = default_shift(self.federation.input_shape) if self.max_shift is None else self.max_shift
        classes = self.federation.num_classes

        def consistency(student: nn.Module, x_l: torch.Tensor, x_u: torch.Tensor) -> torch.Tensor:
            x = torch.cat([x_l, x_u])
            noisy_s = perturb(x, noise, shift, generator)
            noisy_t = perturb(x, noise, shift, generator)
            with torch.no_grad():
                target = F.softmax(teacher(noisy_t), dim=1)
            probs = F.softmax(student(noisy_s), dim=1)
            return weight * ((probs - target) ** 2).sum(dim=1).mean() / classes

        return {"extra_loss": consistency,
                "after_step": lambda: ema_update(teacher, model, self.ema_decay)}

    def _fedavg_round(self, selected: np.ndarray, lr: float, context: dict[str, Any],
                      round_index: int) -> tuple[float, float, float]:
        if context.get("warmup"):
            return super()._fedavg_round(selected, lr, context, round_index)
        train_start = time.perf_counter()

        def local_update(k: int) -> tuple[np.ndarray, np.ndarray]:
            local = copy.deepcopy(self.network)
            self._local_teacher = copy.deepcopy(self.teacher)
            rng = client_rng(self.seed, round_index, k)
            with dropout_generator(local, rng.torch), dropout_generator(self._local_teacher, rng.torch):
                self._client_update(local, k, lr, context, rng)
            return model_vector(local), model_vector(self._local_teacher)

        pairs = self._per_client(selected, local_update)
        students, teachers = [s for s, _ in pairs], [t for _, t in pairs]
        sizes = [float(len(self.federation.clients[int(k)])) for k in selected]
        train_seconds = time.perf_counter() - train_start
        student_avg, report_s = aggregate(students, sizes, secure=self.secure,
                                          sum_backend=self.sum_backend)
        teacher_avg, report_t = aggregate(teachers, sizes, secure=self.secure,
                                          sum_backend=self.sum_backend)
        load_model_vector(self.network, student_avg)
        load_model_vector(self.teacher, teacher_avg)
        return (train_seconds, report_s.crypto_seconds + report_t.crypto_seconds,
                report_s.protocol_bytes_per_client + report_t.protocol_bytes_per_client)

    def _eval_model(self) -> nn.Module:
        return self.teacher

    def run_round(self, round_index: int) -> RoundResult:
        self._round_weight = self.consistency_weight * self.consistency_ramp(round_index)
        return super().run_round(round_index)


class FedAvgMT(MeanTeacherRounds, FedAvgMethod):
    """FedAvg+MT: FedAvg of a mean-teacher student and teacher (FedProp §5.1)."""

    name = "fedavg-mt"

    def __init__(self, *, secure: str = "plaintext", seed: int = 0, crypto_seed: int | None = None,
                 sum_backend: str = "secagg", model: str = "auto",
                 clients_per_round: int = 5, local_epochs: int = 5, batch_size: int = 50,
                 lr: float = 0.1, momentum: float = 0.9, weight_decay: float = 2e-4,
                 lr_decay_rounds: int | None = 2000, prox_mu: float = 0.0,
                 max_shift: int | None = None, ema_decay: float = 0.99,
                 consistency_weight: float = 100.0, consistency_rampup: int = 5,
                 noise_std: float = 0.1) -> None:
        super().__init__(secure=secure, seed=seed, crypto_seed=crypto_seed,
                         sum_backend=sum_backend, model=model,
                         clients_per_round=clients_per_round, local_epochs=local_epochs,
                         batch_size=batch_size, lr=lr, momentum=momentum,
                         weight_decay=weight_decay, lr_decay_rounds=lr_decay_rounds,
                         prox_mu=prox_mu, max_shift=max_shift)
        self.ema_decay = ema_decay
        self.consistency_weight = consistency_weight
        self.consistency_rampup = consistency_rampup
        self.noise_std = noise_std

    def _client_update(self, model: nn.Module, client_index: int, lr: float,
                       context: dict[str, Any], rng: SimulationRNG) -> None:
        """Cross-entropy on B_L (zero weight on B_U) plus the consistency over B_L u B_U."""
        client = self.federation.clients[client_index]
        lab = client.labeled
        unlabeled = int((~lab).sum())
        train_mixed(model, client.x[lab], client.y[lab], client.x[~lab],
                    np.zeros(unlabeled, dtype=np.int64), np.zeros(unlabeled),
                    epochs=self.local_epochs, batch_size=self.batch_size, lr=lr,
                    momentum=self.momentum, weight_decay=self.weight_decay,
                    prox_mu=self.prox_mu, generator=rng.torch,
                    augment=self._augmentation(rng.torch), **self._mixed_extras(model, lr, rng.torch))


def teacher_copy(model: nn.Module) -> nn.Module:
    """A frozen copy of ``model`` to serve as mean teacher."""
    teacher = copy.deepcopy(model)
    for param in teacher.parameters():
        param.requires_grad_(False)
    return teacher
