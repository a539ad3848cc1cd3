"""SHADE for one pair of parties in a fixed number of hops (relayed transports).

:func:`securefl.crypto.shade.shade_pair` runs a pair in one loop, frame by frame.  Over a
transport whose every hop is a message round (``docs/transport-phase2.md``, "SHADE over
links") the same protocol is cut into four hops, each a batch of messages from one party
of the pair to the other, the sender ``s`` (holds ``x``, ``(n_a, L)``) and the receiver
``r`` (holds ``y``, ``(n_b, L)``):

1. :func:`receiver_base` (r -> s): base-OT point ``A`` (r is the base-OT sender).
2. :func:`sender_base` (s -> r): base-OT points ``B_i`` for the choices ``s``'s IKNP
   ``delta``; s keeps ``delta`` and its chosen keys.
3. :func:`receiver_extend` (r -> s): the IKNP matrices ``U`` of *all* chunks; r keeps
   only the 2 x 128 base keys (it recomputes ``t`` at hop 4: the row PRG is
   deterministic).
4. :func:`sender_correct` (s -> r): the corrections ``u`` of all chunks, framed exactly
   as :func:`~securefl.crypto.shade.shade_pair` frames them, and s's share;
   :func:`receiver_finish` absorbs them and returns r's share.

The messages, their tags, shapes and order are those of :func:`shade_pair`, so the
frame bytes are the same; the parties are the same classes
(:class:`~securefl.crypto.ot.BaseOTSender`, :class:`~securefl.crypto.ot.IKNPReceiver`,
:class:`~securefl.crypto.shade.ShadeSender`, ...), only the loop is cut.  What a party
keeps between hops is a ``dict`` of numpy arrays (the caller stores it, e.g. in a
client's state Record): r the base-OT secret (hop 1 -> 3) and base keys (hop 3 -> 4),
s ``delta`` and its chosen keys (hop 2 -> 4).

Who learns what: exactly as :mod:`securefl.crypto.shade` (each share alone is uniform;
the relay sees base-OT points, ``U`` and ``u``, all pseudorandom to it); the caller
authenticates the batches end to end (:mod:`securefl.fl.links`).  Any malformed message
raises :class:`~securefl.errors.ProtocolError`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from Crypto.PublicKey import ECC

from securefl.crypto.channel import Message
from securefl.crypto.ot import _ORDER, CURVE, KAPPA, BaseOTReceiver, BaseOTSender, IKNPReceiver, IKNPSender
from securefl.crypto.rand import RandomSource
from securefl.crypto.shade import CHUNK_OTS, FRAME_BYTES, TILE_BYTES, ShadeReceiver, ShadeSender, _Expander
from securefl.errors import ProtocolError

HOPS = 4
"""Hops of one pair (the shares to the server ride on the last two)."""

_SECRET_BYTES = 32


def chunks(receivers: int, length: int) -> list[tuple[int, int, int]]:
    """``(chunk, first point, stop point)`` of the receiver's points (as :func:`shade_pair`)."""
    per_chunk = max(1, CHUNK_OTS // length)
    return [(index, start, min(start + per_chunk, receivers))
            for index, start in enumerate(range(0, receivers, per_chunk))]


def framing(senders: int) -> tuple[int, int]:
    """``(tile_rows, frame_rows)`` of a pair whose sender holds ``senders`` points."""
    blocks = -(-senders // 8)
    tile_rows = int(np.clip(TILE_BYTES // (16 * blocks), 1, 4096))
    return tile_rows, tile_rows * max(1, FRAME_BYTES // (16 * blocks * tile_rows))


def receiver_base(state: dict[str, np.ndarray], *, sender: int, receiver: int,
                  rng: RandomSource) -> Message:
    """Hop 1 at the receiver: the base-OT point ``A`` for the sender."""
    base = BaseOTSender(count=KAPPA, rng=rng)
    message = base.first(receiver, sender)
    state["secret"] = np.frombuffer(int(base._secret).to_bytes(_SECRET_BYTES, "big"), np.uint8).copy()
    return message


def sender_base(state: dict[str, np.ndarray], message: Message, *, rng: RandomSource) -> Message:
    """Hop 2 at the sender: ``delta`` (its IKNP secret) and the base-OT answer ``B``."""
    _expect(message, "baseot/A")
    delta = rng.array(2, np.uint64)
    base = BaseOTReceiver(choices=np.unpackbits(delta.view(np.uint8), bitorder="little"), rng=rng)
    reply, chosen = base.respond(message)
    state["delta"], state["chosen"] = delta, chosen
    return reply


def receiver_extend(state: dict[str, np.ndarray], message: Message, codes: np.ndarray, *,
                    sender: int, receiver: int) -> list[Message]:
    """Hop 3 at the receiver: finish the base OTs; the IKNP matrix ``U`` of every chunk."""
    _expect(message, "baseot/B")
    if "secret" not in state:
        raise ProtocolError("SHADE: base-OT answer before the base-OT point was sent")
    secret = int.from_bytes(bytes(state.pop("secret")), "big")
    if not 0 < secret < _ORDER:
        raise ProtocolError("SHADE: stored base-OT secret out of range")
    base = BaseOTSender(count=KAPPA, _secret=secret, _a_point=ECC.construct(curve=CURVE, d=secret).pointQ)
    seeds0, seeds1 = base.finish(message)
    state["seeds0"], state["seeds1"] = seeds0, seeds1
    extension = IKNPReceiver(seeds0=seeds0, seeds1=seeds1)
    choices = np.ascontiguousarray(codes.reshape(-1))
    length = codes.shape[1]
    out = []
    for chunk, start, stop in chunks(codes.shape[0], length):
        matrix, _ = extension.extend(choices[start * length: stop * length], chunk,
                                     sender=sender, receiver=receiver)
        out.append(matrix)
    return out


def sender_correct(state: dict[str, np.ndarray], messages: Sequence[Message], codes: np.ndarray, *,
                   receivers: int, sender: int, receiver: int) -> tuple[list[Message], np.ndarray]:
    """Hop 4 at the sender: the corrections ``u`` of every chunk, and the sender's
    ``(n_a, n_b)`` share."""
    if "delta" not in state or "chosen" not in state:
        raise ProtocolError("SHADE: IKNP matrices before the base OTs")
    length = codes.shape[1]
    plan = chunks(receivers, length)
    if len(messages) != len(plan):
        raise ProtocolError(f"SHADE: {len(messages)} IKNP matrices, expected {len(plan)}")
    party = ShadeSender(codes=codes, receivers=receivers)
    extension = IKNPSender(delta=state["delta"], seeds=state["chosen"])
    tile_rows, frame_rows = framing(codes.shape[0])
    lanes = 8 * party.blocks
    expander = _Expander(blocks=party.blocks, rows=tile_rows)
    out = []
    for (chunk, start, stop), message in zip(plan, messages):
        _expect(message, f"iknp/U/{chunk}")
        count, base = (stop - start) * length, start * length
        q = extension.extend(message, chunk, count)
        seeds0, seeds1 = extension.random_ot(q, chunk)
        for frame_start in range(0, count, frame_rows):
            frame = np.empty((min(frame_rows, count - frame_start), lanes), dtype=np.uint16)
            for offset in range(0, frame.shape[0], tile_rows):
                lo, hi = frame_start + offset, min(frame_start + offset + tile_rows, count)
                party.tile(expander, seeds0[lo:hi], seeds1[lo:hi], base + lo,
                           out=frame[offset: offset + hi - lo])
            out.append(Message(sender, receiver, "shade/u", (frame,)))
    state.clear()
    return out, party.share()


def receiver_finish(state: dict[str, np.ndarray], messages: Sequence[Message], codes: np.ndarray, *,
                    senders: int, sender: int, receiver: int) -> np.ndarray:
    """After hop 4 at the receiver: absorb the corrections; the receiver's ``(n_a, n_b)`` share."""
    if "seeds0" not in state or "seeds1" not in state:
        raise ProtocolError("SHADE: corrections before the IKNP matrices")
    length = codes.shape[1]
    party = ShadeReceiver(codes=codes, senders=senders)
    extension = IKNPReceiver(seeds0=state["seeds0"], seeds1=state["seeds1"])
    tile_rows, frame_rows = framing(senders)
    expander = _Expander(blocks=-(-senders // 8), rows=tile_rows)
    frames = iter(messages)
    for chunk, start, stop in chunks(codes.shape[0], length):
        count, base = (stop - start) * length, start * length
        _, t = extension.extend(party.choices[base: base + count], chunk, sender=sender, receiver=receiver)
        seeds = extension.random_ot(t, chunk)
        for frame_start in range(0, count, frame_rows):
            message = next(frames, None)
            if message is None:
                raise ProtocolError("SHADE: fewer correction frames than OTs")
            _expect(message, "shade/u")
            rows = min(frame_rows, count - frame_start)
            if len(message.arrays) != 1 or message.arrays[0].shape[0] != rows:
                raise ProtocolError(f"SHADE correction frame must be one array of {rows} rows")
            received = message.arrays[0]
            for offset in range(0, rows, tile_rows):
                lo, hi = frame_start + offset, min(frame_start + offset + tile_rows, count)
                party.tile(expander, seeds[lo:hi], received[offset: offset + hi - lo], base + lo)
    if next(frames, None) is not None:
        raise ProtocolError("SHADE: more correction frames than OTs")
    state.clear()
    return party.share()


def _expect(message: Message, tag: str) -> None:
    if message.tag != tag:
        raise ProtocolError(f"SHADE: expected {tag!r}, got {message.tag!r}")
