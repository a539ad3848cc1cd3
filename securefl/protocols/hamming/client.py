"""SecureHamming at the client: each backend's hops, written once for every protocol that runs it.

A client in a Hamming session is a :class:`Party` (its party index, its ``(n, L)`` codes, the
session's client ids by party index, the round session and the backend its node resolved).
The functions here are its steps, each filling one reply from one request and updating the
client's state Record; CrossClientLP's client (:mod:`securefl.protocols.crossclient.client_steps`)
and the standalone all-pairs matrix (:mod:`securefl.protocols.hamming.matrix`) both call them,
and the server's side is :mod:`securefl.protocols.hamming.relay`:

* :func:`open_session` (on the step that ends the setup): the party's own block of distances
  to the server (slot ``cclp/own``, computed in the clear: its own data) and hop 0 of its
  backend;
* :func:`shade_hop` ``1 .. 3`` (steps ``cclp/shade/1`` .. ``cclp/shade/4``, the stream step
  repeating): :mod:`securefl.crypto.shade_hops` for every live pair at once, one sealed batch
  per peer (:mod:`securefl.runtime.links`: ``relay/to/<peer>`` up, ``relay/from/<peer>``
  down; the correction frames are made in place in the batch, :class:`~securefl.runtime.links.Outbox`), the shares of finished pairs up (``cclp/share/<a>-<b>``); request config
  ``cclp/chunk-bytes`` bounds a pair's SHADE bytes per message.  The pair's IKNP setup
  persists in the state under ``ot/<peer id>/<role>/`` (session-scoped,
  :data:`securefl.runtime.transport.SESSION_SCOPED`), bound to the transport session and the
  two client ids: base OTs when a pair first meets in a role, later sessions of the same
  extension afterwards (:mod:`securefl.crypto.ot`);
* :func:`lwe_hop` ``1 .. 3`` (steps ``cclp/lwe/1`` .. ``cclp/lwe/3``): :mod:`securefl.crypto.lwe_hops`,
  keys and broadcasts relayed by the server in slots ``cclp/lwe/in`` / ``cclp/lwe/out``, the
  answers ``D`` in sealed batches, the shares up; the evaluation hop is first counted against
  the node's LWE flooding cap (:meth:`securefl.runtime.policy.PrivacyLedger.serve_lwe`).

Request arrays ``cclp/alive`` (the parties still in the session: a pair with a peer that left
is abandoned) and ``cclp/sizes`` (every party's point count) come with every hop.  Each reply
reports the nominal bytes of the client-to-client messages the server cannot see
(``cclp/link-sent``, ``cclp/link-received``: :func:`securefl.crypto.channel.frame_size`) and
the CPU seconds of each pair's work (``cclp/pair-seconds/<a>-<b>``, SHADE; ``cclp/phase/<name>``,
LWE).  Who learns what: :mod:`securefl.crypto.shade` and :mod:`securefl.crypto.lwe_hops`; any
malformed, replayed or reordered message raises :class:`~securefl.errors.ProtocolError`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from securefl.crypto import lwe_hops, shade_hops
from securefl.crypto.channel import SERVER, Message, frame_size
from securefl.crypto.hamming_shares import own_block, pair_roles
from securefl.crypto.lwe import statistical_distance
from securefl.crypto.ot import BASE_POINTS, ReceiverSetup, SenderSetup, setup_context
from securefl.crypto.rand import RandomSource
from securefl.errors import ProtocolError
from securefl.runtime import links
from securefl.runtime.links import transport_session
from securefl.runtime.transport import NodeContext, Record, put_message, take_message

SHADE = tuple(f"cclp/shade/{hop}" for hop in range(1, shade_hops.HOPS + 1))
"""The SHADE backend's steps after the one that opens the session (the third repeats)."""
LWE = tuple(f"cclp/lwe/{hop}" for hop in range(1, lwe_hops.HOPS + 1))
"""The LWE backends' steps after the one that opens the session."""
OT_PREFIX = "ot/"
"""State prefix of the IKNP setups kept with each peer across sessions (``ot/<peer id>/<role>/``)."""
LWE_STATE = "cclp/lwe/state/"
"""State prefix of the party's LWE session."""
SLOT_OWN = "cclp/own"
SLOT_LWE_KEY = "cclp/lwe/key"
SLOT_LWE_IN = "cclp/lwe/in"
SLOT_LWE_OUT = "cclp/lwe/out"
ALIVE = "cclp/alive"
SIZES = "cclp/sizes"
LINK_SENT = "cclp/link-sent"
LINK_RECEIVED = "cclp/link-received"
CHUNK_BYTES = "cclp/chunk-bytes"
"""Request config of the SHADE hops: the bound on one message's SHADE bytes per peer."""
PAIR_SECONDS = "cclp/pair-seconds/"
"""Reply config prefix: a SHADE pair's CPU seconds in this hop (``<a>-<b>``)."""
PHASE_SECONDS = "cclp/phase/"
"""Reply config prefix: the LWE hop's CPU seconds by phase (``fixed``, ``per_pair``)."""
FRESH_SETUPS = "cclp/fresh-setups"
"""Reply config: the pairs whose base OTs this sender ran in this hop."""


@dataclass(frozen=True)
class Party:
    """A client's part in one Hamming session: its party ``index``, its 0/1 ``codes``
    (``(n, L)``), the session's client ids by party index (``members``: its IKNP setups are
    kept by peer client id), the round ``session`` (8 bytes) and the ``backend`` its node
    resolved (``"shade"``, ``"lwe"`` or ``"rlwe"``); ``rng`` the source of its protocol randomness
    (``None``: the OS CSPRNG); ``device`` the torch device of its LWE products."""

    index: int
    codes: np.ndarray
    members: tuple[int, ...]
    session: bytes
    backend: str
    rng: RandomSource | None = None
    device: str = "cpu"

    def randomness(self, label: str) -> RandomSource:
        """The randomness of one hop's work for ``label``: a child of ``rng`` (a seeded
        simulation), else the OS CSPRNG."""
        return self.rng.child(label) if self.rng is not None else RandomSource()


def share_slot(a: int, b: int) -> str:
    """Reply slot of a client's share of the block of the pair ``a < b``."""
    return f"cclp/share/{a}-{b}"


def put_messages(record: Record, slot: str, messages: list[Message]) -> None:
    """Several protocol messages under ``slot/<i>`` (their count in config ``slot/n``)."""
    for i, message in enumerate(messages):
        put_message(record, f"{slot}/{i}", message)
    record.config[f"{slot}/n"] = len(messages)


def take_messages(record: Record, slot: str) -> list[Message]:
    """The messages :func:`put_messages` stored (none: an empty list)."""
    return [take_message(record, f"{slot}/{i}") for i in range(int(record.config.get(f"{slot}/n", 0)))]


def family(backend: str) -> str:
    """The message family of a resolved backend: ``"lwe"`` for both LWE backends, else ``"shade"``."""
    return "lwe" if backend in ("lwe", "rlwe") else "shade"


def open_session(party: Party, request: Record, state: Record, reply: Record, node: NodeContext) -> None:
    """The party's own block to the server and hop 0 of its backend (the SHADE hello to every
    live peer it is OT receiver of, or its signed LWE public key)."""
    kind = family(party.backend)
    put_message(reply, SLOT_OWN, Message(party.index, SERVER, f"{kind}/own/{party.index}",
                                         (own_block(party.codes),)))
    if kind == "lwe":
        lwe_hop(0, party, request, state, reply, node)
    else:
        shade_hop(0, party, request, state, reply)


def _pairs(request: Record, me: int) -> list[tuple[int, int, int, int]]:
    """``(peer, a, b, sender)`` of every live pair of party ``me`` (``a < b``)."""
    alive = np.asarray(request.arrays.get(ALIVE, np.zeros(0, np.int64)))
    pairs = []
    for peer in sorted(int(p) for p in alive):
        if peer == me:
            continue
        a, b = min(me, peer), max(me, peer)
        pairs.append((peer, a, b, pair_roles(a, b)[0]))
    return pairs


def _one(messages: list[Message]) -> Message:
    if len(messages) != 1:
        raise ProtocolError(f"SHADE: expected one message in the batch, got {len(messages)}")
    return messages[0]


def shade_hop(hop: int, party: Party, request: Record, state: Record, reply: Record) -> None:
    """SHADE hop ``hop`` (0: the hellos; 1: the base-OT answers; 2: the first ``U``; 3: a
    stream exchange) of every live pair of ``party``."""
    me, codes = party.index, party.codes
    sizes = np.asarray(request.arrays.get(SIZES, np.zeros(0, np.int64)))
    members = [int(m) for m in party.members]
    chunk_bytes = request.config.get(CHUNK_BYTES, shade_hops.DEFAULT_CHUNK_BYTES)
    if isinstance(chunk_bytes, bool) or not isinstance(chunk_bytes, (int, np.integer)) \
            or chunk_bytes < 1:
        raise ProtocolError(f"client {me}: {CHUNK_BYTES} must be a positive integer, "
                            f"got {chunk_bytes!r}")
    sent = received = fresh = 0
    for peer, a, b, sender in _pairs(request, me):
        started = time.process_time()
        receiver = b if sender == a else a
        i_send = sender == me
        acting = (hop == 1) == i_send  # hops 0 and 2: the receiver; hop 1: the sender
        prefix = f"cclp/shade/{peer}/"
        pair = {k[len(prefix):]: v for k, v in state.arrays.items() if k.startswith(prefix)}
        if not 0 <= peer < len(members):
            raise ProtocolError(f"client {me}: SHADE peer {peer} is not among the round's members")
        setup = _setup(state, members[peer], "sender" if i_send else "receiver")
        context = setup_context(transport_session(state), members[sender], members[receiver])
        taken: list[Message] = []

        def incoming(peer: int = peer, taken: list[Message] = taken) -> list[Message]:
            """The peer's sealed batch in this request, opened (only when the hop needs it)."""
            taken[:] = links.receive_batch(request, state, me=me, peer=peer)
            return taken

        outgoing: list[Message] = []
        share = None
        outbox = None
        if hop == 0 and acting:
            outgoing = [shade_hops.receiver_base(pair, setup=setup, context=context, sender=sender,
                                                 receiver=receiver, rng=party.randomness(f"peer{peer}"))]
        elif hop == 1 and acting:
            answer, setup = shade_hops.sender_base(pair, _one(incoming()), setup=setup, context=context,
                                                   rng=party.randomness(f"peer{peer}"))
            fresh += answer.tag == BASE_POINTS
            outgoing = [answer]
        elif hop == 2 and acting:
            outgoing, setup = shade_hops.receiver_extend(
                pair, _one(incoming()), codes, setup=setup, context=context, sender=sender,
                receiver=receiver, senders=int(sizes[sender]), chunk_bytes=chunk_bytes)
        elif hop == 3 and i_send:
            boxes: list[links.Outbox] = []

            def buffers(tag: str, dtype: np.dtype, shapes: list[tuple[int, int]], peer: int = peer,
                        boxes: list[links.Outbox] = boxes) -> tuple[np.ndarray, ...]:
                """The frames are made where the sealed batch to ``peer`` carries them."""
                boxes.append(links.Outbox.layout(me, peer, tag, dtype, shapes))
                return boxes[-1].arrays

            outgoing, share = shade_hops.sender_stream(
                pair, incoming, codes, setup=setup, receivers=int(sizes[receiver]), sender=sender,
                receiver=receiver, chunk_bytes=chunk_bytes, buffers=buffers)
            outbox = boxes[-1] if boxes else None
        elif hop == 3:
            outgoing, share = shade_hops.receiver_stream(
                pair, incoming, codes, setup=setup, senders=int(sizes[sender]), sender=sender,
                receiver=receiver)
        received += sum(frame_size(m) for m in taken)
        if hop <= 2 and acting and setup is not None:  # hops 1-3 advance or replace it
            _keep_setup(state, members[peer], setup)
        for key in [k for k in state.arrays if k.startswith(prefix)]:
            del state.arrays[key]
        state.arrays.update({prefix + k: v for k, v in pair.items()})
        reply.config[f"{PAIR_SECONDS}{a}-{b}"] = time.process_time() - started
        if outgoing:
            links.send_batch(reply, state, outgoing, me=me, peer=peer, outbox=outbox)
            sent += sum(frame_size(m) for m in outgoing)
        if share is not None:
            oriented = share if sender == a else share.T
            put_message(reply, share_slot(a, b), Message(
                me, SERVER, f"shade/share/{a}-{b}", (np.ascontiguousarray(oriented),)))
    reply.config[LINK_SENT] = sent
    reply.config[LINK_RECEIVED] = received
    reply.config[FRESH_SETUPS] = fresh


def _setup(state: Record, peer: int, role: str) -> SenderSetup | ReceiverSetup | None:
    """This client's IKNP setup with client ``peer`` in ``role``, if it holds one."""
    prefix = f"{OT_PREFIX}{peer}/{role}/"
    arrays = {k[len(prefix):]: v for k, v in state.arrays.items() if k.startswith(prefix)}
    if not arrays:
        return None
    return (SenderSetup if role == "sender" else ReceiverSetup).from_arrays(arrays)


def _keep_setup(state: Record, peer: int, setup: SenderSetup | ReceiverSetup) -> None:
    """Store (replace) this client's IKNP setup with client ``peer``."""
    role = "sender" if isinstance(setup, SenderSetup) else "receiver"
    prefix = f"{OT_PREFIX}{peer}/{role}/"
    for key in [k for k in state.arrays if k.startswith(prefix)]:
        del state.arrays[key]
    state.arrays.update({prefix + k: v for k, v in setup.to_arrays().items()})


def lwe_hop(hop: int, party: Party, request: Record, state: Record, reply: Record,
            node: NodeContext) -> None:
    """LWE hop ``hop`` of the session (:mod:`securefl.crypto.lwe_hops`; hop 0: the signed
    public key): keys, broadcasts and hints relayed by the server with their per-recipient
    tags, the answers ``D`` in sealed batches, the shares up."""
    me, codes, session = party.index, party.codes, party.session
    if hop and party.backend not in ("lwe", "rlwe"):
        raise ProtocolError(f"client {me}: an LWE hop in a session this client runs with "
                            f"{party.backend!r} (its policy's choice)")
    saved = {k[len(LWE_STATE):]: v for k, v in state.arrays.items() if k.startswith(LWE_STATE)}
    sizes = np.asarray(request.arrays.get(SIZES, np.zeros(0, np.int64)))
    alive = [int(p) for p in np.asarray(request.arrays.get(ALIVE, np.zeros(0, np.int64)))]
    if any(not 0 <= p < len(sizes) for p in alive) or me not in alive:
        raise ProtocolError(f"client {me}: LWE hop {hop} with alive parties {alive}")
    members = alive if hop <= 1 else [int(p) for p in saved.get("ids", ())]
    in_session = {p: int(sizes[p]) for p in members}
    sent = received = 0
    ring = party.backend == "rlwe"
    started = time.process_time()
    if hop == 0:
        roster = [int(m) for m in party.members]
        put_message(reply, SLOT_LWE_KEY, lwe_hops.start(
            saved, index=me, codes=codes, session=session, rng=party.randomness("lwe"),
            credentials=node.credentials(), clients={p: roster[p] for p in alive},
            context=transport_session(state) + b"|" + session))
    elif hop == 1:
        put_messages(reply, SLOT_LWE_OUT, lwe_hops.broadcast(
            saved, take_messages(request, SLOT_LWE_IN), index=me, codes=codes,
            sizes=in_session, session=session, credentials=node.credentials(), ring=ring,
            device=party.device))
    elif hop == 2:  # the flooded answers leave here: counted against the node's cap first
        lwe_hops.HopState.load(saved, me, 2)  # a hop that ran already is refused before the ledger
        node.ledger().serve_lwe(
            session=transport_session(state) + session,
            distance=statistical_distance(list(in_session.values()), int(codes.shape[1])),
            cap=node.policy().lwe_max_distance)
        answers, shares = lwe_hops.evaluate(saved, take_messages(request, SLOT_LWE_IN), index=me,
                                            codes=codes, sizes=in_session, alive=alive,
                                            session=session, ring=ring, device=party.device)
        for answer in answers:
            links.send_batch(reply, state, [answer], me=me, peer=answer.receiver)
            sent += frame_size(answer)
    else:
        answers = []
        for encryptor, evaluator in lwe_hops.session_pairs(alive):
            if encryptor == me:
                batch = links.receive_batch(request, state, me=me, peer=evaluator)
                received += sum(frame_size(m) for m in batch)
                answers += batch
        shares = lwe_hops.finish(saved, take_messages(request, SLOT_LWE_IN), answers, index=me,
                                 codes=codes, sizes=in_session, alive=alive, session=session,
                                 ring=ring, device=party.device)
    if hop >= 2:
        for message in lwe_hops.share_messages(me, shares):
            put_message(reply, share_slot(*message.tag[len("lwe/share/"):].split("-")), message)
    if hop:
        reply.config[f"{PHASE_SECONDS}{'fixed' if hop == 1 else 'per_pair'}"] = time.process_time() - started
    for key in [k for k in state.arrays if k.startswith(LWE_STATE)]:
        del state.arrays[key]
    state.arrays.update({LWE_STATE + k: v for k, v in saved.items()})
    reply.config[LINK_SENT] = sent
    reply.config[LINK_RECEIVED] = received
