"""Client half of ProtoFSSL (:mod:`securefl.methods.protofssl.server`): what one client does in a
round, written once for every transport.

Steps (one exchange each):

``train``
    request: array ``model`` (the global embedding network ``theta^{r-1}``, float64,
    :func:`securefl.fl.model_vector`), the helpers' prototypes ``helpers/<i>/vectors``
    ``(C, d)`` and ``helpers/<i>/mask`` (config ``helpers``: how many), config ``round``
    and the model's secure-sum parameters (:class:`securefl.fl.uploads.UploadPlan`).  The
    client builds the architecture from its keywords and its data's shape, loads the
    vector, continues its RMSprop state from its state Record and runs ``local_epochs``
    episodes drawn from ``client_rng(seed, round, client)`` (:func:`local_update`; with
    ``max_shift`` their images are translated first, from the same generator) -- bit
    for bit the update the simulator made -- then uploads its model weighted by |D_i|
    (secure-sum round 0 in real mode).  Without the Gaussian release
    (``noise_multiplier``) it also sends the prototypes of its labeled data under its
    local model, withheld/clipped/noised as configured (``prototypes/vectors``, ``/mask``:
    what the server stores for the next round's helpers, in the clear as in the paper).
    reply: the upload, those prototypes, :data:`~securefl.runtime.costs.COMPUTE` /
    :data:`~securefl.runtime.costs.CRYPTO`, and, when the run asks for reports, the hard
    pseudo-labels of its unlabeled queries and how many match their hidden labels.
``prototypes``
    request: array ``model`` (the aggregated ``theta^r``), config ``round`` and the
    parameters of the sum ``prototypes`` (:mod:`securefl.fl.group_sums`, a plain sum).
    The client embeds its labeled data with ``theta^r``: with ``noise_multiplier`` it makes
    its one DP release of the round -- recorded first in the node's own ledger, which
    refuses a second release for the same round and one past the node's epsilon budget
    (:mod:`securefl.runtime.policy`) -- (sent as ``prototypes/vectors``, ``/mask``, ``/counts``: what the
    server stores) and sums the release; otherwise it sums its exact prototypes and
    counts, which never leave it otherwise.  The secure-sum input is
    :func:`securefl.protocols.prototype_sharing.prototype_sum_input`.
``secagg/keys``, ``secagg/ciphertexts``, ``secagg/survivors``, ``secagg/endorsements`` (real mode)
    rounds 1-3 of the secure sum in progress (the model's after ``train``, the global
    prototypes' after ``prototypes``).

Noise: every Gaussian draw of a prototype release happens here, at the client, seeded by
``crypto_seed_for("prototype-noise", round, client)`` of the client's configuration (the OS
CSPRNG in a real run without a crypto seed: :func:`securefl.methods.halves.run_config`
leaves a real run's seed out of a deployment), as the simulator drew it.

Between rounds a client keeps its RMSprop accumulators (``protofssl/rmsprop/...``),
checkpointed with the simulator's client states.  Who learns what: the client learns the
global models and the helpers' (noised) prototypes; it sends its model only into secure
sums in real mode, its own prototypes as configured (above).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from securefl.errors import ProtocolError
from securefl.fl import SimulationRNG, client_rng, group_sums, load_model_vector, model_vector
from securefl.fl.device import model_device
from securefl.fl.training import prox_term
from securefl.methods.common import translation
from securefl.methods.halves import REPORT, LocalData, MethodClient
from securefl.methods.prototypical import (
    class_prototypes,
    helper_pseudo_labels,
    protofssl_loss,
    prototype_logits,
    split_episode,
)
from securefl.models import build_model, dropout_generator
from securefl.protocols.prototype_sharing import Prototypes, prototype_sum_input, share_prototypes
from securefl.protocols.prototype_sharing import class_prototypes as exact_prototypes
from securefl.runtime import secure_sum_steps
from securefl.runtime.costs import COMPUTE, CRYPTO
from securefl.runtime.transport import NodeContext, Record

TRAIN = "train"
PROTOTYPES = "prototypes"
GLOBAL_SUM = "prototypes"
"""The name of the global prototypes' secure sum."""
SENT = "prototypes/"
RMSPROP = "protofssl/rmsprop/"


def embed_all(network: torch.nn.Module, x: torch.Tensor) -> np.ndarray:
    """Embeddings of ``x`` in evaluation mode (chunks of 1024, each copied to the network's
    device), float64 on the CPU; leaves the network in training mode."""
    device = model_device(network)
    network.eval()
    with torch.no_grad():
        out = torch.cat([network(x[i : i + 1024].to(device)) for i in range(0, len(x), 1024)])
    network.train()
    return out.double().cpu().numpy()


def put_prototypes(record: Record, prototypes: Prototypes) -> None:
    """What a client sends of ``prototypes`` (vectors, mask, counts where they travel)."""
    record.arrays[f"{SENT}vectors"] = np.asarray(prototypes.vectors, dtype=np.float64)
    record.arrays[f"{SENT}mask"] = np.asarray(prototypes.mask, dtype=np.uint8)
    if prototypes.counts is not None:
        record.arrays[f"{SENT}counts"] = np.asarray(prototypes.counts, dtype=np.float64)
    record.config[f"{SENT}noise_std"] = float(prototypes.noise_std)
    record.config[f"{SENT}clip_norm"] = -1.0 if prototypes.clip_norm is None else float(prototypes.clip_norm)


def take_prototypes(record: Record, num_classes: int) -> Prototypes:
    """The prototypes a client sent in ``record`` (ProtocolError if malformed)."""
    try:
        vectors = np.array(record.arrays[f"{SENT}vectors"], dtype=np.float64)
        mask = np.array(record.arrays[f"{SENT}mask"]).astype(bool)
        clip = float(record.config[f"{SENT}clip_norm"])
        noise = float(record.config[f"{SENT}noise_std"])
    except KeyError as missing:
        raise ProtocolError(f"prototypes without {missing}") from None
    counts = record.arrays.get(f"{SENT}counts")
    if vectors.ndim != 2 or vectors.shape[0] != num_classes or mask.shape != (num_classes,) or (
            counts is not None and np.shape(counts) != (num_classes,)):
        raise ProtocolError(f"prototypes must be ({num_classes}, d) with a mask of {num_classes}")
    return Prototypes(vectors, mask, None if counts is None else np.array(counts, dtype=np.float64),
                      noise, None if clip < 0 else clip)


def save_optimizer(state: Record, optimizer: torch.optim.Optimizer) -> None:
    """The optimiser's per-parameter state (accumulators, step counts) into ``state``."""
    for key in [k for k in state.arrays if k.startswith(RMSPROP)]:
        del state.arrays[key]
    for key in [k for k in state.config if k.startswith(RMSPROP)]:
        del state.config[key]
    for index, entries in optimizer.state_dict()["state"].items():
        for name, value in entries.items():
            key = f"{RMSPROP}{int(index)}/{name}"
            if value.ndim == 0:  # step counts: a scalar and its dtype
                state.config[key] = value.item()
                state.config[f"{key}#dtype"] = str(value.dtype).removeprefix("torch.")
            else:
                state.arrays[key] = value.detach().cpu().clone().numpy()


def load_optimizer(state: Record, optimizer: torch.optim.Optimizer) -> None:
    """Give ``optimizer`` the state :func:`save_optimizer` stored (none: a fresh one);
    ``load_state_dict`` moves the accumulators to the parameters' device."""
    entries: dict[int, dict[str, Any]] = {}
    for key, value in state.arrays.items():
        if key.startswith(RMSPROP):
            index, name = key[len(RMSPROP):].split("/", 1)
            entries.setdefault(int(index), {})[name] = torch.from_numpy(np.array(value))
    for key, value in state.config.items():
        if key.startswith(RMSPROP) and not key.endswith("#dtype"):
            index, name = key[len(RMSPROP):].split("/", 1)
            dtype = getattr(torch, str(state.config[f"{key}#dtype"]))
            entries.setdefault(int(index), {})[name] = torch.tensor(value, dtype=dtype)
    if entries:
        optimizer.load_state_dict({"state": entries,
                                   "param_groups": optimizer.state_dict()["param_groups"]})


def local_update(method, network: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 x_l: torch.Tensor, y_l: torch.Tensor, x_u: torch.Tensor, helpers: list[Prototypes],
                 num_classes: int, rng: SimulationRNG) -> tuple[np.ndarray, np.ndarray]:
    """Algorithm 1, RunClient: ``local_epochs`` episodes drawn from ``rng``, one optimiser
    step each.  Returns the hard pseudo-labels (argmax of the sharpened targets) of every
    unlabeled query and those queries' positions among the unlabeled points."""
    network.train()
    anchor = [p.detach().clone() for p in network.parameters()] if method.aggregation == "fedprox" else []
    pseudo: list[np.ndarray] = []
    positions: list[np.ndarray] = []
    y_np = y_l.cpu().numpy()
    augment = translation(tuple(x_l.shape[1:]), method.max_shift, rng.torch)
    for _ in range(method.local_epochs):
        support, _, query, unlabeled = split_episode(
            y_np, len(x_u), num_classes=num_classes, n_support=method.n_support,
            n_query=method.n_query, n_unlabeled=method.n_unlabeled, rng=rng.numpy)
        use_unlabeled = bool(helpers) and unlabeled.size > 0
        images = torch.cat([x_l[support], x_l[query]] + ([x_u[unlabeled]] if use_unlabeled else []))
        z = network(images if augment is None else augment(images))
        z_s, z_q = z[: len(support)], z[len(support) : len(support) + len(query)]
        protos, present = class_prototypes(z_s, y_l[support], num_classes)
        query_logits = prototype_logits(z_q, protos, present, distance=method.distance)
        unlabeled_logits = targets = None
        if use_unlabeled:
            z_u = z[len(support) + len(query) :]
            targets = helper_pseudo_labels(z_u, helpers, temperature=method.temperature, distance=method.distance)
            unlabeled_logits = prototype_logits(z_u, protos, present, distance=method.distance)
            pseudo.append(targets.detach().argmax(dim=1).cpu().numpy())
            positions.append(unlabeled)
        loss = protofssl_loss(query_logits, y_l[query], unlabeled_logits, targets, lambda_u=method.lambda_u)
        if anchor:
            loss = loss + prox_term(network, anchor, method.prox_mu)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    empty = np.empty(0, dtype=np.int64)
    return (np.concatenate(pseudo) if pseudo else empty), (np.concatenate(positions) if positions else empty)


class ProtoFSSLClient(MethodClient):
    """ProtoFSSL's client half (module docstring)."""

    def handle(self, step: str, request: Record, state: Record, node: NodeContext) -> Record:
        if step in secure_sum_steps.STEPS:
            return self.secure_sum_reply(request, state, node)
        reply = Record()
        if step not in (TRAIN, PROTOTYPES):
            raise self.unknown_step(step, TRAIN, PROTOTYPES)
        if "model" not in request.arrays:
            raise ProtocolError(f"a ProtoFSSL {step} request needs the model")
        data = self.data(node)
        network = build_model(self.method.model, input_shape=data.input_shape,
                              num_classes=data.num_classes, seed=self.method.seed,
                              device=self.method.torch_device,
                              **self.method._model_options(data)).body
        load_model_vector(network, np.array(request.arrays["model"], dtype=np.float64))
        if step == TRAIN:
            return self.train(network, request, state, node, data, reply)
        return self.release(network, request, state, node, data, reply)

    def labeled(self, data: LocalData) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The client's labeled images, their labels and its unlabeled images (tensors on
        the method's device)."""
        client, device = data.client, self.method.torch_device
        x = torch.from_numpy(np.ascontiguousarray(client.x, dtype=np.float32))
        return (x[torch.from_numpy(client.labeled)].to(device),
                torch.from_numpy(client.y[client.labeled].astype(np.int64)).to(device),
                x[torch.from_numpy(~client.labeled)].to(device))

    def prototypes(self, network: torch.nn.Module, data: LocalData, round_index: int, client: int,
                   *, noised: bool) -> Prototypes:
        """Prototypes of all the client's labeled data (§4.4): what it sends (``noised``:
        withheld/noised as configured, no exact counts) or its own exact view with counts."""
        method = self.method
        x_l, y_l, _ = self.labeled(data)
        embeddings = embed_all(network, x_l)
        if not noised:
            return exact_prototypes(embeddings, y_l.cpu().numpy(), num_classes=data.num_classes,
                                    min_count=method.min_class_count, clip_norm=method.clip)
        noise = method.noise_std > 0 or method.noise_multiplier is not None
        return share_prototypes(
            embeddings, y_l.cpu().numpy(), num_classes=data.num_classes,
            min_count=method.min_class_count, clip_norm=method.clip,
            sigma=method.noise_std if noise and method.noise_multiplier is None else None,
            noise_multiplier=method.noise_multiplier if noise else None,
            seed=method.crypto_seed_for("prototype-noise", round_index, client) if noise else None,
        )

    def helpers(self, request: Record, num_classes: int) -> list[Prototypes]:
        """The helpers' prototypes the request carries."""
        helpers = []
        for i in range(int(request.config.get("helpers", 0))):
            try:
                vectors = np.array(request.arrays[f"helpers/{i}/vectors"], dtype=np.float64)
                mask = np.array(request.arrays[f"helpers/{i}/mask"]).astype(bool)
            except KeyError:
                raise ProtocolError(f"helper {i}'s prototypes are missing") from None
            if vectors.ndim != 2 or vectors.shape[0] != num_classes or mask.shape != (num_classes,):
                raise ProtocolError(f"helper {i}'s prototypes must be ({num_classes}, d)")
            helpers.append(Prototypes(vectors, mask, None))
        return helpers

    def train(self, network: torch.nn.Module, request: Record, state: Record, node: NodeContext,
              data: LocalData, reply: Record) -> Record:
        method = self.method
        start = time.perf_counter()
        round_index = int(request.config["round"])
        helpers = self.helpers(request, data.num_classes)
        x_l, y_l, x_u = self.labeled(data)
        optimizer = torch.optim.RMSprop(network.parameters(), lr=method.lr, alpha=method.rmsprop_alpha,
                                        eps=method.rmsprop_eps, weight_decay=method.weight_decay)
        load_optimizer(state, optimizer)
        rng = client_rng(method.seed, round_index, node.partition, device=method.torch_device)
        with dropout_generator(network, rng.torch):
            labels, positions = local_update(method, network, optimizer, x_l, y_l, x_u, helpers,
                                             data.num_classes, rng)
        save_optimizer(state, optimizer)
        if not method.private:
            put_prototypes(reply, self.prototypes(network, data, round_index, node.partition, noised=True))
        if self.reports(node) and helpers:
            client = data.client
            truth = client.y[np.flatnonzero(~client.labeled)[positions]]
            reply.arrays[f"{REPORT}pseudo_labels"] = np.asarray(labels, dtype=np.int64)
            reply.config[f"{REPORT}hits"] = int((labels == truth).sum())
            reply.config[f"{REPORT}unlabeled"] = int(labels.size)
        reply.config[COMPUTE] = time.perf_counter() - start
        reply.config[CRYPTO] = self.upload_model(reply, state, request,
                                                 {"model": model_vector(network)}, data, node)
        return reply

    def release(self, network: torch.nn.Module, request: Record, state: Record, node: NodeContext,
                data: LocalData, reply: Record) -> Record:
        method = self.method
        start = time.perf_counter()
        round_index = int(request.config["round"])
        if method.private:  # counted by the client itself, before anything is drawn or sent
            node.ledger().release(session=bytes(state.config["_session"]), round_index=round_index,
                                  noise_multiplier=method.noise_multiplier, delta=method.dp_delta,
                                  budget=node.policy().epsilon)
        final = self.prototypes(network, data, round_index, node.partition, noised=method.private)
        if method.private:
            put_prototypes(reply, final)
        reply.config[COMPUTE] = time.perf_counter() - start
        reply.config[CRYPTO] = group_sums.contribute(
            reply, state, request, secure=method.secure, sum_backend=method.sum_backend,
            vectors={GLOBAL_SUM: prototype_sum_input(final)}, weight=None,
            credentials=self.sum_credentials(node), policy=node.policy())
        return reply
