"""FedMatch (Jeong, Yoon, Yang, Hwang, ICLR 2021), labels-at-client scenario.

**Decomposition.**  Every parameter of the model is ``theta = sigma + psi``: ``sigma``
learns from labels, ``psi`` from unlabeled data (disjoint learning).  Per local step a
client updates ``sigma`` on ``lambda_s CE(f_theta(x_L), y_L)`` with ``psi`` frozen, then
``psi`` on

    L_u = lambda_ICCS / H sum_h KL(p_h || p)  +  lambda_a CE(f_theta(A(x_U)), y^)
          + lambda_L1 ||psi||_1 + lambda_L2 ||sigma - psi||_2^2

with ``sigma`` frozen, over the unlabeled points whose local confidence ``max_c p`` on the
weak view reaches ``tau`` (``confidence``); ``p`` is the local prediction, ``p_h`` helper
``h``'s (``theta_h = sigma_G + psi_h``), ``A`` the strong augmentation (RandAugment +
Cutout of the weak view) and ``y^`` the agreement-based pseudo-label: the class with
most votes among the local and the helpers' argmaxes
(:mod:`securefl.methods.fedmatch.client`).  The server averages ``sigma`` and ``psi``
(FedAvg, weights ``|D_k|``) and deploys ``sigma + psi * [|psi| > l1_threshold]`` (the code's
hard threshold of ``psi`` at inference).

**Helpers.**  Every ``helper_interval`` rounds (round ``t`` with ``t % helper_interval ==
0``) the server asks the round's clients to *reveal* their trained ``psi_k`` and the
embedding ``e_k = softmax(f_{sigma_k + psi_k}(r))`` of their model on a public random probe
``r``; it keeps the latest reveal of every client (the helper pool) and gives each pool
client the ``num_helpers`` other pool clients nearest in Euclidean distance of ``e``
(FedMatch's KD-tree query; ties to the lower client id).  Until the next refresh every
round sends each client the ``psi`` of its helpers; a client never revealed gets none (as
in the code, which only finds helpers for clients it has embedded).  Without helpers the
KL term is absent and ``y^`` is the local argmax.

**Paper's hyper-parameters** (FedMatch §5 / App. A and its code, github.com/wyjeong/FedMatch,
``config.py`` for the labels-at-client task): ``H = 2`` helpers refreshed every 10 rounds,
``lambda_s = 10``, ``lambda_ICCS = lambda_a = 1e-2``, ``lambda_L2 = 10``, ``lambda_L1 = 1e-4``,
``l1_thres = 5e-6``, ``psi`` initialised as ``0.2 sigma`` (``psi_factor``), 1 local epoch,
labeled batch 10, SGD with lr 1e-3.  Where the code and the paper differ we follow:

- ``tau = 0.85`` (the paper; the released ``config.py`` sets ``confidence = 0.75``);
- the KL term averaged over the helpers (the code's ``/ len(y_preds)``; the paper writes
  the sum);
- votes of one-hot argmaxes for ``y^`` (the code; the paper's eq. 3 sums the predictions);
- helpers used in every round, chosen and their ``psi`` fetched at each refresh (the paper;
  the code re-embeds every round but sends helpers only in rounds ``t`` with
  ``(t + 1) % 10 == 0``).

Ours, not the paper's: the optimiser keeps ``momentum`` and ``weight_decay`` (on ``sigma``)
as keywords (the code's plain SGD is ``momentum=0, weight_decay=0``), a constant learning
rate (the code decays it on each client's own validation loss, which this federation
does not give clients), the weak view is the project's translation
(:func:`securefl.methods.common.translation`), and ``theta``'s decomposition covers every
parameter (the code decomposes kernels; its ResNet-9 has no biases).  ``theta_0`` is the
project's initial model: ``sigma_0 = theta_0 / (1 + psi_factor)``, ``psi_0 = psi_factor
sigma_0``.  ``psi`` crosses the link dense (the paper sends only the entries that changed
beyond ``delta_thres`` / survive ``l1_thres``): a round moves ``(2 + H)`` model-sized
vectors down and 2 up (+1 in a refresh round) per client, ``bytes_model_per_client``.

**Who learns what** (``secure="real"``): ``sigma_k`` and ``psi_k`` enter the pairwise-mask
secure sums (:mod:`securefl.fl.uploads`), so the server learns ``sum_k |D_k| sigma_k``,
``sum_k |D_k| psi_k`` and ``|D_k|``.  But FedMatch's helpers are individual models: in a
refresh round every participating client sends its ``psi_k`` and ``e_k`` in the clear, the
server stores them and relays ``psi_k`` to the clients that ``k`` helps.  So the server
learns, once per ``helper_interval`` rounds for each client sampled then, its ``psi_k`` --
which ``lambda_L2`` pulls towards ``sigma_k``, so it approximates the client's whole model
-- and its output on ``r``; each client learns its helpers' ``psi``.  Secure aggregation
hides a client's parameters only in the other rounds.  ``secure="plaintext"`` computes the
same sums directly (fixed point: bit-identical models); the reveals are the same bytes in
both modes.

**Server half and client half** (:mod:`securefl.methods.halves`).  The class here is the
server half (sampling, the helper pool and its choice, aggregation); it reads only the
federation's public facts.  Its client half is
:class:`securefl.methods.fedmatch.client.FedMatchClient`; a round is the exchange ``train``
(+ the secure sums' exchanges in real mode).  Randomness: the server's
:class:`~securefl.fl.SimulationRNG` samples clients (among all of them: unlabeled ones
train ``psi`` only); a client's draws come from :func:`securefl.fl.client_rng`.
"""

from __future__ import annotations

import copy
import time
from typing import Any, ClassVar

import numpy as np
import torch

from securefl.errors import ConfigError, DropoutError, ProtocolError
from securefl.fl import SimulationRNG, sample_clients
from securefl.fl.training import predict_labels
from securefl.fl.uploads import UploadPlan
from securefl.methods.base import Method, RoundResult
from securefl.methods.common import build_network
from securefl.methods.fedmatch.client import (
    HELPER,
    PSI,
    REVEAL_EMBEDDING,
    REVEAL_PSI,
    SIGMA,
    TRAIN,
    FedMatchClient,
    check_decomposable,
    parameter_tensors,
    parameter_vector,
)
from securefl.methods.fedmatch.hyper import FedMatchHyper
from securefl.runtime.costs import RoundMeter
from securefl.runtime.transport import Record, Transport


def nearest_helpers(embeddings: dict[int, np.ndarray], count: int) -> dict[int, list[int]]:
    """For every client of ``embeddings``, the ``count`` other clients whose embeddings are
    nearest (Euclidean), nearest first, ties to the lower client id."""
    clients = sorted(embeddings)
    if not clients:
        return {}
    points = np.stack([embeddings[k] for k in clients])
    distances = np.linalg.norm(points[:, None, :] - points[None, :, :], axis=2)
    chosen = {}
    for i, k in enumerate(clients):
        order = [j for j in np.argsort(distances[i], kind="stable") if j != i]
        chosen[k] = [clients[j] for j in order[:count]]
    return chosen


class FedMatch(Method):
    """FedMatch's server half (module docstring); defaults are the paper's."""

    name: ClassVar[str] = "fedmatch"
    hyper = FedMatchHyper
    client_half = FedMatchClient
    deployable: ClassVar[bool] = True

    # ----------------------------------------------------------------- setup
    def setup(self, federation: Any, *, transport: Transport | None = None) -> None:
        """The initial decomposition and the connection to ``transport`` (default: in process
        over ``federation``'s clients); reads only the federation's public facts."""
        self.check_hyper()
        if not federation.labeled_clients:
            raise ConfigError(f"{self.name}: no client holds labels (labels at the server?); "
                              "this is FedMatch's labels-at-client scenario")
        self.federation = federation
        self.rng = SimulationRNG.from_seed(self.seed)
        self.network = build_network(self.model, federation, seed=self.seed, device=self.torch_device)
        check_decomposable(self.network)
        theta = parameter_vector(dict(self.network.named_parameters()))
        self.sigma = theta / (1.0 + self.psi_factor)
        self.psi = self.psi_factor * self.sigma
        self.pool: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.helpers: dict[int, list[int]] = {}
        self.rounds_done = 0
        self._load_network()
        self._connect(federation, transport)

    def _load_network(self) -> None:
        """The deployed model: ``sigma + psi [|psi| > l1_threshold]``."""
        kept = np.where(np.abs(self.psi) > self.l1_threshold, self.psi, 0.0)
        tensors = parameter_tensors(self.network, self.sigma + kept)
        with torch.no_grad():
            for name, param in self.network.named_parameters():
                param.copy_(tensors[name])

    # ----------------------------------------------------------------- a round
    def run_round(self, round_index: int) -> RoundResult:
        """One round: ``train`` to the sampled clients (global ``sigma``, ``psi``, their
        helpers' ``psi``), the secure FedAvg of their ``sigma_k``, ``psi_k``, and in a
        refresh round the new helper pool (module docstring)."""
        start = time.perf_counter()
        fed = self.federation
        members = [int(k) for k in sample_clients(self.rng.numpy, fed.num_clients,
                                                  min(self.clients_per_round, fed.num_clients))]
        reveal = round_index % self.helper_interval == 0 and self.num_helpers > 0
        meter = RoundMeter(self.transport, members)
        dim = int(self.sigma.size)
        plan = UploadPlan.new(secure=self.secure, sum_backend=self.sum_backend, members=members,
                              dims={SIGMA: dim, PSI: dim})
        shared = {"round": int(round_index), "lr": float(self.lr), "reveal": bool(reveal)}
        requests, helpers_sent = {}, 0
        for k in members:
            arrays = {SIGMA: self.sigma, PSI: self.psi}
            for h, helper in enumerate(self.helpers.get(k, [])):
                arrays[f"{HELPER}{h}"] = self.pool[helper][1]
                helpers_sent += 1
            requests[k] = plan.request(k, arrays, shared)
        train = self.transport.exchange(TRAIN, requests)
        meter.add(train)
        if not train.replies:
            raise DropoutError(f"round {round_index}: no client of {members} finished training")
        revealed = self._reveals(train.replies, dim) if reveal else {}
        outcome = plan.collect(self.transport, train)
        meter.add(outcome.exchanges)
        self.sigma, self.psi = outcome.averages[SIGMA], outcome.averages[PSI]
        self._load_network()
        if reveal:
            self.pool.update(revealed)
            self.helpers = nearest_helpers({k: e for k, (e, _) in self.pool.items()}, self.num_helpers)
        self.rounds_done = round_index + 1
        vector_bytes = 4.0 * dim
        model_bytes = (4 * vector_bytes * len(members) + vector_bytes * helpers_sent
                       + sum(vector_bytes + 4.0 * fed.num_classes for _ in revealed)) / len(members)
        down, up = meter.bytes_per_client()
        participation = {"members": members, "survivors": list(outcome.survivors),
                         "dropped": {k: list(v) for k, v in outcome.dropped.items() if v},
                         "failed": {str(c): text for c, text in sorted(outcome.failed.items())}}
        return RoundResult(
            round=round_index, seconds=time.perf_counter() - start,
            train_seconds=meter.compute_seconds, crypto_seconds=outcome.crypto_seconds,
            bytes_model_per_client=model_bytes,
            bytes_protocol_per_client=outcome.protocol_bytes_per_client,
            messaging_seconds=meter.messaging_seconds, bytes_down_per_client=down,
            bytes_up_per_client=up, participation=participation)

    def _reveals(self, replies: dict[int, Record], dim: int) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """The refresh round's ``(e_k, psi_k)`` of every client that replied."""
        revealed = {}
        for k, reply in replies.items():
            embedding = np.asarray(reply.arrays.get(REVEAL_EMBEDDING), dtype=np.float64)
            psi = np.asarray(reply.arrays.get(REVEAL_PSI), dtype=np.float64)
            if embedding.shape != (self.federation.num_classes,) or psi.shape != (dim,):
                raise ProtocolError(f"client {k}: a refresh round's reply needs reveal/psi ({dim},) "
                                    f"and reveal/embedding ({self.federation.num_classes},)")
            revealed[int(k)] = (embedding, psi)
        return revealed

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Labels of the deployed model ``sigma + psi [|psi| > l1_threshold]``."""
        return predict_labels(self.network, x)

    # ----------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        return {"round": self.rounds_done, "rng": self.rng.state_dict(),
                "sigma": self.sigma.copy(), "psi": self.psi.copy(),
                "pool": {k: (e.copy(), p.copy()) for k, (e, p) in self.pool.items()},
                "helpers": copy.deepcopy(self.helpers), "clients": self._client_states()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rounds_done = state["round"]
        self.rng.load_state_dict(state["rng"])
        self.sigma, self.psi = state["sigma"].copy(), state["psi"].copy()
        self.pool = {int(k): (e.copy(), p.copy()) for k, (e, p) in state["pool"].items()}
        self.helpers = {int(k): list(v) for k, v in state["helpers"].items()}
        self._load_network()
        self._adopt_client_states(state.get("clients", {}))
