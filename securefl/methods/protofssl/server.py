"""ProtoFSSL (Kim et al., protofssl.md Algorithm 1): FSSL with prototypical networks and
inter-client prototype sharing.

The network is the feature extractor ``f_theta`` alone (no final FC layer, Appendix A.2):
a sample is classified by its distance to class prototypes.  Per round ``r``:

* the server samples ``clients_per_round`` clients ``M_r`` and picks ``helpers`` clients
  ``H_r`` among the previous round's ``M_{r-1}``, whose prototypes it stored;
* each client starts from ``theta^{r-1}`` and runs ``local_epochs`` episodes; in each it
  draws per class a support set (``n_support``) and a disjoint query set (``n_query``),
  and ``n_unlabeled`` unlabeled queries; it pseudo-labels the unlabeled queries with the
  helpers' prototypes (eqs. 6–7), sharpens them with temperature ``T`` (eq. 5), builds its
  own prototypes from the support set (eq. 2) and takes one RMSprop step on eq. (8)
  (``lambda_u`` weighs the unlabeled term; ``aggregation="fedprox"`` adds
  ``prox_mu/2 ||theta - theta^{r-1}||^2``); the gradient flows through the pseudo-labels
  too (:mod:`securefl.methods.prototypical`);
* it then computes prototypes from *all* its labeled data with the final weights and
  sends them, with its model, to the server (§4.4);
* the server averages the models weighted by ``|D_i|`` (eq. 1) and stores the
  prototypes for round ``r + 1``.

Distances are squared Euclidean (``distance``; see :mod:`securefl.methods.prototypical`).

**Normalisation.**  ``norm="none"`` (default): the paper's main ProtoFSSL (Table 3's
"ProtoFSSL-FedAvg/-FedProx", Table 4's ResNet8 "None" row) has no normalisation layers;
``norm="bn"`` is its "ProtoFSSL (with BN)" ablation (Tables 3, 4 and 9) and ``"gn"`` Table
4's group-normalisation row.  The option applies to the ResNet8 backbone (CIFAR-sized
inputs); the MLP and the MNIST CNN have no normalisation layers, so only ``"none"``
is accepted with them.

**Optimiser.**  RMSprop (Appendix A.1) with the constants of the authors' Keras code
(``rho = rmsprop_alpha = 0.9``, ``epsilon = rmsprop_eps = 1e-7``, no momentum):

    v <- alpha v + (1 - alpha) g^2,    theta <- theta - lr g / (sqrt(v) + eps),

where ``g`` includes the L2 term ``weight_decay * theta``.  The accumulator ``v`` is
client state that persists across the rounds a client joins (the authors' code builds
one optimiser for the whole run, shared by its simulated clients, and never resets it;
here each client keeps its own, which a deployment can do).  A fresh ``v = 0`` every round is not RMSprop at
rate ``lr``: without bias correction the t-th step is ``lr / sqrt(1 - alpha^t)`` times
too large, 10x at t = 1 and still 3.2x at t = 10 for torch's ``alpha = 0.99``, so every
one of the ``E`` episodes would take near-sign steps of ~0.01 per weight.  The state
stays at the client; nothing about it is sent.

Prediction (:meth:`ProtoFSSL.predict`) is by the nearest *global* prototype: after
aggregation the round's clients embed their labeled data with ``theta^r`` and the server
learns the per-class sums and counts through a secure sum (never one client's prototypes).

Defaults (Table 5): RMSprop lr 1e-3, L2 1e-4, 5 clients per round, ``n_support = 1``,
``n_query = 2``, ``n_unlabeled = 100``, 5 helpers, ``lambda_u = 0.3``, ``T = 0.5``;
FedProx ``prox_mu = 1e-2`` (CIFAR-10).  The paper leaves ``E`` to its code, whose
default is 10 episodes (the best of Table 8's values), our default.  Prototype noise is off
(``noise_std = 0``), as in the paper's main results (Table 9's first row).  A class with
fewer than ``n_support + 1`` labels at a client has no labeled query in its episodes
(Algorithm 1 draws ``Q_{i,k}`` from ``D^L_{i,k} \\ S^L_{i,k}``; the paper's clients hold
5 labels per class).

Security (who learns what): the prototype exchange runs through
:mod:`securefl.protocols.prototype_sharing`: a client may withhold classes with fewer
than ``min_class_count`` labeled samples, clip embeddings to L2 norm ``clip`` and add
Gaussian noise.  ``noise_std`` is a fixed sigma on the prototypes of the client's local
model (Appendix B.4's experiment): **not** differentially private, and the global
prototypes are exact sums.  ``noise_multiplier`` (with ``clip``) is the Gaussian release
of :func:`~securefl.protocols.prototype_sharing.private_prototypes`: after aggregation each
of the round's clients embeds its labeled data with the *global* model theta^r and
releases noised per-class sums and counts once; that one release is what the server
stores for the next round's helpers and what the global prototypes are securely summed
from (post-processing, no further cost).  The local model never touches a release: the
guarantee is per labeled sample given theta^r, which the server learns anyway (the model
updates are securely summed but not noised, so they are not covered).
:meth:`ProtoFSSL.privacy_report` composes each client's releases exactly (one per round it
joined, no amplification: the server picks and sees the participants) with
``dp_accounting`` at ``dp_delta``; every round's :class:`RoundResult` carries it
(``privacy``: ``epsilon_per_client``, ``releases``, ``delta``).  Helpers' prototypes are
relayed by the server, which sees them (noised) as in the paper.  The noise seed is
``crypto_seed_for("prototype-noise", round, client)``: the OS CSPRNG in real mode
without a crypto seed, never the simulation seed (:mod:`securefl.methods.base`).  Models and the global
prototypes are summed with :func:`securefl.runtime.secure_sum` (``secure="real"``) or its
bit-identical plaintext oracle, so both modes produce identical pseudo-labels.

**Augmentation** (an option; off by default, as in the paper, whose clients need "zero
data augmentation", §4.3): ``max_shift = s`` translates every episode image (support,
query and unlabeled, one draw per image from the client's round generator) by up to ``s``
pixels before the embedding, the translation the FedAvg family trains with
(:func:`securefl.methods.common.translation`); ``max_shift=None`` picks that family's
default (2 pixels on images of side >= 28, none on the 8x8 digits).  It serves equal
treatment in comparisons (issue 21): set ``max_shift = None`` to give ProtoFSSL the
same augmentation as the FedAvg rows.  The prototypes a client shares and the global
prototypes are computed from un-augmented images; with ``max_shift = 0`` nothing is
drawn, so the paper's runs are unchanged bit for bit.

**Server half and client half** (:mod:`securefl.methods.halves`).  The class here is the
server half: sampling, helper selection and the prototype relay (:class:`PrototypeStore`),
the model average, the global prototypes and the privacy accounting; it reads only public
facts of the federation.  Its client half,
:class:`securefl.methods.protofssl.client.ProtoFSSLClient`, trains (its RMSprop state in
its state Record, checkpointed with the simulator's client states), makes its prototypes
and draws every prototype noise.  A round is the exchange ``train`` (model and helpers'
prototypes down; the model upload, and without ``noise_multiplier`` the client's shared
prototypes, up) with the model's four secure-sum exchanges in real mode, then the
exchange ``prototypes`` (``theta^r`` down; the global prototypes' secure-sum input, and
with ``noise_multiplier`` the client's one release, up) with that sum's four exchanges
(:mod:`securefl.fl.group_sums`).  Pseudo-labels and their accuracy are the simulation's
reports (run config ``reports``).  Dropouts follow secure aggregation in each sum; a client
lost in ``train`` is asked nothing more that round, and only the clients whose prototypes
arrived are stored as next round's helpers and counted as releasing.

Randomness: the server's :class:`~securefl.fl.SimulationRNG` samples the round's clients
and then picks the helpers; a client's episodes come from its own generator for the
round, :func:`securefl.fl.client_rng` ``(seed, round, client)``, so a round's result does
not depend on the order in which its clients run.
"""

from __future__ import annotations

import copy
import time
from typing import Any, ClassVar

import numpy as np
import torch

from securefl.crypto.dp import class_sum_sensitivity, epsilon_for
from securefl.errors import ConfigError, InputError
from securefl.fl.aggregation import load_model_vector, model_vector
from securefl.fl.group_sums import GroupSumPlan
from securefl.fl.rng import SimulationRNG
from securefl.fl.sampling import sample_clients
from securefl.fl.uploads import UploadPlan
from securefl.methods.base import Method, RoundResult
from securefl.methods.common import build_network
from securefl.methods.halves import collect_pseudo_labels
from securefl.methods.protofssl.client import (
    GLOBAL_SUM,
    PROTOTYPES,
    TRAIN,
    ProtoFSSLClient,
    embed_all,
    take_prototypes,
)
from securefl.methods.protofssl.hyper import ProtoFSSLHyper
from securefl.methods.prototypical import prototype_logits
from securefl.models import resolve_model_name
from securefl.protocols.prototype_sharing import PrototypeStore, prototypes_from_sum
from securefl.runtime.costs import RoundMeter
from securefl.runtime.transport import Transport


class ProtoFSSL(Method):
    """ProtoFSSL-FedAvg / ProtoFSSL-FedProx (``aggregation``); see the module docstring."""

    name: ClassVar[str] = "protofssl"
    hyper = ProtoFSSLHyper
    uses_pseudo_labels: ClassVar[bool] = True
    client_half = ProtoFSSLClient
    deployable: ClassVar[bool] = True

    # ------------------------------------------------------------------ setup
    def setup(self, federation: Any, *, transport: Transport | None = None) -> None:
        """Build the global embedding network and connect to ``transport`` (default: in
        process over ``federation``'s clients).  The server half reads only the
        federation's public facts (number of clients, which hold labels, classes, shape)."""
        self.check_hyper()
        if not federation.labeled_clients:
            raise ConfigError(f"{self.name}: no client holds labels (labels at the server?); ProtoFSSL needs labels at clients")
        self.federation = federation
        self.num_classes = federation.num_classes
        self.rng = SimulationRNG.from_seed(self.seed)
        self.network = build_network(self.model, federation, seed=self.seed, device=self.torch_device,
                                     **self._model_options(federation)).body
        probe = torch.zeros((1, *tuple(federation.input_shape)), dtype=torch.float32)
        self.embedding_dim = int(embed_all(self.network, probe).shape[1])
        self.store = PrototypeStore()
        self.global_prototypes = np.zeros((self.num_classes, 1))
        self.global_mask = np.zeros(self.num_classes, dtype=bool)
        self.releases = np.zeros(federation.num_clients, dtype=np.int64)
        self._connect(federation, transport)

    def _model_options(self, federation: Any) -> dict[str, Any]:
        """``norm`` for the ResNet backbone; other backbones have no normalisation to switch."""
        concrete = resolve_model_name(self.model, tuple(federation.input_shape))
        if concrete in ("resnet8", "resnet9"):
            return {"norm": self.norm}
        if self.norm != "none":
            raise InputError("norm", self.norm, f"model {concrete!r} has no normalisation layers; use 'none'")
        return {}

    @property
    def private(self) -> bool:
        """True with the Gaussian release (``noise_multiplier`` and ``clip``)."""
        return self.noise_multiplier is not None

    def privacy_report(self) -> dict[str, Any]:
        """What the prototype releases so far cost each client (``results.json``'s ``privacy``).

        With ``noise_multiplier``: ``epsilon_per_client`` at ``delta`` (PLD, each client's
        ``releases`` composed in full), per client id.  Without: ``differentially_private``
        False and no epsilon (prototypes and the global sums are exact or fixed-sigma).
        """
        releases = {str(c): int(k) for c, k in enumerate(self.releases)}
        if not self.private:
            return {
                "differentially_private": False,
                "releases": releases,
                "epsilon_per_client": None,
                "delta": None,
                "note": "prototypes shared without the Gaussian mechanism (noise_multiplier with clip); "
                "global prototypes are exact sums: not differentially private",
            }
        epsilon = {c: epsilon_for(self.noise_multiplier, k, self.dp_delta) for c, k in releases.items()}
        return {
            "differentially_private": True,
            "unit": "one labeled sample of a client, add/remove-one, given the global model embedding it",
            "mechanism": "gaussian release of per-class clipped sums and counts, one per round a client joins",
            "noise_multiplier": float(self.noise_multiplier),
            "clip": float(self.clip),
            "sigma": float(self.noise_multiplier * class_sum_sensitivity(self.clip)),
            "delta": self.dp_delta,
            "accountant": "dp_accounting PLD, composed over each client's releases, no amplification by sampling",
            "releases": releases,
            "epsilon_per_client": epsilon,
            "epsilon_max": max(epsilon.values()),
            "global_prototypes": "secure sum of the noised releases (post-processing)",
            "not_covered": "model updates (securely summed, not noised)",
        }

    # ------------------------------------------------------------------ round
    def run_round(self, round_index: int) -> RoundResult:
        """One round of the server half: ``train`` (helpers' prototypes down; models, and
        without DP the clients' prototypes, up; + four secure-sum exchanges in real mode),
        the model average, then ``prototypes`` (``theta^r`` down; the global prototypes'
        secure sum, and with DP the clients' releases, up; + four secure-sum exchanges)."""
        start = time.perf_counter()
        chosen = [int(k) for k in sample_clients(self.rng.numpy, self.federation.num_clients,
                                                  self.clients_per_round)]
        helper_ids = self.store.select_helpers(self.helpers, rng=self.rng.numpy)
        helpers = [h for h in self.store.helper_prototypes(helper_ids) if h.mask.any()]  # a helper may withhold all
        bytes_down = float(sum(h.payload_bytes() for h in helpers))
        meter = RoundMeter(self.transport, chosen)

        vector = model_vector(self.network)
        plan = UploadPlan.new(secure=self.secure, sum_backend=self.sum_backend, members=chosen,
                              dims={"model": vector.size})
        arrays = {"model": vector}
        for i, h in enumerate(helpers):
            arrays[f"helpers/{i}/vectors"] = np.asarray(h.vectors, dtype=np.float64)
            arrays[f"helpers/{i}/mask"] = np.asarray(h.mask, dtype=np.uint8)
        train = self.transport.exchange(TRAIN, {
            k: plan.request(k, arrays, {"round": int(round_index), "helpers": len(helpers)})
            for k in chosen})
        meter.add(train)
        outcome = plan.collect(self.transport, train)
        meter.add(outcome.exchanges)
        load_model_vector(self.network, outcome.averages["model"])
        sent = {} if self.private else {k: take_prototypes(train.replies[k], self.num_classes)
                                        for k in chosen if k in train.replies}

        # global prototypes for classification: secure sum of n_k c_k and n_k under theta^r;
        # with DP each client's one release under theta^r serves the helpers and this sum
        shape = (self.num_classes, self.embedding_dim)
        members = [k for k in chosen if k in train.replies]
        sums = GroupSumPlan.new(secure=self.secure, sum_backend=self.sum_backend,
                                groups={GLOBAL_SUM: members},
                                dims={GLOBAL_SUM: shape[0] * (shape[1] + 1)}, weighted=False)
        theta = model_vector(self.network)
        release = self.transport.exchange(PROTOTYPES, {
            k: sums.request(k, {"model": theta}, {"round": int(round_index)})
            for k in members})
        meter.add(release)
        summed = sums.collect(self.transport, release)
        meter.add(summed.exchanges)
        if self.private:
            sent = {k: take_prototypes(release.replies[k], self.num_classes)
                    for k in members if k in release.replies}
        self.releases[sorted(sent)] += 1  # prototype sets sent per client, one per round joined
        self.store.store(sent)
        bytes_up = float(np.mean([p.payload_bytes() for p in sent.values()]))
        global_protos = prototypes_from_sum(summed.totals[GLOBAL_SUM], shape,
                                            survivors=summed.survivors[GLOBAL_SUM], bytes_sent={})
        self.global_prototypes, self.global_mask = global_protos.vectors, global_protos.mask
        global_bytes = summed.bytes_per_member[GLOBAL_SUM]

        digest, accuracy = collect_pseudo_labels(train.replies, chosen) if helpers else (None, None)
        down, up = meter.bytes_per_client()
        survivors = sorted(set(outcome.survivors) & set(summed.survivors[GLOBAL_SUM]))
        dropped = {**{f"model/{k}": v for k, v in outcome.dropped.items()},
                   **{f"prototypes/{k}": v for k, v in summed.dropped.items()}}
        participation = {"members": chosen, "survivors": survivors,
                         "dropped": {k: list(v) for k, v in dropped.items() if v},
                         "failed": {str(c): text for c, text in
                                    sorted({**outcome.failed, **summed.failed}.items())}}
        return RoundResult(
            round=round_index,
            seconds=time.perf_counter() - start,
            train_seconds=meter.compute_seconds,
            crypto_seconds=outcome.crypto_seconds + summed.crypto_seconds,
            bytes_model_per_client=2.0 * 4.0 * (vector.size + 1),
            bytes_protocol_per_client=outcome.protocol_bytes_per_client + bytes_down + bytes_up + global_bytes,
            pseudo_label_accuracy=accuracy,
            pseudo_label_digest=digest,
            privacy=self.privacy_report(),
            messaging_seconds=meter.messaging_seconds,
            bytes_down_per_client=down,
            bytes_up_per_client=up,
            participation=participation,
        )

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Nearest-global-prototype classification (eq. 6)."""
        x = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
        z = torch.from_numpy(embed_all(self.network, x))
        prototypes, mask = torch.from_numpy(self.global_prototypes), torch.from_numpy(self.global_mask)
        return prototype_logits(z, prototypes, mask, distance=self.distance).argmax(dim=1).numpy()

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        return {
            "network": copy.deepcopy(self.network.state_dict()),
            "store": dict(self.store.previous),
            "global_prototypes": self.global_prototypes.copy(),
            "global_mask": self.global_mask.copy(),
            "releases": self.releases.copy(),
            "rng": self.rng.state_dict(),
            "clients": self._client_states(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.network.load_state_dict(state["network"])
        self.store.store(state["store"])
        self.global_prototypes = state["global_prototypes"].copy()
        self.global_mask = state["global_mask"].copy()
        self.releases = state["releases"].copy()
        self.rng.load_state_dict(state["rng"])
        self._adopt_client_states(state.get("clients", {}))
