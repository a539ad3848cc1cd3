"""Client-to-client links relayed by the server, authenticated end to end.

**Keys.**  The parties of a link session are roster members: party j is roster client c_j
(``members``, in party order, which the server names; each client checks that the list is
distinct and puts itself at its own party number).  Parties j and k derive the same
32-byte link key from the static pair key of their roster identities
(:meth:`securefl.crypto.identity.Credentials.pair_key`, :mod:`securefl.crypto.pairkeys`)

    K_jk = HKDF-SHA256(K_(c_j, c_k), salt = session, info = "securefl/link/v2" || label || min(j,k) || max(j,k) || c_j, c_k in that order)

(:func:`open_links`, once per session and ``label``).  No key crosses the network, so
there is nothing to substitute: computing K_(c_j, c_k) without c_j's or c_k's identity key is
CDH on Curve25519, and HKDF makes each session's and label's keys independent.  A server
that relabels parties -- tells j that party k is roster client c' while c' plays another
party, or names a client outside the roster -- makes the two ends derive different keys
(or none), and the first frame fails its GMAC.

Why no ephemeral key: links give integrity, not confidentiality (below), and forward
secrecy protects confidentiality; a later leak of an identity key lets its holder forge
frames of sessions that are over, which nothing accepts any more.  The protocols that send
secrets over links encrypt them under ephemeral keys of their own.

**Frames.**  All protocol messages client j sends to k in one step form one *batch*:
the messages are serialised as :class:`~securefl.crypto.channel.Network` frames on the
link j -> k with key K_jk and the 8-byte session id

    batch_session(j, k, b) = SHA-256("securefl/link-batch" || session || j || k || b)[:8]

where b counts the batches j has sent to k (kept in j's state; k keeps the count it has
received).  Each frame carries sender, receiver, tag and sequence number in its header
and a GMAC under the one-time key HMAC-SHA256(K_jk, batch session || seq || j || k)[:16]
(:func:`~securefl.crypto.channel.frame_key`; the channel's X25519 directory is not used:
K_jk is already the two ends' shared key), so the receiver checks, for every
frame, that it comes from j, is for k, is the next frame of the next batch of this
session, and is unaltered.  The batch travels as one ``uint8`` array::

    count u32 | per frame: tag length u16 | tag (utf-8) | frame length u64 | frame bytes

(the tag is repeated outside the frame only so the receiver knows what to ask the
channel for; the channel compares it with the MAC-covered tag in the frame header).

**What a relay can do.**  Relabel parties or carry a batch into another session or
label: the ends' keys differ and the GMAC fails.  Alter a byte: the GMAC fails.  Replay an old batch, or drop one
and deliver the next: the batch session differs from the one the receiver expects.
Reorder frames within a batch: the sequence check fails.  Deliver j's batch to another
client or claim it came from another sender: the header endpoints or the key differ.
Each raises :class:`~securefl.errors.ProtocolError` at the receiving client; the link's
receive counter moves only when the whole batch verified.  Links give integrity, not
confidentiality: protocols whose relayed content is not already pseudorandom to the server
encrypt it themselves (see :mod:`securefl.runtime.transport`).

State (in the client's state :class:`~securefl.runtime.records.Record`, which stays on its
node): ``links/ids`` (the parties) and ``links/keys`` (each party's link key with this
client; its own row zero), and config ``links/sent/<peer>``, ``links/received/<peer>``.

Server side: :func:`relay` moves every ``relay/to/<k>`` array of j's reply into k's next
request as ``relay/from/<j>``; the halves put and take batches with :func:`send_batch` /
:func:`receive_batch`.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from securefl.crypto.channel import Frame, Message, Network, SharedKey, frame_size
from securefl.crypto.identity import Credentials
from securefl.errors import InputError, ProtocolError
from securefl.runtime.records import Record

_IDS = "links/ids"
_KEYS = "links/keys"
_SENT = "links/sent/"
_RECEIVED = "links/received/"
TO = "relay/to/"
FROM = "relay/from/"
_DOMAIN = b"securefl/link/v2"


def open_links(state: Record, credentials: Credentials, *, me: int, members: Sequence[int],
               label: str = "") -> None:
    """Derive party ``me``'s link key with every other party of ``members`` (their roster
    ids in party order) for this transport session and ``label`` (the links' use within the
    session, e.g. a round), and keep them in ``state`` (module docstring).  A list that is
    not distinct, does not put this client at ``me``, or names a client outside the roster:
    ProtocolError, and nothing is stored."""
    members = [int(c) for c in members]
    if len(set(members)) != len(members) or not 0 <= int(me) < len(members) \
            or members[int(me)] != credentials.client:
        raise ProtocolError(f"client {credentials.client}: the link members {members} must be "
                            f"distinct with this client at party {me}")
    session = transport_session(state)
    keys = np.zeros((len(members), 32), np.uint8)
    for party, client in enumerate(members):
        if party == int(me):
            continue
        low, high = sorted((int(me), party))
        info = _DOMAIN + _field(label.encode()) + struct.pack(
            ">qqqq", low, high, members[low], members[high])
        secret = HKDF(hashes.SHA256(), 32, salt=session, info=info).derive(
            credentials.pair_key(client, "links"))
        keys[party] = np.frombuffer(secret, np.uint8)
    for table in (state.arrays, state.config):
        for key in [k for k in table if k.startswith("links/")]:
            del table[key]
    state.arrays[_IDS] = np.arange(len(members), dtype=np.int64)
    state.arrays[_KEYS] = keys


def _field(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def peers(state: Record) -> tuple[int, ...]:
    """The parties of the opened links (this client's own party included)."""
    return tuple(int(i) for i in state.arrays.get(_IDS, np.zeros(0, np.int64)))


def _link_key(state: Record, me: int, peer: int) -> bytes:
    ids = state.arrays.get(_IDS)
    if ids is None:
        raise ProtocolError(f"client {me}: no links opened")
    where = np.flatnonzero(ids == peer)
    if where.size != 1 or peer == me:
        raise ProtocolError(f"client {me}: no link to client {peer}")
    return np.asarray(state.arrays[_KEYS][int(where[0])], np.uint8).tobytes()


def transport_session(state: Record) -> bytes:
    """The transport session id a client's state was opened in (``_session``, 16 bytes);
    a state without one raises :class:`ProtocolError`."""
    session = state.config.get("_session")
    if not isinstance(session, bytes):
        raise ProtocolError("links need the transport session in the client state")
    return session


def batch_session(session: bytes, sender: int, receiver: int, batch: int) -> bytes:
    """The 8-byte channel session of batch ``batch`` on the link sender -> receiver."""
    info = b"securefl/link-batch" + session + struct.pack(">iiQ", sender, receiver, batch)
    return hashlib.sha256(info).digest()[:8]


_MAC_BYTES = 16
_COUNT_BYTES = 4


@dataclass(frozen=True)
class Outbox:
    """A batch laid out before its messages are made, so that a producer writes each
    message's array where the sealed batch carries it and :func:`seal` copies no body.

    ``blob`` is the batch (the wire layout of the module docstring); ``arrays[i]`` is the
    view of ``blob`` where message ``i``'s one array goes, ``frames[i]`` that frame's length.
    The header and MAC bytes are written by :func:`seal`, which checks that the messages
    match the layout (tag, dtype, shape) and MACs the body where it lies: the frames, and
    so the authentication and bytes, are those of a batch sealed from fresh arrays.
    """

    blob: np.ndarray
    tags: tuple[str, ...]
    arrays: tuple[np.ndarray, ...]
    frames: tuple[int, ...]

    @classmethod
    def layout(cls, me: int, peer: int, tag: str, dtype: np.dtype,
               shapes: Sequence[tuple[int, ...]]) -> Outbox:
        """The layout of a batch of ``len(shapes)`` messages ``me -> peer`` tagged ``tag``,
        message ``i`` one ``dtype`` array of shape ``shapes[i]``."""
        dtype = np.dtype(dtype)
        sizes = [frame_size(Message(me, peer, tag, (np.broadcast_to(np.zeros((), dtype), shape),)))
                 for shape in shapes]
        encoded = tag.encode()
        blob = np.empty(_COUNT_BYTES + sum(2 + len(encoded) + 8 + n for n in sizes), dtype=np.uint8)
        arrays, offset = [], _COUNT_BYTES
        for shape, size in zip(shapes, sizes):
            nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            body = offset + 2 + len(encoded) + 8 + size - _MAC_BYTES - nbytes
            arrays.append(blob[body: body + nbytes].view(dtype).reshape(shape))
            offset += 2 + len(encoded) + 8 + size
        return cls(blob, (tag,) * len(shapes), tuple(arrays), tuple(sizes))


def seal(state: Record, messages: Sequence[Message], *, me: int, peer: int,
         outbox: Outbox | None = None) -> np.ndarray:
    """One authenticated batch of ``messages`` (all from ``me`` to ``peer``) as uint8;
    with ``outbox`` the batch is its ``blob``, and a body already in place is not copied
    (messages that do not match its layout: :class:`InputError`)."""
    for message in messages:
        if (message.sender, message.receiver) != (me, peer):
            raise InputError("messages", message.tag, f"must all go from {me} to {peer}")
    counter = f"{_SENT}{peer}"
    batch = int(state.config.get(counter, 0))
    network = Network(session=batch_session(transport_session(state), me, peer, batch),
                      keys=SharedKey((me, peer), _link_key(state, me, peer)))
    framed = []
    for message in messages:
        network.send(message)
        framed.append((message.tag.encode(), network.queue(me, peer).popleft()))
    total = _COUNT_BYTES + sum(2 + len(tag) + 8 + len(frame) for tag, frame in framed)
    if outbox is None:
        out = np.empty(total, dtype=np.uint8)
    elif (outbox.blob.nbytes != total or [m.tag for m in messages] != list(outbox.tags)
          or [len(frame) for _, frame in framed] != list(outbox.frames)):
        raise InputError("messages", [m.tag for m in messages], "do not match the outbox's layout")
    else:
        out = outbox.blob
    view = memoryview(out)
    start = out.__array_interface__["data"][0]
    struct.pack_into(">I", view, 0, len(framed))
    offset = _COUNT_BYTES
    for tag, frame in framed:  # written straight into the batch: at most one copy of each frame
        struct.pack_into(">H", view, offset, len(tag))
        view[offset + 2: offset + 2 + len(tag)] = tag
        offset += 2 + len(tag)
        struct.pack_into(">Q", view, offset, len(frame))
        offset += 8
        for part in (frame.header, *frame.body, frame.mac):
            part = memoryview(part).cast("B")
            at = np.frombuffer(part, np.uint8).__array_interface__["data"][0]
            if at != start + offset:
                if part.nbytes and start - part.nbytes < at < start + out.nbytes:
                    raise InputError("messages", tag.decode(), "an array inside the outbox, "
                                                               "not where its layout puts it")
                view[offset: offset + part.nbytes] = part
            offset += part.nbytes
    state.config[counter] = batch + 1
    return out


def open_batch(state: Record, blob: np.ndarray, *, me: int, peer: int) -> list[Message]:
    """Verify and decode the next batch from ``peer``; any fault: ProtocolError."""
    data = np.asarray(blob)
    if data.dtype != np.uint8 or data.ndim != 1:
        raise ProtocolError(f"client {me}: batch from {peer} must be a 1-D uint8 array")
    raw = memoryview(np.ascontiguousarray(data)).cast("B")  # frames are views into the batch
    counter = f"{_RECEIVED}{peer}"
    batch = int(state.config.get(counter, 0))
    network = Network(session=batch_session(transport_session(state), peer, me, batch),
                      keys=SharedKey((peer, me), _link_key(state, me, peer)))
    messages = []
    try:
        (count,) = struct.unpack_from(">I", raw, 0)
        offset = 4
        for _ in range(count):
            (tag_len,) = struct.unpack_from(">H", raw, offset)
            tag = bytes(raw[offset + 2: offset + 2 + tag_len]).decode()
            offset += 2 + tag_len
            (frame_len,) = struct.unpack_from(">Q", raw, offset)
            offset += 8
            if offset + frame_len > len(raw):
                raise ProtocolError(f"client {me}: batch from {peer} truncated")
            network.queue(peer, me).append(Frame.from_bytes(raw[offset: offset + frame_len]))
            offset += frame_len
            messages.append(network.receive(me, peer, tag))
    except (struct.error, UnicodeDecodeError) as exc:
        raise ProtocolError(f"client {me}: malformed batch from {peer}: {exc}") from None
    if offset != len(raw):
        raise ProtocolError(f"client {me}: {len(raw) - offset} trailing bytes in batch from {peer}")
    state.config[counter] = batch + 1
    return messages


def send_batch(reply: Record, state: Record, messages: Sequence[Message], *, me: int,
               peer: int, outbox: Outbox | None = None) -> None:
    """Seal ``messages`` for ``peer`` into ``reply`` (the server relays it), into ``outbox``
    if given (:func:`seal`)."""
    reply.arrays[f"{TO}{peer}"] = seal(state, messages, me=me, peer=peer, outbox=outbox)


def receive_batch(request: Record, state: Record, *, me: int, peer: int) -> list[Message]:
    """The batch ``peer`` sent this client, relayed in ``request``; missing: ProtocolError."""
    blob = request.arrays.get(f"{FROM}{peer}")
    if blob is None:
        raise ProtocolError(f"client {me}: no batch from client {peer} in this request")
    return open_batch(state, blob, me=me, peer=peer)


def relay(replies: Mapping[int, Record]) -> dict[int, dict[str, np.ndarray]]:
    """Server side: route every ``relay/to/<k>`` of sender j to k as ``relay/from/<j>``."""
    routed: dict[int, dict[str, np.ndarray]] = {}
    for sender, reply in replies.items():
        for name, blob in reply.arrays.items():
            if not name.startswith(TO):
                continue
            try:
                receiver = int(name[len(TO):])
            except ValueError:
                raise ProtocolError(f"client {sender}: bad relay address {name!r}") from None
            routed.setdefault(receiver, {})[f"{FROM}{sender}"] = blob
    return routed
