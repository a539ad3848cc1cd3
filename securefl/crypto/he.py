"""Homomorphic secure summation (TenSEAL BFV): the clients share a key the server lacks.

Parties are sans-I/O dataclasses (:class:`HEClient`, :class:`HEServer`);
:func:`run_he` moves their :class:`~securefl.crypto.channel.Message` objects over a
metered :class:`~securefl.crypto.channel.Network`, so every byte is counted per party.
It is the ``backend="he"`` of :func:`securefl.runtime.secure_sum`.

Protocol (semi-honest), rounds named as :data:`securefl.crypto.secagg.ROUNDS` so that
``secure_sum``'s ``dropouts`` keyword means the same thing:

0. **advertise.** Client u draws an X25519 key pair and sends its public key.
1. **share (key distribution).** The server asks the advertised clients, in id order,
   to generate the BFV key until one answers: that client, the *dealer* d, builds a
   TenSEAL BFV context with a fresh secret key sk and, for every other advertised client
   v, seals the serialised secret context under AES-256-GCM with the key
   HKDF-SHA256(X25519(d, v), salt = session) and associated data (session, d, v); it
   sends the sealed keys and the *parameters only* context (no key) to the server, which
   relays each sealed key to its receiver.  The server never holds sk.
2. **masked_input (encrypted input).** Client u splits its encoded input (ring elements
   of Z_(2^k), the :class:`~securefl.crypto.fixed_point.FixedPoint` encoding that every
   backend uses) into L limbs of b bits, packs the L x dim limbs into BFV plaintexts of N
   slots and sends the serialised ciphertexts Enc_sk(limbs(x_u)).  The server adds the
   ciphertexts of the clients that arrived, slot-wise in Z_t.
3. **unmask (decryption).** The server asks the summed clients, in id order, to decrypt
   until one answers.  That client checks that at least ``threshold`` inputs are in the
   sum (else :class:`DropoutError`: no sum of fewer inputs is ever decrypted), decrypts
   the limb sums S_l, recombines z = sum_l S_l 2^(b l) mod 2^k and sends z to the server.

**Exactness.** Limb sums never wrap in Z_t: b is the largest width with
n (2^b - 1) < t, so S_l = sum_u limb_l(x_u) exactly, and z equals the ring sum of the
plaintext and ``secagg`` backends bit for bit.

**Parameters and noise.** N = 4096 (poly modulus degree), coefficient modulus of
36 + 36 + 37 = 109 bits: the largest the HomomorphicEncryption.org standard allows at
N = 4096 for 128-bit classical security with ternary secrets (SEAL, under TenSEAL,
refuses larger ones).  Plain modulus t = 4398046568449, the smallest prime above 2^42
with t = 1 (mod 2N) (batching: N slots per ciphertext).  Then b >= 32 for up to 1024
clients (k = 32: one limb, k = 64: two), b = 30 at :data:`MAX_CLIENTS` = 4096.  Noise: a
fresh ciphertext has about 25 bits of invariant noise budget at these parameters and
adding n ciphertexts costs at most log2(n) bits (their noises add up), leaving about 13
bits even when 4096 correlated copies are added (measured by repeated doubling in the
tests).  Only additions are ever performed, so no relinearisation or modulus switching
is needed.  Ciphertexts are symmetric-key encryptions (every client holds sk).

**Who learns what (trust model).**  The server sees the public keys, AES-GCM-sealed
keys, the BFV ciphertexts (IND-CPA under RLWE without sk) and the sum z of the inputs
that arrived, and who dropped: it learns the sum and nothing else.  Every client holds
sk; a client learns nothing from the protocol except that the decrypting client also
sees the limb sums S_l, i.e. the ring sum plus, per coordinate, the carries between
limbs (for signed inputs roughly how many inputs were negative there).  **A client
colluding with the server reads every input** (the server holds every ciphertext, the
client the key) -- the price of tolerating any dropout pattern: unlike pairwise masking
there is no threshold of colluders, and no unmasking round: once ``threshold`` inputs
have arrived, all clients but one may drop.  Compare :mod:`securefl.crypto.secagg`,
where fewer than ``threshold`` colluding clients learn nothing but more than n - t
dropouts abort the sum.

**Authenticated protocol** (``credentials``, :mod:`securefl.crypto.identity`; what
:func:`securefl.runtime.secure_sum` runs by default).  ``HEConfig.members`` lists the
clients' roster ids; each client signs its X25519 key over (federation, ``he/advertise``,
session, cohort digest, key) and its ciphertexts' digest (:func:`contribution_digest`)
over ``he/ciphertext``.  The dealer seals the key only for receivers whose signed keys
verify; a receiver opens a sealed key only from a dealer whose signed key verifies, so a
key the server dealt (under an X25519 key of its own) is refused.  The decryptor receives
every counted input with its signature instead of the server's sum, checks that at least
``threshold`` distinct members signed their own input for this session, adds them itself
and decrypts that sum: one client's ciphertext labelled as a sum of four is refused.
Against a deviating server that colludes with no client this leaves it the sum of >= t
inputs of its choice among those that arrived (it picks which, as it picks dropouts);
a colluding client still reads every input (it holds the key).

Randomness: X25519 keys and AES-GCM nonces come from the OS CSPRNG, or from the
per-party AES-CTR stream of ``seed`` (tests); the BFV key and encryption randomness
always come from SEAL's own CSPRNG (TenSEAL offers no way to seed it), which changes
no output.

Why TenSEAL: it is the HE library of the federated-learning ecosystem (maintained
bindings of Microsoft SEAL); this module adds only the limb encoding, the key
distribution and the message layout.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import tenseal as ts
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from securefl.crypto.channel import SERVER, Message, Network
from securefl.crypto.fixed_point import container_dtype
from securefl.crypto.identity import SIGNATURE_BYTES, Credentials, cohort_digest
from securefl.crypto.secagg import RandomBytes, SurvivorPlan, party_rng
from securefl.errors import DropoutError, InputError, ProtocolError

POLY_MODULUS_DEGREE = 4096
"""N: slots per ciphertext."""
COEFF_MODULUS_BITS = (36, 36, 37)
"""Bit sizes of the coefficient modulus primes: 109 bits, the 128-bit-security maximum at N = 4096."""
PLAIN_MODULUS = 4398046568449
"""t: the smallest prime above 2^42 with t = 1 (mod 2N)."""
MAX_CLIENTS = 4096
"""Most clients one sum supports (noise budget: about 13 bits left after that many additions)."""

TAGS = {
    "advertise": "he/advertise",
    "deal": "he/deal",
    "keys": "he/keys",
    "key": "he/key",
    "ciphertexts": "he/ciphertexts",
    "sum": "he/sum",
    "total": "he/total",
}
KEY_BYTES = 32
_NONCE_BYTES = 12
ADVERTISE_PROTOCOL = "he/advertise"
"""What a client's signature on its X25519 key names (the dealer's and the receivers')."""
CONTRIBUTION_PROTOCOL = "he/ciphertext"
"""What a client's signature on its ciphertexts' digest names."""


def contribution_digest(lengths: np.ndarray, blob: np.ndarray) -> bytes:
    """SHA-256 of one input's serialised ciphertexts (their lengths, then the bytes)."""
    return hashlib.sha256(np.asarray(lengths, np.int64).tobytes() + np.asarray(blob, np.uint8).tobytes()).digest()


def limb_bits(clients: int, modulus_bits: int) -> int:
    """b: the widest limb whose sum over ``clients`` inputs stays below t (at most k bits)."""
    if not 1 <= clients <= MAX_CLIENTS:
        raise InputError("clients", clients, f"the he backend supports 1..{MAX_CLIENTS} clients")
    container_dtype(modulus_bits)
    widest = ((PLAIN_MODULUS - 1) // clients + 1).bit_length() - 1
    return min(widest, modulus_bits)


def split_limbs(encoded: np.ndarray, modulus_bits: int, bits: int) -> np.ndarray:
    """``(L, dim)`` int64 limbs of b bits of ring elements (low limb first), L = ceil(k / b)."""
    wide = np.asarray(encoded).astype(np.uint64)
    count = math.ceil(modulus_bits / bits)
    mask = np.uint64((1 << bits) - 1)
    return np.stack([((wide >> np.uint64(bits * j)) & mask).astype(np.int64) for j in range(count)])


def join_limbs(sums: np.ndarray, modulus_bits: int, bits: int) -> np.ndarray:
    """sum_l S_l 2^(b l) mod 2^k in the container dtype (uint64 arithmetic wraps mod 2^64,
    which 2^k divides)."""
    total = np.zeros(sums.shape[1], dtype=np.uint64)
    for j, limb in enumerate(np.asarray(sums, dtype=np.uint64)):
        total += limb << np.uint64(bits * j)
    total &= np.uint64((1 << modulus_bits) - 1)
    return total.astype(container_dtype(modulus_bits))


def new_context() -> ts.Context:
    """A BFV context with a fresh secret key (SEAL's CSPRNG) at the module's parameters."""
    return ts.context(
        ts.SCHEME_TYPE.BFV,
        poly_modulus_degree=POLY_MODULUS_DEGREE,
        plain_modulus=PLAIN_MODULUS,
        coeff_mod_bit_sizes=list(COEFF_MODULUS_BITS),
        encryption_type=ts.ENCRYPTION_TYPE.SYMMETRIC,
    )


def secret_context_bytes(context: ts.Context) -> bytes:
    """The context with its secret key (what the dealer seals for each client)."""
    return context.serialize(
        save_public_key=False, save_secret_key=True, save_galois_keys=False, save_relin_keys=False
    )


def parameters_bytes(context: ts.Context) -> bytes:
    """The context's public parameters only: no key of any kind (what the server gets)."""
    return context.serialize(
        save_public_key=False, save_secret_key=False, save_galois_keys=False, save_relin_keys=False
    )


def load_context(data: bytes, *, name: str) -> ts.Context:
    """Parse a serialised context; garbage raises :class:`ProtocolError`."""
    try:
        return ts.context_from(data)
    except (ValueError, RuntimeError, TypeError) as exc:
        raise ProtocolError(f"{name}: not a TenSEAL context ({exc})") from None


def _public_bytes(key: X25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def _seal_key(
    private: X25519PrivateKey, peer_public: bytes, session: bytes, dealer: int, receiver: int
) -> bytes:
    shared = private.exchange(X25519PublicKey.from_public_bytes(peer_public))
    info = (
        b"securefl-he-key"
        + dealer.to_bytes(4, "big", signed=True)
        + receiver.to_bytes(4, "big", signed=True)
    )
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=session, info=info).derive(shared)


def _associated_data(session: bytes, dealer: int, receiver: int) -> bytes:
    return (
        session
        + b"|he/key|"
        + dealer.to_bytes(4, "big", signed=True)
        + receiver.to_bytes(4, "big", signed=True)
    )


def _pack(blobs: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.array([len(b) for b in blobs], dtype=np.int64)
    return lengths, np.frombuffer(b"".join(blobs), dtype=np.uint8)


def _unpack(lengths: np.ndarray, blob: np.ndarray, count: int, what: str) -> list[bytes]:
    if (
        lengths.ndim != 1
        or lengths.dtype != np.int64
        or lengths.size != count
        or blob.ndim != 1
        or blob.dtype != np.uint8
    ):
        raise ProtocolError(f"{what}: expected {count} lengths (int64) and one uint8 blob")
    if np.any(lengths < 0) or int(lengths.sum()) != blob.size:
        raise ProtocolError(f"{what}: lengths do not add up to the blob's {blob.size} bytes")
    raw, out, offset = blob.tobytes(), [], 0
    for length in lengths.tolist():
        out.append(raw[offset : offset + length])
        offset += length
    return out


def _vector(context: ts.Context, data: bytes, size: int, what: str) -> ts.BFVVector:
    try:
        vector = ts.bfv_vector_from(context, data)
    except (ValueError, RuntimeError, TypeError) as exc:
        raise ProtocolError(f"{what}: not a BFV ciphertext ({exc})") from None
    if vector.size() != size:
        raise ProtocolError(f"{what}: ciphertext holds {vector.size()} slots, expected {size}")
    return vector


def _expect(message: Message, tag: str, sender: int, receiver: int) -> None:
    if message.tag != tag or message.sender != sender or message.receiver != receiver:
        raise ProtocolError(
            f"expected {tag!r} {sender}->{receiver}, got {message.tag!r} "
            f"{message.sender}->{message.receiver}"
        )


def _ids(array: np.ndarray, what: str) -> list[int]:
    if array.ndim != 1 or array.dtype.kind not in "iu":
        raise ProtocolError(f"{what}: expected a 1-D integer array")
    ids = array.tolist()
    if len(set(ids)) != len(ids):
        raise ProtocolError(f"{what}: duplicate party ids")
    return ids


@dataclass(frozen=True)
class HEConfig:
    """Public parameters of one sum: session id, clients, threshold, vector length, k;
    ``members``: the clients' roster ids by index (authenticated runs), else empty."""

    session: bytes
    clients: int
    threshold: int
    dim: int
    modulus_bits: int
    members: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if len(self.session) != 16:
            raise InputError("session", self.session, "must be 16 bytes")
        if self.members and len(self.members) != self.clients:
            raise InputError("members", self.members, f"must list {self.clients} roster ids (or none)")
        if not 1 <= self.threshold <= self.clients:
            raise InputError("threshold", self.threshold, f"must be in 1..{self.clients}")
        if self.dim < 0:
            raise InputError("dim", self.dim, "must be >= 0")
        limb_bits(self.clients, self.modulus_bits)

    @property
    def bits(self) -> int:
        return limb_bits(self.clients, self.modulus_bits)

    @property
    def cohort(self) -> bytes:
        """:func:`~securefl.crypto.identity.cohort_digest` of ``members`` (authenticated runs)."""
        return cohort_digest(self.members)

    @property
    def limbs(self) -> int:
        return math.ceil(self.modulus_bits / self.bits)

    @property
    def chunks(self) -> list[tuple[int, int]]:
        """(start, stop) of each ciphertext's slots in the flattened ``(limbs, dim)`` limbs."""
        n, slots = POLY_MODULUS_DEGREE, self.limbs * self.dim
        return [(s, min(s + n, slots)) for s in range(0, slots, n)]

    @property
    def ciphertexts(self) -> int:
        """Ciphertexts per input: ceil(limbs x dim / N)."""
        return len(self.chunks)


@dataclass
class HEClient:
    """Client u; holds its encoded input ``value`` (container dtype of k bits)."""

    index: int
    config: HEConfig
    value: np.ndarray = field(repr=False)
    rng: RandomBytes = field(repr=False)
    credentials: Credentials | None = field(default=None, repr=False)
    _key: X25519PrivateKey | None = field(default=None, repr=False)
    _context: ts.Context | None = field(default=None, repr=False)

    def _sign(self, protocol: str, key: bytes) -> np.ndarray:
        signature = self.credentials.sign(protocol=protocol, context=self.config.session,
                                          cohort=self.config.cohort, key=key)
        return np.frombuffer(signature, np.uint8)

    def _verify(self, signature: np.ndarray, protocol: str, sender: int, key: bytes) -> None:
        """``sender`` (an index) signed ``key`` for this session and cohort; else ProtocolError."""
        if not 0 <= sender < self.config.clients:
            raise ProtocolError(f"client {self.index}: {protocol} from unknown index {sender}")
        signature = np.asarray(signature)
        if signature.shape != (SIGNATURE_BYTES,) or signature.dtype != np.uint8:
            raise ProtocolError(f"client {self.index}: {protocol} of index {sender} is unsigned")
        self.credentials.verify(signature.tobytes(), protocol=protocol, context=self.config.session,
                                sender=self.config.members[sender], cohort=self.config.cohort, key=key)

    def advertise(self) -> Message:
        """Round 0: a fresh X25519 key pair; send the public key."""
        value = np.asarray(self.value)
        if value.shape != (self.config.dim,) or value.dtype != container_dtype(
            self.config.modulus_bits
        ):
            raise InputError(
                "value",
                value,
                f"must be ({self.config.dim},) {container_dtype(self.config.modulus_bits)}",
            )
        if self.credentials is not None and (
                not self.config.members or self.config.members[self.index] != self.credentials.client):
            raise InputError("credentials", self.credentials.client,
                             f"is not index {self.index} of the cohort {self.config.members} "
                             "(an authenticated client needs the members' roster ids)")
        self._key = X25519PrivateKey.from_private_bytes(self.rng(KEY_BYTES))
        public = _public_bytes(self._key)
        arrays: tuple[np.ndarray, ...] = (np.frombuffer(public, np.uint8),)
        if self.credentials is not None:
            arrays += (self._sign(ADVERTISE_PROTOCOL, public),)
        return Message(self.index, SERVER, TAGS["advertise"], arrays)

    def deal(self, message: Message) -> Message:
        """Round 1, as dealer: generate the BFV key, seal it for every listed client."""
        _expect(message, TAGS["deal"], SERVER, self.index)
        signed = self.credentials is not None
        if len(message.arrays) != 2 + signed:
            raise ProtocolError("deal message must hold (ids, public keys[, signatures])")
        ids, keys = _ids(message.arrays[0], "deal ids"), message.arrays[1]
        if keys.shape != (len(ids), KEY_BYTES) or keys.dtype != np.uint8:
            raise ProtocolError(
                f"deal message: public keys must be ({len(ids)}, {KEY_BYTES}) uint8"
            )
        if signed:
            signatures = message.arrays[2]
            if signatures.shape != (len(ids), SIGNATURE_BYTES):
                raise ProtocolError(f"client {self.index}: deal message keys are unsigned")
            for v, public, signature in zip(ids, keys, signatures):
                self._verify(signature, ADVERTISE_PROTOCOL, v, public.tobytes())
        self._context = new_context()
        secret = secret_context_bytes(self._context)
        receivers, sealed = [], []
        for v, public in zip(ids, keys):
            if v == self.index:
                continue
            key = _seal_key(self._key, public.tobytes(), self.config.session, self.index, v)
            nonce = self.rng(_NONCE_BYTES)
            sealed.append(
                nonce
                + AESGCM(key).encrypt(
                    nonce, secret, _associated_data(self.config.session, self.index, v)
                )
            )
            receivers.append(v)
        lengths, blob = _pack(sealed)
        params = np.frombuffer(parameters_bytes(self._context), np.uint8)
        return Message(
            self.index, SERVER, TAGS["keys"], (params, np.array(receivers, np.int32), lengths, blob)
        )

    def receive_key(self, message: Message) -> None:
        """Round 1, as receiver: open the dealer's sealed key."""
        _expect(message, TAGS["key"], SERVER, self.index)
        signed = self.credentials is not None
        if (
            len(message.arrays) != 3 + signed
            or message.arrays[0].shape != (1,)
            or message.arrays[1].shape != (KEY_BYTES,)
        ):
            raise ProtocolError("key message must hold (dealer id, dealer public key, sealed key"
                                + (", dealer's signature)" if signed else ")"))
        dealer = int(message.arrays[0][0])
        if signed:
            # a roster member's signed key, or the server could deal (and keep) its own BFV key
            self._verify(message.arrays[3], ADVERTISE_PROTOCOL, dealer, message.arrays[1].tobytes())
        raw = message.arrays[2].tobytes()
        key = _seal_key(
            self._key, message.arrays[1].tobytes(), self.config.session, dealer, self.index
        )
        try:
            secret = AESGCM(key).decrypt(
                raw[:_NONCE_BYTES],
                raw[_NONCE_BYTES:],
                _associated_data(self.config.session, dealer, self.index),
            )
        except (InvalidTag, ValueError):
            raise ProtocolError(
                f"client {self.index}: sealed key from {dealer} failed AES-GCM authentication"
            ) from None
        self._context = load_context(secret, name="sealed key")
        if not self._context.has_secret_key():
            raise ProtocolError(f"client {self.index}: the dealer's context holds no secret key")

    def encrypt(self) -> Message:
        """Round 2: Enc_sk of every limb of every chunk of the input."""
        if self._context is None:
            raise ProtocolError(f"client {self.index} has no key")
        config = self.config
        flat = split_limbs(self.value, config.modulus_bits, config.bits).reshape(-1)
        blobs = [
            ts.bfv_vector(self._context, flat[start:stop]).serialize()
            for start, stop in config.chunks
        ]
        lengths, blob = _pack(blobs)
        if self.credentials is None:
            return Message(self.index, SERVER, TAGS["ciphertexts"], (lengths, blob))
        signature = self._sign(CONTRIBUTION_PROTOCOL, contribution_digest(lengths, blob))
        return Message(self.index, SERVER, TAGS["ciphertexts"], (lengths, blob, signature))

    def decrypt(self, message: Message) -> Message:
        """Round 3: decrypt the summed limbs (if at least ``threshold`` inputs are in them)
        and send the recombined ring sum."""
        _expect(message, TAGS["sum"], SERVER, self.index)
        if self._context is None:
            raise ProtocolError(f"client {self.index} has no key")
        config = self.config
        signed = self.credentials is not None
        if len(message.arrays) != (4 if signed else 3):
            raise ProtocolError("sum message must hold (summed ids, lengths, ciphertexts"
                                + (", signatures): every input, not their sum" if signed else ")"))
        summed = _ids(message.arrays[0], "summed ids")
        if len(summed) < config.threshold or not set(summed) <= set(range(config.clients)):
            raise DropoutError(
                f"client {self.index} refuses to decrypt a sum of {len(summed)} inputs; "
                f"threshold is {config.threshold}"
            )
        if signed:
            blobs = self._verified_sum(summed, *message.arrays[1:])
        else:
            blobs = _unpack(message.arrays[1], message.arrays[2], config.ciphertexts, "sum message")
        sums = np.empty(config.limbs * config.dim, dtype=np.int64)
        for (start, stop), data in zip(config.chunks, blobs):
            vector = _vector(self._context, data, stop - start, "sum message")
            sums[start:stop] = np.asarray(vector.decrypt(), dtype=np.int64) % PLAIN_MODULUS
        total = join_limbs(sums.reshape(config.limbs, config.dim), config.modulus_bits, config.bits)
        return Message(self.index, SERVER, TAGS["total"], (total,))

    def _verified_sum(self, summed: list[int], lengths: np.ndarray, blob: np.ndarray,
                      signatures: np.ndarray) -> list[bytes]:
        """Authenticated decryption: the server sends every counted input (``lengths`` is
        (inputs, ciphertexts)); each must carry its sender's signature on its digest for
        this session, and the decryptor adds them itself, so the sum it decrypts holds
        exactly the ``len(summed) >= threshold`` signed inputs."""
        config = self.config
        count = config.ciphertexts
        if lengths.ndim != 2 or lengths.shape != (len(summed), count) or lengths.dtype != np.int64 \
                or signatures.shape != (len(summed), SIGNATURE_BYTES) or blob.ndim != 1:
            raise ProtocolError(f"client {self.index}: sum message must carry {len(summed)} signed inputs")
        if np.any(lengths < 0) or int(lengths.sum()) != blob.size:
            raise ProtocolError(f"client {self.index}: sum message lengths do not add up")
        sums: list[ts.BFVVector] = []
        offset = 0
        for u, row, signature in zip(summed, lengths, signatures):
            size = int(row.sum())
            part = blob[offset:offset + size]
            offset += size
            self._verify(signature, CONTRIBUTION_PROTOCOL, u, contribution_digest(row, part))
            vectors = [_vector(self._context, data, stop - start, f"input of index {u}")
                       for (start, stop), data in zip(config.chunks, _unpack(row, part, count, "input"))]
            if not sums:
                sums = vectors
            else:
                for acc, vector in zip(sums, vectors):
                    acc.add_(vector)
        return [vector.serialize() for vector in sums]


@dataclass
class HEServer:
    """The aggregation server: picks the dealer and the decryptor, relays, adds ciphertexts."""

    config: HEConfig
    total: np.ndarray | None = None
    survivors: tuple[int, ...] = ()
    dealer: int | None = None
    decryptor: int | None = None
    _keys: dict[int, bytes] = field(default_factory=dict, repr=False)
    _candidates: list[int] = field(default_factory=list, repr=False)
    _context: ts.Context | None = field(default=None, repr=False)
    _sums: list[ts.BFVVector] = field(default_factory=list, repr=False)
    _inputs: list[int] = field(default_factory=list, repr=False)
    _signatures: dict[int, np.ndarray] = field(default_factory=dict, repr=False)
    _contributions: dict[int, tuple[np.ndarray, ...]] = field(default_factory=dict, repr=False)

    @property
    def signed(self) -> bool:
        """Authenticated run (``config.members`` set): keys and inputs carry signatures."""
        return bool(self.config.members)

    def take_key(self, message: Message) -> None:
        """Round 0: one client's X25519 public key."""
        _expect(message, TAGS["advertise"], message.sender, SERVER)
        u = message.sender
        if not 0 <= u < self.config.clients or u in self._keys:
            raise ProtocolError(f"advertise: unknown or repeated client {u}")
        if (
            len(message.arrays) != 1 + self.signed
            or message.arrays[0].shape != (KEY_BYTES,)
            or message.arrays[0].dtype != np.uint8
        ):
            raise ProtocolError(f"client {u}: public key must be ({KEY_BYTES},) uint8"
                                + (" with its signature" if self.signed else ""))
        if self.signed:
            self._signatures[u] = np.asarray(message.arrays[1])
        self._keys[u] = message.arrays[0].tobytes()

    def start_key_distribution(self) -> None:
        """End of round 0: every advertised client, in id order, is a dealer candidate."""
        if len(self._keys) < self.config.threshold:
            raise DropoutError(
                f"only {len(self._keys)} of {self.config.clients} clients advertised keys; "
                f"threshold is {self.config.threshold}"
            )
        self._candidates = sorted(self._keys)

    def next_deal(self) -> Message:
        """Round 1: ask the next candidate to generate the key (the previous one timed out)."""
        if not self._candidates:
            raise DropoutError("no advertised client answered the key-generation request")
        u = self._candidates.pop(0)
        ids = np.array(sorted(self._keys), dtype=np.int32)
        keys = np.stack([np.frombuffer(self._keys[v], np.uint8) for v in ids.tolist()])
        if not self.signed:
            return Message(SERVER, u, TAGS["deal"], (ids, keys))
        signatures = np.stack([self._signatures[v] for v in ids.tolist()])
        return Message(SERVER, u, TAGS["deal"], (ids, keys, signatures))

    def relay_keys(self, message: Message) -> list[Message]:
        """Round 1: the dealer's answer; returns one sealed key per other client."""
        _expect(message, TAGS["keys"], message.sender, SERVER)
        if len(message.arrays) != 4:
            raise ProtocolError(
                "keys message must hold (parameters, receivers, lengths, sealed keys)"
            )
        dealer = message.sender
        receivers = _ids(message.arrays[1], "key receivers")
        if set(receivers) != set(self._keys) - {dealer}:
            raise ProtocolError(
                f"dealer {dealer} sealed keys for {sorted(receivers)}, not for every other client"
            )
        sealed = _unpack(message.arrays[2], message.arrays[3], len(receivers), "keys message")
        self._context = load_context(message.arrays[0].tobytes(), name="parameters")
        if self._context.has_secret_key():
            raise ProtocolError(f"dealer {dealer} sent the server a secret key")
        self.dealer = dealer
        self._candidates = []
        public = np.frombuffer(self._keys[dealer], np.uint8)
        extra = (self._signatures[dealer],) if self.signed else ()
        return [
            Message(
                SERVER,
                v,
                TAGS["key"],
                (np.array([dealer], np.int32), public, np.frombuffer(blob, np.uint8), *extra),
            )
            for v, blob in zip(receivers, sealed)
        ]

    def add(self, message: Message) -> None:
        """Round 2: add one client's ciphertexts to the running sums."""
        _expect(message, TAGS["ciphertexts"], message.sender, SERVER)
        u = message.sender
        if self._context is None or u not in self._keys or u in self._inputs:
            raise ProtocolError(f"ciphertexts from unknown, keyless or repeated client {u}")
        if len(message.arrays) != 2 + self.signed:
            raise ProtocolError("ciphertexts message must hold (lengths, ciphertexts"
                                + (", signature)" if self.signed else ")"))
        blobs = _unpack(*message.arrays[:2], self.config.ciphertexts, f"client {u}'s ciphertexts")
        if self.signed:
            self._contributions[u] = tuple(np.asarray(a) for a in message.arrays)
        vectors = [
            _vector(self._context, data, stop - start, f"client {u}")
            for (start, stop), data in zip(self.config.chunks, blobs)
        ]
        if not self._sums:
            self._sums = vectors
        else:
            for acc, vector in zip(self._sums, vectors):
                acc.add_(vector)
        self._inputs.append(u)

    def start_decryption(self) -> None:
        """End of round 2: the summed clients, in id order, are decryptor candidates."""
        if len(self._inputs) < self.config.threshold:
            raise DropoutError(
                f"only {len(self._inputs)} of {self.config.clients} clients sent their "
                f"encrypted input; threshold is {self.config.threshold}"
            )
        self.survivors = tuple(sorted(self._inputs))
        self._candidates = list(self.survivors)

    def next_decrypt(self) -> Message:
        """Round 3: send the summed ciphertexts to the next candidate (the previous one
        timed out)."""
        if not self._candidates:
            raise DropoutError("no summed client answered the decryption request")
        u = self._candidates.pop(0)
        ids = np.array(self.survivors, np.int32)
        if self.signed:  # the decryptor adds the signed inputs itself (HEClient._verified_sum)
            inputs = [self._contributions[v] for v in self.survivors]
            return Message(SERVER, u, TAGS["sum"], (
                ids, np.stack([i[0] for i in inputs]), np.concatenate([i[1] for i in inputs]),
                np.stack([i[2] for i in inputs])))
        lengths, blob = _pack([vector.serialize() for vector in self._sums])
        return Message(SERVER, u, TAGS["sum"], (ids, lengths, blob))

    def take_total(self, message: Message) -> None:
        """Round 3: the decryptor's ring sum."""
        _expect(message, TAGS["total"], message.sender, SERVER)
        dtype = container_dtype(self.config.modulus_bits)
        if (
            len(message.arrays) != 1
            or message.arrays[0].shape != (self.config.dim,)
            or message.arrays[0].dtype != dtype
        ):
            raise ProtocolError(f"total must be ({self.config.dim},) {dtype}")
        self.total = np.array(message.arrays[0])
        self.decryptor = message.sender


@dataclass(frozen=True)
class HEOutcome:
    """Result of :func:`run_he`: ring total, survivors, bytes, wall and CPU seconds per party
    (as :class:`securefl.runtime.sum_backends.SimulatedSum`) plus the dealer, the decryptor and
    the bytes of the key distribution."""

    total: np.ndarray
    survivors: tuple[int, ...]
    bytes_sent: dict[int, int]
    server_seconds: float
    client_seconds: np.ndarray
    server_cpu_seconds: float
    client_cpu_seconds: np.ndarray
    dealer: int
    decryptor: int
    key_bytes: int
    network: Network = field(repr=False)


def run_he(
    encoded: Sequence[np.ndarray],
    *,
    plan: SurvivorPlan,
    modulus_bits: int,
    seed: int | bytes | None = None,
    credentials: Sequence[Credentials] | None = None,
) -> HEOutcome:
    """Run all parties in-process over a metered :class:`Network`.

    ``credentials``: one per client (index u is ``credentials[u].client`` of their
    roster) for the authenticated protocol (module docstring), ``None`` for the
    unauthenticated semi-honest one.

    ``encoded`` are the clients' ring vectors (container dtype of ``modulus_bits``);
    ``plan`` says which client skips which round: a client of ``plan.alive[r]`` acts in
    round r; one that has dropped does not answer the dealer or decryptor request (the
    server then asks the next client).  Raises :class:`DropoutError` when fewer than
    ``plan.threshold`` inputs arrive or no client is left to deal or decrypt.
    """
    n = len(encoded)
    if plan.n != n:
        raise InputError("plan", plan, f"is for {plan.n} clients, got {n} inputs")
    if plan.neighbours is not None:
        raise InputError(
            "neighbours", plan.neighbours, "the he backend has no neighbour graph (secagg only)"
        )
    if credentials is not None and len(credentials) != n:
        raise InputError("credentials", len(credentials), f"need one per client ({n})")
    session = party_rng(seed, SERVER - 1)(16)
    members = tuple(c.client for c in credentials) if credentials is not None else ()
    config = HEConfig(session, n, plan.threshold, int(np.asarray(encoded[0]).size), modulus_bits,
                      members)
    network = Network()
    clients = [HEClient(u, config, np.asarray(encoded[u]), party_rng(seed, u),
                        None if credentials is None else credentials[u]) for u in range(n)]
    server = HEServer(config)
    clock = _Clock(n)

    for u in plan.alive[0]:
        reply = clock.client(u, clients[u].advertise)
        clock.server(server.take_key, network.deliver(reply))
    before_keys = network.bytes_total()
    clock.server(server.start_key_distribution)
    while True:
        request = clock.server(server.next_deal)
        network.send(request)
        if request.receiver in plan.alive[1]:
            break
    dealer = clients[request.receiver]
    keys = clock.client(
        dealer.index, dealer.deal, network.receive(dealer.index, SERVER, request.tag)
    )
    for message in clock.server(server.relay_keys, network.deliver(keys)):
        network.send(message)
        if message.receiver in plan.alive[1]:
            received = network.receive(message.receiver, SERVER, message.tag)
            clock.client(message.receiver, clients[message.receiver].receive_key, received)
    key_bytes = network.bytes_total() - before_keys
    for u in plan.alive[2]:
        reply = clock.client(u, clients[u].encrypt)
        clock.server(server.add, network.deliver(reply))
    clock.server(server.start_decryption)
    while True:
        request = clock.server(server.next_decrypt)
        network.send(request)
        if request.receiver in plan.alive[3]:
            break
    decryptor = clients[request.receiver]
    received = network.receive(decryptor.index, SERVER, request.tag)
    reply = clock.client(decryptor.index, decryptor.decrypt, received)
    clock.server(server.take_total, network.deliver(reply))
    return HEOutcome(
        total=server.total,
        survivors=server.survivors,
        bytes_sent=network.bytes_sent(),
        server_seconds=float(clock.server_time[0]),
        client_seconds=clock.client_time[:, 0].copy(),
        server_cpu_seconds=float(clock.server_time[1]),
        client_cpu_seconds=clock.client_time[:, 1].copy(),
        dealer=int(server.dealer),
        decryptor=int(server.decryptor),
        key_bytes=int(key_bytes),
        network=network,
    )


class _Clock:
    """Wall and process-CPU seconds per party (parties run one after another)."""

    def __init__(self, n: int) -> None:
        self.client_time = np.zeros((n, 2))
        self.server_time = np.zeros(2)

    @staticmethod
    def _now() -> np.ndarray:
        return np.array([time.perf_counter(), time.process_time()])

    def client(self, u: int, step, *args):
        start = self._now()
        try:
            return step(*args)
        finally:
            self.client_time[u] += self._now() - start

    def server(self, step, *args):
        start = self._now()
        try:
            return step(*args)
        finally:
            self.server_time += self._now() - start
