"""Metered, authenticated links between parties: every message is bytes, every byte counted.

Sans-I/O protocol parties produce and consume :class:`Message` objects; a runner moves
them over a :class:`Network`, which serialises each message into a :class:`Frame`,
counts its bytes for sender and receiver, and checks it on delivery.

Wire format of a frame (all integers big-endian)::

    header  = MAGIC "SFL1" | session id (8) | seq u64 | sender i32 | receiver i32
              | tag length u16 | tag (utf-8) | array count u16
              | per array: dtype length u8 | dtype str | ndim u8 | shape u64*ndim
    body    = the arrays' bytes, C order, one after another
    mac     = GMAC(k, header || body)   (16 bytes)

The one-time key ``k`` is HMAC-SHA256(K_ab, session || seq || sender || receiver)
truncated to 128 bits, so every frame has a fresh GMAC key (and the fixed all-zero
nonce is never reused under a key).  GMAC is AES-GCM with an empty plaintext and the
frame as associated data, fed buffer by buffer, so the tag depends only on the wire
bytes, not on how the body is split (:func:`securefl.crypto.ghash.gmac`: a 256-bit
``VPCLMULQDQ`` GHASH where the CPU has one and OpenSSL would not use it, 12–13.5 against 7.5
GB/s on an AMD EPYC; OpenSSL's elsewhere; the same tag).  Why GMAC and not Poly1305: both are
Wegman–Carter MACs with a 16-byte tag, but OpenSSL's GHASH (PCLMULQDQ) ran ~28 GB/s on
one project machine (Intel Xeon) and 6–7.5 GB/s on another (AMD EPYC, 2026-11-28) and
releases the GIL, Poly1305 ~10 and 6–6.6 GB/s holding it, and SHADE pushes tens of GB
through this channel.

**Per-link keys.**  Every party p (the server included) holds an X25519 key pair
(sk_p, pk_p); the public keys are relayed by the server (:class:`LinkKeys` is that
directory).  The link between parties a and b is keyed by their agreement

    K_ab = HKDF-SHA256(X25519(sk_a, pk_b), salt = "securefl/channel", info = min(a,b) || max(a,b)),

which a and b compute alone (X25519(sk_a, pk_b) = X25519(sk_b, pk_a)).  So the key of a
link between two clients is one the relaying server cannot compute (CDH on Curve25519,
given pk_a and pk_b), and the server's own links are keyed by its own agreements with
each client, separately.  :meth:`LinkKeys.party` gives one party's view: its private key
and the directory; it derives the keys of links it ends and refuses any other
(:class:`~securefl.errors.InputError`).  :class:`Network` MACs a frame with the sender's
view and verifies it with the receiver's, so a relay that alters a client-to-client
frame and re-MACs it under any key it holds is rejected.  (A relay that substituted
public keys would be an active man in the middle; the semi-honest server relays them
faithfully, and a deployment pins them, e.g. by a PKI.)

This models the authenticated point-to-point channels (TLS) that the semi-honest protocols of FedProp and Bonawitz et
al. 2017 assume; it does not hide the payload (confidentiality of relayed
client-to-client messages is the job of the protocols' own AES-GCM layer).

On delivery the receiver checks magic, session, sender, receiver, round tag,
sequence number (exactly the next one on that link: a replay, gap or reordering is
rejected), the header's array specs (dtype from an allow-list of fixed-size numeric
dtypes, at most :data:`MAX_NDIM` dimensions, sizes computed in Python integers so a
declared shape cannot wrap), header and body lengths and the MAC.  Any failure — a
malformed, truncated, tampered, misrouted or replayed frame, whatever its bytes —
raises :class:`~securefl.errors.ProtocolError`; a frame is never half-accepted.

The body is kept as zero-copy views of the sender's arrays (the bulk of SHADE traffic
is tens of GB); ``bytes(frame)`` gives the contiguous wire bytes for a real transport
and :meth:`Frame.from_bytes` parses them back.

Who learns what: the network (and a test observing it) sees every frame; a party sees
exactly the frames addressed to it.
"""

from __future__ import annotations

import hmac as _hmac
import math
import secrets
import struct
import threading
from collections import defaultdict, deque
from collections.abc import Hashable
from dataclasses import dataclass, field

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from securefl.crypto import ghash
from securefl.errors import InputError, ProtocolError

MAGIC = b"SFL1"
SERVER = -1
"""Party id of the server; clients are 0, 1, 2, ..."""

_FIXED = struct.Struct(">4s8sQiiH")
_MAC_BYTES = 16
MAX_NDIM = 32
MAX_ARRAY_BYTES = 2**63 - 1
"""numpy refuses a shape whose non-zero axes span more bytes than this, even when another
axis is 0 and the array is empty."""
"""Most dimensions a frame may declare for one array."""

_ALLOWED_DTYPES: dict[str, np.dtype] = {
    dtype.str: dtype
    for base in ("b1", "i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8", "f2", "f4", "f8", "c8", "c16")
    for dtype in (np.dtype(base).newbyteorder("<"), np.dtype(base).newbyteorder(">"))
}
"""Array dtypes a frame may carry (fixed-size numbers and booleans, either byte order)."""


@dataclass(frozen=True)
class Message:
    """One protocol message: a round ``tag``, its endpoints and a tuple of numpy arrays."""

    sender: int
    receiver: int
    tag: str
    arrays: tuple[np.ndarray, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "arrays", tuple(np.asarray(a) for a in self.arrays))


@dataclass
class Frame:
    """A serialised message: header bytes, body buffers (zero-copy) and MAC."""

    header: bytes
    body: list[memoryview]
    mac: bytes

    def __len__(self) -> int:
        return len(self.header) + sum(b.nbytes for b in self.body) + len(self.mac)

    def __bytes__(self) -> bytes:
        return b"".join([self.header, *(bytes(b) for b in self.body), self.mac])

    @classmethod
    def from_bytes(cls, data: bytes | memoryview) -> Frame:
        """Split contiguous wire bytes into header, body and MAC (lengths from the header)."""
        header_len = _header_length(data)
        if len(data) < header_len + _MAC_BYTES:
            raise ProtocolError(f"truncated frame: {len(data)} bytes")
        return cls(
            header=bytes(data[:header_len]),
            body=[memoryview(data)[header_len : len(data) - _MAC_BYTES]],
            mac=bytes(data[len(data) - _MAC_BYTES :]),
        )


def _header_length(data: bytes) -> int:
    """Length of the header at the start of ``data`` (parses only lengths)."""
    try:
        offset = _FIXED.size
        (tag_len,) = struct.unpack_from(">H", data, offset - 2)
        offset += tag_len
        (count,) = struct.unpack_from(">H", data, offset)
        offset += 2
        for _ in range(count):
            (dlen,) = struct.unpack_from(">B", data, offset)
            offset += 1 + dlen
            (ndim,) = struct.unpack_from(">B", data, offset)
            offset += 1 + 8 * ndim
    except struct.error as exc:
        raise ProtocolError(f"truncated frame header: {exc}") from None
    return offset


def _encode_header(session: bytes, seq: int, message: Message) -> bytes:
    tag = message.tag.encode()
    parts = [_FIXED.pack(MAGIC, session, seq, message.sender, message.receiver, len(tag)), tag]
    parts.append(struct.pack(">H", len(message.arrays)))
    for index, array in enumerate(message.arrays):
        if array.dtype.str not in _ALLOWED_DTYPES or array.ndim > MAX_NDIM:
            raise InputError(
                f"message.arrays[{index}]", array,
                f"a frame carries numeric arrays of at most {MAX_NDIM} dimensions "
                f"(dtypes {sorted(_ALLOWED_DTYPES)})",
            )
        dtype = array.dtype.str.encode()
        parts.append(struct.pack(">B", len(dtype)) + dtype)
        parts.append(struct.pack(f">B{array.ndim}Q", array.ndim, *array.shape))
    return b"".join(parts)


def frame_size(message: Message) -> int:
    """Bytes of ``message`` as one :class:`Frame` (header, body, MAC): what
    :meth:`Network.send` meters for it, computed without a network (a transport that moves
    the message another way reports the same protocol bytes)."""
    header = _encode_header(bytes(8), 0, message)
    return len(header) + sum(int(np.asarray(a).nbytes) for a in message.arrays) + _MAC_BYTES


@dataclass(frozen=True)
class _ArraySpec:
    """One array as a header declares it; ``nbytes`` computed in Python integers."""

    dtype: np.dtype
    shape: tuple[int, ...]
    count: int
    nbytes: int


def _decode_header(header: bytes) -> tuple[bytes, int, int, int, str, list[_ArraySpec]]:
    """Parse and validate a header; anything malformed raises :class:`ProtocolError`."""
    try:
        magic, session, seq, sender, receiver, tag_len = _FIXED.unpack_from(header, 0)
        if magic != MAGIC:
            raise ProtocolError(f"bad magic {magic!r}")
        offset = _FIXED.size
        if offset + tag_len > len(header):
            raise ProtocolError("malformed frame header: truncated tag")
        tag = header[offset : offset + tag_len].decode()
        offset += tag_len
        (count,) = struct.unpack_from(">H", header, offset)
        offset += 2
        specs = []
        for _ in range(count):
            (dlen,) = struct.unpack_from(">B", header, offset)
            name = header[offset + 1 : offset + 1 + dlen].decode("ascii")
            dtype = _ALLOWED_DTYPES.get(name)
            if dtype is None or len(name) != dlen:
                raise ProtocolError(f"malformed frame header: dtype {name!r} is not allowed")
            offset += 1 + dlen
            (ndim,) = struct.unpack_from(">B", header, offset)
            if ndim > MAX_NDIM:
                raise ProtocolError(
                    f"malformed frame header: {ndim} dimensions (at most {MAX_NDIM})"
                )
            shape = tuple(int(d) for d in struct.unpack_from(f">{ndim}Q", header, offset + 1))
            if math.prod(d for d in shape if d) * dtype.itemsize > MAX_ARRAY_BYTES:
                raise ProtocolError(
                    f"malformed frame header: shape {shape} of {name} exceeds what numpy "
                    "can index (even an empty array)"
                )
            offset += 1 + 8 * ndim
            elements = math.prod(shape)
            specs.append(_ArraySpec(dtype, shape, elements, elements * dtype.itemsize))
    except (struct.error, UnicodeDecodeError) as exc:
        raise ProtocolError(f"malformed frame header: {exc}") from None
    if offset != len(header):
        raise ProtocolError("malformed frame header: trailing bytes")
    return session, seq, sender, receiver, tag, specs


# ---------------------------------------------------------------------------- link keys

_LINK_SALT = b"securefl/channel"


def _hkdf(shared: bytes, info: bytes) -> bytes:
    """HKDF-SHA256 (RFC 5869) to 32 bytes: extract with the channel salt, one expand block."""
    prk = _hmac.digest(_LINK_SALT, shared, "sha256")
    return _hmac.digest(prk, info + b"\x01", "sha256")


def link_info(a: int, b: int) -> bytes:
    """HKDF info of the link between parties ``a`` and ``b`` (symmetric in them)."""
    return b"securefl/channel/link" + struct.pack(">ii", min(a, b), max(a, b))


@dataclass
class PartyKeys:
    """What one party holds: its X25519 private key and the public-key directory.

    :meth:`link_key` derives K_ab for a link this party ends; for any other link it has
    no key and raises :class:`~securefl.errors.InputError`.
    """

    party: int
    private: X25519PrivateKey = field(repr=False)
    directory: LinkKeys = field(repr=False)
    _links: dict[int, bytes] = field(default_factory=dict, repr=False)

    @property
    def public(self) -> bytes:
        """This party's public key (32 bytes)."""
        return self.private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)

    def link_key(self, sender: int, receiver: int) -> bytes:
        """K_ab of the link ``sender -> receiver`` (the same key both ways)."""
        if self.party not in (sender, receiver):
            raise InputError(
                "link", (sender, receiver),
                f"party {self.party} is not an endpoint of this link and holds no key for it",
            )
        peer = receiver if sender == self.party else sender
        key = self._links.get(peer)
        if key is None:
            peer_public = X25519PublicKey.from_public_bytes(self.directory.public_key(peer))
            key = _hkdf(self.private.exchange(peer_public), link_info(self.party, peer))
            self._links[peer] = key
        return key


@dataclass
class LinkKeys:
    """The key pairs of the parties of a simulation and their public directory.

    In a deployment each party draws its own pair and the server relays the public
    keys; here one object stands for every party's machine, and a party's secrets are
    reached only through :meth:`party`, its own view.  Private keys come from the OS
    CSPRNG.
    """

    _parties: dict[int, PartyKeys] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def party(self, index: int) -> PartyKeys:
        """Party ``index``'s keys (its pair is drawn on first use)."""
        keys = self._parties.get(index)
        if keys is None:
            with self._lock:
                keys = self._parties.get(index)
                if keys is None:
                    keys = self._parties[index] = PartyKeys(index, X25519PrivateKey.generate(), self)
        return keys

    def public_key(self, index: int) -> bytes:
        """The public key of party ``index`` as the directory relays it."""
        return self.party(index).public


@dataclass(frozen=True)
class SharedKey:
    """The key ``K_ab`` of one link whose two ends already share it (a link key of
    :mod:`securefl.runtime.links`, derived from the ends' identities): :class:`Network`
    takes it in place of a :class:`LinkKeys` directory and MACs that link's frames under
    one-time keys derived from it (:func:`frame_key`), with no key agreement of its own to
    run.  It is either end's view (:meth:`party`) and ends no other link (:meth:`link_key`:
    :class:`~securefl.errors.InputError`)."""

    ends: tuple[int, int]
    key: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.key, bytes) or len(self.key) < 16:
            raise InputError("key", self.key, "must be at least 16 bytes")
        if len(self.ends) != 2 or self.ends[0] == self.ends[1]:
            raise InputError("ends", self.ends, "must be the link's two distinct parties")

    def party(self, index: int) -> SharedKey:
        """The view of party ``index``, an end of the link."""
        if index not in self.ends:
            raise InputError("party", index, f"is not an end of the link {self.ends}")
        return self

    def link_key(self, sender: int, receiver: int) -> bytes:
        """``K_ab`` for a frame ``sender -> receiver`` on this link, either direction."""
        if sorted((sender, receiver)) != sorted(self.ends):
            raise InputError("link", (sender, receiver), f"this key is the link {self.ends}'s only")
        return self.key


def frame_key(link_key: bytes, session: bytes, seq: int, sender: int, receiver: int) -> bytes:
    """The one-time GMAC key of frame ``seq`` on ``sender -> receiver`` (16 bytes)."""
    info = session + struct.pack(">Qii", seq, sender, receiver)
    return _hmac.digest(link_key, info, "sha256")[:16]


def frame_mac(key: bytes, header: bytes, body: list[memoryview]) -> bytes:
    """GMAC (AES-GCM, empty plaintext) of ``header || body`` under a one-time ``key``."""
    return ghash.gmac(key[:16], bytes(12), [header, *body])


@dataclass
class LinkStats:
    """Byte and message counters of one party."""

    bytes_sent: int = 0
    bytes_received: int = 0
    messages_sent: int = 0
    messages_received: int = 0


@dataclass
class Network:
    """In-process transport for sans-I/O parties: per-link FIFO queues of frames.

    ``send`` serialises, MACs with the sender's link key and meters; ``receive``
    verifies with the receiver's link key and deserialises.  Queues are exposed through
    :meth:`queue` so tests can drop, corrupt, reorder or replay frames.  ``keys`` holds
    the parties' X25519 pairs (share one :class:`LinkKeys` between networks to keep each
    party's identity across them, or give a :class:`SharedKey` for one link whose ends
    already share its key: two networks, e.g. in two processes, then verify each other's
    frames).
    """

    session: bytes = field(default_factory=lambda: secrets.token_bytes(8))
    keys: LinkKeys | SharedKey | None = None
    stats: dict[Hashable, LinkStats] = field(default_factory=lambda: defaultdict(LinkStats))
    _queues: dict[tuple[int, int], deque] = field(default_factory=lambda: defaultdict(deque))
    _next_send: dict[tuple[int, int], int] = field(default_factory=lambda: defaultdict(int))
    _next_recv: dict[tuple[int, int], int] = field(default_factory=lambda: defaultdict(int))

    def __post_init__(self) -> None:
        if not isinstance(self.session, bytes) or len(self.session) != 8:
            raise InputError("session", self.session, "must be 8 bytes")
        if self.keys is None:
            self.keys = LinkKeys()

    def _mac_key(self, seq: int, sender: int, receiver: int, holder: int) -> bytes:
        link_key = self.keys.party(holder).link_key(sender, receiver)
        return frame_key(link_key, self.session, seq, sender, receiver)

    def send(self, message: Message) -> int:
        """Serialise, meter and enqueue ``message``; returns its size in bytes."""
        link = (message.sender, message.receiver)
        seq = self._next_send[link]
        self._next_send[link] = seq + 1
        header = _encode_header(self.session, seq, message)
        body = [memoryview(np.ascontiguousarray(a).reshape(-1).view(np.uint8)) for a in message.arrays]
        mac = frame_mac(self._mac_key(seq, *link, holder=message.sender), header, body)
        frame = Frame(header, body, mac)
        self._queues[link].append(frame)
        size = len(frame)
        sender_stats, receiver_stats = self.stats[message.sender], self.stats[message.receiver]
        sender_stats.bytes_sent += size
        sender_stats.messages_sent += 1
        receiver_stats.bytes_received += size
        receiver_stats.messages_received += 1
        return size

    def queue(self, sender: int, receiver: int) -> deque:
        """The pending frames on the link ``sender -> receiver`` (for tests and runners)."""
        return self._queues[(sender, receiver)]

    def receive(self, receiver: int, sender: int, tag: str) -> Message:
        """Pop, verify and decode the next frame on ``sender -> receiver``.

        Raises :class:`ProtocolError` if there is none, or it is for another session,
        party or round, out of sequence (replayed or reordered), truncated or tampered.
        """
        link = (sender, receiver)
        queue = self._queues[link]
        if not queue:
            raise ProtocolError(f"no message {tag!r} from party {sender} to party {receiver}")
        frame = queue.popleft()
        session, seq, f_sender, f_receiver, f_tag, specs = _decode_header(frame.header)
        expected = self._next_recv[link]
        if session != self.session:
            raise ProtocolError("frame from another session")
        if (f_sender, f_receiver) != link:
            raise ProtocolError(
                f"frame addressed {f_sender}->{f_receiver} delivered on link {sender}->{receiver}"
            )
        if seq != expected:
            kind = "replayed" if seq < expected else "out-of-order"
            raise ProtocolError(f"{kind} frame: sequence {seq}, expected {expected}")
        if f_tag != tag:
            raise ProtocolError(f"expected round {tag!r}, got {f_tag!r}")
        promised = sum(spec.nbytes for spec in specs)
        body_len = sum(b.nbytes for b in frame.body)
        if body_len != promised:
            raise ProtocolError(f"frame body has {body_len} bytes, header promises {promised}")
        key = self._mac_key(seq, *link, holder=receiver)
        expected_mac = frame_mac(key, frame.header, frame.body)
        if not _hmac.compare_digest(expected_mac, frame.mac):
            raise ProtocolError(f"MAC check failed on round {tag!r}: frame tampered")
        self._next_recv[link] = expected + 1
        body = frame.body[0] if len(frame.body) == 1 else memoryview(b"".join(frame.body))
        arrays, offset = [], 0
        for spec in specs:
            data = np.frombuffer(body, dtype=spec.dtype, count=spec.count, offset=offset)
            arrays.append(data.reshape(spec.shape))
            offset += spec.nbytes
        return Message(sender, receiver, tag, tuple(arrays))

    def deliver(self, message: Message) -> Message:
        """Send then immediately receive ``message`` (the common runner step)."""
        self.send(message)
        return self.receive(message.receiver, message.sender, message.tag)

    def bytes_sent(self) -> dict[Hashable, int]:
        """Bytes sent per party."""
        return {party: s.bytes_sent for party, s in self.stats.items()}

    def bytes_total(self) -> int:
        """Bytes that crossed the network."""
        return sum(s.bytes_sent for s in self.stats.values())
