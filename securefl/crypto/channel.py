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

The one-time key ``k`` is HMAC-SHA256(link key, session || seq || sender || receiver)
truncated to 128 bits, so every frame has a fresh GMAC key (and the fixed all-zero
nonce is never reused under a key).  GMAC is AES-GCM with an empty plaintext and the
frame as associated data, fed buffer by buffer, so the tag depends only on the wire
bytes, not on how the body is split.  Why GMAC and not Poly1305: both are
Wegman–Carter MACs with a 16-byte tag, but OpenSSL's GHASH (PCLMULQDQ) runs ~28 GB/s
on the project machine and releases the GIL, Poly1305 ~10 GB/s holding it, and SHADE
pushes tens of GB through this channel.

This models the authenticated point-to-point channels (TLS) that the semi-honest protocols of FedProp and Bonawitz et
al. 2017 assume; it does not hide the payload (confidentiality of relayed
client-to-client messages is the job of the protocols' own AES-GCM layer).

On delivery the receiver checks magic, session, sender, receiver, round tag,
sequence number (exactly the next one on that link: a replay, gap or reordering is
rejected), header and body lengths and the MAC.  Any failure raises
:class:`~securefl.errors.ProtocolError`; a frame is never half-accepted.

The body is kept as zero-copy views of the sender's arrays (the bulk of SHADE traffic
is tens of GB); ``bytes(frame)`` gives the contiguous wire bytes for a real transport
and :meth:`Frame.from_bytes` parses them back.

Who learns what: the network (and a test observing it) sees every frame; a party sees
exactly the frames addressed to it.
"""

from __future__ import annotations

import hmac as _hmac
import hashlib
import secrets
import struct
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Hashable

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from securefl.errors import InputError, ProtocolError

MAGIC = b"SFL1"
SERVER = -1
"""Party id of the server; clients are 0, 1, 2, ..."""

_FIXED = struct.Struct(">4s8sQiiH")
_MAC_BYTES = 16


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
    def from_bytes(cls, data: bytes) -> "Frame":
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
    for array in message.arrays:
        dtype = array.dtype.str.encode()
        parts.append(struct.pack(">B", len(dtype)) + dtype)
        parts.append(struct.pack(f">B{array.ndim}Q", array.ndim, *array.shape))
    return b"".join(parts)


def _decode_header(header: bytes) -> tuple[bytes, int, int, int, str, list[tuple[np.dtype, tuple]]]:
    try:
        magic, session, seq, sender, receiver, tag_len = _FIXED.unpack_from(header, 0)
        if magic != MAGIC:
            raise ProtocolError(f"bad magic {magic!r}")
        offset = _FIXED.size
        tag = header[offset : offset + tag_len].decode()
        offset += tag_len
        (count,) = struct.unpack_from(">H", header, offset)
        offset += 2
        specs = []
        for _ in range(count):
            (dlen,) = struct.unpack_from(">B", header, offset)
            dtype = np.dtype(header[offset + 1 : offset + 1 + dlen].decode())
            offset += 1 + dlen
            (ndim,) = struct.unpack_from(">B", header, offset)
            shape = struct.unpack_from(f">{ndim}Q", header, offset + 1)
            offset += 1 + 8 * ndim
            specs.append((dtype, tuple(shape)))
    except (struct.error, UnicodeDecodeError, TypeError, ValueError) as exc:
        raise ProtocolError(f"malformed frame header: {exc}") from None
    if offset != len(header):
        raise ProtocolError("malformed frame header: trailing bytes")
    return session, seq, sender, receiver, tag, specs


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

    ``send`` serialises and meters, ``receive`` verifies and deserialises.  Queues are
    exposed through :meth:`queue` so tests can drop, corrupt, reorder or replay frames.
    """

    session: bytes = field(default_factory=lambda: secrets.token_bytes(8))
    key: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    stats: dict[Hashable, LinkStats] = field(default_factory=lambda: defaultdict(LinkStats))
    _queues: dict[tuple[int, int], deque] = field(default_factory=lambda: defaultdict(deque))
    _next_send: dict[tuple[int, int], int] = field(default_factory=lambda: defaultdict(int))
    _next_recv: dict[tuple[int, int], int] = field(default_factory=lambda: defaultdict(int))

    def __post_init__(self) -> None:
        if len(self.session) != 8:
            raise InputError("session", self.session, "must be 8 bytes")

    def _mac_key(self, seq: int, sender: int, receiver: int) -> bytes:
        info = self.session + struct.pack(">Qii", seq, sender, receiver)
        return _hmac.new(self.key, info, hashlib.sha256).digest()

    @staticmethod
    def _mac(key: bytes, header: bytes, body: list[memoryview]) -> bytes:
        gmac = Cipher(algorithms.AES(key[:16]), modes.GCM(bytes(12))).encryptor()
        gmac.authenticate_additional_data(header)
        for buffer in body:
            gmac.authenticate_additional_data(buffer)
        gmac.finalize()
        return gmac.tag

    def send(self, message: Message) -> int:
        """Serialise, meter and enqueue ``message``; returns its size in bytes."""
        link = (message.sender, message.receiver)
        seq = self._next_send[link]
        self._next_send[link] = seq + 1
        header = _encode_header(self.session, seq, message)
        body = [memoryview(np.ascontiguousarray(a).reshape(-1).view(np.uint8)) for a in message.arrays]
        mac = self._mac(self._mac_key(seq, *link), header, body)
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
        sizes = [dtype.itemsize * int(np.prod(shape, dtype=np.int64)) for dtype, shape in specs]
        body_len = sum(b.nbytes for b in frame.body)
        if body_len != sum(sizes):
            raise ProtocolError(f"frame body has {body_len} bytes, header promises {sum(sizes)}")
        expected_mac = self._mac(self._mac_key(seq, *link), frame.header, frame.body)
        if not _hmac.compare_digest(expected_mac, frame.mac):
            raise ProtocolError(f"MAC check failed on round {tag!r}: frame tampered")
        self._next_recv[link] = expected + 1
        body = frame.body[0] if len(frame.body) == 1 else memoryview(b"".join(frame.body))
        arrays, offset = [], 0
        for (dtype, shape), size in zip(specs, sizes):
            arrays.append(np.frombuffer(body, dtype=dtype, count=size // max(dtype.itemsize, 1), offset=offset).reshape(shape))
            offset += size
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
