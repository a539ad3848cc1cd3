"""Client halves of the FedAvg family (:mod:`securefl.methods.fedavg.server`; FedProp's
training): what one client does in a round, written once for every transport.

Steps (one exchange each):

``train``
    request: arrays ``model`` (the global model, float64, :func:`securefl.fl.model_vector`)
    and, for mean-teacher rounds, ``teacher``; config ``round`` (index; warm-up round
    ``w`` is ``-(w + 1)``), ``lr``, ``warmup`` (labeled-only training),
    ``consistency_weight`` (mean teacher), the secure sums' parameters
    (:class:`securefl.fl.uploads.UploadPlan`); FedProp's adds its rows of CrossClientLP's
    result (:mod:`securefl.methods.fedprop.client`).
    The client builds the architecture from its keywords (``model``, ``seed``) and its
    data's shape, loads the vector(s), runs ClientUpdate with its generators
    ``client_rng(seed, round, client)`` -- bit for bit the update the simulator made on a
    copy of the global model -- and uploads ``model`` (and ``teacher``) weighted by
    |D_k| (:func:`securefl.fl.uploads.upload`: secure-sum round 0 in real mode).
    reply: the upload, :data:`~securefl.runtime.costs.COMPUTE` / :data:`~securefl.runtime.costs.CRYPTO`
    seconds, and where pseudo-labels were made locally the reports of
    :func:`securefl.methods.halves.report_pseudo_labels`.
``secagg/keys``, ``secagg/ciphertexts``, ``secagg/survivors``, ``secagg/endorsements`` (real mode)
    the secure sums' rounds 1-3 (:func:`securefl.runtime.secure_sum_steps.answer`).

Between rounds a FedAvg client keeps nothing (its state Record holds secure-sum parties
only while a sum is in progress).  Who learns what: the client learns the global
model(s) it is sent; it sends nothing but its secure-sum messages in real mode (its
update in the clear in plaintext mode; reports where the run asks for them).
"""

from __future__ import annotations

import time
from abc import abstractmethod
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from securefl.errors import ProtocolError
from securefl.fl import (
    SimulationRNG,
    client_rng,
    extract_features,
    load_model_vector,
    model_vector,
    train_fixmatch,
    train_mixed,
    train_supervised,
)
from securefl.methods.common import default_shift, perturb, translation
from securefl.methods.consistency import ema_update
from securefl.methods.halves import LocalData, MethodClient, report_pseudo_labels
from securefl.methods.randaugment import randaugment
from securefl.models import build_model, dropout_generator
from securefl.runtime import secure_sum_steps
from securefl.runtime.costs import COMPUTE, CRYPTO
from securefl.runtime.transport import NodeContext, Record

TRAIN = "train"


class FedAvgClient(MethodClient):
    """ClientUpdate + upload (module docstring); subclasses define :meth:`local_update`."""

    reports_pseudo_labels: ClassVar[bool] = False
    """Whether pseudo-labels made here are this client's own (reported, see
    :mod:`securefl.methods.halves`) rather than the server's."""

    def handle(self, step: str, request: Record, state: Record, node: NodeContext) -> Record:
        if step in secure_sum_steps.STEPS:
            return self.secure_sum_reply(request, state, node)
        reply = Record()
        if step != TRAIN:
            raise self.unknown_step(step, TRAIN)
        data = self.data(node)
        method = self.method
        start = time.perf_counter()
        models = self.local_models(request, data)
        pseudo = None if request.config.get("warmup") else self.pseudo_labels(request, models, data)
        if pseudo is not None and self.reports(node) and self.reports_pseudo_labels:
            report_pseudo_labels(reply, pseudo[0], data)
        rng = client_rng(method.seed, int(request.config["round"]), node.partition,
                         device=method.torch_device)
        with ExitStack() as stack:
            for model in models.values():
                stack.enter_context(dropout_generator(model, rng.torch))
            self.local_update(models, data, request, rng, pseudo)
        vectors = {name: model_vector(model) for name, model in models.items()}
        reply.config[COMPUTE] = time.perf_counter() - start
        reply.config[CRYPTO] = self.upload_model(reply, state, request, vectors, data, node)
        return reply

    # ----------------------------------------------------------------- pieces
    def build(self, data: LocalData, vector: np.ndarray) -> nn.Module:
        """The method's architecture for ``data`` on the method's device, holding ``vector``."""
        model = build_model(self.method.model, input_shape=data.input_shape,
                            num_classes=data.num_classes, seed=self.method.seed,
                            device=self.method.torch_device)
        load_model_vector(model, np.asarray(vector, dtype=np.float64))
        return model

    def local_models(self, request: Record, data: LocalData) -> dict[str, nn.Module]:
        """The models this round trains (``model``: the global model)."""
        if "model" not in request.arrays:
            raise ProtocolError("train request without a model")
        return {"model": self.build(data, request.arrays["model"])}

    def pseudo_labels(self, request: Record, models: dict[str, nn.Module], data: LocalData
                      ) -> tuple[np.ndarray, np.ndarray] | None:
        """This round's (pseudo-labels, weights) of the client's points, or None."""
        return None

    def augmentation(self, data: LocalData, generator: torch.Generator
                     ) -> Callable[[torch.Tensor], torch.Tensor] | None:
        """Random translations of up to ``max_shift`` pixels, then random horizontal flips
        where ``hflip`` is set, drawn from ``generator``."""
        return translation(data.input_shape, self.method.max_shift, generator,
                           hflip=self.method.hflip)

    def train_labeled(self, model: nn.Module, data: LocalData, lr: float,
                      generator: torch.Generator) -> None:
        """E epochs of SGD on the client's labeled points."""
        method, client = self.method, data.client
        mask = client.labeled
        train_supervised(model, client.x[mask], client.y[mask], epochs=method.local_epochs,
                         batch_size=method.batch_size, lr=lr, momentum=method.momentum,
                         weight_decay=method.weight_decay, prox_mu=method.prox_mu,
                         generator=generator, augment=self.augmentation(data, generator))

    @abstractmethod
    def local_update(self, models: dict[str, nn.Module], data: LocalData, request: Record,
                     rng: SimulationRNG, pseudo: tuple[np.ndarray, np.ndarray] | None) -> None:
        """ClientUpdate on ``models`` (in place), drawing from ``rng`` only; ``pseudo``:
        this round's pseudo-labels and weights, or None (warm-up, no pseudo-labels)."""


class LabeledClient(FedAvgClient):
    """FedAvg on the client's labeled points (``fedavg-labeled``)."""

    def local_update(self, models, data, request, rng, pseudo):
        self.train_labeled(models["model"], data, float(request.config["lr"]), rng.torch)


class SupervisedClient(FedAvgClient):
    """FedAvg with every label of the client (``fedavg-supervised``)."""

    def local_update(self, models, data, request, rng, pseudo):
        method, client = self.method, data.client
        train_supervised(models["model"], client.x, client.y, epochs=method.local_epochs,
                         batch_size=method.batch_size, lr=float(request.config["lr"]),
                         momentum=method.momentum, weight_decay=method.weight_decay,
                         prox_mu=method.prox_mu, generator=rng.torch,
                         augment=self.augmentation(data, rng.torch))


class PseudoLabelClient(FedAvgClient):
    """Labels plus weighted pseudo-labels over ``B_L u B_U`` (FedProp's ClientUpdate);
    labeled-only in warm-up rounds.  Each subclass makes the pseudo-labels at the client
    (:meth:`pseudo_labels`)."""

    @abstractmethod
    def pseudo_labels(self, request: Record, models: dict[str, nn.Module], data: LocalData
                      ) -> tuple[np.ndarray, np.ndarray]:
        """This round's (pseudo-labels, weights) of the client's points; label ``-1``:
        none reached the point (left out of training)."""

    def local_update(self, models, data, request, rng, pseudo):
        model, lr = models["model"], float(request.config["lr"])
        if pseudo is None:
            self.train_labeled(model, data, lr, rng.torch)
            return
        method, client = self.method, data.client
        labels, weights = pseudo
        lab = client.labeled
        usable = ~lab & (labels >= 0)
        train_mixed(model, client.x[lab], client.y[lab], client.x[usable], labels[usable],
                    weights[usable], epochs=method.local_epochs, batch_size=method.batch_size,
                    lr=lr, momentum=method.momentum, weight_decay=method.weight_decay,
                    prox_mu=method.prox_mu, generator=rng.torch,
                    augment=self.augmentation(data, rng.torch),
                    **self.mixed_extras(models, data, request, rng.torch))

    def mixed_extras(self, models: dict[str, nn.Module], data: LocalData, request: Record,
                     generator: torch.Generator) -> dict[str, Any]:
        """Extra keywords of :func:`train_mixed` (mean-teacher hooks)."""
        return {}


class LocalLPClient(PseudoLabelClient):
    """FedAvg+PL(localLP): label propagation on the client's own features."""

    reports_pseudo_labels = True

    def pseudo_labels(self, request, models, data):
        from securefl.protocols.propagation import label_propagation

        client = data.client
        labels = client.observed_labels()
        if (labels >= 0).any() and len(labels) > 1:
            features = extract_features(models["model"], client.x)
            result = label_propagation(features, labels, num_classes=data.num_classes,
                                       k=min(self.method.k, len(labels) - 1),
                                       alpha=self.method.alpha)
            return result.pseudo_labels, result.weights
        return np.full(len(labels), -1, dtype=np.int64), np.zeros(len(labels))


class NetworkPLClient(PseudoLabelClient):
    """FedAvg+PL(network): the broadcast model's own predictions as pseudo-labels."""

    reports_pseudo_labels = True

    def pseudo_labels(self, request, models, data):
        model = models["model"]
        return self.predictions(model, extract_features(model, data.client.x), data.num_classes)

    def predictions(self, model: nn.Module, features: np.ndarray, num_classes: int
                    ) -> tuple[np.ndarray, np.ndarray]:
        """(pseudo-labels, weights) from the softmax of ``model``'s head on ``features``:
        the top class where its probability exceeds ``threshold`` (else -1), weight 1 or
        ``1 - H(p)/log C`` (``entropy_weights``)."""
        method = self.method
        with torch.no_grad():
            z = torch.from_numpy(features).to(self.method.torch_device)
            probs = F.softmax(model.head(z), dim=1).double().cpu().numpy()
        confident = probs.max(axis=1) > method.threshold
        labels = np.where(confident, probs.argmax(axis=1), -1).astype(np.int64)
        if method.entropy_weights:
            entropy = -(probs * np.log(np.clip(probs, 1e-300, None))).sum(axis=1)
            weights = np.clip(1.0 - entropy / np.log(num_classes), 0.0, 1.0)
        else:
            weights = np.ones(len(features))
        return labels, weights


class FixMatchClient(FedAvgClient):
    """FedAvg+FixMatch: FixMatch's objective on the client's labeled and unlabeled points
    (:func:`securefl.fl.train_fixmatch`); the weak view is the method's translation, the
    strong view an independent translation then :func:`~securefl.methods.randaugment.randaugment`
    (RandAugment + Cutout), all drawn from the client's generator."""

    def local_update(self, models, data, request, rng, pseudo):
        method, client = self.method, data.client
        lab = client.labeled
        weak = self.augmentation(data, rng.torch)

        def strong(batch: torch.Tensor) -> torch.Tensor:
            return randaugment(batch if weak is None else weak(batch), rng.torch,
                               num_ops=method.num_ops, cutout=method.cutout)

        train_fixmatch(models["model"], client.x[lab], client.y[lab], client.x[~lab],
                       epochs=method.local_epochs, batch_size=method.batch_size,
                       unlabeled_ratio=method.unlabeled_ratio, threshold=method.threshold,
                       unlabeled_weight=method.unlabeled_weight, lr=float(request.config["lr"]),
                       momentum=method.momentum, weight_decay=method.weight_decay,
                       prox_mu=method.prox_mu, generator=rng.torch, weak=weak, strong=strong)


class MeanTeacherClient:
    """Mean-teacher rounds (mixin before a :class:`FedAvgClient`): the request's
    ``teacher`` is trained as the EMA of the student after every step, with the
    consistency term of :class:`securefl.methods.fedavg.server.MeanTeacherRounds`, and
    uploaded beside the student."""

    def local_models(self, request, data):
        models = super().local_models(request, data)
        if "teacher" in request.arrays:
            teacher = self.build(data, request.arrays["teacher"])
            for param in teacher.parameters():
                param.requires_grad_(False)
            models["teacher"] = teacher
        return models

    def mixed_extras(self, models, data, request, generator):
        if "teacher" not in models:
            raise ProtocolError("a mean-teacher round needs the teacher")
        student, teacher = models["model"], models["teacher"]
        method = self.method
        weight = float(request.config["consistency_weight"])
        noise = method.noise_std
        shift = default_shift(data.input_shape) if method.max_shift is None else method.max_shift
        classes = data.num_classes

        def consistency(current: nn.Module, x_l: torch.Tensor, x_u: torch.Tensor) -> torch.Tensor:
            x = torch.cat([x_l, x_u])
            noisy_s = perturb(x, noise, shift, generator)
            noisy_t = perturb(x, noise, shift, generator)
            with torch.no_grad():
                target = F.softmax(teacher(noisy_t), dim=1)
            probs = F.softmax(current(noisy_s), dim=1)
            return weight * ((probs - target) ** 2).sum(dim=1).mean() / classes

        return {"extra_loss": consistency,
                "after_step": lambda: ema_update(teacher, student, method.ema_decay)}


class FedAvgMTClient(MeanTeacherClient, FedAvgClient):
    """FedAvg+MT: cross-entropy on ``B_L`` (zero weight on ``B_U``) plus the consistency
    over ``B_L u B_U``."""

    def local_update(self, models, data, request, rng, pseudo):
        method, client = self.method, data.client
        lab = client.labeled
        unlabeled = int((~lab).sum())
        train_mixed(models["model"], client.x[lab], client.y[lab], client.x[~lab],
                    np.zeros(unlabeled, dtype=np.int64), np.zeros(unlabeled),
                    epochs=method.local_epochs, batch_size=method.batch_size,
                    lr=float(request.config["lr"]), momentum=method.momentum,
                    weight_decay=method.weight_decay, prox_mu=method.prox_mu,
                    generator=rng.torch, augment=self.augmentation(data, rng.torch),
                    **self.mixed_extras(models, data, request, rng.torch))


class PseudoLabelMTClient(MeanTeacherClient, PseudoLabelClient):
    """FedProp+MT's training: pseudo-labels (from the server) plus the mean teacher."""
