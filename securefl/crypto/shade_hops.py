"""SHADE for one pair of parties in a fixed number of hops (relayed transports).

:func:`securefl.crypto.shade.shade_pair` drives a pair's session chunk by chunk.  Over a
transport whose every hop is a message round (``docs/method-halves.md``, "SHADE over
links") the same protocol is cut into four hops, each a batch of messages from one party
of the pair to the other, the sender ``s`` (holds ``x``, ``(n_a, L)``) and the receiver
``r`` (holds ``y``, ``(n_b, L)``):

1. :func:`receiver_base` (r -> s): the IKNP hello (:func:`securefl.crypto.ot.receiver_hello`):
   the setup r holds for this pair, if any, with the session number it takes now, and a
   fresh base-OT point ``A``.
2. :func:`sender_base` (s -> r): ``iknp/resume`` if s holds the offered setup and the
   session is new to it, else the base-OT points of a fresh setup (the choices are s's new
   IKNP ``delta``).
3. :func:`receiver_extend` (r -> s): r resumes or finishes the base OTs; the IKNP matrices
   ``U`` of *all* chunks of the session (it recomputes ``t`` at hop 4: the row PRG is
   deterministic).
4. :func:`sender_correct` (s -> r): the corrections ``u`` of all chunks, framed exactly
   by :meth:`~securefl.crypto.shade.SenderSession.corrections`, and s's share;
   :func:`receiver_finish` absorbs them and returns r's share.

Each hop runs the steps of :class:`~securefl.crypto.shade.ReceiverSession` and
:class:`~securefl.crypto.shade.SenderSession` for every chunk of the session (the code
:func:`shade_pair` interleaves), so the messages, their tags and shapes are those of
:func:`shade_pair` and the frame bytes are the same; a hop holds its whole batch (the
transport's message round), so the receiver recomputes each chunk's ``t`` at hop 4.  Two
kinds of state: the *setup* (:class:`~securefl.crypto.ot.SenderSetup`,
:class:`~securefl.crypto.ot.ReceiverSetup`), which outlives the round -- the caller keeps
it with the party (e.g. in the client's state Record, never in a message) and passes it
to every hop; hops 1 to 3 advance or replace it in place or return the new one -- and
the round's ``dict`` of numpy arrays (r: the hello between hops 1 and 3; both: the setup
id and session number of the round).

Who learns what: exactly as :mod:`securefl.crypto.shade` (each share alone is uniform;
the relay sees base-OT points, ``U`` and ``u``, all pseudorandom to it); the caller
authenticates the batches end to end (:mod:`securefl.runtime.links`).  Any malformed,
replayed or out-of-order message raises :class:`~securefl.errors.ProtocolError`.
"""

from __future__ import annotations

from collections.abc import Sequence

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
from securefl.errors import ProtocolError

__all__ = ["HOPS", "chunks", "framing", "receiver_base", "receiver_extend", "receiver_finish",
           "sender_base", "sender_correct"]

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


def receiver_extend(state: dict[str, np.ndarray], message: Message, codes: np.ndarray, *,
                    setup: ReceiverSetup | None, context: bytes, sender: int,
                    receiver: int) -> tuple[list[Message], ReceiverSetup]:
    """Hop 3 at the receiver: resume ``setup`` or finish the fresh base OTs; the IKNP matrix
    ``U`` of every chunk of the session, and the setup to keep."""
    pending = {key[len(_HELLO):]: value for key, value in state.items() if key.startswith(_HELLO)}
    if not pending:
        raise ProtocolError("SHADE: base-OT answer before the hello was sent")
    kept, session = receiver_complete(Hello.from_arrays(pending), setup, message, context=context)
    for key in [k for k in state if k.startswith(_HELLO)]:
        del state[key]
    _remember(state, kept.setup_id, session)
    run = ReceiverSession(codes=codes, extension=kept.extension(session), sender=sender, receiver=receiver)
    worker = run.worker()
    return [run.matrix(index, worker) for index in range(len(run.plan))], kept


def sender_correct(state: dict[str, np.ndarray], messages: Sequence[Message], codes: np.ndarray, *,
                   setup: SenderSetup, receivers: int, sender: int,
                   receiver: int) -> tuple[list[Message], np.ndarray]:
    """Hop 4 at the sender: the corrections ``u`` of every chunk, and the sender's
    ``(n_a, n_b)`` share."""
    session = _session(state, setup, "IKNP matrices before the base OTs")
    run = SenderSession(codes=codes, receivers=receivers, extension=setup.extension(session), sender=sender,
                        receiver=receiver)
    if len(messages) != len(run.plan):
        raise ProtocolError(f"SHADE: {len(messages)} IKNP matrices, expected {len(run.plan)}")
    worker = run.worker()
    out = [frame for index, message in enumerate(messages) for frame in run.corrections(index, message, worker)]
    state.clear()
    return out, run.share()


def receiver_finish(state: dict[str, np.ndarray], messages: Sequence[Message], codes: np.ndarray, *,
                    setup: ReceiverSetup, senders: int, sender: int, receiver: int) -> np.ndarray:
    """After hop 4 at the receiver: absorb the corrections; the receiver's ``(n_a, n_b)`` share."""
    session = _session(state, setup, "corrections before the IKNP matrices")
    run = ReceiverSession(codes=codes, extension=setup.extension(session), sender=sender, receiver=receiver)
    party = ShadeReceiver(codes=codes, senders=senders)
    worker = run.worker()
    frames = iter(messages)
    for index in range(len(run.plan)):
        run.absorb(index, frames, party, worker)
    if next(frames, None) is not None:
        raise ProtocolError("SHADE: more correction frames than OTs")
    state.clear()
    return party.share()


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
