"""FedAnchor (Qiu et al., fedanchor.md): labels only at the server (the *anchor* set),
pseudo-labels for the unlabeled clients from a label-contrastive anchor head.

Model: the backbone ``f_phi`` with two heads, the classification head ``f_psi`` and the
*anchor head*, a linear projection to ``anchor_dim = 128`` (§5.1).

Algorithm 1, per round ``t``:

1. the server samples ``clients_per_round`` clients and computes the anchor latents
   ``Z^anchor = anchor_head(f_phi(x^anchor))``;
2. it sends each selected client the model, the anchor head and ``(Z^anchor, y^anchor)``;
3. each client embeds its data, ``z^m = anchor_head(f_phi(x^m))``, and pseudo-labels it by
   the mean cosine similarity to each class's anchors (eqs. 3–4);
4. it trains ``local_epochs`` epochs (SGD lr 0.03, momentum 0.9, weight decay 5e-4) by
   Appendix B, the paper's method (§4.3; Table 2's and Table 3's "FedAnchor (client
   mixup)"; ``client_mixup=True``, the default): the fix set ``D^fix`` (score
   ``max_c s_c^avg > threshold``, t = 0.6, eq. 5), a mix set ``D^mix`` of the same size
   drawn with replacement from all pseudo-labelled samples (eq. 6), and per batch the loss
   ``L_fix + b L_mix`` (eq. 10, b = 1) with ``L_fix = CE(f(A(x^fix)), y^fix)`` (eq. 7) and
   ``L_mix = lam CE(f(a(x_mix)), y^fix) + (1 - lam) CE(f(a(x_mix)), y^mix)`` (eq. 9),
   ``x_mix = lam x^fix + (1 - lam) x^mix``, ``lam ~ Beta(0.75, 0.75)`` (eq. 8); an epoch
   is one pass over ``D^mix``; a client with an empty fix set does not train.
   ``client_mixup=False`` (Table 3's "FedAnchor (no mixup)") trains plain cross-entropy
   on every pseudo-label instead (with ``max_shift=0`` too: this module's default before
   issue 13);
5. the server averages the uploaded ``(f_phi, f_psi)`` weighted by ``|D_m|``;
6. server training on the anchors: one epoch of cross-entropy through the classification
   head (``server_mixup``: mixup cross-entropy, the paper's "FedAnchor (mix)") and one
   epoch of the label-contrastive loss (eqs. 1–2) through the anchor head.  Both losses
   train the backbone too.

Before round 1 the server pre-trains on the anchors for ``pretrain_epochs = 5`` epochs
(each one CE and one contrastive pass) with lr 0.05 (Appendix C).  The paper gives no
temperature for eq. (1) and no batch sizes; 10 at the clients is the batch every method of
a run shares, and the server's ``server_batch_size=16`` with ``temperature=0.5`` are the
digits default's choice on *validation* accuracy (grid {16, 32, 64} x {0.5, 0.1, 1.0},
seeds 0-2, ``experiments/sweeps/digits-fedanchor/``; the scores are in
``securefl/experiments/default.toml``).  They do not carry over to a large anchor set: on
MNIST's 5,400 anchors batches of 16 diverge in pre-training at lr 0.05, and the MNIST
configs take the MNIST IID validation choice, 128 with 0.5
(``experiments/mnist-fedsemi-iid.toml``, ``experiments/sweeps/mnist-iid-fedanchor-20rounds/``).

Augmentation: the weak augmentation ``a(.)`` of eq. (9) is the random translation every
FedAvg-family method trains with (:func:`securefl.methods.common.translation`,
``max_shift``; none on the 8x8 digits, 2 pixels on 28x28 images).  The strong
augmentation ``A(.)`` of eq. (7) is RandAugment in the paper; it is not implemented (no
image-augmentation library among the dependencies, and its operations are designed for
32x32 colour images), so ``L_fix`` and the plain cross-entropy of ``client_mixup=False``
use the same translation.  Server training is not augmented.

Security (who learns what): clients learn the server's anchor latents and labels (the
server's own data, sent by design, counted as protocol bytes: the paper's "downstream
overhead"); pseudo-labels never leave a client; the server learns only the weighted sum
of the client models and of their sizes, through :func:`securefl.fl.aggregate`
(:func:`securefl.runtime.secure_sum` with pairwise masks for ``secure="real"``, its
bit-identical plaintext oracle otherwise).  The anchor
head is never trained at clients, so it is only downloaded.

**Server half and client half** (:mod:`securefl.methods.halves`).  The class here is the
server half: sampling, the anchor latents, the secure FedAvg and the server's training on
its own anchor set (pre-training in ``setup``, the anchor epochs after each round); of the
clients it reads only public facts (how many).  Its client half,
:class:`securefl.methods.fedanchor.client.FedAnchorClient`, pseudo-labels, trains and
uploads.  A round is the exchange ``train`` (model, anchor head, anchor latents and labels
down; the upload up, secure-sum round 0 in real mode) and in real mode the three
secure-sum exchanges (:mod:`securefl.fl.uploads`); pseudo-labels leave a client only as
the simulation's report (run config ``reports``), so without reports a round's
pseudo-label digest and accuracy are ``None``.  Dropouts follow secure aggregation (a
client lost before its masked input is not in the average).

Randomness: the server's :class:`~securefl.fl.SimulationRNG` samples the round's clients
and then drives the server training (pre-training, anchor epochs: batch order, dropout,
server mixup); everything a client draws (batch order, translations, dropout masks, the
mix set, mixup's lambda) comes from its own generators for the round,
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
from torch import nn

from securefl.errors import ConfigError
from securefl.fl.aggregation import load_model_vector, model_vector
from securefl.fl.rng import SimulationRNG
from securefl.fl.sampling import sample_clients
from securefl.fl.training import batches, predict_labels
from securefl.fl.uploads import UploadPlan
from securefl.methods.anchoring import label_contrastive_loss, mixup_loss
from securefl.methods.base import Method, RoundResult, round_bookkeeping
from securefl.methods.common import build_network
from securefl.methods.fedanchor.client import LABELS, LATENTS, TRAIN, FedAnchorClient, latents
from securefl.methods.fedanchor.hyper import FedAnchorHyper
from securefl.methods.halves import collect_pseudo_labels
from securefl.models import dropout_generator
from securefl.runtime.costs import RoundMeter
from securefl.runtime.transport import Transport


class FedAnchor(Method):
    """FedAnchor; hyper-parameter defaults from fedanchor.md §5.1 and Appendix C."""

    name: ClassVar[str] = "fedanchor"
    hyper = FedAnchorHyper
    uses_pseudo_labels: ClassVar[bool] = True
    client_half = FedAnchorClient

    # ------------------------------------------------------------------ setup
    def setup(self, federation: Any, *, transport: Transport | None = None) -> None:
        """Build the networks, connect to ``transport`` (default: in process over
        ``federation``'s clients) and pre-train on the anchors.  The server half reads
        the server's own anchor set and only public facts of the clients."""
        self.check_hyper()
        server = federation.server
        if server is None or server.num_labeled < 2:
            raise ConfigError(f"{self.name}: needs labeled anchors at the server (partition with labels_at='server')")
        self.federation = federation
        self.num_classes = federation.num_classes
        device = self.torch_device
        self.rng = SimulationRNG.from_seed(self.seed, device=device)
        self.network = build_network(self.model, federation, seed=self.seed, device=device)
        with torch.random.fork_rng():
            torch.manual_seed(self.seed + 1)
            self.anchor_head = nn.Linear(self.network.feature_dim, self.anchor_dim)
        self.anchor_head.to(device)
        keep = server.labeled
        self.anchor_x = torch.from_numpy(np.ascontiguousarray(server.x[keep], dtype=np.float32)).to(device)
        self.anchor_y = torch.from_numpy(server.y[keep].astype(np.int64)).to(device)
        self._connect(federation, transport)
        for _ in range(self.pretrain_epochs):
            self._server_epochs(self.pretrain_lr)

    # ------------------------------------------------------------------ server side
    def _server_epochs(self, lr: float) -> None:
        """One epoch of (mixup) cross-entropy, then one of the label-contrastive loss."""
        with dropout_generator(self.network, self.rng.torch):
            self._server_passes(lr)

    def _server_passes(self, lr: float) -> None:
        self.network.train()
        self.anchor_head.train()
        params = list(self.network.parameters()) + list(self.anchor_head.parameters())
        optimizer = torch.optim.SGD(params, lr=lr, momentum=self.momentum, weight_decay=self.weight_decay)
        n = len(self.anchor_y)
        for idx in batches(n, self.server_batch_size, self.rng.torch):
            xb, yb = self.anchor_x[idx], self.anchor_y[idx]
            if self.server_mixup:
                lam = float(self.rng.numpy.beta(self.mixup_alpha, self.mixup_alpha))
                perm = torch.randperm(len(idx), generator=self.rng.torch, device=self.rng.torch.device)
                loss = mixup_loss(self.network(lam * xb + (1 - lam) * xb[perm]), yb, yb[perm], lam)
            else:
                loss = F.cross_entropy(self.network(xb), yb)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        for idx in batches(n, self.server_batch_size, self.rng.torch):
            yb = self.anchor_y[idx]
            counts = torch.bincount(yb)
            if int((counts >= 2).sum()) == 0 or int((counts > 0).sum()) < 2:
                continue  # eq. (1) needs a positive pair and a negative pair
            z = self.anchor_head(self.network.features(self.anchor_x[idx]))
            loss = label_contrastive_loss(z, yb, temperature=self.temperature)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

    def _latents(self, x: torch.Tensor, network: nn.Module) -> torch.Tensor:
        return latents(x, network, self.anchor_head)

    # ------------------------------------------------------------------ round
    def run_round(self, round_index: int) -> RoundResult:
        """One round of the server half: the exchange ``train`` (model, anchor head and
        anchor latents and labels down; + the four secure-sum exchanges in real mode),
        the secure FedAvg of the uploads, then the server's epochs on its anchors."""
        start = time.perf_counter()
        chosen = [int(k) for k in sample_clients(self.rng.numpy, self.federation.num_clients,
                                                  self.clients_per_round)]
        anchor_z = self._latents(self.anchor_x, self.network)
        meter = RoundMeter(self.transport, chosen)
        vector = model_vector(self.network)
        plan = UploadPlan.new(secure=self.secure, sum_backend=self.sum_backend, members=chosen,
                              dims={"model": vector.size})
        arrays = {"model": vector, "anchor_head": model_vector(self.anchor_head),
                  LATENTS: anchor_z.cpu().numpy(), LABELS: self.anchor_y.cpu().numpy()}
        train = self.transport.exchange(TRAIN, {k: plan.request(k, arrays, {"round": int(round_index)})
                                                for k in chosen})
        meter.add(train)
        outcome = plan.collect(self.transport, train)
        meter.add(outcome.exchanges)
        load_model_vector(self.network, outcome.averages["model"])
        t0 = time.perf_counter()
        self._server_epochs(self.server_lr)
        server_seconds = time.perf_counter() - t0

        digest, accuracy = collect_pseudo_labels(train.replies, chosen)
        head_bytes = sum(p.numel() for p in self.anchor_head.parameters()) * 4
        anchor_bytes = anchor_z.numel() * 4 + self.anchor_y.numel()  # latents (float32) and labels (1 byte each)
        payload = 4.0 * (vector.size + 1)
        return RoundResult(
            round=round_index,
            seconds=time.perf_counter() - start,
            train_seconds=meter.compute_seconds + server_seconds,
            crypto_seconds=outcome.crypto_seconds,
            bytes_model_per_client=2.0 * payload + head_bytes,
            bytes_protocol_per_client=outcome.protocol_bytes_per_client + anchor_bytes,
            pseudo_label_accuracy=accuracy,
            pseudo_label_digest=digest,
            **round_bookkeeping(meter, members=chosen, survivors=outcome.survivors,
                                dropped=outcome.dropped, failed=outcome.failed),
        )

    def predict(self, x: np.ndarray) -> np.ndarray:
        """The classification head's labels (``f_psi(f_phi(x))``)."""
        return predict_labels(self.network, x)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        return {
            "network": copy.deepcopy(self.network.state_dict()),
            "anchor_head": copy.deepcopy(self.anchor_head.state_dict()),
            "rng": self.rng.state_dict(),
            "clients": self._client_states(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.network.load_state_dict(state["network"])
        self.anchor_head.load_state_dict(state["anchor_head"])
        self.rng.load_state_dict(state["rng"])
        self._adopt_client_states(state.get("clients", {}))
