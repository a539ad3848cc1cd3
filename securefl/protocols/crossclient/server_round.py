"""CrossClientLP's server round over a transport (FedProp Algorithm 3, lines 1-14).

The client parties run at the clients (:mod:`securefl.protocols.crossclient.client_steps`,
which lists the steps); the server is :func:`round_steps`, a generator of
:class:`~securefl.runtime.engine.Step`\\ s over one typed state (:class:`RoundState`), one
exchange per step, which :func:`cross_client_round` runs with the one driver
(:func:`securefl.runtime.engine.drive`) on any transport.  Its stages, one function each:

1. ``cclp/advertise``: the block sizes (:func:`_advertise`, :func:`_sizes`);
2. the setup and SecureHamming, by mode (:data:`SETUPS`): real mode relays the LSH seed
   agreement (:class:`~securefl.protocols.lsh.SeedAgreementServer`), collects the own blocks and runs the Hamming backend the clients resolved
   (:data:`~securefl.protocols.hamming.relay.HAMMING`: :class:`~securefl.protocols.hamming.relay.ShadeRelay` relays the sealed SHADE batches between clients,
   which it cannot read or alter, :mod:`securefl.runtime.links`; :class:`~securefl.protocols.hamming.relay.LweRelay` the LWE and
   ring-LWE broadcasts and answers), adds the two shares of every pair's block and places
   the own blocks into the Hamming matrix H; the plaintext placeholder
   (:class:`Placeholder`) hands out the seed shares and computes H from the codes;
3. ``cclp/columns``: builds the graph and solves for the requested columns
   (:class:`~securefl.protocols.crossclient.parties.CrossClientLPServer`);
4. ``cclp/sum`` and the sum's own steps, by mode (:data:`ROW_SUMS`): the padded secure sum
   (:mod:`securefl.runtime.secure_sum_steps`, sum ``cclp``, its steps run inside this round's
   by :func:`securefl.runtime.engine.within`) or the placeholder's direct sum;
5. :func:`finish`: each client's block of the total with the survivor list, which the
   ``train`` request carries.

It reads no client data: what it learns is what the server of
:mod:`securefl.protocols.crossclient.parties` learns (public keys, ciphertexts, H, the labeled
positions, the block sizes, the padded total and its survivors).

**Dropouts** (no reply before the timeout, or an error reply) map onto
:class:`~securefl.protocols.crossclient.parties.Dropouts` (:func:`securefl.protocols.cross_client_lp`
names each stage's step):

* at ``cclp/advertise``: the client is left out of the round's protocol (as if not
  sampled: its share is not in the seed); it gets no pseudo-labels;
* at ``cclp/shares`` (real mode): the others miss its seed share and cannot derive the
  seed: every client fails at ``cclp/codes`` and :class:`~securefl.errors.DropoutError` is
  raised; in plaintext mode ``cclp/shares`` collects the codes: ``before_hamming``;
* at ``cclp/codes`` (``before_hamming``) or at any SHADE or LWE hop (during SecureHamming): it is
  left out of the graph -- its pairs are abandoned, the other pairs finish, H is
  assembled over the clients left -- exactly ``before_hamming`` of the ideal functionality
  (:func:`~securefl.protocols.crossclient.ideal.ideal_cross_client_lp`);
* at ``cclp/columns`` (``before_sum``): its points are in the graph, its labels do not
  contribute, no output;
* at ``cclp/sum`` or a ``secagg/*`` step (``during_sum`` at the secure-aggregation round
  it missed: :data:`securefl.crypto.secagg.ROUNDS`): before its masked input it
  contributes nothing, at ``unmask`` it still contributes; no output for it.

**Nominal bytes.**  Per client, the frame bytes (:func:`securefl.crypto.channel.frame_size`)
of every CrossClientLP message it sends or receives -- setup, SHADE (the client-to-client
frames as the clients report them, the shares and own block it sends the server), column
request and S_L, the rows -- plus the bytes it sent in the secure sum, whatever the
transport moves (which :class:`securefl.runtime.costs.RoundMeter` measures).
Plaintext mode meters columns, S_L, rows and the sum's encoded inputs (the placeholder's
setup and codes are free).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from securefl.crypto import shade_hops
from securefl.crypto.channel import Message, frame_size
from securefl.crypto.hamming import check_codes, choose_backend
from securefl.crypto.hamming_plain import hamming_matrix, pack_codes
from securefl.crypto.projection import busiest_link_bytes
from securefl.crypto.secagg import SecAggConfig
from securefl.errors import DropoutError, ProtocolError
from securefl.protocols.crossclient.client_steps import (
    ADVERTISE,
    CODES,
    COLUMNS,
    SHARES,
    SLOT_COLUMNS,
    SLOT_LSH,
    SLOT_S_L,
    SUM,
    SUM_NAME,
)
from securefl.protocols.crossclient.parties import TAG_COLUMNS, CrossClientLPServer
from securefl.protocols.hamming.relay import (
    HAMMING,
    HammingState,
    assemble,
    collect_own,
    timed_step,
)
from securefl.protocols.lsh import SeedAgreementServer
from securefl.runtime import secure_sum_steps
from securefl.runtime.costs import COMPUTE, CRYPTO
from securefl.runtime.engine import Step, drive, within
from securefl.runtime.secure_sum_steps import Aggregation
from securefl.runtime.transport import Exchange, Record, Transport

_SHARE = re.compile(r"cclp/share/(\d+)-(\d+)/count\Z")


@dataclass
class CrossClientRound:
    """What one CrossClientLP over the transport gave and cost.

    ``rows``: client -> (its block of the padded total, the sum's survivors as party
    indices) for the ``train`` request; ``graph``, ``in_sum``, ``survivors`` as client ids;
    ``failed``: client -> error text of any step; ``bytes_per_client``: nominal bytes
    (module docstring) per member; ``exchanges``: every exchange it ran.
    ``label_mass``: client -> ``(n_k,)`` label mass sum_c Z_ic of each of its points, for
    every client that gets rows (:meth:`CrossClientLPServer.label_mass` over the sum's
    survivors: what the server already holds); ``labeled_positions``: client -> the
    positions of its labeled points that it sent (line 12).
    """

    rows: dict[int, tuple[np.ndarray, np.ndarray]]
    graph: list[int]
    in_sum: list[int]
    survivors: list[int]
    dropped: dict[str, list[int]]
    failed: dict[int, str]
    bytes_sent: dict[int, int]
    bytes_received: dict[int, int]
    server_seconds: float
    exchanges: list[Exchange] = field(default_factory=list, repr=False)
    label_mass: dict[int, np.ndarray] = field(default_factory=dict, repr=False)
    labeled_positions: dict[int, np.ndarray] = field(default_factory=dict, repr=False)

    @property
    def protocol_bytes_per_client(self) -> float:
        """Mean over the members of bytes sent plus received."""
        totals = [self.bytes_sent[c] + self.bytes_received[c] for c in self.bytes_sent]
        return float(np.mean(totals)) if totals else 0.0

    @property
    def link_bytes(self) -> int:
        """The busiest client's bytes in its busier direction."""
        return busiest_link_bytes(self.bytes_sent, self.bytes_received)

    @property
    def crypto_seconds(self) -> float:
        """Clients' cryptography plus the server's share of the protocol."""
        return self.server_seconds + sum(float(r.config.get(CRYPTO, 0.0)) for e in self.exchanges
                                         for r in e.replies.values())

    @property
    def compute_seconds(self) -> float:
        """Clients' embedding time."""
        return sum(float(r.config.get(COMPUTE, 0.0)) for e in self.exchanges
                   for r in e.replies.values())


@dataclass
class RoundState(HammingState):
    """The server's state of one round, threaded through :func:`round_steps` by the driver:
    a Hamming session's state (:class:`~securefl.protocols.hamming.relay.HammingState`: the
    members in party order, the live parties, the nominal bytes, the server's clock, the
    shares) and the round's own.  The fields after ``session`` are not arguments: the
    stages fill them.
    """

    feature_model: np.ndarray
    round_index: int
    real: bool
    k: int
    alpha: float
    L: int
    num_classes: int
    hamming_backend: str
    threshold: int | None = None
    solver: str = "sparse"
    chunk_bytes: int = shade_hops.DEFAULT_CHUNK_BYTES
    session: bytes = field(default_factory=lambda: secrets.token_bytes(8))
    agreement: SeedAgreementServer = field(default_factory=SeedAgreementServer, init=False)
    cost_model: str = field(default="shade", init=False)
    graph: list[int] = field(default_factory=list, init=False)
    server: CrossClientLPServer | None = field(default=None, init=False)
    in_sum: list[int] = field(default_factory=list, init=False)
    sum_config: SecAggConfig | None = field(default=None, init=False)
    aggregation: Aggregation | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.chunk_bytes = shade_hops.check_chunk_bytes(self.chunk_bytes)
        super().__post_init__()


def _absorb(state: RoundState, exchange: Exchange) -> None:
    state.absorb(exchange)


# ----------------------------------------------------------------------------- stage 1


def _advertise(state: RoundState) -> dict[int, Record]:
    roster = np.array(state.members, dtype=np.int64)
    return state.addressed({
        j: Record({"model": np.asarray(state.feature_model, dtype=np.float64), "cclp/members": roster},
                  {"round": int(state.round_index), "cclp/party": j, "cclp/session": state.session})
        for j in state.live})


def _sizes(state: RoundState, exchange: Exchange) -> None:
    state.absorb(exchange)
    for j in state.live:
        state.sizes[j] = int(state.reply(j).config["cclp/points"])


# ----------------------------------------------------------------------------- stage 2


class Setup(Protocol):
    """Stage 2 of a mode: the steps after ``cclp/advertise`` that leave ``state.graph`` and
    the graph built on H in ``state.server``."""

    def steps(self, state: RoundState) -> Iterator[Step[RoundState]]: ...


class Secure:
    """Real mode's setup: seed agreement and links, own blocks, the clients' Hamming backend."""

    def steps(self, state: RoundState) -> Iterator[Step[RoundState]]:
        yield timed_step(SHARES, _relay_keys, _absorb)
        yield timed_step(CODES, _relay_shares, _own_blocks)
        relay = HAMMING[state.hamming_backend]
        yield from relay.steps(state)
        if not state.live:
            raise DropoutError("every client dropped out before SecureHamming")
        state.clock.run(lambda: _receive_hamming(state, assemble(
            state.live, state.sizes, state.own, state.shares, state.L, prefix=relay.prefix)))


def _relay_keys(state: RoundState) -> dict[int, Record]:
    keys = state.agreement.broadcast_keys([state.message_from(j, SLOT_LSH) for j in state.live])
    return state.addressed({m.receiver: state.to_client(Record(), SLOT_LSH, m) for m in keys})


def _relay_shares(state: RoundState) -> dict[int, Record]:
    relayed = state.agreement.relay_shares([state.message_from(j, SLOT_LSH) for j in state.live])
    requests = {m.receiver: state.to_client(state.layout(), SLOT_LSH, m) for m in relayed if m.receiver in state.live}
    state.cost_model = choose_backend([int(state.sizes[j]) for j in state.live], int(state.L))
    return state.addressed(requests)


def _own_blocks(state: RoundState, exchange: Exchange) -> None:
    state.absorb(exchange)
    collect_own(state)
    if state.hamming_backend == "auto":
        state.hamming_backend = _agreed_backend(state.own, state.cost_model)


class Placeholder:
    """Plaintext mode's setup: every seed share to every client, their codes in the clear,
    H computed directly (the same H as the real backends)."""

    def steps(self, state: RoundState) -> Iterator[Step[RoundState]]:
        yield timed_step(SHARES, _all_shares, _codes)


def _all_shares(state: RoundState) -> dict[int, Record]:
    shares = np.stack([np.asarray(state.reply(j).arrays["cclp/share"]) for j in state.live]) \
        if state.live else np.zeros((0, 16), np.uint8)
    return state.addressed({j: Record({"cclp/shares": shares}) for j in state.live})


def _codes(state: RoundState, exchange: Exchange) -> None:
    state.absorb(exchange)
    if not state.live:
        raise DropoutError("every client dropped out before SecureHamming")
    codes = check_codes([state.reply(j).arrays["cclp/codes"] for j in state.live])
    for j, block in zip(state.live, codes):
        if block.shape != (state.sizes[j], state.L):
            raise ProtocolError(f"client {state.members[j]}: codes must have shape "
                                f"({state.sizes[j]}, {state.L})")
    _receive_hamming(state, hamming_matrix(pack_codes(np.concatenate(codes, axis=0))))


def _receive_hamming(state: RoundState, matrix: np.ndarray) -> None:
    """Lines 6-9 on H over the live parties, who make up the graph."""
    state.graph = list(state.live)
    state.server = CrossClientLPServer(k=int(state.k), alpha=float(state.alpha), L=int(state.L),
                                       num_classes=int(state.num_classes), solver=state.solver)
    state.server.receive_hamming(matrix, list(state.graph), [int(state.sizes[j]) for j in state.graph])


SETUPS: dict[bool, Setup] = {True: Secure(), False: Placeholder()}
"""Stage 2 by mode (``real``)."""


# ----------------------------------------------------------------------------- stages 3-4


def _ask_columns(state: RoundState) -> dict[int, Record]:
    return state.addressed({j: Record() for j in state.live})


def _columns(state: RoundState, exchange: Exchange) -> None:
    state.absorb(exchange)
    state.in_sum = list(state.live)
    if not state.in_sum:
        raise DropoutError("every client dropped out before SecureSum")


def _serve_columns(state: RoundState) -> dict[int, Record]:
    """Lines 10-12: S_L^(j) and the row layout to every client in the sum, with the sum's
    parameters (:data:`ROW_SUMS`)."""
    asked = [state.message_from(j, SLOT_COLUMNS) for j in state.in_sum]
    for message in asked:
        if message.tag != TAG_COLUMNS:
            raise ProtocolError(f"client {state.members[message.sender]}: expected {TAG_COLUMNS!r}")
    rows = ROW_SUMS[state.real]
    rows.configure(state)
    requests = {}
    for message in state.server.serve_columns(asked):
        j = message.receiver
        request = state.to_client(Record(config={"cclp/sum/members": len(state.in_sum)}),
                                  SLOT_S_L, message)
        rows.request(state, j, request)
        requests[j] = request
    return state.addressed(requests)


def sum_threshold(entering: int, threshold: int | None) -> int:
    """The sum's t: ``threshold`` when given, else a majority of the ``entering`` clients."""
    return entering // 2 + 1 if threshold is None else int(threshold)


def _threshold(state: RoundState) -> int:
    return sum_threshold(len(state.in_sum), state.threshold)


def _dim(state: RoundState) -> int:
    return int(sum(state.sizes[j] for j in state.in_sum)) * int(state.num_classes)


@dataclass(frozen=True)
class Summed:
    """The row sum's outcome: the ring total over ``survivors``, for ``receivers`` (parties)."""

    total: np.ndarray
    survivors: list[int]
    receivers: list[int]


class RowSum(Protocol):
    """Stage 4 of a mode: the sum of the clients' (padded) row vectors after ``cclp/sum``."""

    def configure(self, state: RoundState) -> None: ...

    def request(self, state: RoundState, j: int, request: Record) -> None: ...

    def steps(self, state: RoundState) -> Iterator[Step]: ...

    def result(self, state: RoundState) -> Summed: ...


class SecAggRows:
    """Real mode: the padded vectors enter the secure sum ``cclp``, whose round 0 rides on
    the ``cclp/sum`` replies and whose rounds 1-3 run as its own steps."""

    def configure(self, state: RoundState) -> None:
        state.sum_config = secure_sum_steps.new_config(
            [state.members[j] for j in state.in_sum], threshold=_threshold(state), dim=_dim(state))

    def request(self, state: RoundState, j: int, request: Record) -> None:
        config = state.sum_config
        request.config.update({"cclp/sum/index": state.in_sum.index(j),
                               "cclp/sum/threshold": config.threshold,
                               "cclp/sum/session": config.session})
        request.arrays["cclp/sum/cohort"] = secure_sum_steps.packed_members(config.members)

    def steps(self, state: RoundState) -> Iterator[Step]:
        state.aggregation = secure_sum_steps.open_aggregation(
            {SUM_NAME: state.sum_config}, [state.members[j] for j in state.in_sum], state.last)
        yield from within(secure_sum_steps.steps(state.aggregation), state.aggregation)

    def result(self, state: RoundState) -> Summed:
        outcome = secure_sum_steps.finish(state.aggregation)
        state.exchanges.extend(outcome.exchanges)
        state.failed.update(outcome.failed)
        state.clock.thread += outcome.server_seconds
        summed = outcome.sums[SUM_NAME]
        position = {c: j for j, c in enumerate(state.members)}
        for client, count_sent in summed.bytes_sent.items():
            state.sent[position[client]] += int(count_sent)
        out_of_sum = {c for clients in summed.dropped.values() for c in clients} | set(outcome.failed)
        for round_name, clients in summed.dropped.items():
            if clients:
                state.dropped[f"{SUM}/{round_name}"] = list(clients)
        return Summed(summed.total, [position[c] for c in summed.survivors],
                      [j for j in state.in_sum if state.members[j] not in out_of_sum])


class PlainRows:
    """Plaintext mode: the unpadded encodings summed directly over the clients that sent one."""

    def configure(self, state: RoundState) -> None:
        state.sum_config = None

    def request(self, state: RoundState, j: int, request: Record) -> None:
        return None

    def steps(self, state: RoundState) -> Iterator[Step]:
        return iter(())

    def result(self, state: RoundState) -> Summed:
        answered, threshold, dim = state.live, _threshold(state), _dim(state)
        if len(answered) < threshold:
            raise DropoutError(f"{len(answered)} of {len(state.in_sum)} clients entered the sum, "
                               f"fewer than the threshold {threshold}")
        total = np.zeros(dim, dtype=np.uint64)
        for j in answered:
            vector = np.asarray(state.reply(j).arrays.get("cclp/input"))
            if vector.shape != (dim,) or vector.dtype != np.uint64:
                raise ProtocolError(f"client {state.members[j]}: sum input must be ({dim},) uint64")
            total += vector
            state.sent[j] += int(vector.nbytes)
        return Summed(total, list(answered), list(answered))


ROW_SUMS: dict[bool, RowSum] = {True: SecAggRows(), False: PlainRows()}
"""Stage 4 by mode (``real``)."""


# ----------------------------------------------------------------------------- the round


def round_steps(state: RoundState) -> Iterator[Step]:
    """The server's steps of one round, in order; later steps depend on the replies."""
    yield timed_step(ADVERTISE, _advertise, _sizes)
    yield from SETUPS[state.real].steps(state)
    yield timed_step(COLUMNS, _ask_columns, _columns)
    yield timed_step(SUM, _serve_columns, _absorb)
    yield from ROW_SUMS[state.real].steps(state)


def finish(state: RoundState) -> CrossClientRound:
    """After the last step: each receiver's block of the total with the survivors, and the
    label mass of its points (what the server already holds)."""
    summed = ROW_SUMS[state.real].result(state)
    return state.clock.run(_forward_rows, state, summed)


def _forward_rows(state: RoundState, summed: Summed) -> CrossClientRound:
    members, sizes, server = state.members, state.sizes, state.server
    rows = {}
    for message in server.forward_rows(summed.total, summed.survivors, summed.receivers):
        state.received[message.receiver] += frame_size(message)
        rows[members[message.receiver]] = (np.asarray(message.arrays[0]), np.asarray(message.arrays[1]))
    mass = server.label_mass(summed.survivors)
    offsets = dict(zip(state.graph, np.concatenate([[0], np.cumsum([sizes[j] for j in state.graph])])[:-1]))
    label_mass = {members[j]: mass[offsets[j]: offsets[j] + sizes[j]] for j in summed.receivers}
    return CrossClientRound(
        rows=rows, graph=[members[j] for j in state.graph], in_sum=[members[j] for j in state.in_sum],
        survivors=[members[j] for j in summed.survivors], dropped=state.dropped, failed=state.failed,
        bytes_sent={members[j]: b for j, b in state.sent.items()},
        bytes_received={members[j]: b for j, b in state.received.items()},
        server_seconds=state.clock.thread, exchanges=state.exchanges, label_mass=label_mass,
        labeled_positions={members[j]: server.requests[j] for j in state.in_sum})


def cross_client_round(transport: Transport, members: Sequence[int], *, round_index: int,
                       secure: str, k: int, alpha: float, L: int, num_classes: int,
                       feature_model: np.ndarray | None = None, timeout: float | None = None,
                       hamming_backend: str = "shade", threshold: int | None = None,
                       solver: str = "sparse",
                       chunk_bytes: int = shade_hops.DEFAULT_CHUNK_BYTES) -> CrossClientRound:
    """Run CrossClientLP among ``members`` (clients, in party order) on ``transport``:
    :func:`round_steps` driven by :func:`securefl.runtime.engine.drive`, then :func:`finish`.
    ``feature_model``: a vector the ``cclp/advertise`` request carries as array ``model`` for
    the clients' :meth:`~securefl.protocols.crossclient.client_steps.CrossClientSteps.features`
    (FedProp: the model whose features they embed; none for clients holding features);
    ``hamming_backend`` (real mode) ``"shade"``, ``"lwe"``, ``"rlwe"`` or ``"auto"`` (each client
    resolves it by its own node's policy, :meth:`securefl.runtime.policy.PrivacyPolicy.hamming_backend`;
    the server follows what they resolved, :func:`_agreed_backend`), as the clients run it;
    ``threshold``: the secure sum's t (default a majority of the clients entering it);
    ``solver``: the server's solver for S_L (:data:`securefl.protocols.propagation.SOLVERS`);
    ``chunk_bytes``: the most SHADE bytes a pair's message carries per peer (:class:`~securefl.protocols.hamming.relay.ShadeRelay`;
    a positive int, else :class:`~securefl.errors.InputError`)."""
    model = np.zeros(0) if feature_model is None else feature_model
    state = RoundState([int(c) for c in members], model, int(round_index), secure == "real",
                       int(k), float(alpha), int(L), int(num_classes), hamming_backend,
                       threshold, solver, chunk_bytes)
    return finish(drive(transport, round_steps(state), state, timeout=timeout))


def _agreed_backend(own: dict[int, Message], model: str) -> str:
    """The backend the clients resolved ``auto`` to, each by its own node's policy: the
    cost model's ``model``, or SHADE where a node's policy does not allow it (the tags of
    their own-code messages say which family).  The server never imposes its own choice;
    clients that disagree fail the round."""
    families = {message.tag.split("/")[0] for message in own.values()}
    if not families:
        return model
    if families == {"shade"}:
        return "shade"
    if families == {"lwe"} and model in ("lwe", "rlwe"):
        return model
    raise ProtocolError(f"clients resolved hamming_backend='auto' to {sorted(families)} "
                        f"where the cost model chose {model!r}")
