"""Static pairwise keys from the roster's Ed25519 identities: one X25519 key agreement per
pair of clients and federation, then a 16-byte HMAC tag per authenticated message.

**Why.**  Bonawitz et al.'s active variant authenticates every ephemeral key with a
signature, and each client verifies one per peer: at 500 clients that is ~500 Ed25519
verifications a round, each about three X25519 exchanges of CPU, which more than doubled
a SecAgg client's CPU.  A signature proves the key to *everyone*; the protocols only need
to prove it to the one peer that uses it.  A MAC under a key that only the two clients
can compute does exactly that, at the cost of a hash.

**The math.**  Client u's Ed25519 secret is a 32-byte seed; RFC 8032 signs with the
scalar a_u = clamp(SHA-512(seed)[0:32]) and publishes A_u = a_u·B on the Edwards curve.
The birational map from edwards25519 to curve25519, u = (1 + y) / (1 - y) mod p
(p = 2^255 - 19, y the encoded coordinate of A_u; RFC 7748 §4.1), takes A_u to the
Montgomery u-coordinate of a_u·9, i.e. to the X25519 public key of the same scalar
(X25519 clamps SHA-512(seed)[0:32] to a_u itself).  So the roster already holds every
client's static X25519 key, and

    K_uv = HKDF-SHA256(X25519(a_u, M(A_v)), salt = F, info = "securefl/pair-mac/v1" || min(u,v) || max(u,v))

(F the roster's federation id, ids as 64-bit big-endian) is the same for u and v and
computed by no one else.  :meth:`securefl.crypto.identity.Credentials.tags` keys
HMAC-SHA256, truncated to 16 bytes, with it.

**Security.**  Computing K_uv without a_u or a_v is CDH on curve25519 (HKDF a random
oracle), so a server -- with any coalition of clients other than u and v -- cannot forge
u's tag to v: the same guarantee a signature gives v, bound to the same statement.  A tag
convinces only its recipient (it is not transferable: v could have made it), which is all
that key authentication and Bonawitz et al.'s consistency check ask of it (every honest
client verifies for itself).  Using one key pair both to sign (Ed25519) and for X25519
key agreement is shown jointly secure by Thormarker, *On using the same key pair for
Ed25519 and an X25519 based KEM* (ePrint 2021/509).  A 16-byte tag: forging one is a
2^-128 guess per try.

**One aggregate tag per receiver** (Katz and Lindell, *Aggregate Message Authentication
Codes*, CT-RSA 2008).  Where a receiver v checks tags from many senders at once (SecAgg's
key list and its survivor-list endorsements) the server relays not
each sender's tag to v but their XOR, :func:`aggregate`; v recomputes every sender's tag
(it holds every K_uv) and compares the XOR.  Katz and Lindell prove XOR aggregation of a
deterministic MAC unforgeable in a model where the adversary also holds any other keys
(colluding clients): while one listed (sender, statement) was never tagged by its honest
sender, that tag is pseudorandom to the server and so is the XOR.  The proof needs the
(sender, statement) pairs distinct -- a pair listed twice cancels out of the XOR -- so a
receiver refuses a sender named twice (:meth:`securefl.crypto.identity.Credentials.check_aggregate`).
A failed check names no culprit (the receiver aborts, as it does on one bad tag), and a
receiver downloads 16 bytes where it downloaded 16 per peer.

**Cost.**  K_uv is derived once per pair and roster and kept (one X25519 exchange plus a
modular inversion, ~70 µs); each tag is one HMAC over ~150 bytes (~2 µs), against ~200 µs
for an Ed25519 verification (``benchmarks/active_security.py``, ``primitives``).

Why by hand: ``cryptography`` offers Ed25519 and X25519 but not the conversion between
them (libsodium's ``crypto_sign_ed25519_pk_to_curve25519``); the map is one modular
inversion, checked in the tests against X25519's own public key of the same scalar.
"""

from __future__ import annotations

import hashlib
import struct

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from securefl.errors import ProtocolError

P = 2**255 - 19
PAIR_DOMAIN = b"securefl/pair-mac/v1"
TAG_BYTES = 16


def montgomery_public(edwards_public: bytes) -> bytes:
    """The X25519 public key of the scalar behind an Ed25519 public key: u = (1 + y) / (1 - y)
    mod p (RFC 7748 §4.1).  A key whose y is not below p, or is 1 (the neutral point):
    ProtocolError."""
    if len(edwards_public) != 32:
        raise ProtocolError(f"an Ed25519 public key has 32 bytes, not {len(edwards_public)}")
    y = int.from_bytes(edwards_public, "little") & ((1 << 255) - 1)
    if y >= P or y == 1:
        raise ProtocolError("roster key is not a usable Ed25519 point (y >= p or the neutral point)")
    u = (1 + y) * pow(1 - y, -1, P) % P
    return u.to_bytes(32, "little")


def exchange_private(signing_key: Ed25519PrivateKey) -> X25519PrivateKey:
    """The X25519 key of the Ed25519 key's own scalar: SHA-512(seed)[0:32] (X25519 clamps it
    as Ed25519 does)."""
    seed = signing_key.private_bytes_raw()
    return X25519PrivateKey.from_private_bytes(hashlib.sha512(seed).digest()[:32])


def pair_key(own: X25519PrivateKey, own_id: int, peer_public: bytes, peer_id: int,
             federation: bytes) -> bytes:
    """K_uv (module docstring): 32 bytes shared by clients ``own_id`` and ``peer_id`` only."""
    try:
        shared = own.exchange(X25519PublicKey.from_public_bytes(montgomery_public(peer_public)))
    except ValueError as exc:  # an all-zero shared secret: a small-order roster key
        raise ProtocolError(f"pair key with client {peer_id}: {exc}") from None
    low, high = sorted((int(own_id), int(peer_id)))
    return HKDF(hashes.SHA256(), 32, salt=federation,
                info=PAIR_DOMAIN + struct.pack(">qq", low, high)).derive(shared)


def aggregate(tags: np.ndarray) -> np.ndarray:
    """Katz-Lindell aggregate of ``(..., k, TAG_BYTES)`` uint8 tags: their XOR over the
    ``k`` axis (zeros for ``k = 0``).  The server computes it; no key is needed."""
    if tags.ndim < 2 or tags.shape[-1] != TAG_BYTES or tags.dtype != np.uint8:
        raise ProtocolError(f"tags must be (..., k, {TAG_BYTES}) uint8, not {tags.shape} {tags.dtype}")
    return np.bitwise_xor.reduce(tags, axis=-2)

