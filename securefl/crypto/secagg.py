"""Secure aggregation with double masking and dropout recovery (Bonawitz et al. 2017).

Parties are sans-I/O dataclasses: :class:`SecAggClient` and :class:`SecAggServer` take
:class:`~securefl.crypto.channel.Message` objects and return the next ones; the one loop
that moves them is :func:`securefl.runtime.engine.drive` over the exchanges of
:mod:`securefl.runtime.secure_sum_steps`, on any transport (the in-process simulator,
:func:`securefl.runtime.secure_sum`, is that driver on the in-process transport).

Protocol (semi-honest variant, Fig. 4 of the paper), ring Z_R with R = 2^k:

0. **advertise keys.** Client u draws two X25519 key pairs (c_u^SK, c_u^PK) for
   encryption and (s_u^SK, s_u^PK) for masking and sends both public keys.  The server
   needs |U1| >= t and broadcasts the list.
1. **share keys.** u draws a self-mask seed b_u (16 bytes) and Shamir-shares s_u^SK and
   b_u t-of-|holders| over F_(2^61-1) (:mod:`securefl.crypto.shamir`) to every holder v
   (itself included, point v + 1).  Each share is encrypted with AES-GCM under
   HKDF(X25519(c_u^SK, c_v^PK)); the associated data binds session id, round, sender and
   receiver, so a tampered, misrouted, replayed or cross-session ciphertext fails to
   decrypt.  The key is the same both ways; u keeps it (its own state) to open v's
   shares in round 2 instead of deriving it again.  The server relays ciphertexts (needs |U2| >= t).
2. **masked input.** u computes s_uv = HKDF(X25519(s_u^SK, s_v^PK)) for every v in U2 and
   sends  y_u = x_u + PRG(b_u) + sum_(v in U2, v != u) sign(v - u) PRG(s_uv)  mod R,
   PRG = AES-128-CTR; the pairwise masks cancel in the sum (needs |U3| >= t).
3. **unmask.** The server announces U3.  Each u in U3 sends, for every v it holds shares
   of, the share of b_v if v in U3 and of s_v^SK if v in U2 \\ U3 (never both).  With
   |U4| >= t shares the server reconstructs them, recomputes the dropped clients' pairwise
   masks and outputs
   z = sum_(u in U3) (y_u - PRG(b_u)) - sum_(u in U3, v in U2\\U3) sign(v - u) PRG(s_uv)
     = sum_(u in U3) x_u  mod R.

SecAgg+ option (Bell et al. 2020): with ``neighbours=k`` the communication graph is the
circulant Harary graph (u adjacent to u +- 1..k/2 mod n): pairwise masks and shares only
along its edges, shares t'-of-(k+1) with t' = ceil(t (k+1) / n).  The graph is fixed
and public rather than random (Bell et al. sample it so that a coalition fixed in
advance rarely holds t' of anyone's shares), and this module claims no threshold
guarantee for it against colluding clients (see *Security*).

**Threshold.**  n/2 < t <= n, enforced by :class:`SecAggConfig` and
:func:`plan_survivors` (every caller in securefl uses a majority).  With t <= n/2 a
server that sends one survivor list to half of the clients and another to the other
half collects t shares of both b_v and s_v^SK of a client v that never dropped and
unmasks x_v (n = 4, t = 2: a test runs that attack).

**Security** (semi-honest parties; AES-CTR a PRF, X25519 CDH, AES-GCM secure).
:func:`collusion_tolerance` returns the largest coalition of clients, colluding with
the server, against which the guarantee below holds.

* *Complete graph* (``neighbours=None``): the server together with any coalition of
  fewer than t semi-honest clients, under any dropout pattern, learns nothing about the
  other clients' inputs beyond sum_(u in U3) x_u, |U3| >= t (Bonawitz et al. 2017,
  Thm. 6.3): each y_u is uniform on Z_R^dim given everything else because of PRG(b_u)
  and the pairwise masks; a holder reveals b_u or s_u^SK, never both; a coalition holds
  fewer than t shares of anything.  Tolerance t - 1.
* *Survivor lists* (complete graph; a server that follows the protocol except that it
  sends different lists U3 to different clients, no colluding client): it cannot
  recover any single client's input.  b_v is revealed by holders that list v and
  s_v^SK by holders that do not, disjoint sets that would each need t > n/2 members;
  removing v's pairwise masks through s_u^SK of all of v's m - 1 partners instead
  needs (m - 1) t omissions from lists of at least t of the m clients of U2 (clients
  refuse shorter lists, lists without themselves and names whose shares they do not
  hold), more than the m (m - t) available when t > m/2.  It *can* learn the sum over a
  subset of the survivors smaller than t: there is no consistency-check round (Bonawitz
  et al.'s actively secure variant authenticates the lists).
* *SecAgg+ graph* (``neighbours=k``): only the server alone is covered (tolerance 0).
  It learns sum_(u in U3) x_u and nothing else, because b_u needs t' shares from u's
  neighbourhood, holders answer one consistent list, and the graph induced on U3 must be
  connected — checked by :meth:`SurvivorPlan.check`, by the server before it announces
  U3 and by every client on the list it receives; otherwise the server would learn the
  sum of each connected part (n = 20, t = 11, k = 4: four dropouts isolate three
  clients).  Colluding clients break it far below t: t' colluding neighbours of v
  (3 for n = 20, t = 11, k = 4) reconstruct b_v and s_v^SK and hence x_v (a test runs
  that attack); t' - 1 colluders plus k - t' + 1 dropped neighbours of v also do;
  colluders that together with dropped clients cut the graph expose partial sums; and a
  server sending inconsistent survivor lists can claim all of v's neighbours dropped to
  some of their holders while v survives for v's holders (the consistency round below
  rules that last attack out: every revealing client holds t endorsements of one list).  Use the complete graph when
  clients may collude with the server.

**Authenticated protocol** (``credentials`` / ``SecAggConfig.members``; what every
transport and :func:`securefl.runtime.secure_sum` run by default).  The request that starts
a sum names its members (roster ids in index order).  Client u tags (c_u^PK, s_u^PK) for
every other member v with the static pair key K_uv of their roster identities
(:mod:`securefl.crypto.pairkeys`): a 16-byte HMAC over the statement (federation id,
``secagg/keys``, session, cohort digest C of the members, u, keys) and v
(:meth:`securefl.crypto.identity.Credentials.tags`).  The server relays to v, with the key
list, the XOR of the listed owners' tags *to v* (v's own keys it compares instead): one
16-byte Katz-Lindell aggregate (:func:`securefl.crypto.pairkeys.aggregate`); v recomputes
every tag, checks their XOR and that its own keys are listed unchanged -- before it
encrypts a share.  The aggregate convinces its recipient exactly as a signature per key
would (only u and v can compute K_uv; the key list names each owner once), at the cost of
a hash per peer instead of an Ed25519 verification.  Against a deviating server this rules
out key substitution: the review's attack (n = 5, t = 3, no colluding client: relay its own
keys, open the shares sent to them, rebuild b_v and s_v^SK, unmask x_v) is refused in round
1 (a test runs it against both variants).

**Consistency round** (``SecAggConfig.consistency``, authenticated only; Bonawitz et al.
§4): between masked input and unmasking, the server sends U3; each client checks it as for
unmasking and *endorses* it: one tag on U3 (``secagg/survivors`` over the sorted indices)
for every other member of U3.  The server relays to each client the aggregate (XOR) of the
tags to it of the t - 1 lowest-numbered endorsers other than itself (t endorsements of one
list are the whole proof and the receiver is the t-th: it endorsed exactly this list
itself), the endorsers named by a bitmap over U3 (:func:`securefl.crypto.idsets.pack_subset`:
an endorser outside U3, or named twice, cannot be expressed).  A client reveals shares only
after checking the aggregate -- of at least t - 1 other clients of its own U3, on exactly
that U3 -- and refuses its own entry, and an aggregate that any tag on another list (or
none at all) went into.  Two lists A != B would each need t > n/2 endorsers, and a client
endorses once: the server cannot show different survivor sets to different clients and
still unmask, so a sum over fewer than t survivors is ruled out too.  Every transport runs
it (:mod:`securefl.runtime.secure_sum_steps`: one more exchange); without it the *Survivor
lists* bound above applies (no single input, but possibly a sum of fewer than t).

A client learns only ciphertexts for it, shares (fewer than t, resp. t', of anything)
and public keys.  The runner enforces that no party object reads another's state.  Too
few survivors at any round -> DropoutError, no output; any malformed, tampered,
misaddressed, out-of-round or replayed message -> ProtocolError.

Masks come only from AES-CTR keyed by X25519/HKDF outputs and CSPRNG seeds (never numpy
or Mersenne Twister).  ``seed`` of :func:`securefl.runtime.secure_sum` (:func:`party_rng`) replaces the OS CSPRNG by a
per-party AES-CTR stream for reproducible tests.

Why by hand: no maintained Python package implements this protocol; the pieces (X25519,
AES-GCM, AES) are from ``cryptography``; HKDF is two ``hmac`` calls (see ``_kdf``).
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import math
import secrets
import struct
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from securefl.crypto import prg, shamir
from securefl.crypto.channel import SERVER, Message
from securefl.crypto.fixed_point import container_dtype, ring_mask
from securefl.crypto.identity import Credentials, cohort_digest
from securefl.crypto.idsets import pack_subset, unpack_subset
from securefl.crypto.pairkeys import TAG_BYTES, aggregate
from securefl.errors import DropoutError, InputError, ProtocolError

ROUNDS = ("advertise", "share", "masked_input", "unmask")
"""Protocol rounds in order; a dropout is declared at one of them."""

TAGS = {
    "advertise": "secagg/advertise",
    "keys": "secagg/keys",
    "shares": "secagg/shares",
    "ciphertexts": "secagg/ciphertexts",
    "masked": "secagg/masked",
    "survivors": "secagg/survivors",
    "unmask": "secagg/unmask",
    "consistency": "secagg/consistency",
    "endorsements": "secagg/endorsements",
}

SURVIVORS_PROTOCOL = "secagg/survivors"
"""What a client's consistency-round tag on the survivor list U3 names."""
KEY_PROTOCOL = "secagg/keys"
"""What a client's tag on its (c^PK, s^PK) names (:mod:`securefl.crypto.identity`)."""
KEY_BYTES = 32
SEED_BYTES = prg.SEED_BYTES
_SK_LIMBS = -(-KEY_BYTES // shamir.LIMB_BYTES)  # 5 field elements per X25519 secret key
_B_LIMBS = -(-SEED_BYTES // shamir.LIMB_BYTES)  # 3 field elements per self-mask seed
_SHARE_WORDS = _SK_LIMBS + _B_LIMBS
_NONCE_BYTES = 12
_CIPHERTEXT_BYTES = _NONCE_BYTES + 8 * _SHARE_WORDS + 16

RandomBytes = shamir.RandomBytes


# ----------------------------------------------------------------------------- plan


def neighbourhood(u: int, n: int, neighbours: int | None) -> tuple[int, ...]:
    """Clients adjacent to ``u``: all others, or u +- 1..k/2 mod n (circulant graph)."""
    if neighbours is None or neighbours >= n - 1:
        return tuple(v for v in range(n) if v != u)
    half = neighbours // 2
    return tuple(sorted({(u + d) % n for d in range(-half, half + 1) if d != 0}))


def check_threshold(n: int, threshold: int) -> int:
    """``threshold`` as an int if n/2 < t <= n, else :class:`InputError`: with t <= n/2 a
    server sending different survivor lists to two halves unmasks a live client."""
    if (
        not isinstance(threshold, (int, np.integer))
        or isinstance(threshold, (bool, np.bool_))
        or not n // 2 < threshold <= n
    ):
        raise InputError(
            "threshold",
            threshold,
            f"must be an integer with n/2 < t <= n, i.e. in {n // 2 + 1}..{n} for n = {n} "
            "clients (with t <= n/2 a server sending different survivor lists to two "
            "halves of the clients collects t shares of both secrets of a client that "
            "never dropped and unmasks its input)",
        )
    return int(threshold)


def collusion_tolerance(n: int, threshold: int, neighbours: int | None) -> int:
    """The largest number of clients that may collude with the server while it still
    learns nothing beyond the sum: t - 1 with the complete graph, 0 with the fixed SecAgg+
    graph (t' neighbours of a client recover its input; see the module docstring)."""
    if neighbours is None or neighbours >= n - 1:
        return threshold - 1
    return 0


def survivors_connected(survivors: Sequence[int], n: int, neighbours: int | None) -> bool:
    """Whether the communication graph induced on ``survivors`` is connected: the masks
    of U3 cancel only in the total of each connected part, whose sum the server learns."""
    alive = {int(u) for u in survivors}
    if neighbours is None or neighbours >= n - 1 or len(alive) <= 1:
        return True
    start = next(iter(alive))
    seen, frontier = {start}, [start]
    while frontier:
        u = frontier.pop()
        for v in neighbourhood(u, n, neighbours):
            if v in alive and v not in seen:
                seen.add(v)
                frontier.append(v)
    return len(seen) == len(alive)


def neighbour_threshold(n: int, threshold: int, neighbours: int | None) -> int:
    """Shamir threshold within one neighbourhood of k + 1 holders: ceil(t (k+1) / n)."""
    if neighbours is None or neighbours >= n - 1:
        return threshold
    return max(1, math.ceil(threshold * (neighbours + 1) / n))


@dataclass(frozen=True)
class SurvivorPlan:
    """Which clients act in which round, given the declared dropouts.

    ``drop_round[u]`` is the first round u skips (``len(ROUNDS)`` if it never drops);
    ``alive[r]`` are the clients that send their round-r message (U1..U4 of the paper);
    ``summed`` = U3, the clients whose inputs are in the sum.
    """

    n: int
    threshold: int
    neighbours: int | None
    drop_round: tuple[int, ...]
    alive: tuple[tuple[int, ...], ...]

    @property
    def summed(self) -> tuple[int, ...]:
        return self.alive[2]

    def dropped_at(self, round_index: int) -> tuple[int, ...]:
        return tuple(u for u, r in enumerate(self.drop_round) if r == round_index)

    def check(self) -> None:
        """Raise :class:`DropoutError` exactly when the protocol cannot finish."""
        t, n = self.threshold, self.n
        t_nb = neighbour_threshold(n, t, self.neighbours)
        for r, name in enumerate(ROUNDS):
            if len(self.alive[r]) < t:
                raise DropoutError(
                    f"only {len(self.alive[r])} of {n} clients sent their {name!r} message; "
                    f"threshold is {t} (at most {n - t} dropouts tolerated)"
                )
            if self.neighbours is not None and r in (1, 2):
                previous = set(self.alive[r - 1])
                for u in self.alive[r]:
                    have = len(set(neighbourhood(u, n, self.neighbours)) & previous) + 1
                    if have < t_nb:
                        raise DropoutError(
                            f"client {u} has {have} live holders in round {name!r}, "
                            f"needs {t_nb} (neighbourhood threshold)"
                        )
        if not survivors_connected(self.alive[2], n, self.neighbours):
            raise DropoutError(
                f"the SecAgg+ graph on the {len(self.alive[2])} surviving clients is not "
                "connected: the server would learn the sum of each part"
            )
        unmasked = set(self.alive[3])
        for u in self.alive[1]:
            have = len(({u} | set(neighbourhood(u, n, self.neighbours))) & unmasked)
            if have < t_nb:
                raise DropoutError(
                    f"only {have} holders of client {u}'s shares answered the unmask round; "
                    f"need {t_nb}"
                )


def plan_survivors(
    n: int,
    threshold: int,
    dropouts: Mapping[int, int | str] | Sequence[Sequence[int]] | None,
    neighbours: int | None = None,
    *,
    check: bool = True,
) -> SurvivorPlan:
    """Validate ``threshold``, ``dropouts`` and ``neighbours`` and derive U1..U4.

    ``dropouts``: ``{client: round}`` (round index or name from :data:`ROUNDS`) or a
    sequence of up to four collections of clients dropping at rounds 0..3.
    With ``check`` the plan raises :class:`DropoutError` if the protocol cannot finish.
    """
    threshold = check_threshold(n, threshold)
    if neighbours is not None and (
            not isinstance(neighbours, (int, np.integer)) or neighbours < 2 or neighbours % 2):
        raise InputError("neighbours", neighbours, "must be an even integer >= 2 (or None)")
    drop = [len(ROUNDS)] * n
    for client, round_index in _dropout_items(dropouts):
        if not isinstance(client, (int, np.integer)) or not 0 <= client < n:
            raise InputError("dropouts", dropouts, f"client {client!r} not in 0..{n - 1}")
        drop[int(client)] = min(drop[int(client)], round_index)
    alive = tuple(tuple(u for u in range(n) if drop[u] > r) for r in range(len(ROUNDS)))
    plan = SurvivorPlan(n, int(threshold), neighbours, tuple(drop), alive)
    if check:
        plan.check()
    return plan


def _dropout_items(dropouts) -> list[tuple[int, int]]:
    if dropouts is None:
        return []
    if isinstance(dropouts, Mapping):
        return [(client, _round_index(r, dropouts)) for client, r in dropouts.items()]
    if isinstance(dropouts, (str, bytes)) or not isinstance(dropouts, Sequence) or len(dropouts) > len(ROUNDS):
        raise InputError("dropouts", dropouts, "must be {client: round} or up to 4 collections of clients")
    return [(client, r) for r, clients in enumerate(dropouts) for client in clients]


def _round_index(value: int | str, dropouts) -> int:
    if isinstance(value, str) and value in ROUNDS:
        return ROUNDS.index(value)
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and 0 <= value < len(ROUNDS):
        return int(value)
    raise InputError("dropouts", dropouts, f"round {value!r} is not one of 0..3 or {ROUNDS}")


# ------------------------------------------------------------------- crypto helpers


def party_rng(seed: int | bytes | None, party: int) -> RandomBytes:
    """The randomness source of one party: the OS CSPRNG, or (tests) an AES-CTR stream
    keyed by SHA-256(seed, party)."""
    if seed is None:
        return secrets.token_bytes
    raw = seed if isinstance(seed, bytes) else str(int(seed)).encode()
    key = hashlib.sha256(b"securefl-secagg-rng" + raw + struct.pack(">i", party)).digest()[:16]
    counter = itertools.count()

    def draw(nbytes: int) -> bytes:
        return prg.expand(key, nbytes, np.uint8, nonce=next(counter)).tobytes()

    return draw


def _pair_info(label: bytes, u: int, v: int) -> bytes:
    return b"securefl-secagg-" + label + struct.pack(">ii", min(u, v), max(u, v))


def _kdf(shared: bytes, session: bytes, info: bytes) -> bytes:
    """HKDF-SHA256 (RFC 5869) to 16 bytes, salt = session id.  Written as its two HMAC
    calls (extract, one expand block) because the server derives one key per
    (dropped, surviving) pair and the generic HKDF object costs 4x more per call."""
    prk = hmac.digest(session, shared, "sha256")
    return hmac.digest(prk, info + b"\x01", "sha256")[:16]


def _public_bytes(key: X25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def _associated_data(session: bytes, sender: int, receiver: int) -> bytes:
    return session + b"|secagg/share|" + struct.pack(">ii", sender, receiver)


@lru_cache(maxsize=8)
def _counter_blocks(nbytes: int) -> np.ndarray:
    """Counter blocks for ``nbytes`` of keystream (nonce 0), cached: every mask reuses them."""
    return prg.counter_blocks(-(-nbytes // 16))


@dataclass
class MaskExpander:
    """AES-128-CTR expansion of 16-byte seeds into ``dim`` ring elements, added in place.

    Produces exactly :func:`securefl.crypto.prg.expand` ``(seed, dim, dtype)`` (nonce 0),
    but encrypts one counter-block buffer, laid out once, straight into a reused scratch
    buffer: the server expands tens of thousands of masks of the same length, where
    per-call setup dominates small vectors.
    """

    dim: int
    dtype: np.dtype
    _scratch: bytearray = field(init=False, repr=False)
    _blocks: memoryview = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.dtype = np.dtype(self.dtype)
        nbytes = self.dim * self.dtype.itemsize
        self._scratch = bytearray(-(-nbytes // 16) * 16 + 16)
        blocks = _counter_blocks(nbytes)
        self._blocks = memoryview(blocks).cast("B") if blocks.size else memoryview(b"")

    def expand(self, seed: bytes) -> np.ndarray:
        """The mask PRG(seed) as a view into the scratch buffer (valid until next call)."""
        if self.dim:
            Cipher(algorithms.AES(seed), modes.ECB()).encryptor().update_into(
                self._blocks, self._scratch
            )
        return np.frombuffer(self._scratch, dtype=self.dtype, count=self.dim)

    def add(self, accumulator: np.ndarray, seed: bytes, sign: int) -> None:
        """accumulator += sign * PRG(seed) (mod 2^width, in place)."""
        if sign > 0:
            np.add(accumulator, self.expand(seed), out=accumulator)
        else:
            np.subtract(accumulator, self.expand(seed), out=accumulator)


def add_masks(
    accumulator: np.ndarray, masks: Sequence[tuple[bytes, int]], *, workers: int = 2
) -> None:
    """``accumulator += sum(sign * PRG(seed) for seed, sign in masks)`` (mod 2^width).

    The masks are split over ``workers`` threads, each expanding into its own partial
    sum; AES (``update_into``) and numpy's ring additions release the GIL, so the
    threads run in parallel.  Addition in Z_(2^k) is associative and commutative, so the
    result is bit-identical to the sequential loop.
    """
    dim, dtype = accumulator.shape[0], accumulator.dtype
    if workers < 2 or len(masks) < 2 * workers:
        expander = MaskExpander(dim, dtype)
        for seed, sign in masks:
            expander.add(accumulator, seed, sign)
        return
    partials = [np.zeros(dim, dtype=dtype) for _ in range(workers)]

    def work(index: int) -> None:
        expander = MaskExpander(dim, dtype)
        for seed, sign in masks[index::workers]:
            expander.add(partials[index], seed, sign)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(work, range(workers)))
    for partial in partials:
        np.add(accumulator, partial, out=accumulator)


# --------------------------------------------------------------------------- config


@dataclass(frozen=True)
class SecAggConfig:
    """Public parameters every party agrees on before round 0 (``server_workers`` is the
    server's own choice of threads for removing masks; it changes no output).

    ``members``: the roster id of the client playing each index (authenticated runs: each
    client tags its keys for every other member, and every tag binds the digest
    :attr:`cohort` of this list), empty in the unauthenticated semi-honest variant.
    ``consistency``: run Bonawitz et al.'s consistency round before unmasking (module
    docstring; authenticated runs only)."""

    session: bytes
    clients: int
    threshold: int
    dim: int
    modulus_bits: int
    neighbours: int | None = None
    server_workers: int = 2
    members: tuple[int, ...] = ()
    consistency: bool = False
    _cohort: bytes = field(default=b"", init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.consistency and not self.members:
            raise InputError("consistency", self.consistency,
                             "the consistency round authenticates: it needs the members")
        if len(self.session) != 16:
            raise InputError("session", self.session, "must be 16 bytes")
        if self.members:
            if len(self.members) != self.clients:
                raise InputError("members", self.members, f"must name all {self.clients} clients")
            object.__setattr__(self, "members", tuple(int(m) for m in self.members))
            object.__setattr__(self, "_cohort", cohort_digest(self.members))
        if self.server_workers < 1:
            raise InputError("server_workers", self.server_workers, "must be >= 1")
        check_threshold(self.clients, self.threshold)
        container_dtype(self.modulus_bits)

    @property
    def dtype(self) -> np.dtype:
        return container_dtype(self.modulus_bits)

    @property
    def cohort(self) -> bytes:
        """:func:`~securefl.crypto.identity.cohort_digest` of :attr:`members` (empty when
        unauthenticated): what every tag of the run binds."""
        return self._cohort

    @property
    def neighbour_threshold(self) -> int:
        return neighbour_threshold(self.clients, self.threshold, self.neighbours)

    @property
    def collusion_tolerance(self) -> int:
        """See :func:`collusion_tolerance`."""
        return collusion_tolerance(self.clients, self.threshold, self.neighbours)

    def neighbourhood(self, u: int) -> tuple[int, ...]:
        return neighbourhood(u, self.clients, self.neighbours)


def _expect(message: Message, tag: str, sender: int, receiver: int) -> None:
    if message.tag != tag:
        raise ProtocolError(f"expected round {tag!r}, got {message.tag!r}")
    if message.sender != sender or message.receiver != receiver:
        raise ProtocolError(
            f"message {message.sender}->{message.receiver} where {sender}->{receiver} was expected"
        )


def _survivor_bytes(survivors: Sequence[int]) -> bytes:
    """U3 as the bytes a consistency-round endorsement covers (sorted indices, int64)."""
    return np.array(sorted(survivors), dtype=">i8").tobytes()


def _slot(receiver: int | np.ndarray, sender: np.ndarray) -> np.ndarray:
    """Row of each ``sender``'s tag to ``receiver`` among that sender's tags, which follow
    the list's order with the sender's own place left out."""
    return receiver - (receiver > sender)


def _tag_rows(tags: Sequence[bytes]) -> np.ndarray:
    """Tags as one ``(k, TAG_BYTES)`` uint8 array (the wire form)."""
    return np.frombuffer(b"".join(tags), dtype=np.uint8).reshape(len(tags), TAG_BYTES)


def _aggregate_tag(array: np.ndarray, name: str) -> bytes:
    """The relayed aggregate tag from its wire form; another shape or dtype: ProtocolError."""
    if array.shape != (TAG_BYTES,) or array.dtype != np.uint8:
        raise ProtocolError(f"{name}: the tags must come as one ({TAG_BYTES},) uint8 aggregate")
    return array.tobytes()


def _ids(array: np.ndarray, name: str) -> list[int]:
    if array.ndim != 1 or array.dtype.kind not in "iu":
        raise ProtocolError(f"{name}: expected a 1-D integer array")
    ids = array.tolist()
    if len(set(ids)) != len(ids):
        raise ProtocolError(f"{name}: duplicate party ids (replayed entry)")
    return ids


# --------------------------------------------------------------------------- client


@dataclass
class SecAggClient:
    """Client u of the protocol; holds its encoded input ``value`` (container dtype)."""

    index: int
    config: SecAggConfig
    value: np.ndarray = field(repr=False)
    rng: RandomBytes = field(default=secrets.token_bytes, repr=False)
    credentials: Credentials | None = field(default=None, repr=False)
    stage: int = 0
    _c_key: X25519PrivateKey | None = field(default=None, repr=False)
    _s_key: X25519PrivateKey | None = field(default=None, repr=False)
    _peers: dict[int, tuple[bytes, bytes]] = field(default_factory=dict, repr=False)
    _gcm_keys: dict[int, np.ndarray] = field(default_factory=dict, repr=False)
    _self_seed: bytes = field(default=b"", repr=False)
    _held: dict[int, np.ndarray] = field(default_factory=dict, repr=False)
    _survivors: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64), repr=False)

    def advertise(self) -> Message:
        """Round 0: fresh key pairs; send (c^PK, s^PK) to the server."""
        self._advance(0)
        value = np.asarray(self.value)
        if value.shape != (self.config.dim,) or value.dtype != self.config.dtype:
            raise InputError("value", value, f"must be ({self.config.dim},) {self.config.dtype}")
        self._c_key = X25519PrivateKey.from_private_bytes(self.rng(KEY_BYTES))
        self._s_key = X25519PrivateKey.from_private_bytes(self.rng(KEY_BYTES))
        raw = _public_bytes(self._c_key) + _public_bytes(self._s_key)
        keys = np.frombuffer(raw, dtype=np.uint8)
        if self.credentials is None:
            return Message(self.index, SERVER, TAGS["advertise"], (keys,))
        members = self.config.members
        if not members:
            raise InputError("config.members", members,
                             "an authenticated client needs the members its keys are for")
        if members[self.index] != self.credentials.client:
            raise ProtocolError(f"client {self.index}: index {self.index} of the cohort is client "
                                f"{members[self.index]}, not this client {self.credentials.client}")
        tags = self.credentials.tags(self._others(range(self.config.clients)), protocol=KEY_PROTOCOL,
                                     context=self.config.session, cohort=self.config.cohort, key=raw)
        return Message(self.index, SERVER, TAGS["advertise"], (keys, _tag_rows(tags)))

    def _others(self, indices: Sequence[int]) -> list[int]:
        """The roster ids of ``indices`` but this client's own, in their order."""
        return [self.config.members[v] for v in indices if v != self.index]

    def handle(self, message: Message) -> Message:
        """Answer the server's message of the current round."""
        handlers = {1: ("keys", self._share_keys), 2: ("ciphertexts", self._masked_input), 3: ("survivors", self._unmask)}
        if self.config.consistency:
            handlers.update({3: ("survivors", self._endorse_survivors),
                             4: ("endorsements", self._checked_unmask)})
        if self.stage not in handlers:
            raise ProtocolError(f"client {self.index} got {message.tag!r} after the protocol ended")
        name, handler = handlers[self.stage]
        _expect(message, TAGS[name], SERVER, self.index)
        return handler(message)

    def _advance(self, stage: int) -> None:
        if self.stage != stage:
            raise ProtocolError(f"client {self.index}: round {stage} out of order (at {self.stage})")
        self.stage = stage + 1

    def _share_keys(self, message: Message) -> Message:
        self._advance(1)
        if len(message.arrays) not in (2, 3):
            raise ProtocolError("keys message must hold (ids, keys[, tags])")
        ids, keys = _ids(message.arrays[0], "keys ids"), message.arrays[1]
        if keys.shape != (len(ids), 2 * KEY_BYTES) or keys.dtype != np.uint8:
            raise ProtocolError("keys message: keys must be (k, 64) uint8")
        if not set(ids) <= set(range(self.config.clients)):
            raise ProtocolError(f"client {self.index}: key ids outside 0..{self.config.clients - 1}")
        if self.credentials is not None:
            self._verify_keys(message, ids, keys)
        if len(ids) < self.config.threshold:
            raise DropoutError(f"only {len(ids)} clients advertised keys; threshold is {self.config.threshold}")
        listed = dict(zip(ids, (bytes(row) for row in keys)))
        own = _public_bytes(self._c_key) + _public_bytes(self._s_key)
        if listed.get(self.index) != own:
            raise ProtocolError(f"client {self.index}: own keys missing or altered in the key list")
        mine = set(self.config.neighbourhood(self.index))
        self._peers = {v: (k[:KEY_BYTES], k[KEY_BYTES:]) for v, k in listed.items() if v in mine}
        holders = sorted([self.index, *self._peers])
        if len(holders) < self.config.neighbour_threshold:
            raise DropoutError(
                f"client {self.index}: {len(holders)} holders, needs {self.config.neighbour_threshold}"
            )
        self._self_seed = self.rng(SEED_BYTES)
        secret_bytes = np.frombuffer(self._s_key.private_bytes_raw(), dtype=np.uint8)[None, :]
        seed_bytes = np.frombuffer(self._self_seed, dtype=np.uint8)[None, :]
        words = np.concatenate([shamir.bytes_to_elements(secret_bytes)[0], shamir.bytes_to_elements(seed_bytes)[0]])
        shares = shamir.share(
            words, threshold=self.config.neighbour_threshold, points=[v + 1 for v in holders], rng=self.rng
        )
        receivers, ciphertexts = [], []
        for row, v in zip(shares, holders):
            if v == self.index:
                self._held[v] = row
                continue
            key = self._gcm_key(v)
            self._gcm_keys[v] = np.frombuffer(key, dtype=np.uint8)
            nonce = self.rng(_NONCE_BYTES)
            sealed = AESGCM(key).encrypt(
                nonce, shamir.shares_to_bytes(row), _associated_data(self.config.session, self.index, v)
            )
            receivers.append(v)
            ciphertexts.append(np.frombuffer(nonce + sealed, dtype=np.uint8))
        blob = np.stack(ciphertexts) if ciphertexts else np.zeros((0, _CIPHERTEXT_BYTES), np.uint8)
        return Message(self.index, SERVER, TAGS["shares"], (np.array(receivers, dtype=np.int32), blob))

    def _verify_keys(self, message: Message, ids: list[int], keys: np.ndarray) -> None:
        """Authenticated run: the aggregate of every listed peer's tag to this client, bound to
        this session and cohort, must verify (this client's own keys it compares instead;
        ``ids`` are distinct, so no tag cancels).  Otherwise ProtocolError before any key is
        used."""
        if len(message.arrays) != 3:
            raise ProtocolError(f"client {self.index}: keys arrived without tags")
        peers = [i for i, v in enumerate(ids) if v != self.index]
        self.credentials.check_aggregate(
            _aggregate_tag(message.arrays[2], "keys message"), protocol=KEY_PROTOCOL,
            context=self.config.session, senders=[self.config.members[ids[i]] for i in peers],
            cohort=self.config.cohort, keys=[keys[i].tobytes() for i in peers])

    def _gcm_key(self, v: int) -> bytes:
        shared = self._c_key.exchange(X25519PublicKey.from_public_bytes(self._peers[v][0]))
        return _kdf(shared, self.config.session, _pair_info(b"gcm", self.index, v))

    def _masked_input(self, message: Message) -> Message:
        self._advance(2)
        if len(message.arrays) != 2:
            raise ProtocolError("ciphertexts message must hold (senders, ciphertexts)")
        senders, blob = _ids(message.arrays[0], "ciphertext senders"), message.arrays[1]
        if blob.shape != (len(senders), _CIPHERTEXT_BYTES) or blob.dtype != np.uint8:
            raise ProtocolError(f"ciphertexts must be (k, {_CIPHERTEXT_BYTES}) uint8")
        for sender, row in zip(senders, blob):
            if sender == self.index or sender not in self._peers:
                raise ProtocolError(f"client {self.index}: ciphertext from non-neighbour {sender}")
            raw = bytes(row)
            try:
                plain = AESGCM(self._gcm_keys[sender].tobytes()).decrypt(
                    raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], _associated_data(self.config.session, sender, self.index)
                )
            except InvalidTag:
                raise ProtocolError(
                    f"client {self.index}: share ciphertext from {sender} failed AES-GCM authentication"
                ) from None
            try:
                self._held[sender] = shamir.shares_from_bytes(plain, _SHARE_WORDS)
            except InputError as exc:
                raise ProtocolError(f"client {self.index}: bad share from {sender}: {exc}") from None
        if len(self._held) < self.config.neighbour_threshold:
            raise DropoutError(
                f"client {self.index}: only {len(self._held)} clients shared keys; "
                f"threshold is {self.config.neighbour_threshold}"
            )
        config = self.config
        expander = MaskExpander(config.dim, config.dtype)
        masked = np.array(self.value, dtype=config.dtype, copy=True)
        expander.add(masked, self._self_seed, +1)
        for v in sorted(self._held):
            if v == self.index:
                continue
            shared = self._s_key.exchange(X25519PublicKey.from_public_bytes(self._peers[v][1]))
            seed = _kdf(shared, config.session, _pair_info(b"mask", self.index, v))
            expander.add(masked, seed, +1 if self.index < v else -1)
        np.bitwise_and(masked, ring_mask(config.modulus_bits), out=masked)
        return Message(self.index, SERVER, TAGS["masked"], (masked,))

    def _endorse_survivors(self, message: Message) -> Message:
        """Consistency round: check U3 as :meth:`_unmask` would, keep it, and endorse it:
        one tag on U3 for every other member of U3, in U3 order."""
        self._advance(3)
        survivors = self._check_survivors(message)
        self._survivors = np.array(sorted(survivors), dtype=np.int64)
        tags = self.credentials.tags(self._others(self._survivors.tolist()),
                                     protocol=SURVIVORS_PROTOCOL, context=self.config.session,
                                     cohort=self.config.cohort, key=_survivor_bytes(self._survivors))
        return Message(self.index, SERVER, TAGS["consistency"], (_tag_rows(tags),))

    def _checked_unmask(self, message: Message) -> Message:
        """Reveal shares only after t members of U3 endorsed the U3 this client endorsed: the
        message names t - 1 *other* endorsers by a bitmap over U3 (so none can lie outside
        it, and none twice) and carries the aggregate of their tags to this client; this
        client is the t-th (it endorsed exactly this list in the step before)."""
        self._advance(4)
        if len(message.arrays) != 2:
            raise ProtocolError("endorsements message must hold (endorser bitmap over U3, tag)")
        survivors = self._survivors.tolist()
        endorsers = unpack_subset(message.arrays[0], survivors, "endorsers")
        tag = _aggregate_tag(message.arrays[1], "endorsements")
        if self.index in endorsers:
            raise ProtocolError(f"client {self.index}: its own survivor-list endorsement was relayed "
                                "back (the format names only the other endorsers)")
        listed = _survivor_bytes(self._survivors)
        self.credentials.check_aggregate(tag, protocol=SURVIVORS_PROTOCOL, context=self.config.session,
                                         senders=[self.config.members[v] for v in endorsers],
                                         cohort=self.config.cohort, keys=[listed] * len(endorsers))
        if len(endorsers) + 1 < self.config.threshold:
            raise DropoutError(f"client {self.index}: only {len(endorsers) + 1} clients (itself included) "
                               f"endorsed the survivor list it was shown; threshold is {self.config.threshold}")
        return self._reveal(set(survivors))

    def _unmask(self, message: Message) -> Message:
        self._advance(3)
        return self._reveal(self._check_survivors(message))

    def _check_survivors(self, message: Message) -> set[int]:
        if len(message.arrays) != 1:
            raise ProtocolError("survivors message must hold (ids,)")
        survivors = set(_ids(message.arrays[0], "survivors"))
        if self.index not in survivors:
            raise ProtocolError(f"client {self.index} asked to unmask but not listed as a survivor")
        if len(survivors) < self.config.threshold:
            raise DropoutError(
                f"only {len(survivors)} masked inputs; threshold is {self.config.threshold}"
            )
        if not survivors <= set(range(self.config.clients)):
            raise ProtocolError(
                f"client {self.index}: survivor ids outside 0..{self.config.clients - 1}"
            )
        mine = ({self.index} | set(self.config.neighbourhood(self.index))) & survivors
        if not mine <= self._held.keys():
            raise ProtocolError(
                f"client {self.index}: survivors {sorted(mine - self._held.keys())} "
                "never shared keys with it"
            )
        if not survivors_connected(survivors, self.config.clients, self.config.neighbours):
            raise ProtocolError(
                f"client {self.index}: the survivor list splits the SecAgg+ graph; "
                "unmasking it would reveal partial sums"
            )
        return survivors

    def _reveal(self, survivors: set[int]) -> Message:
        b_ids = [v for v in sorted(self._held) if v in survivors]
        s_ids = [v for v in sorted(self._held) if v not in survivors]
        b_shares = np.array([self._held[v][_SK_LIMBS:] for v in b_ids], dtype=np.uint64).reshape(-1, _B_LIMBS)
        s_shares = np.array([self._held[v][:_SK_LIMBS] for v in s_ids], dtype=np.uint64).reshape(-1, _SK_LIMBS)
        return Message(
            self.index,
            SERVER,
            TAGS["unmask"],
            (np.array(b_ids, dtype=np.int32), b_shares, np.array(s_ids, dtype=np.int32), s_shares),
        )


# --------------------------------------------------------------------------- server


@dataclass
class SecAggServer:
    """The aggregation server: relays, checks thresholds, unmasks the sum.

    Feed each round's messages with :meth:`handle`, then call :meth:`close_round` for
    the next round's outgoing messages.  After round 3, ``total`` holds the sum mod 2^k
    and ``survivors`` the clients in it.
    """

    config: SecAggConfig
    stage: int = 0
    total: np.ndarray | None = None
    survivors: tuple[int, ...] = ()
    _keys: dict[int, bytes] = field(default_factory=dict, repr=False)
    _tags: dict[int, np.ndarray] = field(default_factory=dict, repr=False)
    _shares: dict[int, tuple[list[int], np.ndarray]] = field(default_factory=dict, repr=False)
    _masked: set[int] = field(default_factory=set, repr=False)
    _unmask: dict[int, tuple[list[int], np.ndarray, list[int], np.ndarray]] = field(default_factory=dict, repr=False)
    _u2: tuple[int, ...] = ()
    _survivor_set: frozenset[int] = frozenset()
    _dropped_set: frozenset[int] = frozenset()
    _consistency: dict[int, np.ndarray] = field(default_factory=dict, repr=False)
    _unendorsed: set[int] = field(default_factory=set, repr=False)
    _checked: bool = False

    _ROUND_TAGS = (TAGS["advertise"], TAGS["shares"], TAGS["masked"], TAGS["unmask"])

    def _in_consistency(self) -> bool:
        return self.config.consistency and self.stage == 3 and not self._checked

    def handle(self, message: Message) -> None:
        """Accept one client message of the current round."""
        if self.stage >= len(ROUNDS):
            raise ProtocolError(f"server got {message.tag!r} after the protocol ended")
        if self._in_consistency():
            _expect(message, TAGS["consistency"], message.sender, SERVER)
            u = message.sender
            if u not in self._survivor_set or u in self._consistency or u in self._unendorsed:
                raise ProtocolError(f"consistency round: unexpected or repeated client {u}")
            tags = message.arrays[0] if len(message.arrays) == 1 else np.zeros(0, np.uint8)
            if tags.shape == (len(self.survivors) - 1, TAG_BYTES) and tags.dtype == np.uint8:
                self._consistency[u] = tags
            else:  # endorsed another list (or nothing): it does not count towards the t
                self._unendorsed.add(u)
            return
        _expect(message, self._ROUND_TAGS[self.stage], message.sender, SERVER)
        u = message.sender
        eligible = (
            range(self.config.clients) if self.stage == 0
            else self._keys if self.stage == 1
            else self._u2 if self.stage == 2
            else self.survivors
        )
        seen = (self._keys, self._shares, self._masked, self._unmask)[self.stage]
        if u not in eligible:
            raise ProtocolError(f"round {ROUNDS[self.stage]!r}: message from ineligible client {u}")
        if u in seen:
            raise ProtocolError(f"round {ROUNDS[self.stage]!r}: second message from client {u} (replay)")
        (self._take_keys, self._take_shares, self._take_masked, self._take_unmask)[self.stage](u, message.arrays)

    def _take_keys(self, u: int, arrays: tuple[np.ndarray, ...]) -> None:
        tagged = bool(self.config.members)
        if len(arrays) != 1 + tagged or arrays[0].shape != (2 * KEY_BYTES,) or arrays[0].dtype != np.uint8:
            raise ProtocolError(f"client {u}: keys must be one (64,) uint8 array"
                                + (" and its tags, one per other member" if tagged else ""))
        if tagged:
            if arrays[1].shape != (self.config.clients - 1, TAG_BYTES) or arrays[1].dtype != np.uint8:
                raise ProtocolError(f"client {u}: advertise tags must be ({self.config.clients - 1}, "
                                    f"{TAG_BYTES}) uint8, one per other member")
            self._tags[u] = arrays[1]
        self._keys[u] = arrays[0].tobytes()

    def _take_shares(self, u: int, arrays: tuple[np.ndarray, ...]) -> None:
        if len(arrays) != 2:
            raise ProtocolError(f"client {u}: shares message must hold (receivers, ciphertexts)")
        receivers = set(_ids(arrays[0], "share receivers"))
        known = u not in receivers and receivers <= self._keys.keys()
        if self.config.neighbours is not None:
            known = known and receivers <= set(self.config.neighbourhood(u))
        if not known or arrays[1].shape != (len(receivers), _CIPHERTEXT_BYTES):
            raise ProtocolError(f"client {u}: share ciphertexts for unknown receivers or of wrong size")
        self._shares[u] = (arrays[0].astype(np.int64), arrays[1])

    def _take_masked(self, u: int, arrays: tuple[np.ndarray, ...]) -> None:
        if len(arrays) != 1 or arrays[0].shape != (self.config.dim,) or arrays[0].dtype != self.config.dtype:
            raise ProtocolError(f"client {u}: masked input must be ({self.config.dim},) {self.config.dtype}")
        if self.total is None:
            self.total = np.zeros(self.config.dim, dtype=self.config.dtype)
        np.add(self.total, arrays[0], out=self.total)
        self._masked.add(u)

    def _take_unmask(self, u: int, arrays: tuple[np.ndarray, ...]) -> None:
        if len(arrays) != 4:
            raise ProtocolError(f"client {u}: unmask message must hold 4 arrays")
        b_ids, b_shares = set(_ids(arrays[0], "b ids")), arrays[1]
        s_ids, s_shares = set(_ids(arrays[2], "s ids")), arrays[3]
        if b_shares.shape != (len(b_ids), _B_LIMBS) or s_shares.shape != (len(s_ids), _SK_LIMBS):
            raise ProtocolError(f"client {u}: unmask share arrays of wrong shape")
        if not b_ids <= self._survivor_set or not s_ids <= self._dropped_set:
            raise ProtocolError(f"client {u}: unmask shares for the wrong clients")
        self._unmask[u] = (arrays[0].astype(np.int64), b_shares, arrays[2].astype(np.int64), s_shares)

    def close_round(self) -> list[Message]:
        """Finish the current round: check the threshold, return the next messages."""
        stage = self.stage
        if stage >= len(ROUNDS):
            raise ProtocolError("protocol already finished")
        if self._in_consistency():
            if len(self._consistency) < self.config.threshold:
                raise DropoutError(f"only {len(self._consistency)} clients endorsed the survivor list; "
                                   f"threshold is {self.config.threshold}")
            self._checked = True
            signers = sorted(self._consistency)
            t = self.config.threshold
            lowest = np.array(signers[:t])  # t endorsements prove the list (docstring)
            position = {v: i for i, v in enumerate(self.survivors)}
            stacked = np.stack([self._consistency[s] for s in lowest.tolist()])
            at = np.array([position[s] for s in lowest.tolist()])
            out = []
            # every client that answered (an endorsement of another list too: it then refuses
            # this), the aggregate of the tags to it of the t - 1 lowest endorsers but itself
            for u in sorted(self._consistency.keys() | self._unendorsed):
                shown = np.flatnonzero(lowest != u)[:t - 1]
                rows = stacked[shown, _slot(position[u], at[shown])]
                out.append(Message(SERVER, u, TAGS["endorsements"],
                                   (pack_subset(lowest[shown].tolist(), self.survivors),
                                    aggregate(rows))))
            return out
        received = (self._keys, self._shares, self._masked, self._unmask)[stage]
        if len(received) < self.config.threshold:
            raise DropoutError(
                f"only {len(received)} of {self.config.clients} clients sent their "
                f"{ROUNDS[stage]!r} message; threshold is {self.config.threshold} "
                f"(at most {self.config.clients - self.config.threshold} dropouts tolerated)"
            )
        self.stage += 1
        return (self._close_advertise, self._close_shares, self._close_masked, self._close_unmask)[stage]()

    def _close_advertise(self) -> list[Message]:
        ids = np.array(sorted(self._keys), dtype=np.int32)
        keys = np.stack([np.frombuffer(self._keys[u], dtype=np.uint8) for u in ids])
        if self.config.members:
            # each receiver v gets the aggregate of every other listed key's owner's tag to v
            m = len(ids)
            stacked = np.stack([self._tags[int(u)] for u in ids])  # (m, n - 1, TAG_BYTES)
            own = np.eye(m, dtype=bool)  # a sender's tag to itself does not exist
            slots = np.where(own, 0, _slot(ids[:, None], ids[None, :]))
            relayed = (stacked[np.arange(m)[None, :], slots][~own].reshape(m, m - 1, TAG_BYTES)
                       if stacked.shape[1] else np.zeros((m, m - 1, TAG_BYTES), np.uint8))
            aggregates = aggregate(relayed)
            return [Message(SERVER, int(v), TAGS["keys"], (ids, keys, aggregates[i]))
                    for i, v in enumerate(ids)]
        return [Message(SERVER, int(u), TAGS["keys"], (ids, keys)) for u in ids]

    def _close_shares(self) -> list[Message]:
        self._u2 = tuple(sorted(self._shares))
        u2 = np.array(self._u2, dtype=np.int64)
        counts = [len(self._shares[u][0]) for u in self._u2]
        senders = np.repeat(u2, counts)
        receivers = np.concatenate([self._shares[u][0] for u in self._u2])
        blob = np.concatenate([self._shares[u][1].reshape(-1, _CIPHERTEXT_BYTES) for u in self._u2])
        keep = np.isin(receivers, u2)
        order = np.flatnonzero(keep)[np.argsort(receivers[keep], kind="stable")]
        senders, receivers, blob = senders[order].astype(np.int32), receivers[order], blob[order]
        low, high = np.searchsorted(receivers, u2, "left"), np.searchsorted(receivers, u2, "right")
        return [
            Message(SERVER, int(v), TAGS["ciphertexts"], (senders[a:b], blob[a:b]))
            for v, a, b in zip(u2, low, high)
        ]

    def _close_masked(self) -> list[Message]:
        if not survivors_connected(self._masked, self.config.clients, self.config.neighbours):
            raise DropoutError(
                f"the SecAgg+ graph on the {len(self._masked)} surviving clients is not "
                "connected: announcing them would reveal the sum of each part"
            )
        self.survivors = tuple(sorted(self._masked))
        self._survivor_set = frozenset(self.survivors)
        self._dropped_set = frozenset(self._u2) - self._survivor_set
        ids = np.array(self.survivors, dtype=np.int32)
        return [Message(SERVER, u, TAGS["survivors"], (ids,)) for u in self.survivors]

    def _close_unmask(self) -> list[Message]:
        config = self.config
        survivors = set(self.survivors)
        dropped = [u for u in self._u2 if u not in survivors]
        b_seeds = self._reconstruct(self.survivors, kind="b")
        s_keys = self._reconstruct(tuple(dropped), kind="s")
        masks = [(b_seeds[u], -1) for u in self.survivors]
        public = {v: X25519PublicKey.from_public_bytes(self._keys[v][KEY_BYTES:]) for v in self.survivors}
        for u in dropped:
            private = X25519PrivateKey.from_private_bytes(s_keys[u])
            if _public_bytes(private) != self._keys[u][KEY_BYTES:]:
                raise ProtocolError(f"reconstructed masking key of client {u} does not match its public key")
            for v in config.neighbourhood(u):
                if v not in survivors:
                    continue
                seed = _kdf(private.exchange(public[v]), config.session, _pair_info(b"mask", u, v))
                # y_v holds sign(u - v) PRG(s_uv): +1 when v < u; remove it.
                masks.append((seed, -1 if v < u else +1))
        total = self.total
        add_masks(total, masks, workers=config.server_workers)
        self.total = np.bitwise_and(total, ring_mask(config.modulus_bits))
        return []

    def _reconstruct(self, owners: tuple[int, ...], *, kind: str) -> dict[int, bytes]:
        """Recover b_u (kind "b") or s_u^SK (kind "s") of ``owners`` from unmask shares.

        Each owner's secret is interpolated from the shares of its ``need`` lowest-numbered
        holders; owners with the same holder set share one Lagrange vector and one GEMM.
        """
        need = self.config.neighbour_threshold
        column = 0 if kind == "b" else 2
        limbs, length = (_B_LIMBS, SEED_BYTES) if kind == "b" else (_SK_LIMBS, KEY_BYTES)
        if not owners:
            return {}
        holders = sorted(self._unmask)
        holder_of = np.concatenate([np.full(len(self._unmask[h][column]), h, dtype=np.int64) for h in holders])
        owner_of = np.concatenate([np.asarray(self._unmask[h][column], dtype=np.int64) for h in holders])
        rows = np.concatenate([self._unmask[h][column + 1].reshape(-1, limbs) for h in holders])
        wanted = np.array(owners, dtype=np.int64)
        keep = np.isin(owner_of, wanted)
        order = np.lexsort((holder_of[keep], owner_of[keep]))
        holder_of, owner_of, rows = holder_of[keep][order], owner_of[keep][order], rows[keep][order]
        wanted.sort()
        start = np.searchsorted(owner_of, wanted, "left")
        counts = np.searchsorted(owner_of, wanted, "right") - start
        if counts.min() < need:
            u = int(wanted[np.argmin(counts)])
            raise DropoutError(f"only {counts.min()} shares of client {u}'s {kind}-secret arrived; need {need}")
        index = start[:, None] + np.arange(need)
        holder_sets, group_of = np.unique(holder_of[index], axis=0, return_inverse=True)
        shares = rows[index]  # (owners, need, limbs)
        out: dict[int, bytes] = {}
        for g, holder_set in enumerate(holder_sets):
            members = np.flatnonzero(group_of.reshape(-1) == g)
            stacked = shares[members].transpose(1, 0, 2).reshape(need, members.size * limbs)
            try:
                words = shamir.reconstruct([int(h) + 1 for h in holder_set], stacked.astype(np.uint64))
                data = shamir.elements_to_bytes(words.reshape(members.size, limbs), length)
            except InputError as exc:
                raise ProtocolError(f"share reconstruction failed: {exc}") from None
            out.update({int(wanted[m]): data[i].tobytes() for i, m in enumerate(members)})
        return out
