"""Oblivious transfer: X25519 base OT, and IKNP OT extension run across many sessions.

**Base OT** (:class:`BaseOTSender`, :class:`BaseOTReceiver`): 128 random 1-out-of-2 OTs of
128-bit keys batched under one sender key, on X25519 (RFC 7748) through ``cryptography``,
using nothing but the X25519 function ``X(k, u)`` (clamped scalar ``k`` times the point of
u-coordinate ``u``).  ``G`` is the base point (u = 9), ``T`` a fixed point of the
prime-order subgroup whose discrete logarithm nobody knows (:data:`CRS_POINT`: SHA-256 of
a domain string, try-and-increment onto the curve, times a public clamped scalar to clear
the cofactor).  With ``ctx`` the setup context (federation, the two parties' identities,
:func:`setup_context`):

* sender: ``a`` random, sends ``A = X(a, G) = aG``;
* receiver, choice ``c_i``: ``b_i`` random; ``P_i^{c_i} = b_i G`` and ``P_i^{1-c_i} = b_i T``;
  sends ``(P_i^0, P_i^1)``; keeps ``k_i = KDF(ctx, i, c_i, A, P_i^0, P_i^1, X(b_i, A))``;
* sender: ``k_i^j = KDF(ctx, i, j, A, P_i^0, P_i^1, X(a, P_i^j))`` for ``j = 0, 1``.

Correct because ``X(a, b_i G) = a b_i G = X(b_i, A)``.  ``KDF`` is SHA-256 of a domain
string and the whole transcript, truncated to 128 bits (a random oracle).

*Who learns what (semi-honest).*  The sender sees ``(b_i G, b_i T)`` in an order set by
``c_i``.  ``(G, T, b G, b T)`` is a DDH tuple; under DDH in the prime-order subgroup of
Curve25519 (for exponents distributed as X25519 clamped scalars, 251 bits of min-entropy,
the distribution every X25519 key exchange relies on) it is indistinguishable from
``(G, T, R_0, R_1)`` for uniform ``R_0, R_1``, and so is the swapped tuple (a DDH tuple with
respect to the generator ``T``): a hybrid over the 128 OTs makes the sender's view
independent of the choices.  The receiver knows ``b_i``; the key it did not choose is
``KDF(.., a b_i T) = KDF(.., b_i (aT))``, and ``aT`` from ``A = aG`` and ``T`` is a CDH instance
(``T``'s logarithm is unknown: it is a hash output); in the random-oracle model the other
key is uniform to it unless it solves CDH.  So: receiver privacy computational (DDH),
sender privacy CDH + ROM, both against semi-honest parties.

*Why this variant and not Chou–Orlandi (CO15) or Masny–Rindal.*  CO15's receiver sends
``B = bG + cA``: a point addition, which X25519's x-only API does not offer, and hand-rolled
Edwards/Weierstrass arithmetic is what this module avoids (the previous P-256 version
through pycryptodome cost ~0.3 s per pair, 90 % of a digits round).  CO15 also has known
subtleties: its UC proof against malicious receivers is flawed (Genç, Iovino, Rial 2017;
Hauck & Loss 2017 give a fix, McQuoid, Rosulek & Roy 2020 "endemic OT" a cleaner one);
over Curve25519 the cofactor must be cleared; each key must hash the whole transcript.
Masny–Rindal needs uniform encodings of group elements (Elligator) or group operations on
the receiver's random-oracle masking.  The construction here needs only the DH function:
its price is computational (DDH) instead of statistical receiver privacy, and a common
reference point ``T``.  It is *not* secure against a malicious
receiver, which can send ``(b G, b' G)`` and learn both keys, and it makes no claim there:
the security model of this project is semi-honest for the clients' protocols (the
server's deviations are caught by the links' MACs).

Received points are validated (:func:`check_point`): 32 bytes, canonical (top bit clear,
``u < 2^255 - 19``), not one of the low-order points, on Curve25519 and not its twist
(the quadratic character of ``u^3 + 486662 u^2 + u`` mod p, a Jacobi symbol through GMP:
the only field arithmetic here);
``P^0 = P^1`` is refused too.  Every failure raises :class:`~securefl.errors.ProtocolError`
naming the message field.  Cost: 3 X25519 evaluations per OT at the receiver, 2 at the
sender: tens of milliseconds per pair instead of 0.3 s.

**IKNP extension** (Ishai, Kilian, Nissim, Petrank 2003).  Roles swap: the extension
sender ``S`` draws ``s in {0,1}^128`` and is the base-OT *receiver* with choices ``s``; the
extension receiver ``R`` is the base-OT sender and holds seed pairs ``(k_i^0, k_i^1)``.  For
a chunk of ``m`` OTs with choice bits ``r``, ``R`` sets ``T^i = PRG(k_i^0)`` and sends
``U^i = T^i XOR PRG(k_i^1) XOR r`` (16 bytes per OT); ``S`` computes
``Q^i = PRG(k_i^{s_i}) XOR s_i U^i = T^i XOR s_i r``.  Transposed (:mod:`securefl.crypto.bits`),
row ``j`` satisfies ``q_j = t_j XOR r_j s``.  Random OT: ``S`` outputs ``H(q_j, w_j)`` and
``H(q_j XOR s, w_j)``, ``R`` outputs ``H(t_j, w_j) = H(q_j XOR r_j s, w_j)``, with ``H`` the
fixed-key TCCR hash of :mod:`securefl.crypto.fixed_key` and ``w_j`` the OT's 128-bit tweak
(below).  ``PRG`` is AES-CTR under the seed (the stream of :func:`securefl.crypto.prg.expand`)
with a 64-bit nonce per chunk, so chunks are independent streams and memory stays bounded;
chunks are small (2^16 OTs) so the bit matrices, the transpose and the hashing stay in the
L2 cache.  Who learns what: ``S`` sees only ``U``, which is ``T XOR PRG(k^1) XOR r`` with
``PRG(k_i^{1-s_i})`` pseudorandom to it, so ``r`` stays hidden; ``R`` learns
``H(q_j XOR r_j s, w_j)`` only, and the other output needs ``s``, which the TCCR hash keeps
hidden.  Correlated OT with vector messages (used by SHADE) is built on these random OTs in
:mod:`securefl.crypto.shade`.

**One setup, many sessions** (:class:`SenderSetup`, :class:`ReceiverSetup`).  The 128 base
OTs run once per ordered pair of parties and federation; every later use of the pair (a
FedProp round) is a *session* ``e = 0, 1, 2, ...`` of the same extension:

* chunk ``c`` of session ``e`` draws its rows from AES-CTR nonce ``e * 2^32 + c`` (a 64-bit
  nonce; ``c < 2^32``), so every (session, chunk) reads its own window of each seed's stream;
* OT ``p`` of that chunk has the 128-bit TCCR tweak ``w = e * 2^64 + c * 2^32 + p``.

Why reusing the base-OT seeds is safe (IKNP's own argument; OT libraries such as libOTe
and emp-ot keep extending from one base-OT set in the same way): after the base OTs the
seeds ``k_i^0, k_i^1`` are used only as PRG
keys, and the extension's state is nothing but a position in those PRG streams.  Running
sessions ``0..E`` with distinct nonces is *the same protocol* as one IKNP extension of all
their OTs laid side by side -- the (session, chunk) nonce is just a longer chunk index --
and IKNP's proof covers any number of OTs for one base-OT set and one ``s``: the columns
``PRG(k_i^{1-s_i})`` that mask ``r`` are fresh PRG output for every chunk of every session, and
the TCCR hash is queried with distinct tweaks for all OTs under one secret ``s`` (its
security game allows polynomially many queries with distinct tweaks).  What would break
it is re-using a position: two ``U`` for one (session, chunk) give ``U XOR U' = r XOR r'``
(the receiver's choices leak), and two sets of outputs under one tweak let the sender's
correlated messages be compared across sessions.  So each party keeps its own counter and
refuses to go back: the receiver *takes* a fresh session number before it sends anything
(:meth:`ReceiverSetup.open`), the sender accepts a number only if it is above every one it
accepted before (:meth:`SenderSetup.accept`: a replayed or out-of-order session raises
:class:`~securefl.errors.ProtocolError`), and every IKNP message is tagged
``iknp/U/<session>/<chunk>``; a message of another session is refused.  Gaps are allowed (an
abandoned session's numbers are simply never used).  Sessions are bounded by ``2^32`` per
setup (then a fresh setup runs).  The setup itself is bound to its context
``ctx = H(federation, sender identity, receiver identity)``, which enters every base-OT key
and the setup id ``H(ctx, A, P)`` both parties check before resuming; setups of different
pairs, directions or federations have independent seeds.

*Negotiation* (:func:`receiver_hello`, :func:`sender_answer`, :func:`receiver_complete`):
in the first message ``R`` offers the id of the setup it holds (or none) with its next
session number, and a fresh base-OT point ``A`` in case the offer is declined; ``S`` answers
``iknp/resume`` if it holds that setup and the number is fresh, else it runs a fresh
setup (the base-OT points ``P``), which replaces any older one on both sides.  So a pair
whose state diverged (a party lost it, or dropped mid-setup) falls back to fresh base OTs,
never to a re-used position.  The setup state is secret (``S``: ``s`` and its chosen keys;
``R``: both keys of every base OT): it stays with its party, never in a message.

**Against a malicious client (what this module does *not* give).**  IKNP's extension keeps
the receiver's choices ``r`` private against a *malicious* sender -- ``S``'s whole view is
``U``, pseudorandom whatever ``S`` does -- but only on top of base OTs that are secure
against a malicious base-OT *receiver*, and ``S`` is that receiver.  The base OT here is
not: ``S`` can send ``(b G, b' G)`` and learn both ``k_i^0`` and ``k_i^1``, then
``r = U^i XOR PRG(k_i^0) XOR PRG(k_i^1)``, i.e. in SHADE the peer's code bits.  In the
other direction, without the KOS consistency check (Keller, Orsini, Scholl 2015) a
malicious receiver may use a different choice vector in each column of ``U``; its
outputs then depend on bits of ``s``, and once it knows ``s`` it holds both messages of
every correlated OT, i.e. the sender's code bits.  Neither countermeasure -- a
maliciously secure base OT (e.g. McQuoid, Rosulek, Roy 2020's endemic OT, or a
Chaum-Pedersen OR-proof that ``(P^0, P^1)`` is ``(bG, bT)`` or ``(bT, bG)``, both needing the
point additions X25519's API lacks) and KOS's check -- is implemented, so SHADE, like
every client-to-client protocol here, is secure against *semi-honest* clients only.
What holds against a deviating *server* that no client colludes with: it relays frames
on links keyed from the two clients' roster identities (:mod:`securefl.runtime.links`), so it can neither
run the OTs in a client's place nor read or alter what it relays.

Why by hand: no maintained Python library offers OT; libOTe/emp-ot are C++ and not
installable here.  Everything is vectorised over whole chunks; nothing loops per OT.
"""

from __future__ import annotations

import functools
import hashlib
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from Crypto.Math.Numbers import Integer
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from securefl.crypto import aesni
from securefl.crypto.bits import transpose_bits
from securefl.crypto.channel import Message, Network
from securefl.crypto.fixed_key import FIXED_ROUND_KEYS, FixedKeyAES
from securefl.crypto.kernels import xor_block_into, xor_masked_into, xor_rows_where
from securefl.crypto.prg import counter_blocks
from securefl.crypto.rand import RandomSource, random_source
from securefl.errors import InputError, ProtocolError

KAPPA = 128
"""Computational security parameter: number of base OTs and bits per OT output."""

FIELD_PRIME = (1 << 255) - 19
"""The prime p of Curve25519's field."""
_MONTGOMERY_A = 486662
_PRIME_GMP = Integer(FIELD_PRIME)
POINT_BYTES = 32
"""An X25519 u-coordinate (little-endian)."""
LOW_ORDER_U = frozenset(
    {
        0,
        1,
        FIELD_PRIME - 1,
        325606250916557431795983626356110631294008115727848805560023387167927233504,
        39382357235489614581723060781553021112529911719440698176882885853963445705823,
    }
)
"""Canonical u-coordinates of the points of order 1, 2, 4 and 8 (curve and twist)."""
SETUP_ID_BYTES = 16
SESSION_LIMIT = 1 << 32
"""Sessions per setup: the session number fills the high half of a 64-bit AES-CTR nonce."""
CHUNK_LIMIT = 1 << 32
"""Chunks per session: the chunk number fills the low half of that nonce."""
DEFAULT_CHUNK = 1 << 16
"""OTs per extension chunk: the 128 x m bit matrices (1 MiB) stay cache resident."""
HASH_BLOCK = 1 << 14
"""OTs hashed per TCCR call (256 KiB of blocks, L2 resident)."""

HELLO = "iknp/hello"
RESUME = "iknp/resume"
BASE_POINTS = "baseot/B"
_POSITION_BITS = 32


def _on_curve(u: int) -> bool:
    """Whether ``u`` is the u-coordinate of a point of Curve25519 other than (0, 0):
    ``u^3 + A u^2 + u`` is a non-zero square mod p (its Jacobi symbol is 1)."""
    rhs = (u * u % FIELD_PRIME * u + _MONTGOMERY_A * u * u + u) % FIELD_PRIME
    return rhs != 0 and Integer.jacobi_symbol(Integer(rhs), _PRIME_GMP) == 1


def check_point(raw: bytes | np.ndarray, name: str) -> bytes:
    """A received X25519 public point, validated; ``name`` is the message field it came in.

    Refused (:class:`ProtocolError` naming ``name`` and the value): a length other than 32
    bytes, a non-canonical encoding (top bit set or ``u >= p``), a low-order point
    (:data:`LOW_ORDER_U`), a point of the quadratic twist.
    """
    if isinstance(raw, np.ndarray):
        if raw.dtype != np.uint8:
            raise ProtocolError(f"{name}: an X25519 point is uint8 bytes, got {raw.dtype}")
        data = raw.tobytes()
    else:
        data = bytes(raw)
    if len(data) != POINT_BYTES:
        raise ProtocolError(f"{name}: an X25519 point has {POINT_BYTES} bytes, got {len(data)}")
    u = int.from_bytes(data, "little")
    if u >> 255 or u >= FIELD_PRIME:
        raise ProtocolError(f"{name}: u = {u:#x} is not a canonical X25519 u-coordinate (>= 2^255 - 19)")
    if u in LOW_ORDER_U:
        raise ProtocolError(f"{name}: u = {u:#x} is a low-order point")
    if not _on_curve(u):
        raise ProtocolError(f"{name}: u = {u:#x} is not on Curve25519 (a point of its twist)")
    return data


def _private(scalar: bytes) -> X25519PrivateKey:
    return X25519PrivateKey.from_private_bytes(scalar)


def _public(point: bytes) -> X25519PublicKey:
    return X25519PublicKey.from_public_bytes(point)


def _crs_point() -> bytes:
    """``T``: SHA-256 outputs tried in turn as u-coordinates until one is on the curve, then
    multiplied by a public clamped scalar (a multiple of the cofactor 8), which moves it into
    the prime-order subgroup; nobody knows its logarithm to the base ``G``."""
    counter = 0
    while True:
        label = b"securefl base OT: reference point T, try " + counter.to_bytes(4, "big")
        u = int.from_bytes(hashlib.sha256(label).digest(), "little") & ((1 << 255) - 1)
        if u < FIELD_PRIME and u not in LOW_ORDER_U and _on_curve(u):
            clearing = hashlib.sha256(b"securefl base OT: cofactor-clearing scalar").digest()
            return _private(clearing).exchange(_public(u.to_bytes(POINT_BYTES, "little")))
        counter += 1


CRS_POINT = _crs_point()
"""``T``, the common reference point of the base OT (see the module docstring)."""


def setup_context(federation: bytes, sender: int, receiver: int) -> bytes:
    """The 32-byte context of the setup between extension sender ``sender`` and extension
    receiver ``receiver`` (stable party identities) in ``federation`` (e.g. a transport's
    session id): it enters every base-OT key and the setup id."""
    if not isinstance(federation, bytes) or not 1 <= len(federation) <= 255:
        raise InputError("federation", federation, "must be 1 to 255 bytes")
    for name, party in (("sender", sender), ("receiver", receiver)):
        if not _is_int(party) or not -(1 << 63) <= party < 1 << 63:
            raise InputError(name, party, "must be a 64-bit integer party identity")
    if sender == receiver:
        raise InputError("receiver", receiver, "must differ from the sender")
    digest = hashlib.sha256(b"securefl IKNP setup context v1" + bytes([len(federation)]))
    digest.update(federation + int(sender).to_bytes(8, "big", signed=True))
    digest.update(int(receiver).to_bytes(8, "big", signed=True))
    return digest.digest()


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _check_context(context: bytes) -> bytes:
    if not isinstance(context, bytes) or len(context) != 32:
        raise InputError("context", context, "must be the 32 bytes of setup_context()")
    return context


def _kdf(
    context: bytes, index: int, choice: int, a_point: bytes, p0: bytes, p1: bytes, shared: bytes
) -> bytes:
    digest = hashlib.sha256(b"securefl X25519 base OT v2")
    digest.update(context + index.to_bytes(4, "big") + bytes([choice]) + a_point + p0 + p1 + shared)
    return digest.digest()[:16]


def _setup_id(context: bytes, a_point: bytes, points: np.ndarray) -> bytes:
    digest = hashlib.sha256(b"securefl IKNP setup id v1" + context + a_point)
    digest.update(np.ascontiguousarray(points).tobytes())
    return digest.digest()[:SETUP_ID_BYTES]


@dataclass
class BaseOTSender:
    """Sender of ``count`` random base OTs: outputs the key pairs ``(k_i^0, k_i^1)``.

    ``secret`` (32 bytes, the X25519 scalar ``a``) is drawn from ``rng`` by :meth:`point`,
    or given to resume a sender whose state was stored between messages.
    """

    context: bytes
    count: int = KAPPA
    rng: RandomSource = field(default_factory=RandomSource)
    secret: bytes | None = field(default=None, repr=False)

    def point(self) -> np.ndarray:
        """``A = aG`` as a ``(32,)`` uint8 array (draws ``a`` on first use)."""
        _check_context(self.context)
        if self.secret is None:
            self.secret = self.rng.bytes(POINT_BYTES)
        elif not isinstance(self.secret, bytes) or len(self.secret) != POINT_BYTES:
            raise InputError("secret", self.secret, f"must be {POINT_BYTES} bytes")
        raw = _private(self.secret).public_key().public_bytes_raw()
        return np.frombuffer(raw, dtype=np.uint8).copy()

    def finish(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The key pairs from the receiver's ``(count, 2, 32)`` points ``(P_i^0, P_i^1)``, as two
        ``(count, 16)`` uint8 arrays."""
        if self.secret is None:
            raise ProtocolError("base OT: finish() before point()")
        points = np.asarray(points)
        if points.shape != (self.count, 2, POINT_BYTES) or points.dtype != np.uint8:
            raise ProtocolError(
                f"{BASE_POINTS}: expected ({self.count}, 2, {POINT_BYTES}) uint8 points, "
                f"got {points.shape} {points.dtype}"
            )
        a_point = self.point().tobytes()
        secret = _private(self.secret)
        keys = np.empty((2, self.count, 16), dtype=np.uint8)
        for index in range(self.count):
            p0 = check_point(points[index, 0], f"{BASE_POINTS}[{index}][0]")
            p1 = check_point(points[index, 1], f"{BASE_POINTS}[{index}][1]")
            if p0 == p1:
                raise ProtocolError(f"{BASE_POINTS}[{index}]: both points are equal")
            for choice, point in ((0, p0), (1, p1)):
                shared = secret.exchange(_public(point))
                key = _kdf(self.context, index, choice, a_point, p0, p1, shared)
                keys[choice, index] = np.frombuffer(key, np.uint8)
        return keys[0], keys[1]


@dataclass
class BaseOTReceiver:
    """Receiver of random base OTs with choice bits ``choices``: outputs ``k_i^{c_i}``."""

    context: bytes
    choices: np.ndarray
    rng: RandomSource = field(default_factory=RandomSource)

    def respond(self, a_point: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Points ``(P_i^0, P_i^1)`` as ``(count, 2, 32)`` uint8 for the sender's ``A``, and the
        chosen keys as ``(count, 16)`` uint8."""
        _check_context(self.context)
        choices = np.asarray(self.choices)
        if choices.ndim != 1 or not np.isin(choices, (0, 1)).all():
            raise InputError("choices", choices, "must be a 1-D array of 0/1")
        a_raw = check_point(a_point, "A")
        a_public, t_public = _public(a_raw), _public(CRS_POINT)
        scalars = self.rng.bytes(POINT_BYTES * choices.size)
        points = np.empty((choices.size, 2, POINT_BYTES), dtype=np.uint8)
        keys = np.empty((choices.size, 16), dtype=np.uint8)
        for index, choice in enumerate(choices.tolist()):
            secret = _private(scalars[POINT_BYTES * index : POINT_BYTES * (index + 1)])
            known = secret.public_key().public_bytes_raw()
            blind = secret.exchange(t_public)
            p0, p1 = (known, blind) if choice == 0 else (blind, known)
            points[index, 0] = np.frombuffer(p0, np.uint8)
            points[index, 1] = np.frombuffer(p1, np.uint8)
            shared = secret.exchange(a_public)
            key = _kdf(self.context, index, choice, a_raw, p0, p1, shared)
            keys[index] = np.frombuffer(key, np.uint8)
        return points, keys


def _bits_to_words(bits: np.ndarray) -> np.ndarray:
    """0/1 vector of length ``m`` (a multiple of 64) -> ``(m // 64,)`` uint64, little bit order."""
    return np.packbits(bits.astype(np.uint8, copy=False), bitorder="little").view(np.uint64)


def _check_session(session: int) -> int:
    if not _is_int(session) or not 0 <= session < SESSION_LIMIT:
        raise InputError("session", session, f"must be an integer in [0, {SESSION_LIMIT})")
    return int(session)


def _check_chunk(chunk: int) -> int:
    if not _is_int(chunk) or not 0 <= chunk < CHUNK_LIMIT:
        raise InputError("chunk", chunk, f"must be an integer in [0, {CHUNK_LIMIT})")
    return int(chunk)


def prg_nonce(session: int, chunk: int) -> int:
    """The AES-CTR nonce of ``chunk`` of ``session``: ``session * 2^32 + chunk``."""
    return (_check_session(session) << 32) | _check_chunk(chunk)


def _first_tweak(chunk: int, count: int) -> np.uint64:
    """``chunk * 2^32``, the low tweak of a chunk's first OT (``count`` OTs, at most 2^32)."""
    chunk = _check_chunk(chunk)
    if count > 1 << _POSITION_BITS:
        raise InputError("count", count, "at most 2^32 OTs per chunk")
    return np.uint64(chunk) << np.uint64(_POSITION_BITS)


def ot_tweaks(chunk: int, count: int) -> np.ndarray:
    """Low 64 bits of the TCCR tweaks of a chunk's OTs: ``chunk * 2^32 + position``
    (the session is the high 64 bits, :meth:`FixedKeyAES.tccr`'s ``high``)."""
    return _first_tweak(chunk, count) + np.arange(count, dtype=np.uint64)


def _padded(count: int) -> int:
    return -(-count // 64) * 64


def u_tag(session: int, chunk: int) -> str:
    """Tag of the IKNP matrix ``U`` of ``chunk`` of ``session``."""
    return f"iknp/U/{session}/{chunk}"


ROW_CONTEXTS_KEPT = 64
"""Row PRGs whose AES contexts a process keeps (:func:`_row_contexts`)."""


@functools.lru_cache(maxsize=ROW_CONTEXTS_KEPT)
def _row_contexts(seeds: bytes) -> tuple:
    """The 128 AES-ECB contexts of the seeds ``seeds`` (16 bytes each), made once per process.

    A client's setups live in its state as arrays (:meth:`SenderSetup.to_arrays`) and are
    rebuilt at every hop, so without this each hop would redo 128 (or 256) key schedules, about
    5,000 a round at the digits shape; the contexts hold nothing the state does not."""
    return tuple(Cipher(algorithms.AES(seeds[i: i + 16]), modes.ECB()).encryptor()
                 for i in range(0, len(seeds), 16))


@dataclass
class RowPRG:
    """``PRG(k_i)`` for 128 seeds, each seed's AES key schedule made once, then reused.

    Row ``i`` for nonce ``n`` is exactly ``prg.expand(k_i, ..., nonce=n)`` (AES-CTR), but the
    counter blocks are laid out once per chunk and shared by all rows, and no key schedule
    is repeated.  Where AES-NI is :func:`~securefl.crypto.aesni.available`, the schedules are
    compiled (:func:`~securefl.crypto.aesni.schedules_into`, ~2 microseconds for 128) and
    one compiled call encrypts every row (:func:`~securefl.crypto.aesni.encrypt_rows_into`):
    128 OpenSSL calls of a few KB each had cost 2.7x the AES at the digits shape.  Elsewhere
    each seed has an OpenSSL AES-ECB context (:func:`_row_contexts`) and a chunk costs 128
    ``update_into`` calls.  The same rows either way.
    """

    seeds: np.ndarray
    _contexts: tuple | None = field(default=None, repr=False)
    _schedules: np.ndarray | None = field(default=None, repr=False)
    _matrix: np.ndarray | None = field(default=None, repr=False)

    def fill(self, nonce: int, words: int) -> np.ndarray:
        """A ``(128, words)`` uint64 view whose row ``i`` is seed ``i``'s stream under ``nonce``.

        The view is into a buffer reused by the next call (no page faults per chunk).
        """
        counters = counter_blocks(-(-words // 2), nonce=nonce)
        shape = (self.seeds.shape[0], 2 * -(-words // 2) + 2)
        if self._matrix is None or self._matrix.shape != shape:
            self._matrix = np.empty(shape, dtype=np.uint64)
        matrix = self._matrix
        if aesni.available():
            if self._schedules is None:
                keys = np.ascontiguousarray(self.seeds, dtype=np.uint8).view("<u8").astype(np.uint64)
                self._schedules = np.empty((keys.shape[0], aesni.ROUNDS + 1, 2), dtype=np.uint64)
                aesni.schedules_into(keys, self._schedules)
            aesni.encrypt_rows_into(counters, self._schedules, matrix)
            return matrix[:, :words]
        if self._contexts is None:
            self._contexts = _row_contexts(np.ascontiguousarray(self.seeds, dtype=np.uint8).tobytes())
        blocks = memoryview(counters).cast("B")
        for context, row in zip(self._contexts, matrix):
            context.update_into(blocks, memoryview(row).cast("B"))
        return matrix[:, :words]


def _hash_blocks(
    hasher: FixedKeyAES,
    x: np.ndarray,
    session: int,
    chunk: int,
    out: np.ndarray,
    delta: np.ndarray | None = None,
) -> np.ndarray:
    """TCCR-hash ``x`` (XOR the block ``delta`` first, if given) under the tweaks ``session *
    2^64 + chunk * 2^32 + position``: in one compiled pass where AES-NI is
    :func:`~securefl.crypto.aesni.available` (both AES layers eight blocks at a time, the XORs
    in registers), else in L2-sized pieces through OpenSSL.  The same hashes either way."""
    if aesni.available() and x.flags.c_contiguous and out.flags.c_contiguous:
        low, high = (np.uint64(0), np.uint64(0)) if delta is None else (delta[0], delta[1])
        aesni.tccr_into(x, low, high, _first_tweak(chunk, x.shape[0]), np.uint64(session),
                        FIXED_ROUND_KEYS, out)
        return out
    tweaks = ot_tweaks(chunk, x.shape[0])
    masked = np.empty((min(HASH_BLOCK, x.shape[0]), 2), dtype=np.uint64) if delta is not None else None
    for start in range(0, x.shape[0], HASH_BLOCK):
        piece = x[start : start + HASH_BLOCK]
        if masked is not None:
            piece = xor_block_into(piece, delta, masked[: piece.shape[0]])
        window = slice(start, start + HASH_BLOCK)
        hasher.tccr(piece, tweaks[window], out=out[window], high=session)
    return out


@dataclass
class IKNPSender:
    """Extension sender in one session: holds ``s`` (``delta``) and the base keys ``k_i^{s_i}``."""

    delta: np.ndarray
    seeds: np.ndarray
    session: int = 0
    hasher: FixedKeyAES = field(default_factory=FixedKeyAES)
    _prg: RowPRG | None = field(default=None, repr=False)

    @property
    def delta_bits(self) -> np.ndarray:
        """``s`` as 128 bits (little order within each 64-bit word)."""
        return np.unpackbits(self.delta.view(np.uint8), bitorder="little")

    def extend(self, message: Message, chunk: int, count: int) -> np.ndarray:
        """``q_j`` for the ``count`` OTs of ``chunk`` as ``(count, 2)`` uint64 blocks; ``message``
        must be this session's ``U`` of ``chunk``."""
        nonce = prg_nonce(self.session, chunk)
        if message.tag != u_tag(self.session, chunk):
            raise ProtocolError(
                f"IKNP: expected {u_tag(self.session, chunk)!r} (session {self.session}), "
                f"got {message.tag!r}"
            )
        words = _padded(count) // 64
        if len(message.arrays) != 1:
            raise ProtocolError("IKNP: expected one matrix U")
        u_matrix = message.arrays[0]
        if u_matrix.shape != (KAPPA, words) or u_matrix.dtype != np.uint64:
            raise ProtocolError(f"IKNP: U has shape {u_matrix.shape}, expected {(KAPPA, words)}")
        if self._prg is None:
            self._prg = RowPRG(self.seeds)
        q_matrix = self._prg.fill(nonce, words)
        xor_rows_where(q_matrix, u_matrix, self.delta_bits)
        return transpose_bits(q_matrix)[:count]

    def random_ot(
        self, q: np.ndarray, chunk: int, out0: np.ndarray | None = None, out1: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The two 128-bit messages ``H(q_j, w_j)`` and ``H(q_j XOR s, w_j)`` of each OT."""
        out0 = np.empty_like(q) if out0 is None else out0
        out1 = np.empty_like(q) if out1 is None else out1
        _hash_blocks(self.hasher, q, self.session, chunk, out0)
        _hash_blocks(self.hasher, q, self.session, chunk, out1, delta=self.delta)
        return out0, out1


@dataclass
class IKNPReceiver:
    """Extension receiver in one session: both base keys ``(k_i^0, k_i^1)`` of every base OT."""

    seeds0: np.ndarray
    seeds1: np.ndarray
    session: int = 0
    hasher: FixedKeyAES = field(default_factory=FixedKeyAES)
    _prg0: RowPRG | None = field(default=None, repr=False)
    _prg1: RowPRG | None = field(default=None, repr=False)

    def extend(self, choices: np.ndarray, chunk: int, sender: int, receiver: int) -> tuple[Message, np.ndarray]:
        """Message ``U`` for ``chunk`` with choice bits ``choices``, and ``t_j`` as ``(m, 2)`` blocks."""
        message, t_matrix = self._matrix(choices, chunk, sender, receiver)
        return message, transpose_bits(t_matrix)[: choices.shape[0]]

    def matrix(self, choices: np.ndarray, chunk: int, sender: int, receiver: int) -> Message:
        """Message ``U`` for ``chunk`` with choice bits ``choices`` alone; :meth:`t_blocks`
        gives the chunk's ``t_j`` whenever asked (they do not depend on the choices)."""
        return self._matrix(choices, chunk, sender, receiver)[0]

    def t_blocks(self, chunk: int, count: int) -> np.ndarray:
        """``t_j`` of the ``count`` OTs of ``chunk`` as ``(count, 2)`` blocks: the rows
        ``T^i = PRG(k_i^0)`` transposed -- a function of the base keys, session and chunk
        only, so equal to the ``t`` that :meth:`extend` returns for any choices."""
        t_matrix = self._prgs()[0].fill(prg_nonce(self.session, chunk), _padded(count) // 64)
        return transpose_bits(t_matrix)[:count]

    def _prgs(self) -> tuple[RowPRG, RowPRG]:
        """The row PRGs of ``k^0`` and ``k^1`` (their AES key schedules made once)."""
        if self._prg0 is None:
            self._prg0, self._prg1 = RowPRG(self.seeds0), RowPRG(self.seeds1)
        return self._prg0, self._prg1

    def _matrix(self, choices: np.ndarray, chunk: int, sender: int, receiver: int) -> tuple[Message, np.ndarray]:
        """``U = T XOR PRG(k^1) XOR r`` as a message, and the row matrix ``T`` (a view into
        the row PRG's buffer, valid until its next fill)."""
        nonce = prg_nonce(self.session, chunk)
        count = choices.shape[0]
        padded = _padded(count)
        bits = np.zeros(padded, dtype=np.uint8)
        bits[:count] = choices
        prg0, prg1 = self._prgs()
        t_matrix = prg0.fill(nonce, padded // 64)
        matrix = np.empty(t_matrix.shape, dtype=np.uint64)
        xor_masked_into(prg1.fill(nonce, padded // 64), t_matrix, _bits_to_words(bits), matrix)
        return Message(receiver, sender, u_tag(self.session, chunk), (matrix,)), t_matrix

    def random_ot(self, t: np.ndarray, chunk: int, out: np.ndarray | None = None) -> np.ndarray:
        """The chosen 128-bit messages ``H(t_j, w_j)``."""
        out = np.empty_like(t) if out is None else out
        return _hash_blocks(self.hasher, t, self.session, chunk, out)


def _setup_array(
    arrays: dict[str, np.ndarray], key: str, shape: tuple[int, ...], dtype, owner: str
) -> np.ndarray:
    array = arrays.get(key)
    if array is None:
        raise ProtocolError(f"{owner} state lacks {key!r}")
    array = np.asarray(array)
    if array.shape != shape or array.dtype != np.dtype(dtype):
        raise ProtocolError(
            f"{owner} state {key!r} has {array.shape} {array.dtype}, expected {shape} {np.dtype(dtype)}"
        )
    return array


@dataclass
class SenderSetup:
    """The extension sender's persistent half of one setup: ``s`` (``delta``), its chosen base
    keys ``k_i^{s_i}``, the setup id and the next session number it may accept.  Secret.

    The row PRG's 128 AES key schedules are made once per setup and shared by the
    extensions of its sessions (one at a time: a thread of its own takes a fresh
    :class:`RowPRG`)."""

    setup_id: bytes
    delta: np.ndarray = field(repr=False)
    seeds: np.ndarray = field(repr=False)
    next_session: int = 0
    _rows: RowPRG | None = field(default=None, repr=False, compare=False)

    def accept(self, session: int) -> int:
        """Admit ``session`` (it must be above every session accepted before); returns it."""
        session = _check_session(session)
        if session < self.next_session:
            raise ProtocolError(
                f"IKNP setup {self.setup_id.hex()}: session {session} replayed or out of order "
                f"(sessions below {self.next_session} were used)"
            )
        self.next_session = session + 1
        return session

    def extension(self, session: int) -> IKNPSender:
        """The extension sender of an accepted ``session``."""
        if not _check_session(session) < self.next_session:
            raise ProtocolError(f"IKNP setup {self.setup_id.hex()}: session {session} was never accepted")
        if self._rows is None:
            self._rows = RowPRG(self.seeds)
        return IKNPSender(delta=self.delta, seeds=self.seeds, session=session, _prg=self._rows)

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The state as named arrays (for a party's state record)."""
        return {
            "id": np.frombuffer(self.setup_id, np.uint8).copy(),
            "delta": np.asarray(self.delta, np.uint64).copy(),
            "seeds": np.asarray(self.seeds, np.uint8).copy(),
            "next": np.array([self.next_session], dtype=np.uint64),
        }

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> SenderSetup:
        """Inverse of :meth:`to_arrays`; malformed state raises :class:`ProtocolError`."""
        owner = "IKNP sender setup"
        return cls(
            setup_id=_setup_array(arrays, "id", (SETUP_ID_BYTES,), np.uint8, owner).tobytes(),
            delta=_setup_array(arrays, "delta", (2,), np.uint64, owner).copy(),
            seeds=_setup_array(arrays, "seeds", (KAPPA, 16), np.uint8, owner).copy(),
            next_session=int(_setup_array(arrays, "next", (1,), np.uint64, owner)[0]),
        )


@dataclass
class ReceiverSetup:
    """The extension receiver's persistent half of one setup: both keys of every base OT, the
    setup id and the next session number it will use.  Secret.  Row PRGs as in
    :class:`SenderSetup`."""

    setup_id: bytes
    seeds0: np.ndarray = field(repr=False)
    seeds1: np.ndarray = field(repr=False)
    next_session: int = 0
    _rows: tuple[RowPRG, RowPRG] | None = field(default=None, repr=False, compare=False)

    def open(self) -> int:
        """Take the next session number (used at most once, even if the session is abandoned)."""
        if self.next_session >= SESSION_LIMIT:
            raise ProtocolError(f"IKNP setup {self.setup_id.hex()}: all {SESSION_LIMIT} sessions used")
        session = self.next_session
        self.next_session = session + 1
        return session

    def extension(self, session: int) -> IKNPReceiver:
        """The extension receiver of an opened ``session``."""
        if not _check_session(session) < self.next_session:
            raise ProtocolError(f"IKNP setup {self.setup_id.hex()}: session {session} was never opened")
        if self._rows is None:
            self._rows = RowPRG(self.seeds0), RowPRG(self.seeds1)
        return IKNPReceiver(seeds0=self.seeds0, seeds1=self.seeds1, session=session,
                            _prg0=self._rows[0], _prg1=self._rows[1])

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The state as named arrays (for a party's state record)."""
        return {
            "id": np.frombuffer(self.setup_id, np.uint8).copy(),
            "seeds0": np.asarray(self.seeds0, np.uint8).copy(),
            "seeds1": np.asarray(self.seeds1, np.uint8).copy(),
            "next": np.array([self.next_session], dtype=np.uint64),
        }

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> ReceiverSetup:
        """Inverse of :meth:`to_arrays`; malformed state raises :class:`ProtocolError`."""
        owner = "IKNP receiver setup"
        return cls(
            setup_id=_setup_array(arrays, "id", (SETUP_ID_BYTES,), np.uint8, owner).tobytes(),
            seeds0=_setup_array(arrays, "seeds0", (KAPPA, 16), np.uint8, owner).copy(),
            seeds1=_setup_array(arrays, "seeds1", (KAPPA, 16), np.uint8, owner).copy(),
            next_session=int(_setup_array(arrays, "next", (1,), np.uint64, owner)[0]),
        )


@dataclass
class Hello:
    """What the extension receiver keeps between its hello and the sender's answer: the
    base-OT scalar ``a`` (used only if a fresh setup runs), the offered setup id (zeros:
    none) and the session number it took."""

    secret: bytes = field(repr=False)
    offer: bytes
    session: int

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The state as named arrays."""
        return {
            "secret": np.frombuffer(self.secret, np.uint8).copy(),
            "offer": np.frombuffer(self.offer, np.uint8).copy(),
            "session": np.array([self.session], dtype=np.uint64),
        }

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> Hello:
        """Inverse of :meth:`to_arrays`; malformed state raises :class:`ProtocolError`."""
        owner = "IKNP hello"
        return cls(
            secret=_setup_array(arrays, "secret", (POINT_BYTES,), np.uint8, owner).tobytes(),
            offer=_setup_array(arrays, "offer", (SETUP_ID_BYTES,), np.uint8, owner).tobytes(),
            session=int(_setup_array(arrays, "session", (1,), np.uint64, owner)[0]),
        )


_NO_SETUP = bytes(SETUP_ID_BYTES)


def receiver_hello(
    setup: ReceiverSetup | None, *, context: bytes, rng: RandomSource, sender: int, receiver: int
) -> tuple[Message, Hello]:
    """Message 1 (extension receiver -> sender): the offered setup and session, and a fresh
    base-OT point ``A``.  With a ``setup`` its next session number is taken now."""
    base = BaseOTSender(context=_check_context(context), rng=rng)
    a_point = base.point()
    offer, session = (_NO_SETUP, 0) if setup is None else (setup.setup_id, setup.open())
    message = Message(
        receiver,
        sender,
        HELLO,
        (np.frombuffer(offer, np.uint8).copy(), np.array([session], dtype=np.uint64), a_point),
    )
    return message, Hello(secret=base.secret, offer=offer, session=session)


def sender_answer(
    setup: SenderSetup | None, message: Message, *, context: bytes, rng: RandomSource
) -> tuple[Message, SenderSetup, int]:
    """Message 2 (extension sender -> receiver): ``iknp/resume`` if ``setup`` is the offered
    one (its session is then accepted: a replayed or out-of-order one raises
    :class:`ProtocolError`), else the base-OT points of a fresh setup.  Returns the answer,
    the sender's setup (the same, advanced, or the new one) and the session."""
    _check_context(context)
    if message.tag != HELLO:
        raise ProtocolError(f"IKNP: expected {HELLO!r}, got {message.tag!r}")
    shapes = [(SETUP_ID_BYTES,), (1,), (POINT_BYTES,)]
    dtypes = [np.uint8, np.uint64, np.uint8]
    if len(message.arrays) != 3 or any(
        a.shape != s or a.dtype != d for a, s, d in zip(message.arrays, shapes, dtypes)
    ):
        raise ProtocolError(
            f"{HELLO}: expected a (16,) uint8 setup id, a (1,) uint64 session and a (32,) uint8 point"
        )
    offer, session, a_point = message.arrays[0].tobytes(), int(message.arrays[1][0]), message.arrays[2]
    if setup is not None and offer != _NO_SETUP and offer == setup.setup_id:
        setup.accept(session)
        named = (message.arrays[0].copy(), message.arrays[1].copy())
        answer = Message(message.receiver, message.sender, RESUME, named)
        return answer, setup, session
    delta = rng.array(2, np.uint64)
    choices = np.unpackbits(delta.view(np.uint8), bitorder="little")
    points, chosen = BaseOTReceiver(context=context, choices=choices, rng=rng).respond(a_point)
    setup_id = _setup_id(context, a_point.tobytes(), points)
    fresh = SenderSetup(setup_id=setup_id, delta=delta, seeds=chosen, next_session=1)
    return Message(message.receiver, message.sender, BASE_POINTS, (points,)), fresh, 0


def receiver_complete(
    hello: Hello, setup: ReceiverSetup | None, message: Message, *, context: bytes
) -> tuple[ReceiverSetup, int]:
    """After message 2 at the extension receiver: the setup to use (``setup`` resumed, or a
    new one from the base OTs) and the session number.  A resume that does not name the
    offered setup and session raises :class:`ProtocolError`."""
    _check_context(context)
    if message.tag == RESUME:
        shapes = [a.shape for a in message.arrays]
        if shapes != [(SETUP_ID_BYTES,), (1,)] or message.arrays[1].dtype != np.uint64:
            raise ProtocolError(f"{RESUME}: expected a (16,) setup id and a (1,) uint64 session")
        named, session = bytes(message.arrays[0].astype(np.uint8)), int(message.arrays[1][0])
        offered = setup is not None and hello.offer != _NO_SETUP and setup.setup_id == hello.offer
        if not offered or named != hello.offer:
            raise ProtocolError(f"{RESUME}: names setup {named.hex()}, which was not offered")
        if session != hello.session:
            raise ProtocolError(
                f"{RESUME}: names session {session}, but session {hello.session} was offered"
            )
        return setup, session
    if message.tag != BASE_POINTS:
        raise ProtocolError(f"IKNP: expected {RESUME!r} or {BASE_POINTS!r}, got {message.tag!r}")
    if len(message.arrays) != 1:
        raise ProtocolError(f"{BASE_POINTS}: expected one array of points")
    base = BaseOTSender(context=context, secret=hello.secret)
    seeds0, seeds1 = base.finish(message.arrays[0])
    fresh = ReceiverSetup(
        setup_id=_setup_id(context, base.point().tobytes(), message.arrays[0]),
        seeds0=seeds0,
        seeds1=seeds1,
        next_session=1,
    )
    return fresh, 0


@dataclass
class OTSetups:
    """Every party's IKNP setups in an in-process simulation, kept from one call (round) to
    the next.

    ``held[party][(peer, role)]`` is ``party``'s own half (a :class:`SenderSetup` for
    ``role="sender"``, a :class:`ReceiverSetup` for ``"receiver"``) of its setup with
    ``peer``; parties are stable identities (a client's id, not its position in a round).
    Each party's entries are read only for that party's own steps, as each client keeps
    its own in a deployment (:mod:`securefl.protocols.crossclient.client_steps`).  ``federation``
    enters every setup's context (:func:`setup_context`).
    """

    federation: bytes = field(default_factory=lambda: secrets.token_bytes(16))
    held: dict[int, dict[tuple[int, str], SenderSetup | ReceiverSetup]] = field(
        default_factory=dict, repr=False
    )

    def sender(self, party: int, peer: int) -> SenderSetup | None:
        """``party``'s setup as extension sender towards ``peer``, if it holds one."""
        return self.held.get(party, {}).get((peer, "sender"))

    def receiver(self, party: int, peer: int) -> ReceiverSetup | None:
        """``party``'s setup as extension receiver from ``peer``, if it holds one."""
        return self.held.get(party, {}).get((peer, "receiver"))

    def keep(self, party: int, peer: int, setup: SenderSetup | ReceiverSetup) -> None:
        """Store ``party``'s half of its setup with ``peer`` (replacing an older one)."""
        if not isinstance(setup, (SenderSetup, ReceiverSetup)):
            raise InputError("setup", setup, "must be a SenderSetup or a ReceiverSetup")
        role = "sender" if isinstance(setup, SenderSetup) else "receiver"
        self.held.setdefault(party, {})[(peer, role)] = setup

    def __len__(self) -> int:
        return sum(len(entries) for entries in self.held.values())


def iknp_setup(
    network: Network,
    *,
    sender: int,
    receiver: int,
    sender_rng: RandomSource,
    receiver_rng: RandomSource,
    context: bytes | None = None,
) -> tuple[IKNPSender, IKNPReceiver]:
    """A fresh setup (128 base OTs) between ``sender`` (extension sender) and ``receiver``
    over ``network``, and the two parties' extensions in its session 0.

    ``context`` defaults to :func:`setup_context` of a one-off federation id drawn from
    ``receiver_rng``.
    """
    if context is None:
        context = setup_context(receiver_rng.bytes(16), sender, receiver)
    hello, pending = receiver_hello(
        None, context=context, rng=receiver_rng, sender=sender, receiver=receiver
    )
    answer, sender_setup, session = sender_answer(
        None, network.deliver(hello), context=context, rng=sender_rng
    )
    receiver_setup, _ = receiver_complete(pending, None, network.deliver(answer), context=context)
    return sender_setup.extension(session), receiver_setup.extension(session)


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
    A fresh setup (128 X25519 base OTs, ``base_seconds``) is followed by one session of
    extension.  Returns the sender's two messages, the receiver's choices and received
    messages.  ``progress`` (optional) is a callable ``advance(ots_done)``.  ``out``
    optionally gives three ``(m, 2)`` uint64 arrays for (messages0, messages1, received),
    so a caller can reuse memory instead of page-faulting in fresh arrays.
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
