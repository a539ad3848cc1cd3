"""Client half of FedMatch (:mod:`securefl.methods.fedmatch.server`): disjoint learning of
``sigma`` and ``psi`` with inter-client consistency, written once for every transport.

Step (one exchange):

``train``
    request: arrays ``sigma`` and ``psi`` (the global decomposition, float64 vectors of the
    model's parameters in ``named_parameters`` order: :func:`parameter_vector`) and
    ``helper/<h>`` for ``h < H`` (the ``psi`` of the client's helpers, chosen by the
    server); config ``round``, ``lr``, ``reveal`` (bool: whether this is a helper-refresh
    round) and the secure sums' parameters (:class:`securefl.fl.uploads.UploadPlan`).
    The client runs :func:`local_update` with its generator ``client_rng(seed, round,
    client)`` -- so a round's result does not depend on the order clients run in -- and
    uploads ``sigma`` and ``psi`` weighted by ``|D_k|`` (secure-sum round 0 in real mode).
    reply: the upload; where ``reveal`` is set, in the clear, ``reveal/psi`` (its trained
    ``psi_k``) and ``reveal/embedding`` (``softmax(f_{sigma_k + psi_k}(r))``, its model's
    output on the public probe ``r`` of :func:`probe_input`); :data:`~securefl.runtime.costs.COMPUTE`
    and :data:`~securefl.runtime.costs.CRYPTO`.
``secagg/keys``, ``secagg/ciphertexts``, ``secagg/survivors``, ``secagg/endorsements`` (real mode)
    the secure sums' rounds 1-3 (:func:`securefl.runtime.secure_sum_steps.answer`).

A client keeps nothing between rounds.  Who learns what: the client learns the global
``sigma``, ``psi`` and its helpers' ``psi_h`` (other clients' unlabeled-data parameters: in
FedMatch, a client sees its helpers' models); it sends ``sigma_k``, ``psi_k`` only into
secure sums in real mode, and in a refresh round ``psi_k`` and its probe output in the clear
(the server needs them to choose and send helpers; :mod:`securefl.methods.fedmatch.server`).
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from securefl.errors import InputError, ProtocolError
from securefl.fl import client_rng
from securefl.methods.common import translation
from securefl.methods.halves import LocalData, MethodClient
from securefl.methods.randaugment import randaugment
from securefl.models import build_model, dropout_generator
from securefl.runtime import secure_sum_steps
from securefl.runtime.costs import COMPUTE, CRYPTO
from securefl.runtime.transport import NodeContext, Record

TRAIN = "train"
SIGMA = "sigma"
PSI = "psi"
HELPER = "helper/"
REVEAL_PSI = "reveal/psi"
REVEAL_EMBEDDING = "reveal/embedding"

Tensors = dict[str, torch.Tensor]


def parameter_vector(tensors: Tensors) -> np.ndarray:
    """Per-parameter tensors (``named_parameters`` order) as one float64 vector."""
    return np.concatenate([t.detach().cpu().double().reshape(-1).numpy() for t in tensors.values()])


def parameter_tensors(model: nn.Module, vector: np.ndarray) -> Tensors:
    """``vector`` (:func:`parameter_vector` of ``model``'s parameters) as float32 tensors
    shaped like ``model``'s parameters, on their device."""
    vector = np.asarray(vector, dtype=np.float64)
    shapes = [(name, p) for name, p in model.named_parameters()]
    total = sum(p.numel() for _, p in shapes)
    if vector.shape != (total,):
        raise ProtocolError(f"a parameter vector must have shape ({total},), not {vector.shape}")
    tensors, start = {}, 0
    for name, p in shapes:
        chunk = vector[start:start + p.numel()].reshape(p.shape)
        tensors[name] = torch.from_numpy(chunk.astype(np.float32)).to(p.device)
        start += p.numel()
    return tensors


def check_decomposable(model: nn.Module) -> None:
    """FedMatch decomposes parameters; a model with floating-point buffers (batch-norm
    statistics) would need them aggregated too, which this implementation does not do."""
    buffers = [name for name, b in model.named_buffers() if torch.is_floating_point(b)]
    if buffers:
        raise InputError("model", type(model).__name__,
                         f"holds floating-point buffers ({buffers[0]}, ...); FedMatch here "
                         "decomposes parameters only: pick a model without batch norm "
                         "(mlp, cnn, resnet9 with norm='gn')")


def forward(model: nn.Module, sigma: Tensors, psi: Tensors, x: torch.Tensor) -> torch.Tensor:
    """Logits of the model with parameters ``theta = sigma + psi`` on ``x``."""
    return functional_call(model, {name: sigma[name] + psi[name] for name in sigma}, (x,))


def probe_input(seed: int, input_shape: tuple[int, ...]) -> np.ndarray:
    """The public probe ``r`` (one image of ``input_shape``) whose model outputs embed the
    clients' models: ``clip(0.5 + 0.5 N(0, I), 0, 1)`` from ``seed`` (FedMatch's code uses
    one truncated Gaussian image of mean and std half the pixel range)."""
    rng = np.random.default_rng([int(seed), 0xFED3A7C4])
    return np.clip(0.5 + 0.5 * rng.standard_normal((1, *input_shape)), 0.0, 1.0).astype(np.float32)


def agreement_labels(local: torch.Tensor, helpers: list[torch.Tensor]) -> torch.Tensor:
    """Agreement-based pseudo-labels (FedMatch eq. 3 as its code computes it): the class
    with most votes among the local model's argmax and each helper's argmax, ties to the
    lowest class index; ``local`` and each of ``helpers`` are ``(n, C)`` probabilities."""
    classes = local.shape[1]
    votes = F.one_hot(local.argmax(dim=1), classes)
    for probs in helpers:
        votes = votes + F.one_hot(probs.argmax(dim=1), classes)
    return votes.argmax(dim=1)


def regularisation(sigma: Tensors, psi: Tensors, *, lambda_l1: float, lambda_l2: float
                   ) -> torch.Tensor:
    """``lambda_L1 ||psi||_1 + lambda_L2 ||sigma - psi||_2^2`` over every parameter."""
    total = sum(lambda_l1 * p.abs().sum() + lambda_l2 * (sigma[n] - p).pow(2).sum()
                for n, p in psi.items())
    return total


def unlabeled_loss(method, model: nn.Module, sigma: Tensors, psi: Tensors,
                   helpers: list[Tensors], weak: torch.Tensor, strong: torch.Tensor
                   ) -> torch.Tensor:
    """FedMatch's ``L_u`` on one unlabeled batch (gradients reach ``psi`` only):

        conf = {i : max_c p_i >= tau},  p = softmax(f_{sigma + psi}(weak)),
        L_u = lambda_ICCS / H  sum_h KL(p^h_conf || p_conf)
              + lambda_a  CE(f_{sigma + psi}(strong_conf), agreement(p_conf, p^h_conf))
              + lambda_L1 ||psi||_1 + lambda_L2 ||sigma - psi||^2,

    ``p^h = softmax(f_{theta_h}(weak))`` the predictions of the helpers ``theta_h = sigma_G +
    psi_h`` (``helpers``: their parameters; no gradient), the KL term absent without helpers."""
    frozen = {n: s.detach() for n, s in sigma.items()}
    loss = regularisation(frozen, psi, lambda_l1=method.lambda_l1, lambda_l2=method.lambda_l2)
    probs = F.softmax(forward(model, frozen, psi, weak), dim=1)
    confident = probs.detach().max(dim=1).values >= method.confidence
    if not bool(confident.any()):
        return loss
    local = probs[confident]
    with torch.no_grad():
        helper_probs = [F.softmax(functional_call(model, h, (weak[confident],)), dim=1) for h in helpers]
    for target in helper_probs:
        kl = (target * (target.clamp_min(1e-12).log() - local.clamp_min(1e-12).log())).sum(dim=1)
        loss = loss + method.lambda_iccs * kl.mean() / len(helper_probs)
    pseudo = agreement_labels(local.detach(), helper_probs)
    return loss + method.lambda_a * F.cross_entropy(forward(model, frozen, psi, strong[confident]), pseudo)


def local_update(method, model: nn.Module, sigma: Tensors, psi: Tensors, helpers: list[Tensors],
                 data: LocalData, lr: float, generator: torch.Generator) -> None:
    """FedMatch's disjoint learning on one client, ``sigma`` and ``psi`` in place.

    Per epoch, ``S`` steps (``S = round(n_L / B)``, at least 1, with ``n_L`` labels; without
    labels ``ceil(n_U / B)``); step ``i`` takes the ``i``-th labeled batch of ``B`` and the
    ``i``-th unlabeled batch of ``ceil(n_U / S)`` of this epoch's permutations (FedMatch's
    ``train_one_round``) and makes one SGD step of ``sigma`` on
    ``lambda_s CE(f_{sigma + psi}(weak(x_L)), y_L)`` (``psi`` frozen), then one of ``psi``
    on :func:`unlabeled_loss` (``sigma`` frozen).  ``weak`` is the method's translation,
    ``strong`` RandAugment + Cutout of the weak view; all draws from ``generator``."""
    client, device = data.client, method.torch_device
    x = torch.from_numpy(np.ascontiguousarray(client.x, dtype=np.float32)).to(device)
    x_l, x_u = x[torch.from_numpy(client.labeled).to(device)], x[torch.from_numpy(~client.labeled).to(device)]
    y_l = torch.from_numpy(client.y[client.labeled].astype(np.int64)).to(device)
    n_l, n_u = len(y_l), len(x_u)
    steps = max(1, round(n_l / method.batch_size)) if n_l else math.ceil(n_u / method.batch_size)
    batch_u = math.ceil(n_u / steps) if steps else 0
    for t in (*sigma.values(), *psi.values()):
        t.requires_grad_(True)
    opt_sigma = torch.optim.SGD(list(sigma.values()), lr=lr, momentum=method.momentum,
                                weight_decay=method.weight_decay)
    opt_psi = torch.optim.SGD(list(psi.values()), lr=lr, momentum=method.momentum)
    weak = translation(data.input_shape, method.max_shift, generator)
    weak = weak or (lambda batch: batch)
    model.train()
    with dropout_generator(model, generator):
        for _ in range(method.local_epochs):
            order_l = torch.randperm(n_l, generator=generator, device=generator.device).to(device)
            order_u = torch.randperm(n_u, generator=generator, device=generator.device).to(device)
            for i in range(steps):
                labeled = order_l[i * method.batch_size:(i + 1) * method.batch_size]
                if len(labeled):
                    frozen = {n: p.detach() for n, p in psi.items()}
                    logits = forward(model, sigma, frozen, weak(x_l[labeled]))
                    loss = method.lambda_s * F.cross_entropy(logits, y_l[labeled])
                    opt_sigma.zero_grad(set_to_none=True)
                    loss.backward()
                    opt_sigma.step()
                unlabeled = order_u[i * batch_u:(i + 1) * batch_u]
                if len(unlabeled):
                    view = weak(x_u[unlabeled])
                    strong = randaugment(view, generator, num_ops=method.num_ops, cutout=method.cutout)
                    loss = unlabeled_loss(method, model, sigma, psi, helpers, view, strong)
                    opt_psi.zero_grad(set_to_none=True)
                    loss.backward()
                    opt_psi.step()
    for t in (*sigma.values(), *psi.values()):
        t.requires_grad_(False)


class FedMatchClient(MethodClient):
    """The client half of FedMatch (module docstring)."""

    def handle(self, step: str, request: Record, state: Record, node: NodeContext) -> Record:
        if step in secure_sum_steps.STEPS:
            return self.secure_sum_reply(request, state, node)
        if step != TRAIN:
            raise self.unknown_step(step, TRAIN)
        method, data = self.method, self.data(node)
        if SIGMA not in request.arrays or PSI not in request.arrays:
            raise ProtocolError("a FedMatch train request needs sigma and psi")
        helper_keys = sorted((k for k in request.arrays if k.startswith(HELPER)),
                             key=lambda k: int(k[len(HELPER):]))
        if len(helper_keys) > method.num_helpers:
            raise ProtocolError(f"{len(helper_keys)} helpers sent, more than num_helpers={method.num_helpers}")
        if bool(request.config.get("reveal", False)) and method.secure == "real" \
                and not node.policy().allow_model_reveal:
            raise ProtocolError("the server asks for psi_k in the clear (FedMatch's helper refresh); "
                                "this node's policy refuses model reveals (policy-allow-model-reveal)")
        start = time.perf_counter()
        reply = Record()
        model = build_model(method.model, input_shape=data.input_shape, num_classes=data.num_classes,
                            seed=method.seed, device=method.torch_device)
        check_decomposable(model)
        sigma = parameter_tensors(model, request.arrays[SIGMA])
        psi = parameter_tensors(model, request.arrays[PSI])
        helpers = [{n: sigma[n] + h[n] for n in sigma}  # theta_h = sigma_G + psi_h, FedMatch's code
                   for h in (parameter_tensors(model, request.arrays[k]) for k in helper_keys)]
        round_index = int(request.config["round"])
        rng = client_rng(method.seed, round_index, node.partition, device=method.torch_device)
        local_update(method, model, sigma, psi, helpers, data, float(request.config["lr"]), rng.torch)
        vectors = {SIGMA: parameter_vector(sigma), PSI: parameter_vector(psi)}
        if bool(request.config.get("reveal", False)):
            reply.arrays[REVEAL_PSI] = vectors[PSI]
            reply.arrays[REVEAL_EMBEDDING] = self.embedding(model, sigma, psi, data)
        reply.config[COMPUTE] = time.perf_counter() - start
        reply.config[CRYPTO] = self.upload_model(reply, state, request, vectors, data, node)
        return reply

    def embedding(self, model: nn.Module, sigma: Tensors, psi: Tensors, data: LocalData) -> np.ndarray:
        """``softmax(f_{sigma_k + psi_k}(r))`` on the public probe ``r``, float64 ``(C,)``."""
        probe = torch.from_numpy(probe_input(self.method.seed, data.input_shape)).to(self.method.torch_device)
        model.eval()
        with torch.no_grad():
            return F.softmax(forward(model, sigma, psi, probe), dim=1)[0].double().cpu().numpy()
