"""Client half of FedAnchor (:mod:`securefl.methods.fedanchor.server`): what one client does in a
round, written once for every transport.

Steps (one exchange each):

``train``
    request: arrays ``model`` (the global backbone and classification head, float64,
    :func:`securefl.fl.model_vector`), ``anchor_head`` (the anchor head, float64),
    ``anchors/latents`` (``Z^anchor``, float32, one row per anchor) and ``anchors/labels``
    (``y^anchor``); config ``round`` and the secure sum's parameters
    (:class:`securefl.fl.uploads.UploadPlan`).  The client builds the architecture from
    its keywords and its data's shape, loads both vectors, embeds its data through the
    anchor head, pseudo-labels it by the anchors (eqs. 3-4), trains (Appendix B, or plain
    cross-entropy) with its generators ``client_rng(seed, round, client)`` -- bit for bit
    the update the simulator made on a copy of the global model -- and uploads its model
    weighted by |D_m| (:func:`securefl.fl.uploads.upload`: secure-sum round 0 in real mode).
    reply: the upload, :data:`~securefl.runtime.costs.COMPUTE` / :data:`~securefl.runtime.costs.CRYPTO`
    seconds, and, when the run asks for reports, its pseudo-labels and their hits
    (:func:`securefl.methods.halves.report_pseudo_labels`).
``secagg/keys``, ``secagg/ciphertexts``, ``secagg/survivors``, ``secagg/endorsements`` (real mode)
    the secure sum's rounds 1-3 (:func:`securefl.runtime.secure_sum_steps.answer`).

A FedAnchor client keeps nothing between rounds.  Who learns what: the client learns the
global model, the anchor head and the server's anchor latents and labels (sent by
design); its pseudo-labels stay local (they leave only as the simulation's report), its
model goes only into the secure sum in real mode.
"""

from __future__ import annotations

import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from securefl.errors import ProtocolError
from securefl.fl import SimulationRNG, client_rng, load_model_vector, model_vector
from securefl.fl.training import batches, make_optimizer
from securefl.methods.anchoring import anchor_pseudo_labels, fix_and_mix, mixup_loss
from securefl.methods.common import translation
from securefl.methods.halves import MethodClient, report_pseudo_labels
from securefl.models import build_model, dropout_generator
from securefl.runtime import secure_sum_steps
from securefl.runtime.costs import COMPUTE, CRYPTO
from securefl.runtime.transport import NodeContext, Record

TRAIN = "train"
LATENTS = "anchors/latents"
LABELS = "anchors/labels"


@torch.no_grad()
def latents(x: torch.Tensor, network: nn.Module, head: nn.Module) -> torch.Tensor:
    """``head(f_phi(x))`` in evaluation mode, in chunks of 1024."""
    network.eval()
    head.eval()
    return torch.cat([head(network.features(x[i : i + 1024])) for i in range(0, len(x), 1024)])


def train_client(method, network: nn.Module, x: torch.Tensor, labels: np.ndarray, scores: np.ndarray,
                 input_shape: tuple[int, ...], rng: SimulationRNG) -> None:
    """Local training on the pseudo-labels (Appendix B, or plain cross-entropy), drawing
    from ``rng`` (the client's generators for the round) only; ``x``, ``network`` and
    ``rng.torch`` share one device."""
    optimizer = make_optimizer(network, lr=method.lr, momentum=method.momentum,
                               weight_decay=method.weight_decay)
    network.train()
    augment = translation(input_shape, method.max_shift, rng.torch) or (lambda batch: batch)
    y = torch.from_numpy(labels).to(x.device)
    if not method.client_mixup:
        for _ in range(method.local_epochs):
            for idx in batches(len(y), method.batch_size, rng.torch):
                loss = F.cross_entropy(network(augment(x[idx])), y[idx])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
        return
    fix, mix = fix_and_mix(scores, method.threshold, rng.numpy)
    if fix.size == 0:
        return
    fix_t, mix_t = torch.from_numpy(fix).to(x.device), torch.from_numpy(mix).to(x.device)
    for _ in range(method.local_epochs):
        for idx in batches(len(fix), method.batch_size, rng.torch):
            i_fix, i_mix = fix_t[idx], mix_t[idx]
            lam = float(rng.numpy.beta(method.mixup_alpha, method.mixup_alpha))
            mixed = lam * x[i_fix] + (1.0 - lam) * x[i_mix]
            loss = F.cross_entropy(network(augment(x[i_fix])), y[i_fix])
            loss = loss + method.mix_weight * mixup_loss(network(augment(mixed)), y[i_fix], y[i_mix], lam)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()


class FedAnchorClient(MethodClient):
    """FedAnchor's client half (module docstring)."""

    def handle(self, step: str, request: Record, state: Record, node: NodeContext) -> Record:
        if step in secure_sum_steps.STEPS:
            return self.secure_sum_reply(request, state, node)
        reply = Record()
        if step != TRAIN:
            raise self.unknown_step(step, TRAIN)
        missing = [k for k in ("model", "anchor_head", LATENTS, LABELS) if k not in request.arrays]
        if missing:
            raise ProtocolError(f"a FedAnchor train request needs {missing}")
        method, data = self.method, self.data(node)
        start = time.perf_counter()
        device = method.torch_device
        network = build_model(method.model, input_shape=data.input_shape,
                              num_classes=data.num_classes, seed=method.seed, device=device)
        load_model_vector(network, np.array(request.arrays["model"], dtype=np.float64))
        with torch.random.fork_rng():  # the head's initial values are overwritten; keep the global stream
            head = nn.Linear(network.feature_dim, method.anchor_dim).to(device)
        load_model_vector(head, np.array(request.arrays["anchor_head"], dtype=np.float64))
        anchor_z = torch.from_numpy(np.array(request.arrays[LATENTS], dtype=np.float32)).to(device)
        anchor_y = torch.from_numpy(np.array(request.arrays[LABELS], dtype=np.int64)).to(device)
        if anchor_z.ndim != 2 or anchor_y.shape != (anchor_z.shape[0],):
            raise ProtocolError("anchor latents must be (n, d) with n labels")
        x = torch.from_numpy(np.ascontiguousarray(data.client.x, dtype=np.float32)).to(device)
        rng = client_rng(method.seed, int(request.config["round"]), node.partition, device=device)
        labels, scores = anchor_pseudo_labels(latents(x, network, head), anchor_z, anchor_y,
                                              data.num_classes)
        with dropout_generator(network, rng.torch):
            train_client(method, network, x, labels, scores, data.input_shape, rng)
        if self.reports(node):
            report_pseudo_labels(reply, labels, data)
        reply.config[COMPUTE] = time.perf_counter() - start
        reply.config[CRYPTO] = self.upload_model(reply, state, request,
                                                 {"model": model_vector(network)}, data, node)
        return reply
