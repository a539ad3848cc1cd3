"""Random-hyperplane LSH from a seed the clients agree on without the server (FedProp §3.2).

**Math.**  L hyperplane normals u_1..u_L are i.i.d. standard Gaussian in R^d, so their
directions are uniform on the sphere.  A vector v gets the code b_i = 1[<v, u_i> >= 0].
For two vectors at angle theta, each bit differs with probability theta / pi, hence the
Hamming distance H ~ Binomial(L, theta / pi) and

    cos(pi H / L)  ->  cos(theta) = <v1, v2> / (|v1| |v2|)   as L grows,

with standard deviation of pi H / L equal to pi sqrt(p (1 - p) / L), p = theta / pi.

**Shared seed (Algorithm 3 line 1).**  Every client j draws a 16-byte share s_j; the
common seed is SHA-256("securefl/lsh", s_1, ..., s_P)[:16].  Shares travel
sealed with AES-GCM under pairwise X25519 keys (:mod:`securefl.crypto.keys`); the
server only relays public keys and ciphertexts.

*Who learns what.*  Each client learns the seed (it needs the hyperplanes), a client
colluding with the server included.  The server alone sees public keys and AES-GCM
ciphertexts only; the seed is pseudo-random to it (one honest share suffices), so it cannot
compute codes of guessed feature vectors, which is what keeps H (the only thing it later
receives) from being matched against candidate inputs; a server with a colluding member
has the seed.

*Seal keys bound to the roster (against a deviating server).*  Unauthenticated, the
agreement falls to key substitution: a server that relays its own X25519 key in place of
every peer's opens every sealed share and computes the seed.  A client that holds
:class:`~securefl.crypto.identity.Credentials` (``credentials``) therefore seals its share
to party k under

    k_jk = HKDF-SHA256(X25519(e_j, E_k) || K_(c_j, c_k), salt = binding,
                       info = "securefl/lsh-seal/v1" || C || min(j,k) || max(j,k))

(E_k the relayed ephemeral key, K the static pair key of the two roster identities,
:meth:`~securefl.crypto.identity.Credentials.pair_key`, c_j = ``cohort[j]`` party j's
roster id, C the digest of the round's ``cohort`` -- the roster ids of the parties in
party order, as this client was shown them -- and ``binding`` the session the caller
names).  A substituted ephemeral key gives the server X25519(e_j, E_server) but not K_jk
(CDH on curve25519, as for the pair tags), so every share sealed to it stays IND-CPA to the
server and its colluding clients; the real receiver cannot open it either, and
:meth:`SeedAgreementClient.receive_shares` raises ProtocolError (AES-GCM authenticates the
key, the parties, the cohort and the session together: a key of another session, a party
relabelled, a cohort this client was not shown all fail the same way).  No tag travels,
so the authenticated agreement sends exactly the semi-honest one's bytes.  The ephemeral
keys stay (unlike the links' keys, derived from the pair keys alone): the seed is secret,
and a later theft of a roster identity must not open old sessions' shares (forward
secrecy: the ephemeral secrets are gone).  A client that opened every peer's share has
confirmed each ephemeral exchange both ways (equal seal keys need equal X25519 outputs,
which a server relaying its own keys cannot arrange without a discrete logarithm), so keys
later derived from the exchange alone (CrossClientLP's pads, ``pairwise_key(peer, "pad")``
of a party without credentials) are as authenticated.  The server can still drop keys or
shares (a missing share: ProtocolError) or make the round fail.  Without credentials (the
in-process library, every party in one process) the seal key is the ephemeral exchange
alone.

The normals come from the AES-CTR PRG (:mod:`securefl.crypto.prg`) through Box-Muller,
because every client must derive bit-identical hyperplanes from the seed on any machine;
numpy's generators do not promise that across versions, AES-CTR does.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from securefl.crypto.channel import SERVER, Message
from securefl.crypto.identity import Credentials, cohort_digest
from securefl.crypto.keys import KeyPair, deterministic_bytes, open_sealed, pairwise_secret, seal
from securefl.crypto.prg import SEED_BYTES, expand, random_seed
from securefl.errors import InputError, ProtocolError

TAG_PUBLIC_KEY = "lsh/public-key"
TAG_PUBLIC_KEYS = "lsh/public-keys"
TAG_SHARES = "lsh/seed-shares"
KEY_PROTOCOL = "lsh"
"""The protocol name a seed-agreement pair key is asked for under (errors name it)."""
SEAL_DOMAIN = b"securefl/lsh-seal/v1"


def hyperplanes(seed: bytes, dim: int, L: int) -> np.ndarray:
    """The ``(dim, L)`` float64 matrix of i.i.d. N(0, 1) normals expanded from ``seed``.

    Box-Muller on 53-bit uniforms from the AES-CTR keystream: z = sqrt(-2 ln u1) cos(2 pi u2)
    and sqrt(-2 ln u1) sin(2 pi u2), with u1 in (0, 1] so the logarithm is finite.
    """
    if not isinstance(dim, (int, np.integer)) or dim < 1:
        raise InputError("dim", dim, "must be a positive integer")
    if not isinstance(L, (int, np.integer)) or L < 1:
        raise InputError("L", L, "must be a positive integer")
    if len(bytes(seed)) != SEED_BYTES:
        raise InputError("seed", seed, f"must be {SEED_BYTES} bytes")
    count = int(dim) * int(L)
    half = -(-count // 2)
    words = expand(bytes(seed), (2, half), np.uint64)
    u1 = ((words[0] >> np.uint64(11)).astype(np.float64) + 1.0) * 2.0**-53
    u2 = (words[1] >> np.uint64(11)).astype(np.float64) * 2.0**-53
    radius = np.sqrt(-2.0 * np.log(u1))
    angle = 2.0 * np.pi * u2
    normals = np.concatenate([radius * np.cos(angle), radius * np.sin(angle)])[:count]
    return normals.reshape(int(dim), int(L))


def lsh_codes(features: np.ndarray, planes: np.ndarray) -> np.ndarray:
    """Codes b = 1[<v, u_i> >= 0] of the rows of ``features`` as an ``(n, L)`` uint8 0/1 array."""
    features = np.asarray(features)
    planes = np.asarray(planes)
    if features.ndim != 2 or features.dtype.kind not in "fiu":
        raise InputError("features", features, "must be a real (n, d) array")
    if planes.ndim != 2 or planes.shape[0] != features.shape[1]:
        raise InputError("planes", planes, f"must be a (d, L) array with d = {features.shape[1]}")
    if not np.all(np.isfinite(features)):
        raise InputError("features", features, "contains NaN or infinity")
    return (features.astype(np.float64, copy=False) @ planes >= 0).astype(np.uint8)


def cosine_from_hamming(hamming: np.ndarray, L: int) -> np.ndarray:
    """The LSH cosine estimate cos(pi H / L), elementwise."""
    if not isinstance(L, (int, np.integer)) or L < 1:
        raise InputError("L", L, "must be a positive integer")
    hamming = np.asarray(hamming)
    if hamming.size and (hamming.min() < 0 or hamming.max() > L):
        raise InputError("hamming", hamming, f"distances must lie in [0, L={L}]")
    return np.cos(np.pi * hamming.astype(np.float64) / L)


def common_seed(shares: list[bytes]) -> bytes:
    """SHA-256("securefl/lsh", shares in party order) truncated to a PRG seed."""
    digest = hashlib.sha256(b"securefl/lsh")
    for share in shares:
        digest.update(share)
    return digest.digest()[:SEED_BYTES]


@dataclass
class SeedAgreementClient:
    """Client side of the seed agreement: a key pair, a share, and what it has received.

    Rounds: :meth:`advertise` -> (server broadcasts keys) -> :meth:`send_shares` ->
    (server relays) -> :meth:`receive_shares`, which returns the common seed.

    ``seed`` derives the share (so a simulation can reproduce the hyperplanes; the
    server must then not know it), ``key_seed`` the X25519 key pair (deterministic
    transcripts in tests); ``None`` draws from the OS CSPRNG.  ``credentials``,
    ``cohort`` (the roster id of every party, in party order) and ``binding`` (the
    session bytes the seal keys bind) bind every seal key to the pair key of the two
    roster identities (module docstring); with ``credentials`` a cohort is required.
    """

    party: int
    session: bytes
    seed: int | None = None
    key_seed: int | None = None
    keys: KeyPair | None = None
    share: bytes = b""
    peer_keys: dict[int, bytes] = field(default_factory=dict)
    lsh_seed: bytes | None = None
    credentials: Credentials | None = None
    cohort: Sequence[int] = ()
    binding: bytes = b""
    _cohort_digest: bytes = field(default=b"", init=False, repr=False, compare=False)

    def _roster_id(self, party: int) -> int:
        """Party ``party``'s roster id in the cohort this client was shown."""
        if not 0 <= int(party) < len(self.cohort):
            raise ProtocolError(f"client {self.party}: a seed-agreement key of party {party}, "
                                f"outside the round's {len(self.cohort)} members")
        return int(self.cohort[int(party)])

    def draw_share(self) -> bytes:
        """This client's 16-byte contribution to the seed (CSPRNG, or from ``seed``)."""
        if self.seed is None:
            self.share = random_seed()
        else:
            self.share = deterministic_bytes(self.seed, "share", self.party, length=SEED_BYTES)
        return self.share

    def advertise(self) -> Message:
        """Generate the key pair and share; send the public key to the server (the same
        message with or without credentials: the roster binding is in the seal keys)."""
        if self.credentials is not None and self._roster_id(self.party) != self.credentials.client:
            raise ProtocolError(f"party {self.party} of the cohort is client {self.cohort[self.party]}, "
                                f"not this client ({self.credentials.client})")
        self.keys = KeyPair.generate(seed=self.key_seed, party=self.party)
        self.draw_share()
        return Message(self.party, SERVER, TAG_PUBLIC_KEY, (self.keys.public_array(),))

    def pairwise_key(self, peer: int, label: str) -> bytes:
        """Key ``label`` shared with ``peer`` (needs the peer's public key); with credentials
        bound to the two roster identities' pair key, the cohort and ``binding`` (module
        docstring)."""
        if self.keys is None or peer not in self.peer_keys:
            raise ProtocolError(f"client {self.party} has no public key of client {peer}")
        secret = pairwise_secret(
            self.keys.private,
            self.peer_keys[peer],
            session=self.session,
            me=self.party,
            peer=peer,
            label=label,
        )
        if self.credentials is None:
            return secret
        pair = self.credentials.pair_key(self._roster_id(peer), KEY_PROTOCOL)
        low, high = sorted((self.party, int(peer)))
        if not self._cohort_digest:  # the cohort is fixed for the agreement: hashed once
            self._cohort_digest = cohort_digest([int(c) for c in self.cohort])
        info = SEAL_DOMAIN + label.encode() + self._cohort_digest + struct.pack(">qq", low, high)
        return HKDF(hashes.SHA256(), 32, salt=bytes(self.binding), info=info).derive(secret + pair)

    def send_shares(self, message: Message) -> Message:
        """Store the broadcast public keys; seal the share for every other client."""
        if message.tag != TAG_PUBLIC_KEYS:
            raise ProtocolError(f"expected {TAG_PUBLIC_KEYS!r}, got {message.tag!r}")
        if len(message.arrays) != 2:
            raise ProtocolError(f"client {self.party}: the key broadcast must hold (parties, keys)")
        parties, publics = message.arrays
        peer_keys = {int(p): bytes(k) for p, k in zip(parties, publics)}
        if len(peer_keys) != len(parties):
            raise ProtocolError(f"client {self.party}: the key broadcast lists a party twice")
        self.peer_keys = peer_keys
        if self.peer_keys.get(self.party) != self.keys.public:
            raise ProtocolError(f"server broadcast a wrong public key for client {self.party}")
        recipients = np.array([p for p in self.peer_keys if p != self.party], dtype=np.int32)
        sealed = [
            seal(
                self.pairwise_key(int(p), "seal"),
                self.share,
                associated=_context(self.party, int(p)),
            )
            for p in recipients
        ]
        blob = np.stack(sealed) if sealed else np.zeros((0, 0), dtype=np.uint8)
        return Message(self.party, SERVER, TAG_SHARES, (recipients, blob))

    def receive_shares(self, message: Message) -> bytes:
        """Open every relayed share and derive the common seed."""
        if message.tag != TAG_SHARES:
            raise ProtocolError(f"expected {TAG_SHARES!r}, got {message.tag!r}")
        senders, blobs = message.arrays
        shares = {self.party: self.share}
        for sender, blob in zip(senders, blobs):
            sender = int(sender)
            try:
                shares[sender] = open_sealed(
                    self.pairwise_key(sender, "seal"), blob, associated=_context(sender, self.party))
            except ProtocolError as error:
                raise ProtocolError(
                    f"client {self.party}: the seed share of party {sender} does not open ({error}; "
                    "a substituted or relabelled key, or one of another session or cohort)") from None
        missing = sorted(set(self.peer_keys) - set(shares))
        if missing:
            raise ProtocolError(f"client {self.party} is missing seed shares from {missing}")
        self.lsh_seed = common_seed([shares[p] for p in sorted(shares)])
        return self.lsh_seed


@dataclass
class SeedAgreementServer:
    """Server side: broadcasts public keys, relays sealed shares; never holds a secret."""

    parties: list[int] = field(default_factory=list)

    def broadcast_keys(self, messages: list[Message]) -> list[Message]:
        """All received public keys, to every client that sent one."""
        for message in messages:
            if message.tag != TAG_PUBLIC_KEY or message.receiver != SERVER:
                raise ProtocolError(f"unexpected message {message.tag!r} from {message.sender}")
        self.parties = [m.sender for m in messages]
        if not messages:  # every client left (or refused) before the agreement
            return []
        ids = np.array(self.parties, dtype=np.int32)
        keys = np.stack([m.arrays[0] for m in messages])
        return [Message(SERVER, p, TAG_PUBLIC_KEYS, (ids, keys)) for p in self.parties]

    def relay_shares(self, messages: list[Message]) -> list[Message]:
        """Route each sealed share to its recipient (the server cannot open them)."""
        inbox: dict[int, list[tuple[int, np.ndarray]]] = {p: [] for p in self.parties}
        for message in messages:
            recipients, blobs = message.arrays
            for recipient, blob in zip(recipients, blobs):
                if int(recipient) not in inbox:
                    raise ProtocolError(f"share addressed to unknown client {int(recipient)}")
                inbox[int(recipient)].append((message.sender, blob))
        out = []
        for party, items in inbox.items():
            senders = np.array([s for s, _ in items], dtype=np.int32)
            blobs = np.stack([b for _, b in items]) if items else np.zeros((0, 0), dtype=np.uint8)
            out.append(Message(SERVER, party, TAG_SHARES, (senders, blobs)))
        return out


def _context(sender: int, receiver: int) -> bytes:
    return f"securefl/lsh-share/{sender}->{receiver}".encode()


def agree_seed(clients: list[SeedAgreementClient], network) -> SeedAgreementServer:
    """Run the seed agreement among ``clients`` over ``network`` (a :class:`Network`).

    Afterwards every client's ``lsh_seed`` is set and equal; the returned server state
    holds nothing but the list of parties.
    """
    server = SeedAgreementServer()
    inbound = [network.deliver(c.advertise()) for c in clients]
    by_party = {c.party: c for c in clients}
    outbound = [network.deliver(m) for m in server.broadcast_keys(inbound)]
    inbound = [network.deliver(by_party[m.receiver].send_shares(m)) for m in outbound]
    for message in server.relay_shares(inbound):
        by_party[message.receiver].receive_shares(network.deliver(message))
    return server
