"""Secure aggregation (:mod:`securefl.crypto.secagg`) as exchanges of a transport.

The protocol rounds of Bonawitz et al. map onto message rounds: round 0 (advertise keys)
rides on the step that produces the client's input -- its reply carries the advertise
message beside whatever else the step returns -- and the others are one exchange each
(:data:`STEPS`): the server's ``keys`` / ``ciphertexts`` / ``survivors`` / ``endorsements``
messages go down, the clients' ``shares`` / ``masked`` / ``consistency`` / ``unmask``
messages come up.  ``survivors`` -> ``consistency`` -> ``endorsements`` is the consistency
round (:mod:`securefl.crypto.secagg`): each client endorses the survivor list U3 it was
shown and reveals shares only once t clients of U3 endorsed that same list.
The share ciphertexts a client sends to another are relayed inside the server's
``ciphertexts`` messages, batched per destination by :class:`SecAggServer` itself and
sealed with AES-GCM under the two clients' X25519 key, so the server cannot read or
alter them (a changed byte makes the receiving client raise ProtocolError).

**Several sums in the same exchanges.**  A step may start several independent secure
sums, each under its own ``name`` (FedAvg+MT sums students and teachers separately,
FedSemi one sum per layer group): each is its own :class:`SecAggConfig` (own session,
own keys and masks), its messages travel in the slots ``secagg/<name>/in`` (down) and
``secagg/<name>/out`` (up) of the same requests and replies, and its party state lives
under ``secagg/<name>/party/`` in the client's state Record.  The later rounds of all of them
share the four exchanges.

Client side: :func:`start` (round 0 of sum ``name``) and :func:`answer` (rounds 1-3 of
every sum whose message the request carries) rebuild each :class:`SecAggClient` (a typed
dataclass) from the state Record (:mod:`securefl.runtime.state_codec`), run it, and store it
back; after the last round its state is removed.  Server side: :func:`steps` are the
rounds 1-3 as engine steps (:class:`~securefl.runtime.engine.Step`) over the typed server state
:class:`Aggregation` (one :class:`SumSession` per sum), and :func:`aggregate_steps` is
:func:`open_aggregation`, :func:`securefl.runtime.engine.drive` of those steps, and
:func:`finish` (the unmasking).  This is the only loop of the protocol: the in-process
simulator (:func:`securefl.runtime.secure_sum`, ``securefl bench secagg``; backend
``secagg`` of :mod:`securefl.runtime.sum_backends`) drives the same steps on the in-process
transport.

**Bytes.**  Each sum's ``bytes_sent[client]`` counts the messages the client sent in it as
:func:`securefl.crypto.channel.frame_size` frames -- exactly what the in-process
:func:`securefl.runtime.secure_sum` reports for the same protocol run (it runs these very
steps), so a method's protocol-byte accounting does not depend on the transport.  What the transport
itself moves (Record payloads) is metered separately in ``transport.stats``.

Dropouts: a client that does not answer an exchange (timeout) or raises (its error is
kept in ``failed``) is treated as having dropped at that protocol round, with the
protocol's own semantics (:data:`securefl.crypto.secagg.ROUNDS`): dropped before its
masked input -> not in the sum; dropped at ``unmask`` -> in the sum.  A reply that lacks
one sum's message counts as a dropout of that sum only.  Fewer than ``threshold`` clients
left at any round -> :class:`~securefl.errors.DropoutError`.

**Authentication.**  Every sum is the authenticated protocol: the request names the
members (their roster ids in index order) beside the session; each client tags its two
keys for every other member with the pair keys of its roster identity (the node's own
:class:`~securefl.crypto.identity.Credentials`, never the server's) bound to (federation,
session, cohort digest); the server relays to each client the XOR of the peers' tags to it
(one 16-byte aggregate), and every client checks it before it encrypts a share
(:meth:`securefl.crypto.secagg.SecAggClient._verify_keys`).  A request without members
is refused.

Who learns what: exactly as :mod:`securefl.crypto.secagg` (the server: each sum over its
survivors and who dropped; a client: nothing about another's input).
"""

from __future__ import annotations

import re
import secrets
import struct
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TypeVar

import numpy as np

from securefl.crypto.channel import SERVER, frame_size
from securefl.crypto.identity import Credentials
from securefl.crypto.idsets import pack_ids, unpack_ids
from securefl.crypto.secagg import RandomBytes, SecAggClient, SecAggConfig, SecAggServer, party_rng
from securefl.errors import InputError, ProtocolError
from securefl.runtime.engine import Step, drive
from securefl.runtime.policy import PrivacyPolicy
from securefl.runtime.records import Exchange, Record, has_message, put_message, take_message
from securefl.runtime.state_codec import load, save
from securefl.runtime.transport import Transport

T = TypeVar("T")

STEPS = ("secagg/keys", "secagg/ciphertexts", "secagg/survivors", "secagg/endorsements")
"""Exchanges after the one that carries the advertise message."""

ROUND_OF_STEP = {"secagg/keys": "share", "secagg/ciphertexts": "masked_input",
                 "secagg/survivors": "unmask", "secagg/endorsements": "unmask"}
"""The protocol round (:data:`securefl.crypto.secagg.ROUNDS`) whose messages each step collects."""

DEFAULT = "sum"
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*\Z")
_DOWN = re.compile(r"secagg/([a-z0-9][a-z0-9_-]*)/in/count\Z")


def slot_down(name: str = DEFAULT) -> str:
    """Request slot of sum ``name``'s server message."""
    return f"secagg/{name}/in"


def slot_up(name: str = DEFAULT) -> str:
    """Reply slot of sum ``name``'s client message."""
    return f"secagg/{name}/out"


def _party(name: str) -> str:
    return f"secagg/{name}/party/"


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise InputError("name", name, "must be lower-case letters, digits, '-' or '_'")
    return name


# ----------------------------------------------------------------------------- client


def start(state: Record, reply: Record, *, index: int, config: SecAggConfig,
          encoded: np.ndarray, credentials: Credentials | None, policy: PrivacyPolicy,
          name: str = DEFAULT, seed: bytes | None = None) -> None:
    """Round 0 of sum ``name`` at client ``index``: a new party for ``encoded`` that tags
    its keys with ``credentials`` (the node's own); its advertise message goes in
    ``reply``.  The cohort size and threshold the request set must satisfy the node's
    ``policy`` (:meth:`~securefl.runtime.policy.PrivacyPolicy.check_cohort`), else ProtocolError
    and nothing is sent.  With ``credentials``, ``config.members`` and the consistency round
    must be set: a deployment's sums are authenticated.  ``credentials=None`` runs the
    unauthenticated semi-honest variant, which only the in-process simulator asks for (its
    own client code, never a request, decides; :mod:`securefl.runtime.sum_backends`).
    ``seed``: the simulator's reproducible randomness (:func:`party_rng`), else the OS
    CSPRNG."""
    _check_name(name)
    policy.check_cohort(config.clients, config.threshold)
    if credentials is not None and (not config.members or not config.consistency):
        raise ProtocolError(f"sum {name!r}: a secure sum without its members or without the "
                            "consistency round is refused")
    clear(state, name)
    party = SecAggClient(index, config, np.asarray(encoded), rng=_rng(seed, index, 0),
                         credentials=credentials)
    put_message(reply, slot_up(name), party.advertise())
    save(party, state, _party(name), skip=("rng", "credentials"))


def answer(request: Record, state: Record, reply: Record, *, credentials: Credentials | None,
           seed: bytes | None = None) -> None:
    """Rounds 1-3: each server message in ``request`` -> that sum's answer in ``reply``
    (``credentials``: the node's own, to check the peers' tagged keys; ``None`` and
    ``seed`` as :func:`start`)."""
    names = sorted(m.group(1) for key in request.config if (m := _DOWN.match(key)))
    if not names:
        raise ProtocolError("secure-sum step without a secure-sum message")
    for name in names:
        prefix = _party(name)
        if f"{prefix}stage#" not in state.config:
            raise ProtocolError(f"secure-sum step of {name!r} without that secure sum in progress")
        stage = int(state.config[f"{prefix}stage"])
        index = int(state.config[f"{prefix}index"])
        party = load(SecAggClient, state, prefix, rng=_rng(seed, index, stage),
                     credentials=credentials)
        put_message(reply, slot_up(name), party.handle(take_message(request, slot_down(name))))
        clear(state, name)
        if party.stage < len(STEPS) + 1:
            save(party, state, prefix, skip=("rng", "credentials"))


def _rng(seed: bytes | None, index: int, stage: int) -> RandomBytes:
    """Party ``index``'s randomness at ``stage``: the OS CSPRNG, or (``seed``) an AES-CTR
    stream of its own per stage, so that a party rebuilt from its state never draws the
    same bytes twice."""
    if seed is None:
        return secrets.token_bytes
    return party_rng(seed + struct.pack(">i", stage), index)


def clear(state: Record, name: str | None = None) -> None:
    """Forget the party state of sum ``name`` (``None``: of every secure sum)."""
    prefix = "secagg/" if name is None else _party(name)
    for key in [k for k in state.arrays if k.startswith(prefix)]:
        del state.arrays[key]
    for key in [k for k in state.config if k.startswith(prefix)]:
        del state.config[key]


# ----------------------------------------------------------------------------- server


@dataclass
class ServerClock:
    """The server's time in the secure-sum handlers: CPU seconds of this thread (``thread``,
    what a method's cost accounting reports), wall seconds and process CPU seconds (mask
    removal's worker threads included; what the benchmark reports)."""

    thread: float = 0.0
    wall: float = 0.0
    cpu: float = 0.0

    def run(self, work: Callable[..., T], *args: object) -> T:
        """``work(*args)``, its time added to the clock."""
        begin = (time.thread_time(), time.perf_counter(), time.process_time())
        try:
            return work(*args)
        finally:
            self.thread += time.thread_time() - begin[0]
            self.wall += time.perf_counter() - begin[1]
            self.cpu += time.process_time() - begin[2]


@dataclass
class SumSession:
    """Server state of one named sum: its :class:`SecAggServer`, the client playing each
    index, who answered the last step, who dropped at which round, and the frame bytes
    each party sent and received in it (:func:`securefl.crypto.channel.frame_size`)."""

    server: SecAggServer
    clients: tuple[int, ...]
    index_of: dict[int, int]
    sent: dict[int, int]
    received: dict[int, int]
    answered: set[int] = field(default_factory=set)
    addressed: set[int] = field(default_factory=set)
    server_sent: int = 0
    dropped: dict[str, tuple[int, ...]] = field(default_factory=dict)


@dataclass
class Aggregation:
    """Server state of one :func:`aggregate_steps` call, threaded through :func:`steps` by
    :func:`securefl.runtime.engine.drive`."""

    sums: dict[str, SumSession]
    failed: dict[int, str]
    clock: ServerClock = field(default_factory=ServerClock)
    client_seconds: dict[int, float] = field(default_factory=dict)
    exchanges: list[Exchange] = field(default_factory=list)


@dataclass
class SumResult:
    """One secure sum: the ring ``total`` over ``survivors`` (client ids), who dropped at
    which protocol round, the frame bytes each client sent in it, the frame bytes each party
    received (``SERVER`` included) and the bytes the server sent."""

    total: np.ndarray
    survivors: tuple[int, ...]
    dropped: dict[str, tuple[int, ...]]
    bytes_sent: dict[int, int]
    bytes_received: dict[int, int] = field(default_factory=dict)
    server_bytes_sent: int = 0


def merged_dropped(sums: Mapping[str, SumResult]) -> dict[str, tuple[int, ...]]:
    """Who dropped at which round over all ``sums`` (a client dropping from any)."""
    merged: dict[str, set[int]] = {}
    for result in sums.values():
        for round_name, clients in result.dropped.items():
            merged.setdefault(round_name, set()).update(clients)
    return {k: tuple(sorted(v)) for k, v in merged.items()}


@dataclass
class SecureSumOutcome:
    """Every sum of one :func:`aggregate_steps` call and what the steps cost
    (``server_seconds``: CPU of the server's thread; ``clock``: all three clocks)."""

    sums: dict[str, SumResult]
    failed: dict[int, str]
    server_seconds: float
    client_seconds: dict[int, float] = field(default_factory=dict)
    exchanges: list[Exchange] = field(default_factory=list)
    clock: ServerClock = field(default_factory=ServerClock)

    def _only(self) -> SumResult:
        if len(self.sums) != 1:
            raise InputError("sums", sorted(self.sums), "name the sum: there are several")
        return next(iter(self.sums.values()))

    @property
    def total(self) -> np.ndarray:
        """The total of the only sum."""
        return self._only().total

    @property
    def survivors(self) -> tuple[int, ...]:
        """The survivors of the only sum."""
        return self._only().survivors

    @property
    def dropped(self) -> dict[str, tuple[int, ...]]:
        """Who dropped at which round, over all sums (a client dropping from any)."""
        return merged_dropped(self.sums)


def new_config(members: Sequence[int], *, threshold: int, dim: int, modulus_bits: int = 64
               ) -> SecAggConfig:
    """Public parameters of one secure sum among ``members`` (roster ids in index order):
    a fresh 16-byte session, the members, the consistency round."""
    return SecAggConfig(secrets.token_bytes(16), len(members), threshold, dim, modulus_bits,
                        members=tuple(int(c) for c in members), consistency=True)


def packed_members(members: Sequence[int]) -> np.ndarray:
    """A sum's member list as its request carries it (:func:`~securefl.crypto.idsets.pack_ids`:
    a bitmap over the roster ids when ascending)."""
    return pack_ids(members)


def request_members(request: Record, key: str, count: int) -> tuple[int, ...]:
    """The member list a request carries under array ``key``: ``count`` distinct roster ids;
    missing or another count: ProtocolError (the client refuses before sending anything)."""
    if key not in request.arrays:
        raise ProtocolError(f"a real-mode secure sum needs its member list {key!r}")
    ids = unpack_ids(np.asarray(request.arrays[key]), key)
    if len(ids) != count:
        raise ProtocolError(f"{key}: {len(ids)} members listed, the request says {count}")
    return tuple(ids)


def open_aggregation(configs: SecAggConfig | Mapping[str, SecAggConfig],
                     members: Sequence[int] | Mapping[str, Sequence[int]],
                     first: Exchange) -> Aggregation:
    """The server state after ``first`` (the exchange whose replies hold every sum's round
    0): one :class:`SumSession` per sum, the advertise messages absorbed.  ``configs`` and
    ``members`` as :func:`aggregate_steps`."""
    if isinstance(configs, SecAggConfig):
        configs = {DEFAULT: configs}
    sums = {}
    for name, config in configs.items():
        group = tuple(int(c) for c in (members[name] if isinstance(members, Mapping) else members))
        if config.members and config.members != group:
            raise InputError("members", group, f"differ from sum {name!r}'s config.members")
        # the request that started the sum carried its member list (packed_members): counted
        listed = packed_members(config.members).nbytes if config.members else 0
        sums[_check_name(name)] = SumSession(
            SecAggServer(config), group,
            {c: i for i, c in enumerate(group)}, {c: 0 for c in group},
            {**{c: listed for c in group}, SERVER: 0}, server_sent=listed * len(group))
    state = Aggregation(sums, dict(first.failed))
    _take(state, first)
    for session in sums.values():
        session.dropped["advertise"] = tuple(c for c in session.clients
                                             if c not in session.answered)
    return state


def steps(state: Aggregation) -> Iterator[Step[Aggregation]]:
    """Rounds 1-3 of every sum as :class:`~securefl.runtime.engine.Step`\\ s: ``keys``,
    ``ciphertexts``, ``survivors`` and, where a sum runs the consistency round,
    ``endorsements``."""
    consistency = any(s.server.config.consistency for s in state.sums.values())
    for step in STEPS if consistency else STEPS[:-1]:
        yield Step(step, _requests, partial(_collect, step=step))


def _requests(state: Aggregation) -> dict[int, Record]:
    """Close the round of every sum; its messages go into their clients' requests."""
    requests: dict[int, Record] = {}
    for name, session in state.sums.items():
        outgoing = state.clock.run(session.server.close_round)
        session.addressed = set()
        for message in outgoing:
            client = session.clients[message.receiver]
            put_message(requests.setdefault(client, Record()), slot_down(name), message)
            size = frame_size(message)
            session.received[client] += size
            session.server_sent += size
            session.addressed.add(client)
    return requests


def _collect(state: Aggregation, exchange: Exchange, *, step: str) -> None:
    """Absorb the replies of ``step``; an addressed client that did not answer a sum
    dropped from it at the step's protocol round (:data:`ROUND_OF_STEP`)."""
    state.exchanges.append(exchange)
    state.failed.update(exchange.failed)
    _take(state, exchange)
    round_name = ROUND_OF_STEP[step]  # two steps of the unmask round: union
    for session in state.sums.values():
        late = set(session.dropped.get(round_name, ())) | (session.addressed - session.answered)
        session.dropped[round_name] = tuple(sorted(late))


def _take(state: Aggregation, exchange: Exchange) -> None:
    """Hand every sum's message in ``exchange``'s replies to that sum's server."""
    for session in state.sums.values():
        session.answered = set()
    for client, reply in sorted(exchange.replies.items()):
        state.client_seconds[client] = (state.client_seconds.get(client, 0.0)
                                        + exchange.client_seconds.get(client, 0.0))
        for name, session in state.sums.items():
            if not has_message(reply, slot_up(name)):
                continue
            message = take_message(reply, slot_up(name))
            if message.sender != session.index_of.get(client):
                state.failed[client] = (f"ProtocolError: client {client} sent as index "
                                        f"{message.sender}")
                continue
            state.clock.run(session.server.handle, message)
            size = frame_size(message)
            session.sent[client] += size
            session.received[SERVER] += size
            session.answered.add(client)


def finish(state: Aggregation) -> SecureSumOutcome:
    """Unmask every sum (the last server step) and report it."""
    for session in state.sums.values():
        state.clock.run(session.server.close_round)
    sums = {name: SumResult(s.server.total, tuple(s.clients[i] for i in s.server.survivors),
                            s.dropped, dict(s.sent), dict(s.received), s.server_sent)
            for name, s in state.sums.items()}
    return SecureSumOutcome(sums, state.failed, state.clock.thread, state.client_seconds,
                            state.exchanges, state.clock)


def aggregate_steps(transport: Transport, configs: SecAggConfig | Mapping[str, SecAggConfig],
                    members: Sequence[int] | Mapping[str, Sequence[int]], first: Exchange, *,
                    timeout: float | None = None) -> SecureSumOutcome:
    """Run rounds 1-3 of every sum after ``first`` (whose replies hold their round 0) and
    unmask: :func:`open_aggregation`, :func:`steps` driven by
    :func:`securefl.runtime.engine.drive`, :func:`finish`.  ``configs``: one config (the sum
    :data:`DEFAULT`) or ``{name: config}``; ``members[i]`` is the client playing
    secure-aggregation index ``i`` in every sum, or ``members`` is ``{name: clients}`` where
    the sums have members of their own (FedSemi's per-layer sums among a layer's uploaders;
    :mod:`securefl.fl.group_sums`)."""
    state = open_aggregation(configs, members, first)
    return finish(drive(transport, steps(state), state, timeout=timeout))
