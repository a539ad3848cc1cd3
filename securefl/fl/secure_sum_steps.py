"""Secure aggregation (:mod:`securefl.crypto.secagg`) as exchanges of a transport.

The four protocol rounds of Bonawitz et al. map onto message rounds: round 0 (advertise
keys) rides on the step that produces the client's input -- its reply carries the
advertise message beside whatever else the step returns -- and rounds 1-3 are one
exchange each (:data:`STEPS`): the server's ``keys`` / ``ciphertexts`` / ``survivors``
messages go down, the clients' ``shares`` / ``masked`` / ``unmask`` messages come up.
The share ciphertexts a client sends to another are relayed inside the server's
``ciphertexts`` messages, batched per destination by :class:`SecAggServer` itself and
sealed with AES-GCM under the two clients' X25519 key, so the server cannot read or
alter them (a changed byte makes the receiving client raise ProtocolError).

Client side: :func:`start` (round 0) and :func:`answer` (rounds 1-3) rebuild the
:class:`SecAggClient` from the state Record (:mod:`securefl.fl.state_codec`), run it, and
store it back; after the last round its state is removed.  Server side:
:func:`aggregate_steps` runs rounds 1-3 and the unmasking.

Dropouts: a client that does not answer an exchange (timeout) or raises (its error is
kept in ``failed``) is treated as having dropped at that protocol round, with the
protocol's own semantics (:data:`securefl.crypto.secagg.ROUNDS`): dropped before its
masked input -> not in the sum; dropped at ``unmask`` -> in the sum.  Fewer than
``threshold`` clients left at any round -> :class:`~securefl.errors.DropoutError`.

Who learns what: exactly as :mod:`securefl.crypto.secagg` (the server: the sum over the
survivors and who dropped; a client: nothing about another's input).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from securefl.crypto.secagg import SecAggClient, SecAggConfig, SecAggServer
from securefl.errors import ProtocolError
from securefl.fl.state_codec import load, save
from securefl.fl.transport import Exchange, Record, Transport, put_message, take_message

STEPS = ("secagg/keys", "secagg/ciphertexts", "secagg/survivors")
"""Exchanges after the one that carries the advertise message."""

SLOT_DOWN = "secagg/in"
SLOT_UP = "secagg/out"
_PARTY = "secagg/party/"


# ----------------------------------------------------------------------------- client


def start(state: Record, reply: Record, *, index: int, config: SecAggConfig,
          encoded: np.ndarray) -> None:
    """Round 0 at client ``index``: new party for ``encoded``; its advertise goes in ``reply``."""
    clear(state)
    party = SecAggClient(index, config, np.asarray(encoded), rng=secrets.token_bytes)
    put_message(reply, SLOT_UP, party.advertise())
    save(party, state, _PARTY, skip=("rng",))


def answer(request: Record, state: Record, reply: Record) -> None:
    """Rounds 1-3: the server's message in ``request`` -> this party's answer in ``reply``."""
    if f"{_PARTY}stage#" not in state.config:
        raise ProtocolError("secure-sum step without a secure sum in progress")
    party = load(SecAggClient, state, _PARTY, rng=secrets.token_bytes)
    put_message(reply, SLOT_UP, party.handle(take_message(request, SLOT_DOWN)))
    clear(state)
    if party.stage < len(STEPS) + 1:
        save(party, state, _PARTY, skip=("rng",))


def clear(state: Record) -> None:
    """Forget any secure-sum party state."""
    for name in [k for k in state.arrays if k.startswith(_PARTY)]:
        del state.arrays[name]
    for name in [k for k in state.config if k.startswith(_PARTY)]:
        del state.config[name]


# ----------------------------------------------------------------------------- server


@dataclass
class SecureSumOutcome:
    """The ring total over ``survivors`` (client ids) and what each step cost."""

    total: np.ndarray
    survivors: tuple[int, ...]
    dropped: dict[str, tuple[int, ...]]
    failed: dict[int, str]
    server_seconds: float
    client_seconds: dict[int, float] = field(default_factory=dict)
    exchanges: list[Exchange] = field(default_factory=list)


def new_config(members: Sequence[int], *, threshold: int, dim: int, modulus_bits: int = 64
               ) -> SecAggConfig:
    """Public parameters of one secure sum among ``members`` (fresh 16-byte session)."""
    return SecAggConfig(secrets.token_bytes(16), len(members), threshold, dim, modulus_bits)


def aggregate_steps(transport: Transport, config: SecAggConfig, members: Sequence[int],
                    first: Exchange, *, timeout: float | None = None) -> SecureSumOutcome:
    """Run rounds 1-3 after ``first`` (whose replies hold round 0) and unmask.

    ``members[i]`` is the client playing secure-aggregation index ``i``.
    """
    members = list(members)
    client_of = dict(enumerate(members))
    index_of = {c: i for i, c in client_of.items()}
    server = SecAggServer(config)
    seconds = 0.0
    client_seconds: dict[int, float] = {}
    failed = dict(first.failed)
    dropped = {"advertise": tuple(c for c in members if c not in first.replies)}

    def take(exchange: Exchange) -> None:
        nonlocal seconds
        for client, reply in sorted(exchange.replies.items()):
            message = take_message(reply, SLOT_UP)
            if message.sender != index_of[client]:
                failed[client] = f"ProtocolError: client {client} sent as index {message.sender}"
                continue
            begin = time.thread_time()
            server.handle(message)
            seconds += time.thread_time() - begin
            client_seconds[client] = client_seconds.get(client, 0.0) + exchange.client_seconds.get(client, 0.0)

    take(first)
    exchanges = []
    for step, round_name in zip(STEPS, ("share", "masked_input", "unmask")):
        begin = time.thread_time()
        outgoing = server.close_round()
        seconds += time.thread_time() - begin
        requests = {}
        for message in outgoing:
            request = Record()
            put_message(request, SLOT_DOWN, message)
            requests[client_of[message.receiver]] = request
        exchange = transport.exchange(step, requests, timeout=timeout)
        exchanges.append(exchange)
        failed.update(exchange.failed)
        dropped[round_name] = tuple(sorted(set(requests) - set(exchange.replies)))
        take(exchange)
    begin = time.thread_time()
    server.close_round()
    seconds += time.thread_time() - begin
    survivors = tuple(client_of[i] for i in server.survivors)
    return SecureSumOutcome(server.total, survivors, dropped, failed, seconds, client_seconds,
                            exchanges)
