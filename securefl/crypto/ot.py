"""Oblivious transfer: elliptic-curve base OT and IKNP OT extension (semi-honest).

**Base OT** — Chou–Orlandi "simplest OT" (Latincrypt 2015) on NIST P-256 with
pycryptodome point arithmetic, 128 OTs batched under one sender key:

* sender: ``a <- Z_q``, sends ``A = aG``;
* receiver with choice ``c_i``: ``b_i <- Z_q``, sends ``B_i = b_i G + c_i A``,
  keeps ``k_i = KDF(i, A, B_i, b_i A)``;
* sender: ``k_i^0 = KDF(i, A, B_i, a B_i)``, ``k_i^1 = KDF(i, A, B_i, a (B_i - A))``.

``KDF`` is SHA-256 of a domain string, the index and the transcript, truncated to
128 bits.  Semi-honest security under CDH in the random-oracle model: ``B_i`` is
uniform whatever ``c_i`` is (the sender learns nothing), and the key the receiver did
not choose is ``KDF(.., a b_i G +/- a^2 G)``-like, which needs CDH to compute.
Known caveats, none of which affects the semi-honest setting claimed here: the
original UC proof of CO15 is flawed against malicious parties (Genç, Iovino, Rial
2017; Hauck & Loss 2017 give a corrected protocol, McQuoid, Rosulek & Roy 2020
"endemic OT" a cleaner one); CO15 over Curve25519 needs cofactor clearing, which is
why P-256 (cofactor 1) is used; hashing the whole transcript into each key follows
the fix of Hauck & Loss.  Points received are validated (on the curve, not the point
at infinity) and a bad one raises :class:`~securefl.errors.ProtocolError`.

**IKNP extension** (Ishai, Kilian, Nissim, Petrank 2003).  Roles swap: the extension
sender ``S`` draws ``s in {0,1}^128`` and is the base-OT *receiver* with choices ``s``;
the extension receiver ``R`` is the base-OT sender and holds seed pairs ``(k_i^0, k_i^1)``.
For a chunk of ``m`` OTs with choice bits ``r``, ``R`` sets ``T^i = G(k_i^0)`` and sends
``U^i = T^i XOR G(k_i^1) XOR r`` (16 bytes per OT); ``S`` computes
``Q^i = G(k_i^{s_i}) XOR s_i U^i = T^i XOR s_i r``.  Transposed (:mod:`securefl.crypto.bits`),
row ``j`` satisfies ``q_j = t_j XOR r_j s``.  Random OT: ``S`` outputs
``H(q_j, j)`` and ``H(q_j XOR s, j)``, ``R`` outputs ``H(t_j, j) = H(q_j XOR r_j s, j)``, with
``H`` the fixed-key TCCR hash of :mod:`securefl.crypto.fixed_key` and ``j`` the global
OT index (``chunk * 2^32 + position``) as tweak.  ``G`` is AES-CTR under the seed with
the chunk number as nonce (the stream of :func:`securefl.crypto.prg.expand`), so chunks
are independent streams and memory stays bounded; chunks are small (2^16 OTs) so the
bit matrices, the transpose and the hashing stay in the L2 cache.

Who learns what (semi-honest): ``S`` sees only ``U``, which is ``T XOR G(k^1) XOR r``
with ``G(k_i^{1-s_i})`` pseudorandom to it, so ``r`` stays hidden; ``R`` learns
``H(q_j XOR r_j s, j)`` only, and the other output needs ``s``, which the TCCR hash keeps
hidden.  Correlated OT with vector messages (used by SHADE) is built on these random
OTs in :mod:`securefl.crypto.shade`: each 128-bit output is expanded by fixed-key AES and
one correction per OT turns the pair of expansions into ``(m0, m0 + Delta)``.

Why by hand: no maintained Python library offers OT; libOTe/emp-ot are C++ and not
installable here.  Everything is vectorised over whole chunks; nothing loops per OT.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from Crypto.PublicKey import ECC
from Crypto.PublicKey.ECC import EccPoint
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from securefl.crypto.bits import transpose_bits
from securefl.crypto.channel import Message, Network
from securefl.crypto.fixed_key import FixedKeyAES
from securefl.crypto.kernels import xor_block_into, xor_rows_where
from securefl.crypto.prg import counter_blocks
from securefl.crypto.rand import RandomSource, random_source
from securefl.errors import InputError, ProtocolError

KAPPA = 128
"""Computational security parameter: number of base OTs and bits per OT output."""

CURVE = "P-256"
_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551
_POINT_BYTES = 64
_TWEAK_SHIFT = 32
DEFAULT_CHUNK = 1 << 16
"""OTs per extension chunk: the 128 x m bit matrices (1 MiB) stay cache resident."""
HASH_BLOCK = 1 << 14
"""OTs hashed per TCCR call (256 KiB of blocks, L2 resident)."""


def _key_pair(rng: RandomSource) -> tuple[int, EccPoint]:
    """A uniform secret ``x`` in ``[1, q)`` and ``xG``.

    ``xG`` comes from ``ECC.construct``, whose fixed-base multiplication uses
    pycryptodome's precomputed tables for G: ~4x faster than ``G * x`` on a point object.
    """
    secret = 1 + rng.below(_ORDER - 1)
    return secret, ECC.construct(curve=CURVE, d=secret).pointQ


def _encode(points: list[EccPoint]) -> np.ndarray:
    raw = b"".join(int(p.x).to_bytes(32, "big") + int(p.y).to_bytes(32, "big") for p in points)
    return np.frombuffer(raw, dtype=np.uint8).reshape(len(points), _POINT_BYTES)


def _decode(array: np.ndarray, name: str) -> list[EccPoint]:
    array = np.asarray(array)
    if array.ndim != 2 or array.shape[1] != _POINT_BYTES or array.dtype != np.uint8:
        raise ProtocolError(f"{name}: expected (k, {_POINT_BYTES}) uint8 points, got {array.shape}")
    points = []
    for row in array:
        x, y = int.from_bytes(row[:32].tobytes(), "big"), int.from_bytes(row[32:].tobytes(), "big")
        try:
            point = EccPoint(x, y, curve=CURVE)
        except ValueError:
            raise ProtocolError(f"{name}: point not on {CURVE}") from None
        if point.is_point_at_infinity():
            raise ProtocolError(f"{name}: point at infinity")
        points.append(point)
    return points


def _kdf(index: int, a_point: bytes, b_point: bytes, shared: EccPoint) -> bytes:
    digest = hashlib.sha256(b"securefl CO15 base OT v1")
    digest.update(index.to_bytes(4, "big") + a_point + b_point)
    digest.update(int(shared.x).to_bytes(32, "big") + int(shared.y).to_bytes(32, "big"))
    return digest.digest()[:16]


@dataclass
class BaseOTSender:
    """Chou–Orlandi sender of ``count`` random OTs: outputs key pairs ``(k^0_i, k^1_i)``."""

    count: int = KAPPA
    rng: RandomSource = field(default_factory=RandomSource)
    _secret: int | None = field(default=None, repr=False)
    _a_point: EccPoint | None = field(default=None, repr=False)

    def first(self, sender: int, receiver: int) -> Message:
        """Round 1: ``A = aG``."""
        self._secret, self._a_point = _key_pair(self.rng)
        return Message(sender, receiver, "baseot/A", (_encode([self._a_point]),))

    def finish(self, message: Message) -> tuple[np.ndarray, np.ndarray]:
        """Round 3: the key pairs, as two ``(count, 16)`` uint8 arrays."""
        if self._secret is None or self._a_point is None:
            raise ProtocolError("base OT: finish() before first()")
        if len(message.arrays) != 1 or message.arrays[0].shape[0:1] != (self.count,):
            raise ProtocolError(f"base OT: expected {self.count} receiver points")
        b_points = _decode(message.arrays[0], "baseot/B")
        a_bytes = _encode([self._a_point]).tobytes()
        a_times_a = self._a_point * self._secret
        keys = np.empty((2, self.count, 16), dtype=np.uint8)
        for index, (point, raw) in enumerate(zip(b_points, message.arrays[0])):
            shared = point * self._secret
            keys[0, index] = np.frombuffer(_kdf(index, a_bytes, raw.tobytes(), shared), np.uint8)
            keys[1, index] = np.frombuffer(
                _kdf(index, a_bytes, raw.tobytes(), shared + (-a_times_a)), np.uint8
            )
        return keys[0], keys[1]


@dataclass
class BaseOTReceiver:
    """Chou–Orlandi receiver with choice bits ``choices``: outputs ``k^{c_i}_i``."""

    choices: np.ndarray
    rng: RandomSource = field(default_factory=RandomSource)

    def respond(self, message: Message) -> tuple[Message, np.ndarray]:
        """Round 2: ``B_i = b_i G + c_i A``; returns the reply and the ``(count, 16)`` keys."""
        choices = np.asarray(self.choices)
        if choices.ndim != 1 or not np.isin(choices, (0, 1)).all():
            raise InputError("choices", choices, "must be a 1-D array of 0/1")
        if len(message.arrays) != 1:
            raise ProtocolError("base OT: expected one point A")
        (a_point,) = _decode(message.arrays[0], "baseot/A")
        a_bytes = message.arrays[0].tobytes()
        b_points, keys = [], np.empty((choices.size, 16), dtype=np.uint8)
        for index, choice in enumerate(choices):
            secret, point = _key_pair(self.rng)
            if choice:
                point = point + a_point
            b_points.append(point)
            raw = _encode([point]).tobytes()
            keys[index] = np.frombuffer(_kdf(index, a_bytes, raw, a_point * secret), np.uint8)
        reply = Message(message.receiver, message.sender, "baseot/B", (_encode(b_points),))
        return reply, keys


def _bits_to_words(bits: np.ndarray) -> np.ndarray:
    """0/1 vector of length ``m`` (a multiple of 64) -> ``(m // 64,)`` uint64, little bit order."""
    return np.packbits(bits.astype(np.uint8, copy=False), bitorder="little").view(np.uint64)


def _tweaks(chunk: int, count: int) -> np.ndarray:
    if not 0 <= chunk < 1 << 31:
        raise InputError("chunk", chunk, "must be in [0, 2^31)")
    if count > 1 << _TWEAK_SHIFT:
        raise InputError("count", count, "at most 2^32 OTs per chunk")
    return (np.uint64(chunk) << np.uint64(_TWEAK_SHIFT)) + np.arange(count, dtype=np.uint64)


def _padded(count: int) -> int:
    return -(-count // 64) * 64


@dataclass
class RowPRG:
    """``G(k_i)`` for 128 seeds: one AES-ECB context per seed, created once, then reused.

    Row ``i`` of chunk ``c`` is exactly ``prg.expand(k_i, ..., nonce=c)`` (AES-CTR), but the
    counter blocks are laid out once per chunk and shared by all rows, and no key
    schedule is repeated: per chunk the cost is 128 ``update_into`` calls.
    """

    seeds: np.ndarray
    _contexts: list | None = field(default=None, repr=False)
    _matrix: np.ndarray | None = field(default=None, repr=False)

    def fill(self, chunk: int, words: int) -> np.ndarray:
        """A ``(128, words)`` uint64 view whose row ``i`` is the chunk's stream of seed ``i``.

        The view is into a buffer reused by the next call (no page faults per chunk).
        """
        if self._contexts is None:
            self._contexts = [
                Cipher(algorithms.AES(seed.tobytes()), modes.ECB()).encryptor() for seed in self.seeds
            ]
        counters = memoryview(counter_blocks(-(-words // 2), nonce=chunk)).cast("B")
        shape = (len(self._contexts), 2 * -(-words // 2) + 2)
        if self._matrix is None or self._matrix.shape != shape:
            self._matrix = np.empty(shape, dtype=np.uint64)
        matrix = self._matrix
        for context, row in zip(self._contexts, matrix):
            context.update_into(counters, memoryview(row).cast("B"))
        return matrix[:, :words]


def _hash_blocks(
    hasher: FixedKeyAES, x: np.ndarray, chunk: int, out: np.ndarray, delta: np.ndarray | None = None
) -> np.ndarray:
    """TCCR-hash ``x`` (XOR the block ``delta`` first, if given) in L2-sized pieces,
    tweak = global OT index."""
    tweaks = _tweaks(chunk, x.shape[0])
    masked = np.empty((min(HASH_BLOCK, x.shape[0]), 2), dtype=np.uint64) if delta is not None else None
    for start in range(0, x.shape[0], HASH_BLOCK):
        piece = x[start : start + HASH_BLOCK]
        if masked is not None:
            piece = xor_block_into(piece, delta, masked[: piece.shape[0]])
        hasher.tccr(piece, tweaks[start : start + HASH_BLOCK], out=out[start : start + HASH_BLOCK])
    return out


@dataclass
class IKNPSender:
    """Extension sender: holds ``s`` (``delta``) and the base keys ``k_i^{s_i}``."""

    delta: np.ndarray
    seeds: np.ndarray
    hasher: FixedKeyAES = field(default_factory=FixedKeyAES)
    _prg: RowPRG | None = field(default=None, repr=False)

    @property
    def delta_bits(self) -> np.ndarray:
        """``s`` as 128 bits (little order within each 64-bit word)."""
        return np.unpackbits(self.delta.view(np.uint8), bitorder="little")

    def extend(self, message: Message, chunk: int, count: int) -> np.ndarray:
        """``q_j`` for the ``count`` OTs of ``chunk`` as ``(count, 2)`` uint64 blocks."""
        words = _padded(count) // 64
        if len(message.arrays) != 1:
            raise ProtocolError("IKNP: expected one matrix U")
        u_matrix = message.arrays[0]
        if u_matrix.shape != (KAPPA, words) or u_matrix.dtype != np.uint64:
            raise ProtocolError(f"IKNP: U has shape {u_matrix.shape}, expected {(KAPPA, words)}")
        if self._prg is None:
            self._prg = RowPRG(self.seeds)
        q_matrix = self._prg.fill(chunk, words)
        xor_rows_where(q_matrix, u_matrix, self.delta_bits)
        return transpose_bits(q_matrix)[:count]

    def random_ot(
        self, q: np.ndarray, chunk: int, out0: np.ndarray | None = None, out1: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The two 128-bit messages ``H(q_j, j)`` and ``H(q_j XOR s, j)`` of each OT."""
        out0 = np.empty_like(q) if out0 is None else out0
        out1 = np.empty_like(q) if out1 is None else out1
        _hash_blocks(self.hasher, q, chunk, out0)
        _hash_blocks(self.hasher, q, chunk, out1, delta=self.delta)
        return out0, out1


@dataclass
class IKNPReceiver:
    """Extension receiver: holds both base keys ``(k_i^0, k_i^1)`` of every base OT."""

    seeds0: np.ndarray
    seeds1: np.ndarray
    hasher: FixedKeyAES = field(default_factory=FixedKeyAES)
    _prg0: RowPRG | None = field(default=None, repr=False)
    _prg1: RowPRG | None = field(default=None, repr=False)

    def extend(self, choices: np.ndarray, chunk: int, sender: int, receiver: int) -> tuple[Message, np.ndarray]:
        """Message ``U`` for ``chunk`` with choice bits ``choices``, and ``t_j`` as ``(m, 2)`` blocks."""
        count = choices.shape[0]
        padded = _padded(count)
        bits = np.zeros(padded, dtype=np.uint8)
        bits[:count] = choices
        if self._prg0 is None:
            self._prg0, self._prg1 = RowPRG(self.seeds0), RowPRG(self.seeds1)
        t_matrix = self._prg0.fill(chunk, padded // 64)
        u_matrix = self._prg1.fill(chunk, padded // 64)
        u_matrix ^= t_matrix
        u_matrix ^= _bits_to_words(bits)
        message = Message(receiver, sender, f"iknp/U/{chunk}", (np.ascontiguousarray(u_matrix),))
        return message, transpose_bits(t_matrix)[:count]

    def random_ot(self, t: np.ndarray, chunk: int, out: np.ndarray | None = None) -> np.ndarray:
        """The chosen 128-bit messages ``H(t_j, j)``."""
        return _hash_blocks(self.hasher, t, chunk, np.empty_like(t) if out is None else out)


def iknp_setup(
    network: Network,
    *,
    sender: int,
    receiver: int,
    sender_rng: RandomSource,
    receiver_rng: RandomSource,
) -> tuple[IKNPSender, IKNPReceiver]:
    """Run the 128 base OTs between ``sender`` (extension sender) and ``receiver``.

    The extension receiver acts as base-OT sender; the extension sender picks ``s``
    from ``sender_rng`` and uses its bits as base-OT choices.
    """
    delta = sender_rng.array(2, np.uint64)
    base_sender = BaseOTSender(count=KAPPA, rng=receiver_rng)
    base_receiver = BaseOTReceiver(
        choices=np.unpackbits(delta.view(np.uint8), bitorder="little"), rng=sender_rng
    )
    first = network.deliver(base_sender.first(receiver, sender))
    reply, chosen = base_receiver.respond(first)
    seeds0, seeds1 = base_sender.finish(network.deliver(reply))
    return IKNPSender(delta=delta, seeds=chosen), IKNPReceiver(seeds0=seeds0, seeds1=seeds1)


@dataclass
class RandomOTResult:
    """Outcome of :func:`random_ot`: both parties' outputs plus cost figures."""

    messages0: np.ndarray
    messages1: np.ndarray
    choices: np.ndarray
    received: np.ndarray
    bytes_sent: dict[int, int]
    base_seconds: float
    extension_seconds: float
    extension_cpu_seconds: float

    @property
    def bytes_total(self) -> int:
        """Bytes that crossed the network."""
        return sum(self.bytes_sent.values())


def random_ot(
    m: int,
    *,
    seed: bytes | int | None = None,
    chunk: int = DEFAULT_CHUNK,
    choices: np.ndarray | None = None,
    network: Network | None = None,
    progress: Callable[[int], None] | None = None,
    out: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> RandomOTResult:
    """``m`` random 1-out-of-2 OTs of 128-bit messages, both parties in this process.

    Party 0 is the OT sender, party 1 the receiver; ``choices`` defaults to random bits.
    Returns the sender's two messages, the receiver's choices and received messages.
    ``progress`` (optional) is a callable ``advance(ots_done)``.  ``out`` optionally
    gives three ``(m, 2)`` uint64 arrays for (messages0, messages1, received), so a
    caller can reuse memory instead of page-faulting in fresh arrays.
    """
    if not isinstance(m, (int, np.integer)) or m < 1:
        raise InputError("m", m, "must be a positive integer")
    if not isinstance(chunk, (int, np.integer)) or chunk < 64 or chunk % 64:
        raise InputError("chunk", chunk, "must be a positive multiple of 64")
    rng = random_source(seed)
    if choices is None:
        choices = np.unpackbits(rng.child("choices").array(-(-m // 8)), count=m)
    else:
        choices = np.asarray(choices)
        if choices.shape != (m,) or (choices.size and (choices.min() < 0 or choices.max() > 1)):
            raise InputError("choices", choices, f"must be a length-{m} 0/1 vector")
        choices = choices.astype(np.uint8)
    network = network if network is not None else Network()
    start = time.perf_counter()
    ot_sender, ot_receiver = iknp_setup(
        network, sender=0, receiver=1, sender_rng=rng.child("sender"), receiver_rng=rng.child("receiver")
    )
    base_seconds = time.perf_counter() - start
    if out is None:
        out = tuple(np.empty((m, 2), dtype=np.uint64) for _ in range(3))
    elif len(out) != 3 or any(a.shape != (m, 2) or a.dtype != np.uint64 for a in out):
        raise InputError("out", out, f"must be three ({m}, 2) uint64 arrays")
    messages0, messages1, received = out
    start, cpu_start = time.perf_counter(), time.process_time()
    for index, offset in enumerate(range(0, m, chunk)):
        stop = min(offset + chunk, m)
        message, t = ot_receiver.extend(choices[offset:stop], index, sender=0, receiver=1)
        q = ot_sender.extend(network.deliver(message), index, stop - offset)
        ot_sender.random_ot(q, index, out0=messages0[offset:stop], out1=messages1[offset:stop])
        ot_receiver.random_ot(t, index, out=received[offset:stop])
        if progress is not None:
            progress(stop - offset)
    return RandomOTResult(
        messages0=messages0,
        messages1=messages1,
        choices=choices,
        received=received,
        bytes_sent={party: sent for party, sent in network.bytes_sent().items()},
        base_seconds=base_seconds,
        extension_seconds=time.perf_counter() - start,
        extension_cpu_seconds=time.process_time() - cpu_start,
    )
