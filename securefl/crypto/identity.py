"""Long-term client identities, the federation roster, and signed ephemeral keys.

**Why.**  Every protocol of securefl agrees keys over the server: a client sends an
ephemeral X25519 public key (links, SecAgg's two keys, the HE dealer's key) and the
server relays the table of them.  Without authentication a server that relays its own
keys in place of the clients' sits in the middle of every pairwise channel: it reads and
rewrites relayed frames, decrypts SecAgg's Shamir shares (and so unmasks an input), and
deals its own HE key.  This module is what stops it.

**Identities.**  Client ``c`` holds a long-term Ed25519 key pair (``cryptography``),
created by ``securefl keys new`` and kept in its node's files (mode 0600).

**Roster.**  The federation's name and, per client id, its Ed25519 public key.  A client
gets it *out of band*, from its own node configuration (``roster-file``), never from the
server.  Its hash

    F = SHA-256("securefl/roster/v1" || canonical JSON of (name, {id: key}))

is the *federation id* every signature binds, so a signature made for one federation
(or for an edited roster) is worthless in another.

**Binding an ephemeral key.**  Client s signs, with its Ed25519 key, the statement

    "securefl/key-binding/v1" || F || protocol || context || s || C || key

(every field length-prefixed; C = :func:`cohort_digest` of the recipient list R) where
``protocol`` names the protocol and the role of the key (``"secagg"``, ``"links"``,
``"he/deal"`` ...), ``context`` is the session/round the key is for, ``R`` are the
clients the key is meant for, in protocol order (the cohort the server announced to s:
SecAgg's members by index; for links, the whole roster) and ``key`` the
ephemeral public key bytes.  A receiver verifies the signature with the roster's key of
``s`` *before* it derives anything from ``key``, and raises
:class:`~securefl.errors.ProtocolError` for a key that is unsigned, signed by a stranger
(an id not in the roster, or another member's key), or bound to another federation,
protocol, context, sender or recipient set.

**What the server can still do** (EUF-CMA of Ed25519, SHA-256 collision resistance):
relay only keys that a roster member signed for exactly this protocol, session and
cohort.  It can drop, delay or withhold keys (a round fails or has fewer members), and it
chooses the cohort -- each client checks the cohort against its own policy
(:mod:`securefl.runtime.policy`).  It cannot substitute a key, replay a key of another
session or round into this one, or show a key signed for cohort R to a client that was
shown a different cohort R' (the signature covers R).  A client colluding with the
server can sign keys under *its own* identity only.

**Why not Flower's SuperNode authentication keys.**  Flower 1.x can authenticate
SuperNodes to the SuperLink with EC keys (``--auth-supernode-private-key``) -- but that
authenticates a node *to the server*: the SuperLink checks it, and a client never sees
another node's key or a signature from it.  Against a deviating server that is the wrong
direction: the party that verifies must be the peer client, with a key list the server
does not supply.  Flower also exposes those keys to neither ServerApp nor ClientApp, and
the in-process simulator has no SuperNodes.  So securefl keeps its own roster (which an
operator may fill with the same people's keys).

**Pair tags where a client would verify one signature per peer.**  SecAgg's client checks
n - 1 peer keys and t - 1 survivor-list endorsements a round; an Ed25519 verification costs
about three X25519 exchanges (``benchmarks/active_security.py``, ``primitives``), which more
than doubled its CPU.  There :meth:`Credentials.tags` binds the same statement (plus the
recipient) with a 16-byte HMAC under the static pair key K_uv that only the two clients can
compute from their roster identities (:mod:`securefl.crypto.pairkeys`), derived once per
pair and kept; a tag costs a hash.  The server relays to each receiver the XOR of the tags
to it (Katz-Lindell aggregation, :meth:`Credentials.check_aggregate`), 16 bytes whatever
the number of senders.  It convinces its recipient as the signatures would and is not
transferable, which no check of securefl needs.  The LSH seed agreement mixes the pair key
into its seal keys instead (:mod:`securefl.protocols.lsh`: no tag travels),
client-to-client links derive their keys from the pair keys with no exchange
(:mod:`securefl.runtime.links`), and the HE dealer's and LWE's keys keep signatures.

**What is not repeated.**  Nothing is verified, derived or parsed twice: a roster parses a
member's key into its verifier object on first use and keeps it (the roster is immutable);
credentials keep each pair key; :func:`node_credentials` parses a node's two files once per
content (a changed file is parsed afresh); :meth:`Roster.verify_all` encodes the statement's
shared fields (federation, protocol, context) once per batch; a client neither checks its
own keys (it compares them with what it sent) nor is shown more than t - 1 endorsements
(:mod:`securefl.crypto.secagg`).  Every signature or aggregate tag it *is* shown it checks.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from securefl.crypto.pairkeys import TAG_BYTES, exchange_private, pair_key
from securefl.errors import ConfigError, InputError, ProtocolError

SIGNATURE_BYTES = 64
PUBLIC_KEY_BYTES = 32
ROSTER_DOMAIN = b"securefl/roster/v1"
BINDING_DOMAIN = b"securefl/key-binding/v1"
ROSTER_FILE = "roster.json"


def _field(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def cohort_digest(recipients: Sequence[int]) -> bytes:
    """C = SHA-256("securefl/cohort/v1" || ids as 64-bit big-endian, in the given order):
    32 bytes that fix a recipient list (a request can carry it where the list is long)."""
    ids = [int(r) for r in recipients]
    if len(set(ids)) != len(ids) or any(r < 0 for r in ids):
        raise InputError("recipients", recipients, "must be distinct non-negative client ids")
    return hashlib.sha256(b"securefl/cohort/v1" + b"".join(struct.pack(">q", r) for r in ids)).digest()


def statement(federation: bytes, protocol: str, context: bytes, sender: int, cohort: bytes,
              key: bytes) -> bytes:
    """The byte string a sender signs to bind ``key`` (module docstring); injective in its
    fields (each is length-prefixed).  ``cohort``: :func:`cohort_digest` of the recipients."""
    return _prefix(federation, protocol, context) + _tail(sender, cohort, key)


def _prefix(federation: bytes, protocol: str, context: bytes) -> bytes:
    """The statement's fields that every key of one protocol session shares."""
    return BINDING_DOMAIN + _field(federation) + _field(protocol.encode()) + _field(bytes(context))


def _tail(sender: int, cohort: bytes, key: bytes) -> bytes:
    if not isinstance(cohort, bytes) or len(cohort) != 32:
        raise InputError("cohort", cohort, "must be a 32-byte cohort_digest")
    return struct.pack(">q", int(sender)) + _field(cohort) + _field(bytes(key))


def _tag(pair_key: bytes, statement_bytes: bytes, recipient: int) -> bytes:
    """HMAC-SHA256(pair key, statement || recipient), truncated to :data:`TAG_BYTES`."""
    return hmac.new(pair_key, statement_bytes + struct.pack(">q", recipient),
                    hashlib.sha256).digest()[:TAG_BYTES]


@dataclass(frozen=True)
class Roster:
    """The federation: ``name`` and ``keys`` (client id -> 32-byte Ed25519 public key)."""

    name: str
    keys: Mapping[int, bytes]
    _id: bytes = field(default=b"", init=False, repr=False, compare=False)
    _verifiers: dict[int, Ed25519PublicKey] = field(default_factory=dict, init=False, repr=False,
                                                    compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InputError("name", self.name, "a roster needs a non-empty federation name")
        keys = {}
        for client, key in dict(self.keys).items():
            if not isinstance(client, int) or isinstance(client, bool) or client < 0:
                raise InputError("keys", client, "client ids must be non-negative integers")
            if not isinstance(key, bytes) or len(key) != PUBLIC_KEY_BYTES:
                raise InputError(f"keys[{client}]", key, f"must be {PUBLIC_KEY_BYTES} raw Ed25519 bytes")
            keys[client] = key
        if not keys:
            raise InputError("keys", keys, "a roster needs at least one client")
        object.__setattr__(self, "keys", dict(sorted(keys.items())))
        object.__setattr__(self, "_id", hashlib.sha256(ROSTER_DOMAIN + self.canonical()).digest())

    def canonical(self) -> bytes:
        """The canonical JSON encoding (sorted ids, hex keys) that :attr:`id` hashes."""
        body = {"name": self.name, "clients": {str(c): k.hex() for c, k in self.keys.items()}}
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()

    @property
    def id(self) -> bytes:
        """F = SHA-256(domain || canonical encoding): the federation id signatures bind
        (computed once: the roster is immutable)."""
        return self._id

    def _verifier(self, sender: int, protocol: str) -> Ed25519PublicKey:
        """``sender``'s Ed25519 public key object, parsed from :attr:`keys` on first use and
        kept for the roster's life (the roster is immutable, so the object cannot go stale)."""
        public = self._verifiers.get(sender)
        if public is None:
            key = self.keys.get(sender)
            if key is None:
                raise ProtocolError(f"{protocol}: key of client {sender}, who is not in roster {self.name!r}")
            public = self._verifiers[sender] = Ed25519PublicKey.from_public_bytes(key)
        return public

    def verify(self, signature: bytes, *, protocol: str, context: bytes, sender: int,
               cohort: bytes, key: bytes) -> None:
        """Check ``sender``'s ``signature`` binding ``key``; any fault: ProtocolError."""
        self.verify_all([signature], protocol=protocol, context=context, senders=[sender],
                        cohort=cohort, keys=[key])

    def verify_all(self, signatures: Sequence[bytes], *, protocol: str, context: bytes,
                   senders: Sequence[int], cohort: bytes, keys: Sequence[bytes]) -> None:
        """:meth:`verify` of ``signatures[i]`` by ``senders[i]`` on ``keys[i]``, every one
        of them (one Ed25519 verification each; the statement's shared fields are encoded
        once).  The first fault: ProtocolError."""
        if not len(signatures) == len(senders) == len(keys):
            raise InputError("signatures", len(signatures),
                             f"needs one sender and one key each ({len(senders)}, {len(keys)})")
        prefix = _prefix(self.id, protocol, context)
        for signature, sender, key in zip(signatures, senders, keys):
            sender = int(sender)
            public = self._verifier(sender, protocol)
            if not isinstance(signature, (bytes, bytearray)) or len(signature) != SIGNATURE_BYTES:
                raise ProtocolError(f"{protocol}: key of client {sender} is unsigned")
            try:
                public.verify(bytes(signature), prefix + _tail(sender, cohort, key))
            except InvalidSignature:
                raise ProtocolError(
                    f"{protocol}: signature on client {sender}'s key does not verify under roster "
                    f"{self.name!r} (substituted key, or bound to another session, round or cohort)"
                ) from None

    @property
    def everyone(self) -> bytes:
        """:func:`cohort_digest` of every client id of the roster."""
        return cohort_digest(list(self.keys))

    def save(self, path: str | os.PathLike) -> Path:
        """Write the roster as JSON (public: mode 0644)."""
        path = Path(path)
        path.write_bytes(self.canonical() + b"\n")
        return path

    @classmethod
    def load(cls, path: str | os.PathLike, text: bytes | None = None) -> Roster:
        """Read a roster written by :meth:`save` (``text``: the file's bytes, already read);
        bad file: ConfigError naming it."""
        try:
            body = json.loads(Path(path).read_bytes() if text is None else text)
            return cls(str(body["name"]), {int(c): bytes.fromhex(k) for c, k in body["clients"].items()})
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ConfigError(f"roster-file={str(path)!r}: unreadable roster ({exc})") from None


@dataclass(frozen=True)
class Identity:
    """Client ``client``'s long-term Ed25519 key pair."""

    client: int
    private: Ed25519PrivateKey = field(repr=False)

    @classmethod
    def generate(cls, client: int) -> Identity:
        if not isinstance(client, int) or isinstance(client, bool) or client < 0:
            raise InputError("client", client, "must be a non-negative integer")
        return cls(client, Ed25519PrivateKey.generate())

    @property
    def public(self) -> bytes:
        return self.private.public_key().public_bytes_raw()

    def save(self, path: str | os.PathLike) -> Path:
        """Write ``{"client": id, "private": PKCS#8 PEM}`` with mode 0600 (secret)."""
        pem = self.private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                         serialization.NoEncryption()).decode()
        path = Path(path)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            os.fchmod(handle.fileno(), 0o600)
            json.dump({"client": self.client, "private": pem}, handle)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike, text: bytes | None = None) -> Identity:
        """Read an identity written by :meth:`save` (``text``: the file's bytes, already
        read); bad file: ConfigError naming it."""
        try:
            body = json.loads(Path(path).read_bytes() if text is None else text)
            key = serialization.load_pem_private_key(body["private"].encode(), password=None)
            client = int(body["client"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ConfigError(f"identity-file={str(path)!r}: unreadable identity ({exc})") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise ConfigError(f"identity-file={str(path)!r}: not an Ed25519 key")
        return cls(client, key)


@dataclass(frozen=True)
class Credentials:
    """What one client holds: its :class:`Identity` and the roster it trusts.  The
    identity must be the roster's entry for its client id."""

    identity: Identity
    roster: Roster
    _pair_keys: dict[int, bytes] = field(default_factory=dict, init=False, repr=False,
                                         compare=False)
    _exchange: list[X25519PrivateKey] = field(default_factory=list, init=False, repr=False,
                                              compare=False)

    def __post_init__(self) -> None:
        if self.roster.keys.get(self.identity.client) != self.identity.public:
            raise InputError("identity", self.identity.client,
                             f"is not the roster {self.roster.name!r}'s key for that client")

    @property
    def client(self) -> int:
        return self.identity.client

    def sign(self, *, protocol: str, context: bytes, cohort: bytes, key: bytes) -> bytes:
        """This client's signature binding its ephemeral ``key`` (module docstring)."""
        return self.identity.private.sign(
            statement(self.roster.id, protocol, context, self.client, cohort, key))

    def verify(self, signature: bytes, *, protocol: str, context: bytes, sender: int,
               cohort: bytes, key: bytes) -> None:
        """:meth:`Roster.verify` against this client's roster."""
        self.roster.verify(signature, protocol=protocol, context=context, sender=sender,
                           cohort=cohort, key=key)

    def verify_all(self, signatures: Sequence[bytes], *, protocol: str, context: bytes,
                   senders: Sequence[int], cohort: bytes, keys: Sequence[bytes]) -> None:
        """:meth:`Roster.verify_all` against this client's roster."""
        self.roster.verify_all(signatures, protocol=protocol, context=context, senders=senders,
                               cohort=cohort, keys=keys)

    @property
    def everyone(self) -> bytes:
        """:func:`cohort_digest` of the whole roster (keys meant for any member)."""
        return self.roster.everyone

    def pair_key(self, peer: int, protocol: str = "pair") -> bytes:
        """K_(self, peer) of :mod:`securefl.crypto.pairkeys`: derived from the roster on first
        use and kept (the roster is immutable).  ``peer`` outside the roster, or this client
        itself: ProtocolError naming ``protocol``."""
        key = self._pair_keys.get(peer)
        if key is None:
            public = self.roster.keys.get(int(peer))
            if public is None or int(peer) == self.client:
                raise ProtocolError(f"{protocol}: no pair key between client {self.client} and "
                                    f"{peer} in roster {self.roster.name!r}")
            if not self._exchange:  # this client's X25519 key, derived once
                self._exchange.append(exchange_private(self.identity.private))
            key = self._pair_keys[int(peer)] = pair_key(
                self._exchange[0], self.client, public, int(peer), self.roster.id)
        return key

    def derive_pair_keys(self) -> int:
        """Derive (and keep) the pair key with every other roster member: what a node's warm
        executor does once, before it forks a process per message, so that no message pays
        for them again.  Returns how many there are."""
        for peer in self.roster.keys:
            if peer != self.client:
                self.pair_key(peer)
        return len(self._pair_keys)

    def tags(self, recipients: Sequence[int], *, protocol: str, context: bytes, cohort: bytes,
             key: bytes) -> list[bytes]:
        """This client's 16-byte tag binding ``key`` for each of ``recipients``:
        HMAC-SHA256(K_(self, r), statement(F, protocol, context, self, cohort, key) || r),
        truncated (:mod:`securefl.crypto.pairkeys`).  The statement is the one :meth:`sign`
        signs, so a tag binds exactly what a signature binds, for its recipient only."""
        body = statement(self.roster.id, protocol, context, self.client, cohort, key)
        return [_tag(self.pair_key(r, protocol), body, int(r)) for r in recipients]

    def check_aggregate(self, aggregate: bytes, *, protocol: str, context: bytes | Sequence[bytes],
                        senders: Sequence[int], cohort: bytes, keys: Sequence[bytes]) -> None:
        """Check the Katz-Lindell aggregate of ``senders[i]``'s tags to this client binding
        ``keys[i]`` (under ``context``, or ``context[i]`` when one per sender): the XOR of
        every expected tag must equal ``aggregate`` (constant-time comparison;
        :func:`securefl.crypto.pairkeys.aggregate`).  A sender named twice (its tags would
        cancel), a malformed aggregate or a mismatch: ProtocolError."""
        contexts = [context] * len(senders) if isinstance(context, (bytes, bytearray)) else list(context)
        if not len(contexts) == len(senders) == len(keys):
            raise InputError("senders", len(senders), f"needs one key and one context each "
                                                      f"({len(keys)}, {len(contexts)})")
        senders = [int(s) for s in senders]
        if len(set(senders)) != len(senders):
            raise ProtocolError(f"{protocol}: a sender is named twice among {senders} (its tags "
                                "would cancel out of the aggregate)")
        if not isinstance(aggregate, (bytes, bytearray)) or len(aggregate) != TAG_BYTES:
            raise ProtocolError(f"{protocol}: keys to client {self.client} carry no {TAG_BYTES}-byte "
                                "aggregate tag")
        prefixes = {bytes(c): _prefix(self.roster.id, protocol, c) for c in set(map(bytes, contexts))}
        expected = 0
        for sender, each, key in zip(senders, contexts, keys):
            body = prefixes[bytes(each)] + _tail(sender, cohort, key)
            expected ^= int.from_bytes(_tag(self.pair_key(sender, protocol), body, self.client), "big")
        if not hmac.compare_digest(expected.to_bytes(TAG_BYTES, "big"), bytes(aggregate)):
            raise ProtocolError(
                f"{protocol}: the aggregate tag of clients {senders} to client {self.client} does "
                f"not verify under roster {self.roster.name!r} (a substituted key, or one bound to "
                "another session, round or cohort)")


def new_federation(name: str, clients: int) -> tuple[Roster, list[Credentials]]:
    """A fresh roster of ``clients`` identities 0..clients-1 and each client's credentials
    (the in-process simulator's throwaway federation; ``securefl keys new``)."""
    if not isinstance(clients, int) or isinstance(clients, bool) or clients < 1:
        raise InputError("clients", clients, "must be a positive integer")
    identities = [Identity.generate(c) for c in range(clients)]
    roster = Roster(name, {i.client: i.public for i in identities})
    return roster, [Credentials(i, roster) for i in identities]


def write_federation(directory: str | os.PathLike, name: str, clients: int) -> Path:
    """``securefl keys new``: ``directory/roster.json`` (public, to every node) and
    ``directory/client-<c>.key`` (mode 0600, to node c only).  Refuses to overwrite."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    if (out / ROSTER_FILE).exists():
        raise InputError("--out", str(out), f"already holds a {ROSTER_FILE}; refusing to overwrite keys")
    roster, credentials = new_federation(name, clients)
    for c in credentials:
        c.identity.save(out / f"client-{c.client}.key")
    roster.save(out / ROSTER_FILE)
    return out


CREDENTIALS = "credentials"
"""In-process node config entry: a :class:`Credentials` object (the simulator's)."""
IDENTITY_FILE = "identity-file"
ROSTER_FILE_KEY = "roster-file"


def node_credentials(node_config: Mapping[str, Any], client: int) -> Credentials:
    """The credentials a node's own configuration gives client ``client``: the in-process
    simulator's object under ``credentials``, or (a deployment) the files named by
    ``identity-file`` and ``roster-file``.  Never anything from the server.  A node
    without them, or whose identity is another client's: ProtocolError (a real protocol
    cannot run unauthenticated)."""
    held = node_config.get(CREDENTIALS)
    if held is None:
        identity_file, roster_file = node_config.get(IDENTITY_FILE), node_config.get(ROSTER_FILE_KEY)
        if not identity_file or not roster_file:
            raise ProtocolError(
                f"client {client}: node config names no '{IDENTITY_FILE}' and '{ROSTER_FILE_KEY}' "
                "(create them with `securefl keys new`); a real protocol will not run unauthenticated")
        held = _file_credentials(str(identity_file), str(roster_file))
    if not isinstance(held, Credentials):
        raise InputError(CREDENTIALS, held, "must be a securefl.crypto.identity.Credentials")
    if held.client != int(client):
        raise ProtocolError(f"node of client {client} holds the identity of client {held.client}")
    return held



def _file_credentials(identity_file: str, roster_file: str) -> Credentials:
    """The credentials in a node's two files, read on every call and parsed once per content:
    a node's later messages reuse the roster whose key objects are already loaded, and a
    file whose bytes changed (a replaced roster or identity) is parsed afresh."""
    texts = []
    for option, path, what in ((IDENTITY_FILE, identity_file, "identity"),
                               (ROSTER_FILE_KEY, roster_file, "roster")):
        try:
            texts.append(Path(path).read_bytes())
        except OSError as exc:
            raise ConfigError(f"{option}={path!r}: unreadable {what} ({exc})") from None
    return _parsed_credentials(identity_file, roster_file, *texts)


@lru_cache(maxsize=8)
def _parsed_credentials(identity_file: str, roster_file: str, identity_text: bytes,
                        roster_text: bytes) -> Credentials:
    return Credentials(Identity.load(identity_file, identity_text), Roster.load(roster_file, roster_text))
