"""Pairwise keys between clients: X25519 agreement, HKDF derivation, AES-GCM sealing.

Every client j holds an X25519 key pair (sk_j, pk_j).  The server only relays public
keys.  Clients j and k derive the same 32-byte pairwise secret

    K_jk = HKDF-SHA256(X25519(sk_j, pk_k), salt = session, info = label || min(j,k) || max(j,k))

and from it independent sub-keys by ``label`` (one to seal relayed messages, one per
PRG use).  Under the computational Diffie-Hellman assumption for Curve25519 the server,
which sees pk_j and pk_k, learns nothing about K_jk (it is indistinguishable from
uniform); HKDF with distinct labels makes the sub-keys independent.

Relayed client-to-client payloads are sealed with AES-256-GCM under K_jk with the
sender, receiver and message tag as associated data, so the relaying server can neither
read nor redirect nor alter them undetected (a failed tag raises ProtocolError).

Why by hand: ``cryptography`` supplies X25519, HKDF and AES-GCM; this module only fixes
the derivation labels and the wire layout (12-byte nonce || ciphertext || 16-byte tag).

A ``seed`` (tests, benchmarks) derives the private keys deterministically from
SHA-256(seed, party) so that two runs can be compared bit for bit; production use leaves
it ``None`` and keys come from the OS CSPRNG.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from securefl.errors import InputError, ProtocolError

PUBLIC_KEY_BYTES = 32
NONCE_BYTES = 12
TAG_BYTES = 16


def deterministic_bytes(seed: int, *labels: object, length: int = 32) -> bytes:
    """``length`` bytes of SHA-256 output bound to ``seed`` and ``labels`` (tests only)."""
    digest = hashlib.sha256(repr((int(seed),) + labels).encode()).digest()
    while len(digest) < length:
        digest += hashlib.sha256(digest).digest()
    return digest[:length]


@dataclass
class KeyPair:
    """One party's X25519 key pair."""

    private: X25519PrivateKey
    public: bytes

    @classmethod
    def generate(cls, *, seed: int | None = None, party: int = 0) -> KeyPair:
        """A fresh key pair (OS CSPRNG), or a reproducible one from ``seed`` and ``party``."""
        if seed is None:
            private = X25519PrivateKey.generate()
        else:
            private = X25519PrivateKey.from_private_bytes(
                deterministic_bytes(seed, "x25519", party)
            )
        public = private.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        return cls(private=private, public=public)

    def public_array(self) -> np.ndarray:
        """The public key as a (32,) uint8 array (for a :class:`Message`)."""
        return np.frombuffer(self.public, dtype=np.uint8).copy()


def pairwise_secret(
    private: X25519PrivateKey,
    peer_public: bytes | np.ndarray,
    *,
    session: bytes,
    me: int,
    peer: int,
    label: str,
) -> bytes:
    """The 32-byte key ``label`` shared by parties ``me`` and ``peer`` (symmetric in them)."""
    raw = (
        bytes(np.asarray(peer_public, dtype=np.uint8).tobytes())
        if not isinstance(peer_public, bytes)
        else peer_public
    )
    if len(raw) != PUBLIC_KEY_BYTES:
        raise InputError("peer_public", peer_public, f"must be {PUBLIC_KEY_BYTES} bytes")
    shared = private.exchange(X25519PublicKey.from_public_bytes(raw))
    low, high = sorted((int(me), int(peer)))
    info = f"securefl/{label}/{low}/{high}".encode()
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=session, info=info).derive(shared)


def seal(key: bytes, plaintext: bytes, *, associated: bytes) -> np.ndarray:
    """AES-256-GCM: returns nonce || ciphertext || tag as a uint8 array."""
    nonce = secrets.token_bytes(NONCE_BYTES)
    sealed = nonce + AESGCM(key).encrypt(nonce, plaintext, associated)
    return np.frombuffer(sealed, dtype=np.uint8).copy()


def open_sealed(key: bytes, sealed: np.ndarray, *, associated: bytes) -> bytes:
    """Inverse of :func:`seal`; a wrong key, tampered payload or context: ProtocolError."""
    blob = np.asarray(sealed, dtype=np.uint8).tobytes()
    if len(blob) < NONCE_BYTES + TAG_BYTES:
        raise ProtocolError(f"sealed payload of {len(blob)} bytes is truncated")
    try:
        return AESGCM(key).decrypt(blob[:NONCE_BYTES], blob[NONCE_BYTES:], associated)
    except InvalidTag:
        raise ProtocolError("AES-GCM authentication failed: relayed payload tampered") from None
