"""SHADE for one pair of parties in a fixed number of hops, and the in-process runs of them.

The protocol (:mod:`securefl.crypto.shade`'s parties over IKNP, :mod:`securefl.crypto.ot`)
is written here once, cut into four hops, each a batch of messages from one party of the
pair to the other, the sender ``s`` (holds ``x``, ``(n_a, L)``) and the receiver ``r``
(holds ``y``, ``(n_b, L)``).  A transport runs one hop per message round (FedProp's
clients, :mod:`securefl.methods.fedprop_clients`, the batches sealed by
:mod:`securefl.fl.links`); :func:`shade_pair` and :func:`shade_hamming_matrix` (the
``"shade"`` backend of :func:`securefl.crypto.secure_hamming_matrix`, which ``bench
hamming`` times) run the same hops in this process, each batch over a metered
:class:`~securefl.crypto.channel.Network`, so the simulator and the benchmarks run the code
a deployed client runs:

1. :func:`receiver_base` (r -> s): the IKNP hello (:func:`securefl.crypto.ot.receiver_hello`):
   the setup r holds for this pair, if any, with the session number it takes now, and a
   fresh base-OT point ``A``.
2. :func:`sender_base` (s -> r): ``iknp/resume`` if s holds the offered setup and the
   session is new to it, else the base-OT points of a fresh setup (the choices are s's new
   IKNP ``delta``).
3. :func:`receiver_extend` (r -> s): r resumes or finishes the base OTs; the IKNP matrices
   ``U`` of *all* chunks of the session (it recomputes ``t`` at hop 4: the row PRG is
   deterministic).
4. :func:`sender_correct` (s -> r): the corrections ``u`` of all chunks, in frames of
   about :data:`~securefl.crypto.shade.FRAME_BYTES`, and s's share;
   :func:`receiver_finish` absorbs them and returns r's share.

A hop holds its whole batch in memory (the corrections of a pair: ``16 ceil(n_a / 8)``
bytes per OT), as a relayed batch must be.  Two
kinds of state: the *setup* (:class:`~securefl.crypto.ot.SenderSetup`,
:class:`~securefl.crypto.ot.ReceiverSetup`), which outlives the round -- the caller keeps
it with the party (e.g. in the client's state Record, never in a message) and passes it
to every hop; hops 1 to 3 advance or replace it in place or return the new one -- and
the round's ``dict`` of numpy arrays (r: the hello between hops 1 and 3; both: the setup
id and session number of the round).

Who learns what: exactly as :mod:`securefl.crypto.shade` (each share alone is uniform;
the relay sees base-OT points, ``U`` and ``u``, all pseudorandom to it); the caller
authenticates the batches end to end (:mod:`securefl.fl.links`).  Any malformed,
replayed or out-of-order message raises :class:`~securefl.errors.ProtocolError`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from securefl.crypto import shade
from securefl.crypto.channel import SERVER, Message, Network
from securefl.crypto.hamming_shares import (
    HammingResult,
    check_codes,
    own_block,
    pair_roles,
    server_reconstruct,
)
from securefl.crypto.ot import (
    BASE_POINTS,
    KAPPA,
    SETUP_ID_BYTES,
    Hello,
    OTSetups,
    ReceiverSetup,
    SenderSetup,
    receiver_complete,
    receiver_hello,
    sender_answer,
    setup_context,
)
from securefl.crypto.rand import RandomSource
from securefl.crypto.shade import ShadeReceiver, ShadeSender, _Expander
from securefl.errors import InputError, ProtocolError

HOPS = 4
"""Hops of one pair (the shares to the server ride on the last two)."""


@dataclass
class PairCost:
    """Work counters of one SHADE pair: OTs run, AES output bytes generated, the seconds
    of its IKNP setup step (base OTs when ``fresh_setup``, else the resume messages) and of
    the whole pair."""

    ots: int = 0
    prg_bytes: int = 0
    setup_seconds: float = 0.0
    seconds: float = 0.0
    fresh_setup: bool = False

_HELLO = "hello/"


def chunks(receivers: int, length: int) -> list[tuple[int, int, int]]:
    """``(chunk, first point, stop point)`` of the receiver's points (as :func:`shade_pair`)."""
    per_chunk = max(1, shade.CHUNK_OTS // length)
    return [(index, start, min(start + per_chunk, receivers))
            for index, start in enumerate(range(0, receivers, per_chunk))]


def framing(senders: int) -> tuple[int, int]:
    """``(tile_rows, frame_rows)`` of a pair whose sender holds ``senders`` points."""
    blocks = -(-senders // 8)
    tile_rows = int(np.clip(shade.TILE_BYTES // (16 * blocks), 1, 4096))
    return tile_rows, tile_rows * max(1, shade.FRAME_BYTES // (16 * blocks * tile_rows))


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
    extension = kept.extension(session)
    choices = np.ascontiguousarray(codes.reshape(-1))
    length = codes.shape[1]
    out = []
    for chunk, start, stop in chunks(codes.shape[0], length):
        matrix, _ = extension.extend(choices[start * length: stop * length], chunk,
                                     sender=sender, receiver=receiver)
        out.append(matrix)
    return out, kept


def sender_correct(state: dict[str, np.ndarray], messages: Sequence[Message], codes: np.ndarray, *,
                   setup: SenderSetup, receivers: int, sender: int,
                   receiver: int) -> tuple[list[Message], np.ndarray]:
    """Hop 4 at the sender: the corrections ``u`` of every chunk, and the sender's
    ``(n_a, n_b)`` share."""
    session = _session(state, setup, "IKNP matrices before the base OTs")
    length = codes.shape[1]
    plan = chunks(receivers, length)
    if len(messages) != len(plan):
        raise ProtocolError(f"SHADE: {len(messages)} IKNP matrices, expected {len(plan)}")
    party = ShadeSender(codes=codes, receivers=receivers)
    extension = setup.extension(session)
    tile_rows, frame_rows = framing(codes.shape[0])
    lanes = 8 * party.blocks
    expander = _Expander(blocks=party.blocks, rows=tile_rows)
    out = []
    for (chunk, start, stop), message in zip(plan, messages):
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
                    setup: ReceiverSetup, senders: int, sender: int, receiver: int) -> np.ndarray:
    """After hop 4 at the receiver: absorb the corrections; the receiver's ``(n_a, n_b)`` share."""
    session = _session(state, setup, "corrections before the IKNP matrices")
    length = codes.shape[1]
    party = ShadeReceiver(codes=codes, senders=senders)
    extension = setup.extension(session)
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


def _expect(message: Message, tag: str) -> None:
    if message.tag != tag:
        raise ProtocolError(f"SHADE: expected {tag!r}, got {message.tag!r}")


def shade_pair(
    x: np.ndarray,
    y: np.ndarray,
    *,
    network: Network,
    sender: int = 0,
    receiver: int = 1,
    rng: RandomSource | None = None,
    workers: int = 1,
    progress: Callable[[int], None] | None = None,
    setups: OTSetups | None = None,
    identities: tuple[int, int] | None = None,
) -> tuple[np.ndarray, np.ndarray, PairCost]:
    """SHADE between ``sender`` (holds ``x``, ``(n_a, L)``) and ``receiver`` (holds ``y``, ``(n_b, L)``),
    in this process: the four hops above (the code a deployed client runs), each batch of
    frames over ``network``.

    Returns the sender's and the receiver's ``(n_a, n_b)`` uint16 shares (their sum mod
    2^16 is ``HD(x_i, y_j)``) and the work done (``setup_seconds``: hops 1 and 2, the hello
    and its answer, which carry the base OTs of a fresh setup).  ``setups`` keeps the pair's
    IKNP setup between calls (:class:`~securefl.crypto.ot.OTSetups`: the base OTs run on
    the first call only, later calls are new sessions of the same extension);
    ``identities`` are the two parties' stable ids in it (default ``(sender, receiver)``).
    Without ``setups`` every call runs fresh base OTs.  A pair's hops run in one thread
    (``workers`` is accepted for the signature of :func:`shade_hamming_matrix`, which runs
    pairs in parallel).
    """
    started = time.perf_counter()
    x, y = check_codes([x, y])
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1:
        raise InputError("workers", workers, "must be a positive integer")
    rng = rng if rng is not None else RandomSource()
    if setups is None:
        setups = OTSetups(federation=rng.child("federation").bytes(16))
    me, peer = identities if identities is not None else (sender, receiver)
    context = setup_context(setups.federation, me, peer)
    s_state: dict[str, np.ndarray] = {}
    r_state: dict[str, np.ndarray] = {}
    hello = receiver_base(r_state, setup=setups.receiver(peer, me), context=context, sender=sender,
                          receiver=receiver, rng=rng.child(f"party{receiver}"))
    answer, s_setup = sender_base(s_state, network.deliver(hello), setup=setups.sender(me, peer),
                                  context=context, rng=rng.child(f"party{sender}"))
    setups.keep(me, peer, s_setup)
    delivered = network.deliver(answer)
    setup_seconds = time.perf_counter() - started
    matrices, r_setup = receiver_extend(r_state, delivered, y, setup=setups.receiver(peer, me),
                                        context=context, sender=sender, receiver=receiver)
    setups.keep(peer, me, r_setup)
    corrections, share_s = sender_correct(s_state, [network.deliver(m) for m in matrices], x,
                                          setup=s_setup, receivers=y.shape[0], sender=sender,
                                          receiver=receiver)
    share_r = receiver_finish(r_state, [network.deliver(m) for m in corrections], y, setup=r_setup,
                              senders=x.shape[0], sender=sender, receiver=receiver)
    count = y.shape[0] * y.shape[1]
    if progress is not None:
        progress(count)
    blocks = -(-x.shape[0] // 8)
    chunked = sum(-(-(stop - start) * y.shape[1] // 64) * 8 for _, start, stop in chunks(*y.shape))
    return share_s, share_r, PairCost(
        ots=count, prg_bytes=3 * KAPPA * chunked + 6 * 16 * count + 3 * count * blocks * 16,
        setup_seconds=setup_seconds, seconds=time.perf_counter() - started,
        fresh_setup=answer.tag == BASE_POINTS)


def shade_one_vs_many(
    many: np.ndarray, one: np.ndarray, *, network: Network | None = None, rng: RandomSource | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """SHADE of one code ``one`` (``(L,)``, the OT receiver's) against ``many`` (``(n, L)``, the sender's).

    GSHADE batching makes this cost ``L`` OTs whatever ``n`` is.  Returns the sender's and
    the receiver's ``(n,)`` uint16 shares of ``HD(many[i], one)``.
    """
    one = np.asarray(one)
    if one.ndim != 1:
        raise InputError("one", one, "must be a single (L,) code")
    sender_share, receiver_share, _ = shade_pair(
        many, one[None, :], network=network if network is not None else Network(), rng=rng
    )
    return sender_share[:, 0], receiver_share[:, 0]


def shade_distance(
    x: np.ndarray, y: np.ndarray, *, network: Network | None = None, rng: RandomSource | None = None
) -> tuple[int, int]:
    """SHADE for one pair of ``(L,)`` codes: the two parties' shares of ``HD(x, y)`` mod 2^16."""
    x = np.asarray(x)
    if x.ndim != 1:
        raise InputError("x", x, "must be a single (L,) code")
    sender_share, receiver_share = shade_one_vs_many(x[None, :], y, network=network, rng=rng)
    return int(sender_share[0]), int(receiver_share[0])


@dataclass
class _PairRun:
    a: int
    b: int
    share_s: np.ndarray
    share_r: np.ndarray
    cost: PairCost


def shade_hamming_matrix(
    parties: list[np.ndarray],
    *,
    rng: RandomSource,
    workers: int,
    network: Network,
    progress: Callable[[int], None] | None = None,
    setups: OTSetups | None = None,
    identities: Sequence[int] | None = None,
) -> HammingResult:
    """All-pairs SHADE on checked codes (the ``"shade"`` backend of
    :func:`securefl.crypto.secure_hamming_matrix`, which validates the arguments).

    For every pair ``a < b`` SHADE runs (:func:`shade_pair`: the hops) with the OT sender
    given by :func:`~securefl.crypto.hamming_shares.pair_roles`; each of the two sends its
    share of the ``(a, b)`` block and every party its own block to the server, which
    reconstructs.  ``workers`` threads run pairs side by side, each pair on its own link
    (same keys; its bytes are added to ``network``'s).  ``setups`` and ``identities`` (the
    parties' stable ids, default their positions) keep the pairs' IKNP setups across calls.
    """
    start = time.perf_counter()
    sizes = [p.shape[0] for p in parties]
    offsets = np.cumsum([0, *sizes]).tolist()
    identities = list(range(len(parties))) if identities is None else [int(i) for i in identities]
    if setups is None:
        setups = OTSetups(federation=rng.child("federation").bytes(16))
    pairs = [(a, b) for a in range(len(parties)) for b in range(a + 1, len(parties))]
    workers = max(1, min(int(workers), len(pairs)))
    links = [network] if workers == 1 else [Network(keys=network.keys) for _ in pairs]

    def run(index: int) -> _PairRun:
        a, b = pairs[index]
        sender, receiver = pair_roles(a, b)
        share_s, share_r, cost = shade_pair(
            parties[sender], parties[receiver], network=links[index if workers > 1 else 0],
            sender=sender, receiver=receiver, rng=rng.child(f"pair{a}-{b}"), progress=progress,
            setups=setups, identities=(identities[sender], identities[receiver]))
        if sender != a:
            share_s, share_r = share_s.T, share_r.T
        return _PairRun(a, b, share_s, share_r, cost)

    if workers == 1:
        runs = [run(i) for i in range(len(pairs))]
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            runs = list(pool.map(run, range(len(pairs))))
        for link in links:
            for party, stats in link.stats.items():
                network.stats[party].bytes_sent += stats.bytes_sent
                network.stats[party].bytes_received += stats.bytes_received
                network.stats[party].messages_sent += stats.messages_sent
                network.stats[party].messages_received += stats.messages_received
    total = PairCost()
    pair_seconds: dict[str, float] = {}
    fresh = 0
    for done in runs:
        sender, receiver = pair_roles(done.a, done.b)
        total.ots += done.cost.ots
        total.prg_bytes += done.cost.prg_bytes
        total.setup_seconds += done.cost.setup_seconds
        fresh += done.cost.fresh_setup
        pair_seconds[f"{done.a}-{done.b}"] = done.cost.seconds - done.cost.setup_seconds
        network.send(Message(sender, SERVER, f"shade/share/{done.a}-{done.b}", (done.share_s,)))
        network.send(Message(receiver, SERVER, f"shade/share/{done.a}-{done.b}", (done.share_r,)))
    for index, party in enumerate(parties):
        network.send(Message(index, SERVER, f"shade/own/{index}", (own_block(party),)))
    matrix = server_reconstruct(network, sizes, parties[0].shape[1], prefix="shade")
    return HammingResult(
        matrix=matrix,
        bytes_sent={**{p: 0 for p in range(len(parties))}, SERVER: 0, **network.bytes_sent()},
        bytes_received={party: s.bytes_received for party, s in network.stats.items()},
        backend="shade",
        seconds=time.perf_counter() - start,
        ots=total.ots,
        prg_bytes=total.prg_bytes,
        offsets=tuple(offsets[:-1]),
        setup_seconds=total.setup_seconds,
        pair_seconds=pair_seconds,
        fresh_setups=fresh,
    )
