"""Transports: one code path for a method, run in one process or on Flower.

Design
======

**A method is two halves.**  A *server half* (:class:`ServerHalf`) drives the rounds: it
decides which clients take part, what each is sent and what to do with the replies.  A
*client half* (:class:`ClientHalf`) answers one request at a time.  Neither half knows how
requests travel; a :class:`Transport` moves them:

* :class:`InProcessTransport` (this module) calls the client halves in this process, one
  after another, with exactly the serialisation discipline of a real deployment;
* :class:`securefl.fl.flower.FlowerTransport` sends them as Flower messages through a
  SuperLink to SuperNodes, where :mod:`securefl.fl.flower.app` (the ClientApp) serves them.

The same two halves, the same seed and the same node configuration give bit-identical
results on both transports; ``tests/deploy`` checks it on a real SuperLink.

**Everything that crosses is a** :class:`~securefl.runtime.records.Record`
(:mod:`securefl.runtime.records`: named numpy arrays plus a small config of scalars; bulk
data always an array).  This module re-exports the records' names (``Record``,
``Exchange``, ``put_message``, ``take_message``, ``has_message``, ``CONFIG_VALUE_LIMIT``)
beside the transport's own, the vocabulary a client or server half is written in.

**Client state lives in a Record, never in objects.**  Flower starts a fresh ClientApp
process for every message; what a client must remember between messages (model, protocol
party state, link keys and counters) is a :class:`Record` the client half reads and
updates in place.  The transport stores it (``Context.state`` on Flower, a dict here) and
keeps the update only if the handler returns: a handler that raises leaves the state as
it was, on both transports.  :class:`InProcessTransport` hands every request, reply and
state array on read-only (:meth:`Record.frozen`: it copies what its sender could still
write and takes over what a handler has just returned), so a half that writes to an object
it shares with its peer fails here the way it would fail on Flower.

**One exchange = one message round.**  :meth:`Transport.exchange` sends one request to each
addressed client and collects the replies: ``replies`` (client -> Record), ``dropped``
(no reply before ``timeout``) and ``failed`` (the client raised; its error text, e.g.
``ProtocolError: ...``).  A protocol step that needs a round trip costs one exchange;
client-to-client steps cost one exchange per hop, so the halves batch everything that can
travel together (per destination, per step).  On Flower an exchange costs seconds
(process start, polling; see ``docs/flower.md``), in process microseconds.

**Every request carries** ``_program``, ``_session`` (16 random bytes per program run),
``_seq`` (per client, strictly increasing) and ``_step``, stamped by the transport.  The
client-side dispatcher (:func:`serve`) rejects with :class:`ProtocolError` a request of
another session unless it opens one (``_seq == 0``) and any ``_seq`` not above the last it
accepted: a replayed or reordered request is refused; a gap (a request that timed out) is
allowed, so a client that missed a round can rejoin the next one.

**Client-to-client frames** (SHADE's OT traffic, the LWE backend's ciphertexts) are relayed
by the server half but authenticated end to end: :mod:`securefl.runtime.links` derives a key
per pair of clients from their X25519 agreement (the server relays the public keys, each
signed by its owner's roster identity, :mod:`securefl.crypto.identity`, so it can neither
compute the keys nor substitute its own), and seals each batch of protocol messages for one destination
as :class:`~securefl.crypto.channel.Network` frames (GMAC per frame, sequence numbers per
batch, a batch counter per link), carried as one ``uint8`` array.  A relay that alters,
drops, replays, reorders or misroutes a frame makes the receiving client raise
:class:`ProtocolError`.  Payloads that are not pseudorandom to the server are also
encrypted by the protocol that sends them (secure aggregation's key shares, the LSH seed
shares: AES-GCM under the same kind of pairwise keys).

**Protocol frames map onto messages** as follows: a sans-I/O party's
:class:`~securefl.crypto.channel.Message` to or from the server is put into a Record
(:func:`~securefl.runtime.records.put_message` /
:func:`~securefl.runtime.records.take_message`); client-to-client messages go through the
links.  The protocol
parties keep their own checks (round tags, stage order, AES-GCM on relayed secrets), so a
step out of order still raises :class:`ProtocolError` in the party itself.

**Dropouts are replies that time out.**  A client that does not answer an exchange within
``timeout`` is reported in ``dropped``; the server half treats it as a protocol dropout
at that step (for secure aggregation: :data:`securefl.crypto.secagg.ROUNDS`).  In process,
:class:`InProcessTransport` takes the same dropouts as ``{client: step}``, so a dropout
test runs in milliseconds and the Flower test checks that a killed SuperNode gives the
same outcome.

**Methods run as program** ``method``: :mod:`securefl.methods.halves` is the method-split
API built on these pieces (a method's server half is the ``Method`` the runner drives, its
client half a ``MethodClient``), :mod:`securefl.fl.uploads` is FedAvg's secure averaging
as exchanges and :mod:`securefl.runtime.costs` the per-round time and byte accounting;
``docs/method-halves.md`` is the guide to writing a method.  Every client's simulation
randomness comes from ``(seed, round, client, purpose)`` (:func:`securefl.fl.client_rng`),
never from one stream shared by all clients in sequence, so the order in which clients run
cannot change a result.

**Checkpoints** (a simulator's resume): :meth:`InProcessTransport.client_states` gives each
client's persistent state without the session's own entries (:data:`SESSION_SCOPED`),
:meth:`InProcessTransport.adopt` hands it back within a new session.

Who learns what: the transport adds nothing to a protocol's view.  The server half sees
what the protocol gives the server (its messages and relayed ciphertexts) and the
transport metadata (which client answered which step, sizes, times); a client sees only
requests addressed to it.
"""

from __future__ import annotations

import secrets
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from securefl.crypto.identity import (
    CREDENTIALS,
    IDENTITY_FILE,
    Credentials,
    Identity,
    Roster,
    node_credentials,
)
from securefl.errors import InputError, ProtocolError
from securefl.runtime.policy import (
    LEDGER,
    POLICY,
    PrivacyLedger,
    PrivacyPolicy,
    node_ledger,
    node_policy,
)
from securefl.runtime.records import (  # re-exported: the vocabulary of every half
    CONFIG_VALUE_LIMIT,
    ConfigValue,
    Exchange,
    Record,
    has_message,
    put_message,
    take_message,
)

__all__ = [
    "CONFIG_VALUE_LIMIT", "RESERVED", "SESSION_BYTES", "SESSION_SCOPED", "ClientHalf",
    "ConfigValue", "Exchange", "InProcessTransport", "NodeContext", "Record", "ServerHalf",
    "Transport", "TransportStats", "has_message", "put_message", "serve", "take_message",
]

RESERVED = ("_program", "_session", "_seq", "_step")
"""Config keys the transport stamps on every request."""

SESSION_BYTES = 16

SESSION_SCOPED = ("links/", "secagg/", "cclp/", "ot/")
"""Prefixes of client-state entries that belong to one session (:mod:`securefl.runtime.links`'
keys and counters, :mod:`securefl.runtime.secure_sum_steps`' parties, the IKNP setups SHADE
keeps with each peer across rounds, :mod:`securefl.methods.fedprop.client`): never
checkpointed by :meth:`InProcessTransport.client_states`."""


@dataclass(frozen=True)
class NodeContext:
    """What a client half knows about the node it runs on.

    ``partition``: the client index (Flower node config ``partition-id``); ``node_config``:
    the node's own settings (``num-partitions``, ``data-dir``, its identity and roster:
    ``identity-file`` / ``roster-file``, in process a ``credentials`` object); ``run_config``: the
    program's public settings (dataset, seed, hyper-parameters), the same at every node;
    ``data``: the node's own local data, as the program defines it, or ``None`` when the
    program loads it itself from ``run_config`` and ``node_config`` (a simulator hands each
    in-process node its partition here; it is the node's, never a message).
    """

    partition: int
    node_config: Mapping[str, Any]
    run_config: Mapping[str, Any]
    data: Any = None

    def credentials(self) -> Credentials:
        """This node's identity and roster, from its own configuration only
        (:func:`securefl.crypto.identity.node_credentials`; none: ProtocolError)."""
        return node_credentials(self.node_config, self.partition)

    def policy(self) -> PrivacyPolicy:
        """This node's privacy policy (:func:`securefl.runtime.policy.node_policy`)."""
        return node_policy(self.node_config)

    def ledger(self) -> PrivacyLedger:
        """This node's ledger of DP releases (:func:`securefl.runtime.policy.node_ledger`)."""
        return node_ledger(self.node_config)


class ClientHalf(ABC):
    """What one client runs.  Stateless object; per-client state is the ``state`` Record."""

    program: ClassVar[str]

    @abstractmethod
    def handle(self, step: str, request: Record, state: Record, node: NodeContext) -> Record:
        """Answer ``request`` of ``step``; update ``state`` in place; return the reply."""

    @classmethod
    def warm_up(cls) -> None:
        """Import and initialise, once per process, what :meth:`handle` needs, so that a
        warm executor does it before it forks the message handlers
        (:func:`securefl.fl.flower.app.warm_up`).  The default needs nothing."""


@dataclass
class TransportStats:
    """Bytes moved per client (down = server to client) and time per step name."""

    bytes_down: dict[int, int] = field(default_factory=dict)
    bytes_up: dict[int, int] = field(default_factory=dict)
    exchanges: int = 0
    seconds: dict[str, float] = field(default_factory=dict)

    def add(self, client: int, down: int, up: int) -> None:
        self.bytes_down[client] = self.bytes_down.get(client, 0) + down
        self.bytes_up[client] = self.bytes_up.get(client, 0) + up


class Transport(ABC):
    """Moves requests of a server half to client halves and their replies back.

    ``parallel``: whether the clients of one exchange compute at the same time (separate
    machines) or one after another (in process); cost accounting uses it to tell an
    exchange's messaging time from its clients' handler time."""

    parallel: ClassVar[bool] = True

    def __init__(self, *, program: str, session: bytes | None = None) -> None:
        self.program = program
        self.session = secrets.token_bytes(SESSION_BYTES) if session is None else session
        if len(self.session) != SESSION_BYTES:
            raise InputError("session", self.session, f"must be {SESSION_BYTES} bytes")
        self.stats = TransportStats()
        self.timeout: float | None = None
        """Seconds an exchange waits for replies when the caller names none (None: forever)."""
        self._seq: dict[int, int] = {}
        self.events: list[dict[str, Any]] = []
        self.on_event: Callable[[dict[str, Any]], None] | None = None

    @property
    @abstractmethod
    def clients(self) -> tuple[int, ...]:
        """Client indices reachable through this transport."""

    def stamp(self, client: int, step: str, request: Record) -> Record:
        """``request`` with the transport's reserved config keys (next ``_seq`` of client)."""
        if any(key in request.config for key in RESERVED):
            raise InputError("request", sorted(request.config), f"keys {RESERVED} are reserved")
        seq = self._seq.get(client, 0)
        self._seq[client] = seq + 1
        stamped = Record(dict(request.arrays), dict(request.config))
        stamped.config.update({"_program": self.program, "_session": self.session,
                               "_seq": seq, "_step": step})
        return stamped.check()

    def exchange(self, step: str, requests: Mapping[int, Record], *,
                 timeout: float | None = None) -> Exchange:
        """Send ``requests[c]`` to every client ``c`` and collect the replies (waiting at
        most ``timeout`` seconds, default :attr:`timeout`)."""
        timeout = self.timeout if timeout is None else timeout
        unknown = set(requests) - set(self.clients)
        if unknown:
            raise InputError("requests", sorted(unknown), f"not among the clients {self.clients}")
        self.log({"event": "send", "step": step, "clients": sorted(int(c) for c in requests)})
        start = time.perf_counter()
        result = self._exchange(step, {c: self.stamp(c, step, r) for c, r in requests.items()},
                                timeout)
        result.seconds = time.perf_counter() - start
        self.stats.exchanges += 1
        self.stats.seconds[step] = self.stats.seconds.get(step, 0.0) + result.seconds
        self.log({"event": "received", "step": step, "answered": list(result.answered),
                  "dropped": list(result.dropped), "failed": sorted(result.failed)})
        return result

    @abstractmethod
    def _exchange(self, step: str, requests: dict[int, Record], timeout: float | None) -> Exchange:
        """Deliver stamped requests; meter bytes into ``self.stats``."""

    def log(self, event: dict[str, Any]) -> None:
        """Record a progress event (and pass it to ``on_event``)."""
        event = {"time": time.time(), **event}
        self.events.append(event)
        if self.on_event is not None:
            self.on_event(event)


# ----------------------------------------------------------------------------- client side

_STATE_SESSION = "_session"
_STATE_SEQ = "_seq"


def serve(half: ClientHalf, request: Record, state: Record, node: NodeContext
          ) -> tuple[Record, Record, float]:
    """Client-side dispatch shared by every transport: check the reserved keys, run the
    half on a copy of ``state``; returns ``(reply, new_state, handler_seconds)``.

    ``state`` itself is never modified, so a handler that raises leaves it unchanged.
    """
    config = request.config
    for key in RESERVED:
        if key not in config:
            raise ProtocolError(f"request lacks {key!r}")
    if config["_program"] != half.program:
        raise ProtocolError(f"request for program {config['_program']!r} sent to {half.program!r}")
    session, seq = bytes(config["_session"]), int(config["_seq"])
    work = state.copy(writable=True)
    if work.config.get(_STATE_SESSION) != session:
        if seq != 0:
            raise ProtocolError(f"request {seq} of a session this client never opened")
        work = Record(config={_STATE_SESSION: session, _STATE_SEQ: -1})
    if seq <= int(work.config[_STATE_SEQ]):
        raise ProtocolError(
            f"replayed or reordered request: sequence {seq}, last accepted {work.config[_STATE_SEQ]}")
    work.config[_STATE_SEQ] = seq
    body = Record({k: v for k, v in request.arrays.items()},
                  {k: v for k, v in config.items() if k not in RESERVED})
    start = time.perf_counter()
    reply = half.handle(str(config["_step"]), body, work, node)
    seconds = time.perf_counter() - start
    return reply.check(), work.check(), seconds


# ----------------------------------------------------------------------------- in process


class InProcessTransport(Transport):
    """Client halves called in this process with Flower's discipline (see module docstring).

    ``nodes``: one :class:`NodeContext` per client, indexed by ``partition``;
    ``dropouts``: ``{client: step}`` or ``{client: (step, k)}`` -- from the first (or the
    k-th, 0-based) exchange of ``step`` on, the client never answers (it is reported in
    ``dropped``, as a timed-out Flower reply is);
    ``intercept``: test hook ``(client, stamped request) -> request`` applied to every
    request before delivery (a tampering server);
    ``order``: the order the clients of an exchange run in, ``order(clients) -> clients``
    (default: ascending); no result may depend on it (tests permute it).

    :meth:`client_states` and :meth:`adopt` save and restore the clients' state Records
    (a simulator's resume: the server half stores them in its ``state_dict``).

    Nodes whose config holds no identity get one of a throwaway federation made for this
    transport (:func:`securefl.crypto.identity.new_federation`, one roster over all the
    nodes' partitions): the simulator needs no key files, and its protocols run exactly
    the authenticated code of a deployment.  Nodes without a privacy policy get the
    simulator's (:meth:`securefl.runtime.policy.PrivacyPolicy.simulator`; a method's
    simulator sets its own, :meth:`~securefl.runtime.policy.PrivacyPolicy.for_method`), and
    every node an in-memory ledger of its DP releases unless its config names one.
    """

    parallel: ClassVar[bool] = False

    def __init__(self, half: ClientHalf, nodes: Sequence[NodeContext], *,
                 dropouts: Mapping[int, str | tuple[str, int]] | None = None,
                 session: bytes | None = None,
                 intercept: Callable[[int, Record], Record] | None = None,
                 order: Callable[[Sequence[int]], Sequence[int]] | None = None) -> None:
        super().__init__(program=half.program, session=session)
        self.half = half
        self.nodes = {int(n.partition): n for n in nodes}
        if len(self.nodes) != len(nodes):
            raise InputError("nodes", [n.partition for n in nodes], "partitions must be distinct")
        self.nodes = _simulated(_with_credentials(self.nodes))
        self.dropouts = {int(c): (v, 0) if isinstance(v, str) else (str(v[0]), int(v[1]))
                         for c, v in (dropouts or {}).items()}
        unknown = set(self.dropouts) - set(self.nodes)
        if unknown:
            raise InputError("dropouts", dropouts, f"clients {sorted(unknown)} unknown")
        self.intercept = intercept
        self.order = order
        self.states: dict[int, Record] = {c: Record() for c in self.nodes}
        self._gone: set[int] = set()
        self._occurrences: dict[str, int] = {}

    @property
    def clients(self) -> tuple[int, ...]:
        return tuple(sorted(self.nodes))

    def _exchange(self, step: str, requests: dict[int, Record], timeout: float | None) -> Exchange:
        result = Exchange(step, {})
        dropped = []
        occurrence = self._occurrences.get(step, 0)
        self._occurrences[step] = occurrence + 1
        clients = sorted(requests) if self.order is None else [int(c) for c in self.order(sorted(requests))]
        if sorted(clients) != sorted(requests):
            raise InputError("order", clients, f"must be a permutation of {sorted(requests)}")
        for client in clients:
            if self.dropouts.get(client) == (step, occurrence):
                self._gone.add(client)
            request = requests[client].frozen()
            if self.intercept is not None:
                request = self.intercept(client, request)
            self.stats.add(client, request.nbytes, 0)
            if client in self._gone:
                dropped.append(client)
                continue
            try:
                reply, state, seconds = serve(self.half, request, self.states[client],
                                              self.nodes[client])
            except Exception as exc:  # noqa: BLE001 -- reported like a Flower error reply
                result.failed[client] = f"{type(exc).__name__}: {exc}"
                continue
            self.states[client] = state.frozen(take_over=True)
            reply = reply.frozen(take_over=True)
            self.stats.add(client, 0, reply.nbytes)
            result.replies[client] = reply
            result.client_seconds[client] = seconds
        result.dropped = tuple(sorted(dropped))
        return result

    def client_states(self) -> dict[int, Record]:
        """Each client's persistent state, as a simulator checkpoints it: its state Record
        without the transport's session stamps (``_session``, ``_seq``) and without
        session-scoped entries (:data:`SESSION_SCOPED`: link keys and counters, protocol
        parties mid-protocol -- secrets of this session that a resumed run, a new session,
        sets up again).  Clients with nothing left are left out."""
        saved = {}
        for client, state in self.states.items():
            def kept(name: str) -> bool:
                return name not in (_STATE_SESSION, _STATE_SEQ) and not name.startswith(SESSION_SCOPED)

            record = Record({k: v for k, v in state.arrays.items() if kept(k)},
                            {k: v for k, v in state.config.items() if kept(k)})
            if record.arrays or record.config:
                saved[client] = record.copy()
        return saved

    def adopt(self, states: Mapping[int, Record]) -> None:
        """Give each client back a state saved by :meth:`client_states` (of any session),
        within this transport's session: the client accepts this transport's requests from
        its next sequence number on and keeps the saved entries."""
        unknown = set(states) - set(self.nodes)
        if unknown:
            raise InputError("states", sorted(unknown), f"not among the clients {self.clients}")
        for client, saved in states.items():
            state = saved.copy()
            state.config[_STATE_SESSION] = self.session
            state.config[_STATE_SEQ] = self._seq.get(int(client), 0) - 1
            self.states[int(client)] = state.check()


def _with_credentials(nodes: dict[int, NodeContext]) -> dict[int, NodeContext]:
    """``nodes``, those without an identity given one of a throwaway federation."""
    bare = [p for p, n in nodes.items()
            if CREDENTIALS not in n.node_config and IDENTITY_FILE not in n.node_config]
    if not bare:
        return nodes
    if len(bare) != len(nodes):
        raise InputError("nodes", sorted(bare), "hold no identity while others do: give every node "
                         "one of the same roster, or none (a throwaway federation)")
    identities = {p: Identity.generate(p) for p in nodes}
    roster = Roster(f"in-process-{secrets.token_hex(4)}", {p: i.public for p, i in identities.items()})
    return {p: replace(n, node_config={**n.node_config, CREDENTIALS: Credentials(identities[p], roster)})
            for p, n in nodes.items()}


def _simulated(nodes: dict[int, NodeContext]) -> dict[int, NodeContext]:
    """``nodes``, each given the simulator's policy (:meth:`PrivacyPolicy.simulator`) and an
    in-memory ledger where its config has none."""
    out = {}
    for p, n in nodes.items():
        config = dict(n.node_config)
        if POLICY not in config and not any(str(k).startswith("policy-") for k in config):
            config[POLICY] = PrivacyPolicy.simulator()
        config.setdefault(LEDGER, PrivacyLedger())
        out[p] = replace(n, node_config=config)
    return out


# ----------------------------------------------------------------------------- server side


class ServerHalf(ABC):
    """What the server runs: drives a program over a transport and returns its results."""

    program: ClassVar[str]

    @abstractmethod
    def run(self, transport: Transport, run_config: Mapping[str, Any]) -> dict[str, Any]:
        """Run the whole program (all rounds) and return a JSON-able result."""
