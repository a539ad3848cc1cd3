"""SHADE for one pair of parties in bounded hops (relayed transports).

A pair's session (:mod:`securefl.crypto.shade`: I/O-free steps per IKNP chunk and frame)
runs over a transport whose every hop is a message round (``docs/method-halves.md``, "SHADE
over links"), so it is cut into hops, each a batch of messages from one party of the
pair to the other, the sender ``s`` (holds ``x``, ``(n_a, L)``) and the receiver ``r``
(holds ``y``, ``(n_b, L)``):

1. :func:`receiver_base` (r -> s): the IKNP hello (:func:`securefl.crypto.ot.receiver_hello`):
   the setup r holds for this pair, if any, with the session number it takes now, and a
   fresh base-OT point ``A``.
2. :func:`sender_base` (s -> r): ``iknp/resume`` if s holds the offered setup and the
   session is new to it, else the base-OT points of a fresh setup (the choices are s's new
   IKNP ``delta``).
3. :func:`receiver_extend` (r -> s): r resumes or finishes the base OTs and sends the IKNP
   matrices ``U`` of the chunks stream exchange 0 corrects.
4. the stream, exchanges ``x = 0 .. G`` (:func:`schedule` cuts the pair's correction
   frames, in order, into ``G`` groups of at most ``chunk_bytes``, at least one frame each:
   a single frame, at most :data:`~securefl.crypto.shade.FRAME_BYTES`, is never split).
   In exchange ``x`` :func:`sender_stream` (s -> r) takes the ``U`` of the chunks group
   ``x`` starts and sends group ``x``'s frames (its share after the last group), while
   :func:`receiver_stream` (r -> s) absorbs group ``x - 1``'s frames and sends the ``U``
   of the chunks group ``x + 1`` starts (its share at ``x = G``).  A ``u`` needs the ``U``
   of its chunk, which crosses one exchange earlier, and the receiver absorbs one exchange
   after the ``u`` was sent: ``G + 1`` exchanges, the least this dependency allows with
   one batch per direction per exchange.  The ``U`` a message carries are 16 bytes per OT
against the ``2 x lanes >= 16`` of a correction, so they weigh at most the frames of the
chunks they start, plus the ``U`` of one chunk (``16 x`` :data:`~securefl.crypto.shade.CHUNK_OTS`
bytes, 1 MiB) that the next group only begins: a message carries at most ``chunk_bytes`` (or
one frame) of corrections, or about that much ``U`` and 1 MiB more.  When the pair fits in ``chunk_bytes``, ``G = 1``: the four hops
   and the frames of the unbounded protocol.

The correction frames are those of :meth:`~securefl.crypto.shade.SenderSession.frame`
whatever ``G``; only the link batches' headers grow with ``G``.  Two kinds of state: the *setup*
(:class:`~securefl.crypto.ot.SenderSetup`, :class:`~securefl.crypto.ot.ReceiverSetup`), which
outlives the round -- the caller keeps it with the party (e.g. in the client's state
Record, never in a message) and passes it to every hop; hops 1 to 3 advance or replace it
in place or return the new one -- and the pair's ``dict`` of numpy arrays between hops (r:
the hello between hops 1 and 3; both: the :class:`Stream` -- setup id, session number,
cursor, the pinned ``chunk_bytes``, running sums and, at s only, the random-OT seeds of
chunks whose frames are still due and its correlation ``Delta`` (``L x lanes`` uint16, built
at its first exchange: rebuilt from ``x`` in every exchange it cost as much as the
exchange's own AES and corrections once ``n_a`` reached ~1,500)).  r keeps no seeds: its
``t = PRG(k^0)`` is a function of the setup, session and chunk alone, not of its choices,
so when a chunk's frames arrive it recomputes exactly the seeds it would have kept
(:meth:`ReceiverSession.seeds <securefl.crypto.shade.ReceiverSession.seeds>`, in each
exchange that carries frames of the chunk) instead of keeping 16 bytes per OT of every
chunk in flight in its state; the
cost is one more ``PRG(k^0)`` fill per chunk (and per extra exchange it spans).  s cannot do
the same: its ``q_j = t_j XOR r_j s`` needs the chunk's ``U``, which crosses only once.

Who learns what: exactly as :mod:`securefl.crypto.shade` (each share alone is uniform;
the relay sees base-OT points, ``U`` and ``u``, all pseudorandom to it); the caller
authenticates the batches end to end (:mod:`securefl.runtime.links`).  Any malformed,
replayed or out-of-order message raises :class:`~securefl.errors.ProtocolError`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from securefl.crypto.channel import Message
from securefl.crypto.ot import (
    SETUP_ID_BYTES,
    Hello,
    ReceiverSetup,
    SenderSetup,
    receiver_complete,
    receiver_hello,
    sender_answer,
)
from securefl.crypto.rand import RandomSource
from securefl.crypto.shade import ReceiverSession, SenderSession, ShadeReceiver, chunks, framing
from securefl.errors import InputError, ProtocolError

__all__ = ["DEFAULT_CHUNK_BYTES", "HOPS", "Buffers", "Stream", "check_chunk_bytes", "chunks", "done", "framing",
           "receiver_base", "receiver_extend", "receiver_stream", "schedule", "sender_base",
           "sender_stream"]

DEFAULT_CHUNK_BYTES = 64 << 20
"""Default bound on the SHADE bytes one message carries per peer (``chunk_bytes``)."""

HOPS = 4
"""Hops of one pair (the shares to the server ride on the last two)."""

_HELLO = "hello/"


def receiver_base(state: dict[str, np.ndarray], *, setup: ReceiverSetup | None, context: bytes,
                  sender: int, receiver: int, rng: RandomSource) -> Message:
    """Hop 1 at the receiver: the hello; ``setup`` (if any) gives up its next session number."""
    message, hello = receiver_hello(setup, context=context, rng=rng, sender=sender, receiver=receiver)
    state.update({_HELLO + key: value for key, value in hello.to_arrays().items()})
    return message


def sender_base(state: dict[str, np.ndarray], message: Message, *, setup: SenderSetup | None,
                context: bytes, rng: RandomSource) -> tuple[Message, SenderSetup]:
    """Hop 2 at the sender: the answer to the hello, and the setup to keep (``setup``
    advanced to the accepted session, or a fresh one)."""
    answer, kept, session = sender_answer(setup, message, context=context, rng=rng)
    _remember(state, kept.setup_id, session)
    return answer, kept


def check_chunk_bytes(chunk_bytes: int) -> int:
    """``chunk_bytes`` as an int, or :class:`~securefl.errors.InputError` naming it."""
    if isinstance(chunk_bytes, bool) or not isinstance(chunk_bytes, (int, np.integer)) or chunk_bytes < 1:
        raise InputError("chunk_bytes", chunk_bytes, "must be a positive int (bytes per peer per message)")
    return int(chunk_bytes)


@lru_cache(maxsize=1024)
def schedule(senders: int, receivers: int, length: int, chunk_bytes: int) -> tuple[tuple[tuple[int, int], ...], ...]:
    """The correction frames ``(chunk, frame)`` of each exchange of a pair, in stream order:
    frames packed greedily while their bytes (``rows x 2 x lanes``) stay within
    ``chunk_bytes``, at least one frame per exchange (a frame is at most
    :data:`~securefl.crypto.shade.FRAME_BYTES`); one exchange when the pair fits.  A pure
    function of public sizes, computed once per process and shape (every hop reads it; the
    last 1,024 shapes are kept)."""
    lanes = 8 * -(-senders // 8)
    frame_rows = framing(senders)[1]
    exchanges: list[list[tuple[int, int]]] = [[]]
    size = 0
    for chunk, start, stop in chunks(receivers, length):
        count = (stop - start) * length
        for number, first in enumerate(range(0, count, frame_rows)):
            nbytes = min(frame_rows, count - first) * 2 * lanes
            if exchanges[-1] and size + nbytes > chunk_bytes:
                exchanges.append([])
                size = 0
            exchanges[-1].append((chunk, number))
            size += nbytes
    return tuple(tuple(exchange) for exchange in exchanges)


def _fresh(exchange: Sequence[tuple[int, int]]) -> list[int]:
    """The chunks whose first frame an exchange carries (their ``U`` travels one exchange earlier)."""
    return [chunk for chunk, number in exchange if number == 0]


@dataclass
class Stream:
    """One side's state of a pair between exchanges (kept in the client's state as arrays):
    the setup id and session number it runs on, ``cursor`` (the next stream exchange),
    ``chunk_bytes`` (pinned at the first exchange), ``sums`` (the party's running
    :class:`~securefl.crypto.shade.ShadeSender` / :class:`~securefl.crypto.shade.ShadeReceiver`
    sums), the random-OT ``seeds`` of chunks whose frames are still to come -- the
    sender's only: the receiver's are recomputed from the setup (module docstring) -- and the
    sender's ``correlation`` (:attr:`~securefl.crypto.shade.ShadeSender.correlation`)."""

    setup_id: bytes
    session: int
    cursor: int = 0
    chunk_bytes: int = 0
    sums: np.ndarray | None = None
    seeds: dict[int, tuple[np.ndarray, ...]] = field(default_factory=dict)
    correlation: np.ndarray | None = None

    def save(self, state: dict[str, np.ndarray]) -> None:
        """Replace ``state`` by this stream."""
        state.clear()
        _remember(state, self.setup_id, self.session)
        state["cursor"] = np.array([self.cursor, self.chunk_bytes], dtype=np.int64)
        if self.sums is not None:
            state["sums"] = self.sums
        if self.correlation is not None:
            state["correlation"] = self.correlation
        for chunk, seeds in self.seeds.items():
            for side, array in enumerate(seeds):
                state[f"seeds/{chunk}/{side}"] = array

    @classmethod
    def load(cls, state: dict[str, np.ndarray], setup: SenderSetup | ReceiverSetup | None,
             problem: str) -> Stream:
        """The stream in ``state``, checked against the setup the caller passes."""
        session = _session(state, setup, problem)
        cursor, chunk_bytes = (int(v) for v in np.asarray(state.get("cursor", (0, 0))).reshape(-1)[:2])
        seeds: dict[int, list[np.ndarray]] = {}
        for key in sorted(k for k in state if k.startswith("seeds/")):
            _, chunk, _side = key.split("/")
            seeds.setdefault(int(chunk), []).append(np.asarray(state[key]))
        return cls(setup.setup_id, session, cursor, chunk_bytes, state.get("sums"),
                   {chunk: tuple(v) for chunk, v in seeds.items()}, state.get("correlation"))

    def pin(self, chunk_bytes: int) -> None:
        """Fix ``chunk_bytes`` at the first exchange; a later change raises ProtocolError."""
        chunk_bytes = int(chunk_bytes)
        if chunk_bytes < 1 or (self.chunk_bytes and self.chunk_bytes != chunk_bytes):
            raise ProtocolError(f"SHADE: chunk_bytes {chunk_bytes} where the pair runs on {self.chunk_bytes}")
        self.chunk_bytes = chunk_bytes


def done(state: dict[str, np.ndarray]) -> bool:
    """Whether this side of the pair has its share (nothing more to send or receive)."""
    return "done" in state


def receiver_extend(state: dict[str, np.ndarray], message: Message, codes: np.ndarray, *,
                    setup: ReceiverSetup | None, context: bytes, sender: int, receiver: int,
                    senders: int, chunk_bytes: int) -> tuple[list[Message], ReceiverSetup]:
    """Hop 3 at the receiver: resume ``setup`` or finish the fresh base OTs; the IKNP matrices
    ``U`` of the chunks the first stream exchange corrects, and the setup to keep."""
    pending = {key[len(_HELLO):]: value for key, value in state.items() if key.startswith(_HELLO)}
    if not pending:
        raise ProtocolError("SHADE: base-OT answer before the hello was sent")
    kept, session = receiver_complete(Hello.from_arrays(pending), setup, message, context=context)
    stream = Stream(kept.setup_id, session)
    stream.pin(chunk_bytes)
    run = ReceiverSession(codes=codes, extension=kept.extension(session), sender=sender, receiver=receiver)
    stream.sums = ShadeReceiver(codes=codes, senders=senders).sums
    plan = schedule(senders, codes.shape[0], codes.shape[1], stream.chunk_bytes)
    out = _matrices(run, _fresh(plan[0]))
    stream.save(state)
    return out, kept


def _matrices(run: ReceiverSession, fresh: list[int]) -> list[Message]:
    """The ``U`` of each chunk in ``fresh`` (nothing of the chunk is kept: its chosen seeds
    are recomputed from the setup when its corrections arrive)."""
    worker = run.worker()
    return [run.matrix(index, worker) for index in fresh]


Buffers = Callable[[str, np.dtype, list[tuple[int, int]]], Sequence[np.ndarray]]
"""Where a hop's outgoing frames go: ``(tag, dtype, shapes)`` -> one array per frame (e.g.
views of the transport's batch, so the frames are made in place)."""


def sender_stream(state: dict[str, np.ndarray], incoming: Callable[[], list[Message]],
                  codes: np.ndarray, *, setup: SenderSetup, receivers: int, sender: int,
                  receiver: int, chunk_bytes: int,
                  buffers: Buffers | None = None) -> tuple[list[Message], np.ndarray | None]:
    """Stream exchange ``x`` at the sender (``x`` its cursor): takes the ``U`` of the chunks
    exchange ``x`` starts (``incoming()``, called only when there are any), sends the
    correction frames of exchange ``x`` (written into ``buffers(...)``'s arrays, if given)
    and, after the last, its ``(n_a, n_b)`` share."""
    if done(state):
        return [], None
    stream = Stream.load(state, setup, "IKNP matrices before the base OTs")
    stream.pin(chunk_bytes)
    run = SenderSession(codes=codes, receivers=receivers, extension=setup.extension(stream.session),
                        sender=sender, receiver=receiver, correlation=stream.correlation)
    plan = schedule(codes.shape[0], receivers, codes.shape[1], stream.chunk_bytes)
    if stream.sums is not None:
        run.party.sums = stream.sums
    exchange, worker = plan[stream.cursor], run.worker()
    fresh = _fresh(exchange)
    if fresh:
        messages = incoming()
        if len(messages) != len(fresh):
            raise ProtocolError(f"SHADE: {len(messages)} IKNP matrices, expected {len(fresh)}")
        for index, message in zip(fresh, messages):
            stream.seeds[index] = run.seeds(index, message, worker)
    shapes = [run.frame_shape(index, number) for index, number in exchange]
    targets = list(buffers("shade/u", np.dtype(np.uint16), shapes)) if buffers is not None \
        else [None] * len(exchange)
    out = []
    for (index, number), target in zip(exchange, targets, strict=True):
        out.append(run.frame(index, number, stream.seeds[index], worker, out=target))
        if number == run.frames(index) - 1:
            del stream.seeds[index]
    stream.cursor += 1
    stream.sums, stream.correlation = run.party.sums, run.party.correlation
    if stream.cursor == len(plan):
        state.clear()
        state["done"] = np.ones(1, np.uint8)
        return out, run.share()
    stream.save(state)
    return out, None


def receiver_stream(state: dict[str, np.ndarray], incoming: Callable[[], list[Message]],
                    codes: np.ndarray, *, setup: ReceiverSetup, senders: int, sender: int,
                    receiver: int) -> tuple[list[Message], np.ndarray | None]:
    """Stream exchange ``x`` at the receiver (``x`` its cursor): absorbs the frames of
    exchange ``x - 1`` (``incoming()``, from ``x = 1``), sends the ``U`` of the chunks
    exchange ``x + 1`` starts, and after the last exchange's frames its share."""
    if done(state):
        return [], None
    stream = Stream.load(state, setup, "corrections before the IKNP matrices")
    run = ReceiverSession(codes=codes, extension=setup.extension(stream.session), sender=sender,
                          receiver=receiver)
    party = ShadeReceiver(codes=codes, senders=senders)
    party.sums = stream.sums
    plan = schedule(senders, codes.shape[0], codes.shape[1], stream.chunk_bytes)
    worker = run.worker()
    if stream.cursor >= 1:
        frames = incoming()
        exchange = plan[stream.cursor - 1]
        if len(frames) != len(exchange):
            raise ProtocolError(f"SHADE: {len(frames)} correction frames, expected {len(exchange)}")
        seeds: tuple[int, np.ndarray] | None = None  # the chunk being absorbed, its seeds
        for (index, number), message in zip(exchange, frames):
            if seeds is None or seeds[0] != index:
                seeds = (index, run.seeds(index, worker))
            run.absorb_frame(index, number, seeds[1], message, party, worker)
    out = _matrices(run, _fresh(plan[stream.cursor + 1])) if stream.cursor + 1 < len(plan) else []
    stream.cursor += 1
    stream.sums = party.sums
    if stream.cursor > len(plan):
        state.clear()
        state["done"] = np.ones(1, np.uint8)
        return out, party.share()
    stream.save(state)
    return out, None


def _remember(state: dict[str, np.ndarray], setup_id: bytes, session: int) -> None:
    state["setup"] = np.frombuffer(setup_id, np.uint8).copy()
    state["session"] = np.array([session], dtype=np.uint64)


def _session(state: dict[str, np.ndarray], setup: SenderSetup | ReceiverSetup | None, problem: str) -> int:
    """The round's session number, checked against the setup the caller passes."""
    if "session" not in state or "setup" not in state:
        raise ProtocolError(f"SHADE: {problem}")
    if setup is None or np.asarray(state["setup"]).shape != (SETUP_ID_BYTES,) \
            or bytes(np.asarray(state["setup"], np.uint8)) != setup.setup_id:
        raise ProtocolError("SHADE: the setup passed is not the one this session was opened on")
    return int(np.asarray(state["session"]).reshape(-1)[0])
