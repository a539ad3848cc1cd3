"""SecureHamming at the server: each backend's relay and the reconstruction of H, written once.

The server's side of a Hamming session (:mod:`securefl.protocols.hamming.client` is the
clients'), as :class:`~securefl.runtime.engine.Step`\\ s over a :class:`HammingState`, which
CrossClientLP's round state extends (:mod:`securefl.protocols.crossclient.server_round`) and
the standalone all-pairs matrix uses as it is (:mod:`securefl.protocols.hamming.matrix`):
:data:`HAMMING` names each backend's relay, whose steps leave every pair's two shares in
``state.shares``; :func:`assemble` adds them and places the own blocks (the server learns
exactly H: each share alone is uniform).

* :class:`ShadeRelay` (:mod:`securefl.crypto.shade_hops`): the sealed batches of every pair
  relayed from each hop's replies into the next hop's requests.  ``cclp/shade/1`` (the
  base-OT answers) and ``cclp/shade/2`` (the first ``U``) once, then the bounded stream:
  ``cclp/shade/3`` for stream exchanges ``0 .. G - 1`` and ``cclp/shade/4`` for exchange
  ``G``, where ``G`` is the most exchanges of any live pair
  (:func:`~securefl.crypto.shade_hops.schedule` at the session's ``chunk_bytes``).  In
  exchange ``x`` the sender sends the correction frames of its exchange ``x`` (they need the
  ``U`` that came at ``x - 1``) while the receiver absorbs those of ``x - 1`` and sends the
  ``U`` that exchange ``x + 1`` starts: ``G + 1`` stream exchanges, as few as the dependency
  ``U -> u -> absorb`` allows.  Sender shares come with its last frames, receiver shares one
  exchange later.  Once forwarded, the sealed batches leave the replies the state keeps
  (``exchanges``), so the server holds one exchange's batches at a time.
* :class:`LweRelay` (LWE or ring-LWE, :mod:`securefl.crypto.lwe_hops`): keys relayed (hop 1),
  each ``C`` block to its evaluators (hop 2), each hint to its encryptors (hop 3), every
  forward with its recipient's own tag; the answers ``D`` client to client in sealed
  batches; shares at hops 2 and 3.

The relay cannot read or alter the sealed batches (:mod:`securefl.runtime.links`).  Bytes are
nominal (:func:`securefl.crypto.channel.frame_size` of each protocol message), per party:
what it sends the server and the server forwards to it, and the client-to-client messages
as the clients report them; ``relayed`` is what the server forwards.  A party that does
not answer a hop leaves the session (``live``): its pairs are abandoned, the others finish.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

import numpy as np

from securefl.crypto import lwe_hops, shade_hops
from securefl.crypto.channel import SERVER, Message, frame_size
from securefl.crypto.lwe import check_session
from securefl.errors import ProtocolError
from securefl.protocols.hamming.client import (
    ALIVE,
    CHUNK_BYTES,
    FRESH_SETUPS,
    LINK_RECEIVED,
    LINK_SENT,
    LWE,
    PAIR_SECONDS,
    PHASE_SECONDS,
    SHADE,
    SIZES,
    SLOT_LWE_IN,
    SLOT_LWE_KEY,
    SLOT_LWE_OUT,
    put_messages,
    take_messages,
)
from securefl.runtime import links
from securefl.runtime.engine import Step
from securefl.runtime.secure_sum_steps import ServerClock
from securefl.runtime.transport import Exchange, Record, put_message, take_message

_SHARE = re.compile(r"cclp/share/(\d+)-(\d+)/count\Z")


@dataclass
class LweSession:
    """The relay's state of one LWE session: its parties, and the forwards (origin, message)
    each party gets in the next request (``inbox``) and the one after (``hints``)."""

    parties: list[int]
    inbox: dict[int, list[tuple[int, Message]]] = field(default_factory=dict)
    hints: dict[int, list[tuple[int, Message]]] = field(default_factory=dict)


@dataclass
class HammingState:
    """The server's state of a Hamming session, threaded through the relay's steps.

    Parties are indices into ``members`` (the client ids in party order); ``live`` the
    parties still in the session (those that answered the last step), ``last`` that step's
    exchange; ``sent`` / ``received``: nominal bytes per party (module docstring), ``relayed``
    the bytes the server forwarded; ``clock``: the server's own CPU time.  A subclass gives
    ``L`` (the code length) and ``chunk_bytes`` (SHADE's bound per message and peer).  What
    the clients report: ``pair_seconds`` (SHADE, ``"a-b"`` -> the two parties' CPU seconds
    on the pair's hops after its setup, ``setup_seconds`` those of the setup hops),
    ``phase_seconds`` (LWE: ``fixed``, ``per_pair``), ``fresh_setups`` (pairs that ran base OTs).
    """

    members: list[int]
    live: list[int] = field(init=False)
    sizes: np.ndarray = field(init=False)
    sent: dict[int, int] = field(init=False)
    received: dict[int, int] = field(init=False)
    relayed: int = field(default=0, init=False)
    collected: int = field(default=0, init=False)
    kinds: dict[str, int] = field(default_factory=dict, init=False)
    last: Exchange | None = field(default=None, init=False)
    failed: dict[int, str] = field(default_factory=dict, init=False)
    dropped: dict[str, list[int]] = field(default_factory=dict, init=False)
    exchanges: list[Exchange] = field(default_factory=list, init=False)
    clock: ServerClock = field(default_factory=ServerClock, init=False)
    own: dict[int, Message] = field(default_factory=dict, init=False)
    shares: dict[tuple[int, int], dict[int, Message]] = field(default_factory=dict, init=False)
    lwe: LweSession | None = field(default=None, init=False)
    setup_seconds: float = field(default=0.0, init=False)
    pair_seconds: dict[str, float] = field(default_factory=dict, init=False)
    phase_seconds: dict[str, float] = field(default_factory=dict, init=False)
    fresh_setups: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self.live = list(range(len(self.members)))
        self.sizes = np.zeros(len(self.members), dtype=np.int64)
        self.sent = dict.fromkeys(self.live, 0)
        self.received = dict.fromkeys(self.live, 0)

    def addressed(self, requests: Mapping[int, Record]) -> dict[int, Record]:
        """``requests`` by party, addressed to the live parties' client ids."""
        return {self.members[j]: requests[j] for j in self.live}

    def absorb(self, exchange: Exchange) -> None:
        """Record ``exchange``; the live parties that did not answer leave the protocol."""
        self.exchanges.append(exchange)
        self.failed.update(exchange.failed)
        left = [j for j in self.live if self.members[j] not in exchange.replies]
        if left:
            self.dropped.setdefault(exchange.step, []).extend(self.members[j] for j in left)
        self.live = [j for j in self.live if self.members[j] in exchange.replies]
        self.last = exchange

    def reply(self, j: int) -> Record:
        """Party ``j``'s reply to the last step."""
        return self.last.replies[self.members[j]]

    def message_from(self, j: int, slot: str) -> Message:
        """The protocol message party ``j`` put in ``slot`` of its last reply (metered)."""
        message = take_message(self.reply(j), slot)
        if message.sender != j or message.receiver != SERVER:
            raise ProtocolError(f"client {self.members[j]} sent {slot} as party {message.sender}")
        size = frame_size(message)
        self.sent[j] += size
        self.collected += size
        self.count(message.tag, size)
        return message

    def count(self, tag: str, size: int, *, relayed: bool = False) -> None:
        """Add ``size`` bytes to the message kind of ``tag`` (``<family>/<kind>/...``;
        ``relay/<kind>`` for the server's forwards)."""
        kind = tag.split("/")[1] if "/" in tag else tag
        kind = f"relay/{kind}" if relayed else kind
        self.kinds[kind] = self.kinds.get(kind, 0) + size

    def to_client(self, record: Record, slot: str, message: Message) -> Record:
        """``record`` with ``message`` in ``slot`` (metered for its receiver)."""
        put_message(record, slot, message)
        size = frame_size(message)
        self.received[message.receiver] += size
        self.relayed += size
        self.count(message.tag, size, relayed=True)
        return record

    def layout(self) -> Record:
        """The live parties and every party's block size (the Hamming hops' requests)."""
        return Record({ALIVE: np.array(self.live, dtype=np.int64), SIZES: self.sizes})


S = HammingState


def timed_step(name: str, requests: Callable[[S], dict[int, Record]],
               collect: Callable[[S, Exchange], None]) -> Step[S]:
    """A step whose two halves run on the server's clock."""
    return Step(name, lambda state: state.clock.run(requests, state),
                lambda state, exchange: state.clock.run(collect, state, exchange))


def collect_shares(state: HammingState, exchange: Exchange) -> None:
    """Absorb a hop: the links' metered bytes, the clients' timings and every finished pair's share."""
    state.absorb(exchange)
    for j in state.live:
        answer = state.reply(j)
        state.sent[j] += int(answer.config.get(LINK_SENT, 0))
        state.received[j] += int(answer.config.get(LINK_RECEIVED, 0))
        state.fresh_setups += int(answer.config.get(FRESH_SETUPS, 0))
        for key, value in answer.config.items():
            match = _SHARE.match(key)
            if match:
                pair = (int(match.group(1)), int(match.group(2)))
                state.shares.setdefault(pair, {})[j] = state.message_from(j, key[: -len("/count")])
            elif key.startswith(PAIR_SECONDS):
                if exchange.step in SHADE[:2]:
                    state.setup_seconds += float(value)
                else:
                    pair_name = key[len(PAIR_SECONDS):]
                    state.pair_seconds[pair_name] = state.pair_seconds.get(pair_name, 0.0) + float(value)
            elif key.startswith(PHASE_SECONDS):
                phase = key[len(PHASE_SECONDS):]
                state.phase_seconds[phase] = state.phase_seconds.get(phase, 0.0) + float(value)


def collect_own(state: HammingState) -> None:
    """The own blocks of the last step's replies (the step that opens the session) and the
    bytes and timings its hop 0 reported."""
    state.own = {j: state.message_from(j, "cclp/own") for j in state.live}
    for j in state.live:
        answer = state.reply(j)
        state.sent[j] += int(answer.config.get(LINK_SENT, 0))
        state.setup_seconds += sum(float(v) for k, v in answer.config.items() if k.startswith(PAIR_SECONDS))


class HammingRelay(Protocol):
    """The server's side of one SecureHamming backend after the step that opens the session:
    its hops, whose replies leave the pair shares (tags ``<prefix>/share/<a>-<b>``) in
    ``state.shares``."""

    prefix: str

    def steps(self, state: HammingState) -> Iterator[Step[HammingState]]: ...


class ShadeRelay:
    """SHADE's relay (module docstring)."""

    prefix: ClassVar[str] = "shade"

    def steps(self, state: HammingState) -> Iterator[Step[HammingState]]:
        for hop in SHADE[:2]:
            yield timed_step(hop, _shade_hop, collect_shares)
        last = _stream_exchanges(state)
        for exchange in range(last + 1):
            yield timed_step(SHADE[2] if exchange < last else SHADE[3], _shade_hop, collect_shares)


def _stream_exchanges(state: HammingState) -> int:
    """``G``: the most stream exchanges of a live pair (sizes, ``L`` and ``chunk_bytes`` are public)."""
    return max((len(shade_hops.schedule(int(state.sizes[a]), int(state.sizes[b]), int(state.L),
                                        state.chunk_bytes))
                for a in state.live for b in state.live if a != b), default=1)


def _shade_hop(state: HammingState) -> dict[int, Record]:
    requests = {j: state.layout() for j in state.live}
    for request in requests.values():
        request.config[CHUNK_BYTES] = state.chunk_bytes
    replies = {j: state.reply(j) for j in state.live}
    forward_links(replies, requests)
    for answer in replies.values():  # forwarded: the kept exchange lets go of the sealed batches
        answer.arrays = {k: v for k, v in answer.arrays.items() if not k.startswith(links.TO)}
    return state.addressed(requests)


def _relay(state: HammingState, origin: int, message: Message,
           target: dict[int, list[tuple[int, Message]]]) -> None:
    """Every forward of ``message`` (:func:`securefl.crypto.lwe_hops.relay`) into ``target``."""
    for forward in lwe_hops.relay(state.lwe.parties, message):
        target.setdefault(forward.receiver, []).append((origin, forward))


@dataclass(frozen=True)
class LweRelay:
    """LWE's or ring-LWE's relay (module docstring)."""

    ring: bool
    prefix: ClassVar[str] = "lwe"

    def steps(self, state: HammingState) -> Iterator[Step[HammingState]]:
        state.clock.run(self._open, state)
        for step in LWE:
            yield timed_step(step, _lwe_hop, _lwe_collect)

    def _open(self, state: HammingState) -> None:
        check_session([int(state.sizes[j]) for j in state.live], int(state.L), ring=self.ring)
        state.lwe = LweSession(list(state.live))
        for j in state.live:
            _relay(state, j, state.message_from(j, SLOT_LWE_KEY), state.lwe.inbox)


def _lwe_hop(state: HammingState) -> dict[int, Record]:
    requests = {}
    for j in state.live:
        delivered = [m for origin, m in state.lwe.inbox.get(j, []) if origin in state.live]
        requests[j] = state.layout()
        put_messages(requests[j], SLOT_LWE_IN, delivered)
        for message in delivered:
            size = frame_size(message)
            state.received[j] += size
            state.relayed += size
            state.count(message.tag, size, relayed=True)
    forward_links({j: state.reply(j) for j in state.live}, requests)
    return state.addressed(requests)


def _lwe_collect(state: HammingState, exchange: Exchange) -> None:
    collect_shares(state, exchange)
    for j in state.live:  # the answers D are the only client-to-client messages
        state.count("lwe/D", int(state.reply(j).config.get(LINK_SENT, 0)))
    session = state.lwe
    broadcasts = exchange.step == LWE[0]
    session.inbox = session.hints if exchange.step == LWE[1] else {}
    if not broadcasts:
        return
    for j in state.live:
        for message in take_messages(state.reply(j), SLOT_LWE_OUT):
            if message.sender != j or message.receiver != SERVER:
                raise ProtocolError(f"client {state.members[j]} sent an LWE broadcast as party "
                                    f"{message.sender}")
            size = frame_size(message)
            state.sent[j] += size
            state.collected += size
            state.count(message.tag, size)
            _relay(state, j, message, session.inbox if message.tag.startswith("lwe/C/") else session.hints)


HAMMING: dict[str, HammingRelay] = {"shade": ShadeRelay(), "lwe": LweRelay(ring=False),
                                    "rlwe": LweRelay(ring=True)}
"""The server's side of each SecureHamming backend a client may resolve to."""


def forward_links(replies: dict[int, Record], requests: dict[int, Record]) -> None:
    """Move every sealed batch ``relay/to/<k>`` of party j's reply into party k's request
    as ``relay/from/<j>`` (:mod:`securefl.runtime.links`; parties by index)."""
    for j, answer in replies.items():
        for name, blob in answer.arrays.items():
            if name.startswith(links.TO):
                peer = int(name[len(links.TO):])
                if peer in requests:
                    requests[peer].arrays[f"{links.FROM}{j}"] = blob


def assemble(graph: list[int], sizes: np.ndarray, own: dict[int, Message],
             shares: dict[tuple[int, int], dict[int, Message]], length: int, *,
             prefix: str = "shade") -> np.ndarray:
    """H over ``graph``: the sum mod 2^16 of the two shares of every pair's block, the own
    blocks on the diagonal; a share or own block missing or malformed, or a distance above
    ``length``, raises :class:`ProtocolError`."""
    offsets = np.concatenate([[0], np.cumsum([sizes[j] for j in graph])]).astype(np.int64)
    where = {j: i for i, j in enumerate(graph)}
    matrix = np.empty((offsets[-1], offsets[-1]), dtype=np.int32)

    def block(message: Message | None, tag: str, shape: tuple[int, int]) -> np.ndarray:
        if message is None or message.tag != tag or len(message.arrays) != 1 \
                or message.arrays[0].shape != shape or message.arrays[0].dtype != np.uint16:
            raise ProtocolError(f"{tag}: expected one {shape} uint16 array")
        return message.arrays[0]

    for a in graph:
        for b in graph:
            if b <= a:
                continue
            tag, shape = f"{prefix}/share/{a}-{b}", (int(sizes[a]), int(sizes[b]))
            pair = shares.get((a, b), {})
            if a not in pair or b not in pair:
                raise ProtocolError(f"{prefix.upper()} pair {a}-{b}: a share is missing")
            total = (block(pair[a], tag, shape) + block(pair[b], tag, shape)).astype(np.int32)
            ia, ib = where[a], where[b]
            matrix[offsets[ia]: offsets[ia + 1], offsets[ib]: offsets[ib + 1]] = total
            matrix[offsets[ib]: offsets[ib + 1], offsets[ia]: offsets[ia + 1]] = total.T
    for j in graph:
        i = where[j]
        matrix[offsets[i]: offsets[i + 1], offsets[i]: offsets[i + 1]] = block(
            own.get(j), f"{prefix}/own/{j}", (int(sizes[j]), int(sizes[j])))
    if matrix.size and matrix.max() > length:
        raise ProtocolError(f"reconstructed distance {matrix.max()} exceeds L={length}: shares corrupted")
    return matrix
