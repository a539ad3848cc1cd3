"""Client-to-client links relayed by the server, authenticated end to end.

**Keys.**  Client j (protocol party j, roster client c_j) draws an X25519 key pair (OS
CSPRNG) and sends the *signed key*

    pk_j (32) | sig_j (64) | c_j (int64, 8)    sig_j = Sign_(c_j)(F, "links", session || label || j, C_all, pk_j)

to the server (:func:`advertise`; :mod:`securefl.crypto.identity`: F the federation id,
C_all the digest of the whole roster: a link key is for any member of this transport
session), which relays the table of signed keys to every client (:func:`key_table`).
:func:`install` verifies every row against the client's own roster, for this session,
``label`` and party number, before it keeps a key: a key the server made, one of another
session or round, or one relabelled to another party raises ProtocolError.  Two
clients j, k derive the same 32-byte link key

    K_jk = HKDF-SHA256(X25519(sk_j, pk_k), salt = session, info = "securefl/link/min/max")

(:func:`securefl.crypto.keys.pairwise_secret`).  The server sees pk_j and pk_k only;
under CDH on Curve25519 K_jk is pseudorandom to it, and since it cannot sign a key of its
own (EUF-CMA of Ed25519) it cannot sit between j and k.

**Frames.**  All protocol messages client j sends to k in one step form one *batch*:
the messages are serialised as :class:`~securefl.crypto.channel.Network` frames on the
link j -> k with key K_jk and the 8-byte session id

    batch_session(j, k, b) = SHA-256("securefl/link-batch" || session || j || k || b)[:8]

where b counts the batches j has sent to k (kept in j's state; k keeps the count it has
received).  Each frame carries sender, receiver, tag and sequence number in its header
and a GMAC under a one-time key derived from K_jk, so the receiver checks, for every
frame, that it comes from j, is for k, is the next frame of the next batch of this
session, and is unaltered.  The batch travels as one ``uint8`` array::

    count u32 | per frame: tag length u16 | tag (utf-8) | frame length u64 | frame bytes

(the tag is repeated outside the frame only so the receiver knows what to ask the
channel for; the channel compares it with the MAC-covered tag in the frame header).

**What a relay can do.**  Substitute a public key, relabel one to another party or replay
one of another session or label: :func:`install` refuses the table.  Alter a byte: the
GMAC fails.  Replay an old batch, or drop one
and deliver the next: the batch session differs from the one the receiver expects.
Reorder frames within a batch: the sequence check fails.  Deliver j's batch to another
client or claim it came from another sender: the header endpoints or the key differ.
Each raises :class:`~securefl.errors.ProtocolError` at the receiving client; the link's
receive counter moves only when the whole batch verified.  Links give integrity, not
confidentiality: protocols whose relayed content is not already pseudorandom to the server
encrypt it themselves (see :mod:`securefl.runtime.transport`).

State (in the client's state :class:`~securefl.runtime.records.Record`): ``links/private``
(32 bytes), ``links/ids`` and ``links/keys`` (the verified public-key table), and config
``links/sent/<peer>``, ``links/received/<peer>``.

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
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from securefl.crypto.channel import Frame, Message, Network, frame_size
from securefl.crypto.identity import SIGNATURE_BYTES, Credentials
from securefl.crypto.keys import PUBLIC_KEY_BYTES, KeyPair, pairwise_secret
from securefl.errors import InputError, ProtocolError
from securefl.runtime.records import Record

_PRIVATE = "links/private"
_IDS = "links/ids"
_KEYS = "links/keys"
_SENT = "links/sent/"
_RECEIVED = "links/received/"
TO = "relay/to/"
FROM = "relay/from/"
KEY_PROTOCOL = "links"
SIGNED_KEY_BYTES = PUBLIC_KEY_BYTES + SIGNATURE_BYTES + 8
"""A signed link key: public key, Ed25519 signature, signer's roster id (int64)."""
_LABEL = "links/label"


def _context(state: Record, label: str, party: int) -> bytes:
    return transport_session(state) + b"|" + label.encode() + b"|" + struct.pack(">q", int(party))


def advertise(state: Record, credentials: Credentials, *, me: int, label: str = "") -> np.ndarray:
    """Draw party ``me``'s X25519 key pair (kept in ``state``); returns its signed key, a
    (:data:`SIGNED_KEY_BYTES`,) uint8 row (module docstring).  ``label`` names the key's
    use within the session (a round): a key signed under one label is refused under
    another."""
    pair = KeyPair.generate()
    state.arrays[_PRIVATE] = np.frombuffer(pair.private.private_bytes_raw(), np.uint8).copy()
    state.config[_LABEL] = label
    public = pair.public_array().tobytes()
    signature = credentials.sign(protocol=KEY_PROTOCOL, context=_context(state, label, me),
                                 cohort=credentials.everyone, key=public)
    row = public + signature + struct.pack(">q", credentials.client)
    return np.frombuffer(row, np.uint8).copy()


def key_table(public_keys: Mapping[int, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Server side: the ``(ids, keys)`` table to relay, from each party's signed key."""
    ids = np.array(sorted(int(c) for c in public_keys), dtype=np.int64)
    rows = []
    for c in ids:
        key = np.asarray(public_keys[int(c)])
        if key.shape != (SIGNED_KEY_BYTES,) or key.dtype != np.uint8:
            raise ProtocolError(f"client {c}: signed key must be ({SIGNED_KEY_BYTES},) uint8")
        rows.append(key)
    keys = np.stack(rows) if rows else np.zeros((0, SIGNED_KEY_BYTES), np.uint8)
    return ids, keys


def install(state: Record, ids: np.ndarray, keys: np.ndarray, *, me: int,
            credentials: Credentials) -> None:
    """Verify and store the relayed table of signed keys: every row must carry a roster
    member's signature for this session, label and party, each roster member may hold
    one party only, and this client's own key must be in it unaltered.  Any fault:
    ProtocolError, and nothing is stored."""
    ids, keys = np.asarray(ids), np.asarray(keys)
    if ids.ndim != 1 or ids.dtype.kind not in "iu" or keys.shape != (len(ids), SIGNED_KEY_BYTES) \
            or keys.dtype != np.uint8 or len(set(ids.tolist())) != len(ids):
        raise ProtocolError(f"public-key table must be distinct ids and (m, {SIGNED_KEY_BYTES}) uint8 signed keys")
    if _PRIVATE not in state.arrays:
        raise ProtocolError(f"client {me}: key table before advertising a key")
    label = str(state.config[_LABEL])
    own = _private_key(state).public_key().public_bytes_raw()
    signers: set[int] = set()
    listed = {}
    for party, row in zip(ids.tolist(), keys):
        raw = bytes(row)
        public, signature = raw[:PUBLIC_KEY_BYTES], raw[PUBLIC_KEY_BYTES:PUBLIC_KEY_BYTES + SIGNATURE_BYTES]
        (signer,) = struct.unpack(">q", raw[-8:])
        if signer in signers:
            raise ProtocolError(f"client {me}: roster client {signer} signed two keys in the table")
        signers.add(signer)
        credentials.verify(signature, protocol=KEY_PROTOCOL, context=_context(state, label, party),
                           sender=signer, cohort=credentials.everyone, key=public)
        listed[int(party)] = (public, signer)
    if listed.get(int(me)) != (own, credentials.client):
        raise ProtocolError(f"client {me}: own public key missing or altered in the key table")
    state.arrays[_IDS] = ids.astype(np.int64)
    state.arrays[_KEYS] = np.stack([np.frombuffer(listed[int(p)][0], np.uint8) for p in ids]) \
        if len(ids) else np.zeros((0, PUBLIC_KEY_BYTES), np.uint8)


def peers(state: Record) -> tuple[int, ...]:
    """Clients in the installed key table."""
    return tuple(int(i) for i in state.arrays.get(_IDS, np.zeros(0, np.int64)))


def _private_key(state: Record) -> X25519PrivateKey:
    return X25519PrivateKey.from_private_bytes(bytes(state.arrays[_PRIVATE]))


def _link_key(state: Record, me: int, peer: int) -> bytes:
    ids = state.arrays.get(_IDS)
    if ids is None:
        raise ProtocolError(f"client {me}: no key table installed")
    where = np.flatnonzero(ids == peer)
    if where.size != 1 or peer == me:
        raise ProtocolError(f"client {me}: no link to client {peer}")
    return pairwise_secret(_private_key(state), state.arrays[_KEYS][int(where[0])],
                           session=transport_session(state), me=me, peer=peer, label="link")


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
                      key=_link_key(state, me, peer))
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
                      key=_link_key(state, me, peer))
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
