"""Secure aggregation (:mod:`securefl.crypto.secagg`) as exchanges of a transport.

The protocol rounds of Bonawitz et al. map onto message rounds: round 0 (advertise keys)
rides on the step that produces the client's input -- its reply carries the advertise
message beside whatever else the step returns -- and the others are one exchange each
(:data:`STEPS`): the server's ``keys`` / ``ciphertexts`` / ``survivors`` / ``signatures``
messages go down, the clients' ``shares`` / ``masked`` / ``consistency`` / ``unmask``
messages come up.  ``survivors`` -> ``consistency`` -> ``signatures`` is the consistency
round (:mod:`securefl.crypto.secagg`): each client signs the survivor list U3 it was
shown and reveals shares only once t clients of U3 signed that same list.
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
every sum whose message the request carries) rebuild each :class:`SecAggClient` from the
state Record (:mod:`securefl.fl.state_codec`), run it, and store it back; after the last
round its state is removed.  Server side: :func:`aggregate_steps` runs rounds 1-3 and the
unmasking of every sum.

**Bytes.**  Each sum's ``bytes_sent[client]`` counts the messages the client sent in it as
:func:`securefl.crypto.channel.frame_size` frames -- exactly what the in-process
:func:`securefl.crypto.secure_sum` meters on its network for the same protocol run, so a
method's protocol-byte accounting does not depend on the transport.  What the transport
itself moves (Record payloads) is metered separately in ``transport.stats``.

Dropouts: a client that does not answer an exchange (timeout) or raises (its error is
kept in ``failed``) is treated as having dropped at that protocol round, with the
protocol's own semantics (:data:`securefl.crypto.secagg.ROUNDS`): dropped before its
masked input -> not in the sum; dropped at ``unmask`` -> in the sum.  A reply that lacks
one sum's message counts as a dropout of that sum only.  Fewer than ``threshold`` clients
left at any round -> :class:`~securefl.errors.DropoutError`.

**Authentication.**  Every sum is the authenticated protocol: the request names the
cohort digest (:func:`securefl.crypto.identity.cohort_digest` of the members' client ids
in index order) beside the session; each client signs its two keys with its roster
identity (the node's own :class:`~securefl.crypto.identity.Credentials`, never the
server's) bound to (federation, session, cohort); the server relays the signatures and the
cohort list with the keys, and every client verifies all of them before it encrypts a
share (:meth:`securefl.crypto.secagg.SecAggClient._verify_keys`).  A request without a
cohort digest is refused.

Who learns what: exactly as :mod:`securefl.crypto.secagg` (the server: each sum over its
survivors and who dropped; a client: nothing about another's input).
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from securefl.crypto.channel import frame_size
from securefl.crypto.identity import Credentials, cohort_digest
from securefl.crypto.secagg import SecAggClient, SecAggConfig, SecAggServer
from securefl.errors import InputError, ProtocolError
from securefl.fl.policy import PrivacyPolicy
from securefl.fl.state_codec import load, save
from securefl.fl.transport import Exchange, Record, Transport, has_message, put_message, take_message

STEPS = ("secagg/keys", "secagg/ciphertexts", "secagg/survivors", "secagg/signatures")
"""Exchanges after the one that carries the advertise message."""

ROUND_OF_STEP = {"secagg/keys": "share", "secagg/ciphertexts": "masked_input",
                 "secagg/survivors": "unmask", "secagg/signatures": "unmask"}
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
          encoded: np.ndarray, credentials: Credentials, policy: PrivacyPolicy,
          name: str = DEFAULT) -> None:
    """Round 0 of sum ``name`` at client ``index``: a new party for ``encoded`` that signs
    its keys with ``credentials`` (the node's own); its advertise message goes in
    ``reply``.  ``config.cohort`` must be set: a deployment's sums are authenticated;
    the cohort size and threshold the request set must satisfy the node's ``policy``
    (:meth:`~securefl.fl.policy.PrivacyPolicy.check_cohort`), else ProtocolError and
    nothing is sent."""
    _check_name(name)
    policy.check_cohort(config.clients, config.threshold)
    if len(config.cohort) != 32 or not config.consistency:
        raise ProtocolError(f"sum {name!r}: a secure sum without a cohort digest or without the "
                            "consistency round is refused")
    clear(state, name)
    party = SecAggClient(index, config, np.asarray(encoded), rng=secrets.token_bytes,
                         credentials=credentials)
    put_message(reply, slot_up(name), party.advertise())
    save(party, state, _party(name), skip=("rng", "credentials"))


def answer(request: Record, state: Record, reply: Record, *, credentials: Credentials) -> None:
    """Rounds 1-3: each server message in ``request`` -> that sum's answer in ``reply``
    (``credentials``: the node's own, to verify the peers' signed keys)."""
    names = sorted(m.group(1) for key in request.config if (m := _DOWN.match(key)))
    if not names:
        raise ProtocolError("secure-sum step without a secure-sum message")
    for name in names:
        prefix = _party(name)
        if f"{prefix}stage#" not in state.config:
            raise ProtocolError(f"secure-sum step of {name!r} without that secure sum in progress")
        party = load(SecAggClient, state, prefix, rng=secrets.token_bytes, credentials=credentials)
        put_message(reply, slot_up(name), party.handle(take_message(request, slot_down(name))))
        clear(state, name)
        if party.stage < len(STEPS) + 1:
            save(party, state, prefix, skip=("rng", "credentials"))


def clear(state: Record, name: str | None = None) -> None:
    """Forget the party state of sum ``name`` (``None``: of every secure sum)."""
    prefix = "secagg/" if name is None else _party(name)
    for key in [k for k in state.arrays if k.startswith(prefix)]:
        del state.arrays[key]
    for key in [k for k in state.config if k.startswith(prefix)]:
        del state.config[key]


# ----------------------------------------------------------------------------- server


@dataclass
class SumResult:
    """One secure sum: the ring ``total`` over ``survivors`` (client ids), who dropped at
    which protocol round, and the frame bytes each client sent in it."""

    total: np.ndarray
    survivors: tuple[int, ...]
    dropped: dict[str, tuple[int, ...]]
    bytes_sent: dict[int, int]


@dataclass
class SecureSumOutcome:
    """Every sum of one :func:`aggregate_steps` call and what the steps cost."""

    sums: dict[str, SumResult]
    failed: dict[int, str]
    server_seconds: float
    client_seconds: dict[int, float] = field(default_factory=dict)
    exchanges: list[Exchange] = field(default_factory=list)

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
        merged: dict[str, set[int]] = {}
        for result in self.sums.values():
            for round_name, clients in result.dropped.items():
                merged.setdefault(round_name, set()).update(clients)
        return {k: tuple(sorted(v)) for k, v in merged.items()}


def new_config(members: Sequence[int], *, threshold: int, dim: int, modulus_bits: int = 64
               ) -> SecAggConfig:
    """Public parameters of one secure sum among ``members`` (roster ids in index order):
    a fresh 16-byte session, the members' cohort digest, the consistency round."""
    return SecAggConfig(secrets.token_bytes(16), len(members), threshold, dim, modulus_bits,
                        cohort=cohort_digest([int(c) for c in members]), consistency=True)


def aggregate_steps(transport: Transport, configs: SecAggConfig | Mapping[str, SecAggConfig],
                    members: Sequence[int] | Mapping[str, Sequence[int]], first: Exchange, *,
                    timeout: float | None = None) -> SecureSumOutcome:
    """Run rounds 1-3 of every sum after ``first`` (whose replies hold their round 0) and
    unmask.  ``configs``: one config (the sum :data:`DEFAULT`) or ``{name: config}``;
    ``members[i]`` is the client playing secure-aggregation index ``i`` in every sum, or
    ``members`` is ``{name: clients}`` where the sums have members of their own (FedSemi's
    per-layer sums among a layer's uploaders; :mod:`securefl.fl.group_sums`).
    """
    if isinstance(configs, SecAggConfig):
        configs = {DEFAULT: configs}
    groups = ({name: [int(c) for c in members[name]] for name in configs}
              if isinstance(members, Mapping) else {name: [int(c) for c in members] for name in configs})
    client_of = {name: dict(enumerate(group)) for name, group in groups.items()}
    index_of = {name: {c: i for i, c in mapping.items()} for name, mapping in client_of.items()}
    servers = {_check_name(name): SecAggServer(config, tuple(groups[name]) if config.cohort else ())
               for name, config in configs.items()}
    seconds = 0.0
    client_seconds: dict[int, float] = {}
    failed = dict(first.failed)
    sent = {name: {c: 0 for c in groups[name]} for name in servers}
    answered = {name: set() for name in servers}
    dropped = {name: {} for name in servers}

    def take(exchange: Exchange) -> None:
        nonlocal seconds
        for name in servers:
            answered[name] = set()
        for client, reply in sorted(exchange.replies.items()):
            client_seconds[client] = client_seconds.get(client, 0.0) + \
                exchange.client_seconds.get(client, 0.0)
            for name, server in servers.items():
                if not has_message(reply, slot_up(name)):
                    continue
                message = take_message(reply, slot_up(name))
                if message.sender != index_of[name].get(client):
                    failed[client] = f"ProtocolError: client {client} sent as index {message.sender}"
                    continue
                begin = time.thread_time()
                server.handle(message)
                seconds += time.thread_time() - begin
                sent[name][client] += frame_size(message)
                answered[name].add(client)

    take(first)
    for name in servers:
        dropped[name]["advertise"] = tuple(c for c in groups[name] if c not in answered[name])
    exchanges = []
    for step in STEPS:
        requests: dict[int, Record] = {}
        for name, server in servers.items():
            begin = time.thread_time()
            outgoing = server.close_round()
            seconds += time.thread_time() - begin
            for message in outgoing:
                put_message(requests.setdefault(client_of[name][message.receiver], Record()),
                            slot_down(name), message)
        exchange = transport.exchange(step, requests, timeout=timeout)
        exchanges.append(exchange)
        failed.update(exchange.failed)
        take(exchange)
        for name in servers:
            addressed = {c for c, r in requests.items() if has_message(r, slot_down(name))}
            round_name = ROUND_OF_STEP[step]  # two steps of the unmask round: union
            late = set(dropped[name].get(round_name, ())) | (addressed - answered[name])
            dropped[name][round_name] = tuple(sorted(late))
    for server in servers.values():
        begin = time.thread_time()
        server.close_round()
        seconds += time.thread_time() - begin
    sums = {name: SumResult(server.total, tuple(client_of[name][i] for i in server.survivors),
                            dropped[name], dict(sent[name]))
            for name, server in servers.items()}
    return SecureSumOutcome(sums, failed, seconds, client_seconds, exchanges)
