"""FedProp (fedprop.md Algorithm 2) and FedProp+MT (§5.1).

FedProp:

1. theta <- random init; FederatedOptimization on labeled data only (``warmup_rounds``
   of labeled-only FedAvg, run by :meth:`setup`).
2. Each round t: the server samples clients P (tau m_L labeled + tau (m - m_L)
   unlabeled when m_L < m) and broadcasts theta; client j embeds all its data
   V_j = f_phi(X_j); :func:`securefl.protocols.cross_client_lp` computes pseudo-labels
   y^_j and entropy weights omega_j on the graph of *all* selected clients' points;
   ClientUpdate is E epochs of SGD on the weighted cross-entropy over batches
   B_L u B_U (|B_U| = |B_L| = min(batch_size, #labels)); ServerUpdate is FedAvg
   (secure aggregation when ``secure="real"``).

With ``secure="real"`` CrossClientLP runs secure Hamming distances on the LSH codes
(``hamming_backend``: ``"shade"``, the linear-communication ``"lwe"``, its ring-structured
``"rlwe"``, or by default ``"auto"``: per round, ring-LWE where it moves fewer bytes than
SHADE on the busiest client's link, SHADE on small rounds,
:func:`~securefl.crypto.hamming.choose_backend`; the same H every way) and secure sums of the label scores; with ``secure="plaintext"`` its placeholder computes
the same Hamming matrix and sums directly.  The clients' shares of the LSH seed (agreed
by key exchange, unknown to the server) come from ``crypto_seed_for("lsh", round)``:
the OS CSPRNG in real mode without a crypto seed, never the simulation seed; real and
plaintext runs given one ``crypto_seed`` use the same hyperplanes and give identical
pseudo-labels (:mod:`securefl.methods.base`).

Who learns what (semi-honest): the server learns the Hamming matrix H between the
selected clients' LSH codes (an approximation of their features' cosine similarities)
and the aggregate model; client j learns the columns S_L^(j) of the propagation matrix
for its own labeled points and its own pseudo-labels.  No party sees another's data,
labels or individual model.

**Label mass and coverage** (issue: Non-IID-II "drift" is label coverage).  Algorithm 1
normalises Z row by row, discarding the label mass m_i = sum_c Z_ic that reached point i.
Per round the server reports ``RoundResult.label_mass_median``, the median m_i over the
pseudo-labelled clients' unlabeled points: m = S_L 1 (every labeled row of Y sums to 1),
computed from the columns S_L it solved and the labeled positions it was sent, so it
learns nothing new.  Which classes the round's labels cover is known to no party (the
server never sees a class, a client sees only its own labels and rows of Z):
:meth:`FedProp.label_coverage` computes it for the runner from the simulation's labels, a
simulation-only diagnostic never sent over the transport and never used in training.

**Label-mass option** (off by default; not the paper): ``min_label_mass = tau > 0`` drops
the pseudo-labels of unlabeled points with m_i < tau; ``mass_weighting=True`` multiplies
each entropy weight by m_i / max_j m_j over the client's unlabeled points
(:func:`securefl.protocols.propagation.gate_by_mass`).  Each client applies it to its own
rows of Z, which it holds after line 15: no message changes, and with both off the
pseudo-labels and weights are the paper's, bit for bit.

FedProp+MT (:class:`FedPropMT`): FedProp combined with FedAvg+MT
(:class:`securefl.methods.fedavg.server.MeanTeacherRounds`): the server broadcasts a student
and a mean teacher; clients train the student on FedProp's loss plus the mean-teacher
consistency ``w_t * mean_i ||softmax(student(eta(x_i))) - softmax(teacher(eta'(x_i)))||^2 / C``
(Tarvainen & Valpola 2017: independent random translations and Gaussian input noise, sigmoid
ramp-up of w_t over ``consistency_rampup`` rounds), update the teacher as an EMA of the student after every
step, and return both; the server averages students and teachers separately (two secure
sums).  Pseudo-labels come from the teacher's features and the teacher is evaluated.

Defaults: FedProp Appendix A (L = 4096, k = 10, alpha = 0.99, E = 5, |B_L| <= 50,
lr 0.1, momentum 0.9, weight decay 2e-4, 5 clients per round, cosine decay over 2000
rounds, random translations as augmentation: ``max_shift``, applied to the warm-up too).
The paper does not state the number of warm-up rounds; ``warmup_rounds=10``.

**Warm-up in the round budget** (an option, off by default): Algorithm 2 runs the warm-up
(line 2) before its R rounds, so by default :meth:`setup` plays ``warmup_rounds`` of
labeled-only FedAvg and a run of R rounds trains for ``warmup_rounds + R``, more than a
method without warm-up gets (issue 21).  With ``warmup_in_budget=True`` setup plays none;
the first ``warmup_rounds`` of the R rounds are the warm-up (labeled clients sampled as
in setup, no CrossClientLP, the learning-rate schedule of the round index, evaluated like
any round) and the other R - ``warmup_rounds`` are FedProp rounds: R rounds in all.
FedProp only (FedProp+MT keeps the paper's warm-up before its rounds).

Split into halves (:mod:`securefl.methods.halves`): the whole round runs on the method's
transport.  CrossClientLP's client parties run at the clients
(the protocol's steps, :mod:`securefl.protocols.crossclient.client_steps`, on FedProp's
embedding, :mod:`securefl.methods.fedprop.client`: LSH seed agreement, LSH codes, SHADE in
four hops with sealed batches relayed between clients, column request, the padded secure
sum); the server half (the protocol's round,
:func:`securefl.protocols.crossclient.server_round.cross_client_round`)
relays, assembles H, builds the graph, solves for the requested columns and forwards each
client's rows, which its ``train`` request carries; ClientUpdate and the model's secure
aggregation follow (:class:`~securefl.methods.fedprop.client.FedPropClient`,
:class:`~securefl.methods.fedprop.client.FedPropMTClient`).  The server half reads only the
federation's public facts, so FedProp runs on Flower (as every method does).  The
pseudo-label digest and accuracy come from the clients' reports (run config ``reports``).
With ``hamming_backend="lwe"`` or ``"rlwe"`` the clients run the LWE backend in four hops instead of
SHADE's five (:mod:`securefl.crypto.lwe_hops`: key, broadcasts of ``C`` and ``H'`` relayed
with per-recipient tags, answers ``D`` in sealed client-to-client batches, decryption), on
any transport.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

import numpy as np
from torch import nn

from securefl.crypto.projection import seconds_at_bandwidth
from securefl.fl import model_vector
from securefl.methods.base import RoundResult
from securefl.methods.fedavg.server import MeanTeacherRounds, PseudoLabelMethod
from securefl.methods.fedprop.client import (
    ROWS_BLOCK,
    ROWS_SURVIVORS,
    FedPropClient,
    FedPropMTClient,
)
from securefl.methods.fedprop.hyper import FedPropHyper, FedPropMTHyper
from securefl.protocols.crossclient.server_round import cross_client_round
from securefl.runtime.costs import RoundMeter


class FedProp(PseudoLabelMethod):
    """FedProp: cross-client label propagation pseudo-labels (Algorithm 2)."""

    name = "fedprop"
    hyper = FedPropHyper
    client_half = FedPropClient

    def _setup_extra(self) -> None:
        if not self.warmup_in_budget:
            super()._setup_extra()
            return
        in_budget, self.warmup_rounds = self.warmup_rounds, 0
        try:  # the parent's labeled-clients check, without its warm-up rounds: run_round plays them
            super()._setup_extra()
        finally:
            self.warmup_rounds = in_budget

    def _budget_warmup(self) -> bool:
        """Whether the next round is one of the warm-up rounds counted in the budget."""
        return self.warmup_in_budget and self.rounds_done < self.warmup_rounds

    def _sample(self) -> np.ndarray:
        """A warm-up round's clients are drawn as in setup's warm-up (labeled clients only)."""
        if not self._budget_warmup():
            return super()._sample()
        labeled = np.asarray(self.federation.labeled_clients)
        count = min(self.clients_per_round, len(labeled))
        return np.sort(self.rng.numpy.choice(labeled, size=count, replace=False))

    def _feature_model(self) -> nn.Module:
        return self.network

    def _prepare_round(self, selected: np.ndarray, round_index: int) -> dict[str, Any]:
        """CrossClientLP among the selected clients over the transport
        (:func:`~securefl.protocols.crossclient.server_round.cross_client_round`: the clients embed,
        hash and run their parties; the server relays, assembles H, solves and forwards);
        each client's rows of the padded total travel in its ``train`` request.  A warm-up
        round of the budget (``warmup_in_budget``) has no CrossClientLP: labeled-only FedAvg."""
        if self._budget_warmup():
            self._phase(f"warm-up round {self.rounds_done + 1}/{self.warmup_rounds} (labeled only, "
                        "in the budget)")
            return {"crypto_seconds": 0.0, "protocol_bytes": 0.0, "warmup": True}
        members = [int(k) for k in selected]
        self._phase(f"CrossClientLP ({self.secure})")
        meter = RoundMeter(self.transport, members)
        done = cross_client_round(
            self.transport, members, feature_model=model_vector(self._feature_model()),
            round_index=self.rounds_done, secure=self.secure, k=self.k, alpha=self.alpha,
            L=self.L, num_classes=self.federation.num_classes, hamming_backend=self.hamming_backend,
            chunk_bytes=self.chunk_bytes)
        meter.add(done.exchanges)
        self.last_cross_client = done
        self._round_link_bytes = done.link_bytes
        down, up = meter.bytes_per_client()
        self._cclp_costs = {"compute_seconds": meter.compute_seconds,
                            "messaging_seconds": meter.messaging_seconds,
                            "bytes_down": down, "bytes_up": up,
                            "participation": {
                                "graph": done.graph, "in_sum": done.in_sum,
                                "survivors": done.survivors,
                                "dropped": {k: list(v) for k, v in done.dropped.items()},
                                "failed": {str(c): t for c, t in sorted(done.failed.items())}}}
        return {"crypto_seconds": done.crypto_seconds,
                "protocol_bytes": done.protocol_bytes_per_client, "rows": done.rows}

    def _request_arrays(self, client: int, context: dict[str, Any]) -> dict[str, np.ndarray]:
        if "rows" not in context:
            return super()._request_arrays(client, context)
        if int(client) not in context["rows"]:
            return {}
        block, survivors = context["rows"][int(client)]
        return {ROWS_BLOCK: block, ROWS_SURVIVORS: survivors}

    def run_round(self, round_index: int) -> RoundResult:
        """A round, with its projection onto real links (:class:`RoundResult`)."""
        self._round_link_bytes = 0
        self._cclp_costs = {}
        warmup = self._budget_warmup()
        cpu_start = time.process_time()
        result = super().run_round(round_index)
        extra = self._cclp_costs
        if extra:
            result.train_seconds += extra["compute_seconds"]
            result.messaging_seconds = (result.messaging_seconds or 0.0) + extra["messaging_seconds"]
            result.bytes_down_per_client = (result.bytes_down_per_client or 0.0) + extra["bytes_down"]
            result.bytes_up_per_client = (result.bytes_up_per_client or 0.0) + extra["bytes_up"]
            result.participation = {**(result.participation or {}), "crossclient": extra["participation"]}
        link_bytes = self._round_link_bytes + result.bytes_model_per_client / 2
        result.seconds_at_bandwidth = seconds_at_bandwidth(time.process_time() - cpu_start, link_bytes)
        result.label_mass_median = None if warmup else self._label_mass_median()
        return result

    def _label_mass_median(self) -> float | None:
        """Median label mass sum_c Z_ic over the unlabeled points of the clients that got
        rows this round, from what the server holds (the columns of S it solved and the
        labeled positions it was sent: :attr:`CrossClientRound.label_mass`)."""
        done = self.last_cross_client
        return _median([np.delete(mass, done.labeled_positions[c]) for c, mass in done.label_mass.items()])

    def label_coverage(self, federation: Any) -> dict[str, Any] | None:
        """Simulation-only: the last round's label coverage (:meth:`Method.label_coverage`).

        Let P be the clients whose labels entered the last round's propagation (the
        secure sum's survivors) and K the classes among their labeled points.  No party
        of CrossClientLP learns K: the server sees labeled *positions*, never classes, and
        a client sees its own labels and rows of Z.  So this is computed here, from the
        simulation's labels, and never sent anywhere:

        * ``uncovered_classes``: sorted classes outside K, ``uncovered_count`` their number;
        * ``label_mass_median_covered`` / ``label_mass_median_uncovered``: the median label
          mass sum_c Z_ic of the unlabeled points (of the clients that got pseudo-labels)
          whose *hidden true* class is in K / not in K (``None`` when there is none) --
          an evaluation-only split, like pseudo-label accuracy;
        * ``clients``: P.

        ``None`` before the first round of this object (e.g. right after a resume).
        """
        done = getattr(self, "last_cross_client", None)
        if done is None:
            return None
        classes = int(federation.num_classes)
        held = set()
        for client in done.survivors:
            data = federation.clients[client]
            held.update(int(c) for c in np.unique(data.y[data.labeled]))
        uncovered = sorted(set(range(classes)) - held)
        covered_mass, uncovered_mass = [], []
        for client, mass in done.label_mass.items():
            data = federation.clients[client]
            hidden = data.y[~data.labeled]
            points = mass[~data.labeled]
            starved = np.isin(hidden, uncovered)
            covered_mass.append(points[~starved])
            uncovered_mass.append(points[starved])
        return {"uncovered_classes": uncovered, "uncovered_count": len(uncovered),
                "label_mass_median_covered": _median(covered_mass),
                "label_mass_median_uncovered": _median(uncovered_mass),
                "clients": [int(c) for c in done.survivors]}


def _median(parts: list[np.ndarray]) -> float | None:
    """Median of the pooled arrays, ``None`` when they hold no value."""
    pooled = np.concatenate(parts) if parts else np.zeros(0)
    return float(np.median(pooled)) if pooled.size else None


class FedPropMT(MeanTeacherRounds, FedProp):
    """FedProp + mean teacher (§5.1)."""

    name = "fedprop-mt"
    hyper = FedPropMTHyper
    client_half = FedPropMTClient
    warmup_in_budget: ClassVar[bool] = False
    """Not a hyper-parameter of FedProp+MT: the mean teacher's warm-up stays before its
    rounds (FedProp's option, fixed off)."""

    def _feature_model(self) -> nn.Module:
        return self.teacher
