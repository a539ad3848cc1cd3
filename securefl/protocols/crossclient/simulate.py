"""The in-process simulator of CrossClientLP: the deployed round on the in-process transport.

:func:`cross_client_lp` builds one :class:`~securefl.protocols.crossclient.client_steps.FeatureClient`
node per client on an :class:`~securefl.runtime.transport.InProcessTransport`, runs the server
round (:func:`~securefl.protocols.crossclient.server_round.cross_client_round`) with the one
driver (:func:`securefl.runtime.engine.drive`) and finishes each client's rows: the same code a
Flower deployment runs.  Its :class:`~securefl.protocols.crossclient.parties.Dropouts` are
the transport's dropouts at the step of each stage (:func:`transport_dropouts`); its
specification is :func:`~securefl.protocols.crossclient.ideal.ideal_cross_client_lp`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from securefl.crypto.projection import busiest_link_bytes
from securefl.crypto.secagg import ROUNDS
from securefl.errors import DropoutError, InputError, ProtocolError
from securefl.protocols.crossclient.client_steps import (
    CODES,
    COLUMNS,
    SHARES,
    SUM,
    FeatureClient,
    FeatureData,
    FeatureProtocol,
)
from securefl.protocols.crossclient.parties import BACKENDS, HAMMING_BACKENDS, Dropouts
from securefl.protocols.crossclient.server_round import (
    CrossClientRound,
    cross_client_round,
    sum_threshold,
)
from securefl.protocols.propagation import (
    SOLVERS,
    LabelPropagationResult,
    check_labels,
    check_num_classes,
)
from securefl.runtime.secure_sum_steps import ROUND_OF_STEP
from securefl.runtime.transport import InProcessTransport, NodeContext, Record


@dataclass
class CrossClientLPResult:
    """Per-client outputs (``None`` for a client without one) and the costs of the run.

    Iterating yields ``(pseudo_labels, weights)`` per client in input order
    (``(None, None)`` for a client that dropped out).  ``bytes_sent`` / ``bytes_received``:
    client -> the nominal bytes of the round
    (:mod:`~securefl.protocols.crossclient.server_round`); ``seconds``: wall time, the
    clients' rows finished included; ``crypto_seconds`` / ``server_seconds``: the round's
    split (:class:`~securefl.protocols.crossclient.server_round.CrossClientRound`);
    ``graph_parties``: the clients in the graph; ``sum_survivors``: the secure sum's;
    ``round``: the server's outcome (every exchange, the rows it forwarded).
    """

    outputs: list[LabelPropagationResult | None]
    backend: str
    bytes_sent: dict[int, int]
    bytes_received: dict[int, int]
    seconds: float
    crypto_seconds: float
    server_seconds: float
    graph_parties: list[int]
    sum_survivors: list[int]
    round: CrossClientRound = field(repr=False)

    def __iter__(self):
        for output in self.outputs:
            yield (None, None) if output is None else (output.pseudo_labels, output.weights)

    def __len__(self) -> int:
        return len(self.outputs)

    def __getitem__(self, index: int) -> tuple[np.ndarray | None, np.ndarray | None]:
        output = self.outputs[index]
        return (None, None) if output is None else (output.pseudo_labels, output.weights)

    def link_bytes(self) -> int:
        """The busiest client's bytes in its busier direction, ``max_j max(sent_j, received_j)``
        (what :func:`securefl.crypto.seconds_at_bandwidth` projects)."""
        return busiest_link_bytes(self.bytes_sent, self.bytes_received)

    def bytes_per_client(self) -> dict[int, int]:
        """Bytes each client sent plus bytes it received."""
        return {c: self.bytes_sent[c] + self.bytes_received[c] for c in self.bytes_sent}


def transport_dropouts(drops: Dropouts, *, real: bool) -> dict[int, tuple[str, int]]:
    """The transport's ``{client: (step, 0)}`` of each stage: ``before_hamming`` at
    ``cclp/codes`` (plaintext: ``cclp/shares``, which collects the codes),
    ``before_sum`` at ``cclp/columns``, ``during_sum`` at the step that collects the secure
    aggregation round it misses (``advertise``: ``cclp/sum``; plaintext: ``cclp/sum`` for
    every round but ``unmask``, whose client sent its input and is only left without
    output, :func:`cross_client_lp`)."""
    first_step = {"advertise": SUM}
    for step, round_name in ROUND_OF_STEP.items():
        first_step.setdefault(round_name, step)
    steps = {c: (CODES if real else SHARES, 0) for c in drops.before_hamming}
    steps.update({c: (COLUMNS, 0) for c in drops.before_sum})
    for client, stage in drops.during_sum.items():
        round_name = _round_name(stage, drops)
        if real:
            steps[client] = (first_step[round_name], 0)
        elif round_name != "unmask":
            steps[client] = (SUM, 0)
    return steps


def _round_name(stage: int | str, drops: Dropouts) -> str:
    if isinstance(stage, str) and stage in ROUNDS:
        return stage
    if isinstance(stage, (int, np.integer)) and not isinstance(stage, bool) and 0 <= stage < len(ROUNDS):
        return ROUNDS[int(stage)]
    raise InputError("dropouts", drops, f"during_sum stage {stage!r} is not a round of {ROUNDS}")


def _check_inputs(features, labels, num_classes, k, alpha, L, backend, solver, hamming_backend):
    check_num_classes(num_classes)
    if backend not in BACKENDS:
        raise InputError("backend", backend, f"must be one of {BACKENDS}")
    if hamming_backend not in HAMMING_BACKENDS:
        raise InputError("hamming_backend", hamming_backend, f"must be one of {HAMMING_BACKENDS}")
    if solver not in SOLVERS:
        raise InputError("solver", solver, f"must be one of {SOLVERS}")
    if not isinstance(k, (int, np.integer)) or k < 1:
        raise InputError("k", k, "must be a positive integer")
    if not (isinstance(alpha, (int, float, np.floating)) and 0.0 < float(alpha) < 1.0):
        raise InputError("alpha", alpha, "must lie strictly between 0 and 1")
    if not isinstance(L, (int, np.integer)) or not 1 <= L < 1 << 16:
        raise InputError("L", L, "must be an integer in [1, 2^16)")
    if isinstance(features, np.ndarray) or len(features) == 0:
        raise InputError(
            "features", features, "must be a non-empty sequence of per-client (n_j, d) arrays"
        )
    if len(labels) != len(features):
        raise InputError(
            "labels", labels, f"must hold one label vector per client ({len(features)})"
        )
    checked_features, checked_labels = [], []
    dim = None
    for j, (x, y) in enumerate(zip(features, labels)):
        x = np.asarray(x)
        if x.ndim != 2 or x.shape[0] == 0 or x.dtype.kind not in "fiu":
            raise InputError(f"features[{j}]", x, "must be a real (n_j, d) array with n_j >= 1")
        if not np.all(np.isfinite(x)):
            raise InputError(f"features[{j}]", x, "contains NaN or infinity")
        dim = x.shape[1] if dim is None else dim
        if x.shape[1] != dim:
            raise InputError(
                f"features[{j}]", x, f"dimension {x.shape[1]} differs from d={dim} of features[0]"
            )
        checked_features.append(x.astype(np.float64))
        checked_labels.append(check_labels(y, num_classes, x.shape[0], name=f"labels[{j}]"))
    return checked_features, checked_labels


def cross_client_lp(
    features: Sequence[np.ndarray],
    labels: Sequence[np.ndarray],
    *,
    num_classes: int,
    k: int = 10,
    alpha: float = 0.99,
    L: int = 4096,
    backend: str = "real",
    seed: int | None = None,
    dropouts: Dropouts | Mapping | None = None,
    threshold: int | None = None,
    solver: str = "sparse",
    hamming_backend: str = "shade",
    intercept: Callable[[int, Record], Record] | None = None,
) -> CrossClientLPResult:
    """Run FedProp's CrossClientLP among ``len(features)`` clients and a server.

    ``features[j]`` is client j's ``(n_j, d)`` embedding matrix, ``labels[j]`` its
    ``(n_j,)`` labels with ``-1`` for unlabeled.  ``backend="real"`` runs X25519/AES-GCM
    seed agreement, the secure Hamming matrix (``hamming_backend``: SHADE, LWE, ring-LWE
    or ``auto``) and the padded secure aggregation; ``"plaintext"`` computes the same
    pseudo-labels and weights (bit-identical) with the crypto replaced by direct
    computation.  The round is the deployed one (module docstring); every key, pad and
    mask comes from the OS CSPRNG.

    ``seed`` fixes the clients' seed shares, hence the LSH hyperplanes: the only
    randomness the outputs depend on, so real and plaintext runs with the same ``seed``
    give bit-identical pseudo-labels and weights, those of
    :func:`~securefl.protocols.crossclient.ideal.ideal_cross_client_lp`.  A server that
    knows ``seed`` knows the hyperplanes, so production leaves it ``None``.
    ``threshold`` is the secure sum's t (default: a majority of the clients entering it);
    ``solver`` the server's solver for S_L; ``dropouts`` which client drops at which
    stage (:class:`~securefl.protocols.crossclient.parties.Dropouts`, at the steps of
    :func:`transport_dropouts`); ``intercept(client, request) -> request`` sees (and may
    rewrite) every request the server sends, as :class:`~securefl.runtime.transport.InProcessTransport`'s
    test hook; the replies it received are in ``result.round.exchanges``.  A client
    whose step fails raises :class:`ProtocolError`; too few clients left raise
    :class:`DropoutError`.
    """
    start = time.perf_counter()
    features, labels = _check_inputs(
        features, labels, num_classes, k, alpha, L, backend, solver, hamming_backend
    )
    parties = len(features)
    drops = Dropouts.coerce(dropouts, parties)
    real = backend == "real"
    steps = transport_dropouts(drops, real=real)
    withheld = set(drops.during_sum) - set(steps)
    half = FeatureClient(FeatureProtocol(backend, int(L), hamming_backend, seed))
    nodes = [NodeContext(j, {"partition-id": j}, {}, FeatureData(features[j], labels[j], num_classes))
             for j in range(parties)]
    transport = InProcessTransport(half, nodes, dropouts=steps, intercept=intercept)
    done = cross_client_round(transport, range(parties), round_index=0, secure=backend, k=int(k),
                              alpha=float(alpha), L=int(L), num_classes=int(num_classes),
                              hamming_backend=hamming_backend, threshold=threshold, solver=solver)
    if done.failed:
        raise ProtocolError(f"CrossClientLP: clients failed: {done.failed}")
    receivers = [j for j in done.rows if j not in withheld]
    t = sum_threshold(len(done.in_sum), threshold)
    if len(receivers) < t:
        raise DropoutError(f"{len(receivers)} of {len(done.in_sum)} clients finished the sum, "
                           f"fewer than the threshold {t}")
    outputs: list[LabelPropagationResult | None] = [None] * parties
    for j in receivers:
        outputs[j] = half.finish_rows(done.rows[j], transport.states[j], transport.nodes[j])
    return CrossClientLPResult(
        outputs=outputs, backend=backend, bytes_sent=done.bytes_sent,
        bytes_received=done.bytes_received, seconds=time.perf_counter() - start,
        crypto_seconds=done.crypto_seconds, server_seconds=done.server_seconds,
        graph_parties=done.graph, sum_survivors=done.survivors, round=done)
