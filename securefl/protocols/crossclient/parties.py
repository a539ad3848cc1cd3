"""CrossClientLP, FedProp Algorithm 3: label propagation over all clients' points, privately.

Parties: clients 0..P-1 holding features V^(j) (n_j x d) and partial labels Y^(j), and
a semi-honest server.  This module holds the parties' math (sans-I/O: the client's typed
state :class:`CrossClientLPClient` and the server's :class:`CrossClientLPServer` take and
return :class:`~securefl.crypto.channel.Message` objects); the client steps
(:mod:`~securefl.protocols.crossclient.client_steps`) and the server round
(:mod:`~securefl.protocols.crossclient.server_round`) run them over any transport, the
in-process simulator :func:`~securefl.protocols.crossclient.simulate.cross_client_lp` on
the in-process one, and :mod:`~securefl.protocols.crossclient.ideal` states what they
compute.  Rounds:

1. **Setup (line 1).**  X25519 key pairs, signed with Ed25519 roster identities (the
   federation's roster; a simulator's throwaway one); the server relays public keys; every pair (j, k) verifies
   and derives pairwise keys; the clients agree on a common LSH seed from AES-GCM
   sealed shares (:mod:`securefl.protocols.lsh`).
2. **LSH (lines 3-4).**  Each client hashes its features with the same L hyperplanes.
3. **SecureHamming (line 5).**  :func:`securefl.protocols.secure_hamming_matrix` (SHADE or
   LWE, ``hamming_backend``); the server obtains H (N x N), nothing else.
4. **Server graph (lines 6-10).**  A = cos(pi H / L), k-NN sparsification, W = B + B^T,
   W_n = D^-1/2 W D^-1/2 (:mod:`securefl.protocols.propagation`).
5. **Columns (line 12).**  Client j sends the *positions* of its labeled points (never
   the labels); the server solves (I - alpha W_n) S_L = E_L for exactly those columns
   with one sparse CG solve (never forming the dense inverse) and sends S_L^(j)
   (N x l_j) to client j.
6. **Local product (line 13).**  Client j forms Zbar^(j) = S_L^(j) Y_L^(j) (N x C).
7. **SecureSum (line 14), row-routed.**  Client j encodes Zbar^(j) in fixed point
   (Z_(2^64), scale 2^32, :mod:`securefl.crypto.fixed_point`) and, for every receiving
   client k, adds to the n_k x C block of rows of k the one-time pad
   PRG(K_jk, nonce = (j, k)), where K_jk is the X25519-derived key j shares with k
   (j = k: a key only k knows).  The padded vectors enter the Bonawitz et al. secure sum
   (:func:`securefl.runtime.secure_sum`, threshold t); the server obtains only
   T = sum_j (enc(Zbar^(j)) + pads_j) over the sum's survivors, forwards block k of T
   with the survivor list to client k, and k subtracts sum_{j in survivors} PRG(K_jk)
   to get enc(Z^(k)) = sum_j enc(Zbar^(j)_k), then decodes.
8. **Finish (lines 15-16).**  Client k normalises its rows, takes argmax labels and
   entropy weights (zero rows: label -1, weight 0).

**Who learns what** (semi-honest parties; AES-CTR a PRF, X25519 CDH, AES-GCM secure):

* *Server*: public keys; sealed seed shares (ciphertexts); H; each client's labeled
  positions and counts l_j (needed to pick columns; the class values never leave the
  client); its own S_L; the secure sum's output T and the survivor set.  T is
  enc(Z) + sum of pads keyed by K_jk, which the server does not know, so every block of
  T is pseudo-random to it: the server learns nothing about Z or Y beyond H and the
  labeled positions.  The secure sum additionally hides each individual padded vector,
  so even a server colluding with client k (who knows k's pads) sees only the sum of
  the survivors' contributions to k's rows, never one client's Zbar^(j).
* *Client k*: the LSH seed, pairwise keys, S_L^(k) (columns of S for its labeled points,
  which the paper accepts as revealing only unnormalised influence), the participants
  and their point counts n_j (the row layout), the sum's survivors, and its own rows
  Z^(k) = sum_j Zbar^(j)_k.  It never receives H, other clients' codes or features, or
  any row of Z outside its block.
* With only one other survivor j, Z^(k) - Zbar^(k)_k equals Zbar^(j)_k: inherent to the
  function computed (the paper's output), not to this protocol; ``threshold`` of the
  secure sum bounds how few contributors are acceptable.

*Proof sketch (server).*  A simulator given H, the labeled positions, the block sizes and
the survivor set outputs random public keys, random AES-GCM ciphertexts of the right
length, the real H, and a uniform vector in place of T.  Public keys are uniform
Curve25519 points; AES-GCM ciphertexts under keys the server lacks are
indistinguishable from random (the keys are HKDF outputs of X25519 secrets: CDH); and
every block k of T contains PRG(K_jk) for each survivor j (at least one), keyed by a
secret the server lacks (for j = k the self-pad seed, which never leaves k), and the
streams are independent across blocks (distinct keys or nonces), so T is
indistinguishable from uniform as long as AES-CTR is a PRF.  The secure sum's own view
is simulatable from T (Bonawitz et al. 2017, Thm. 6.3).  *Server colluding with client
k*: it can strip the pads of block k only (it knows no K_jm with m != k), so it learns
Z^(k), which k outputs anyway.

**Dropouts** (FedProp §4.2, Robustness), ``dropouts=Dropouts(...)``:

* ``before_hamming``: the client took part in setup but sends no codes: it is excluded
  (same as not being sampled); it gets no output.
* ``before_sum``: it contributed codes, so its points shape the graph, but it sends no
  column request: its labels do not contribute (as if it had none); no output for it.
* ``during_sum``: ``{client: secagg round}`` it misses in the secure sum (rounds of
  :data:`securefl.crypto.secagg.ROUNDS`): a client dropping before its masked input
  contributes nothing; one dropping at ``"unmask"`` still contributes.  Neither gets an
  output.  Fewer than ``threshold`` survivors raise :class:`DropoutError`.

Fixed-point bound: each entry of Z^(k) is within m / 2^33 + 2^-53 (sum |Zbar| + m / 2^33)
of the float sum over the m contributing clients (:meth:`FixedPoint.error_bound`); the
``plaintext`` backend sums the very same encodings without pads or masks, so real and
plaintext outputs are bit-identical.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from securefl.crypto.channel import SERVER, Message
from securefl.crypto.fixed_point import FixedPoint
from securefl.crypto.keys import KeyPair
from securefl.crypto.prg import SEED_BYTES, expand
from securefl.errors import InputError, ProtocolError
from securefl.protocols.lsh import (
    SeedAgreementClient,
    cosine_from_hamming,
    hyperplanes,
    lsh_codes,
)
from securefl.protocols.propagation import (
    LabelPropagationResult,
    graph_from_neighbours,
    knn_select,
    labels_from_scores,
    normalize_graph,
    one_hot,
    propagate,
)

BACKENDS = ("real", "plaintext")
HAMMING_BACKENDS = ("auto", "shade", "lwe", "rlwe")
"""``auto``: :func:`~securefl.crypto.hamming.choose_backend` picks SHADE or ring-LWE per round."""
TAG_COLUMNS = "cclp/columns"
TAG_S_L = "cclp/s-l"
TAG_ROWS = "cclp/rows"


@dataclass(frozen=True)
class Dropouts:
    """Which clients drop at which stage of Algorithm 3 (see the module docstring)."""

    before_hamming: frozenset[int] = frozenset()
    before_sum: frozenset[int] = frozenset()
    during_sum: Mapping[int, int | str] = field(default_factory=dict)

    @classmethod
    def coerce(cls, value: Dropouts | Mapping | None, parties: int) -> Dropouts:
        """Accept ``None``, a :class:`Dropouts` or a mapping with the same three keys."""
        if value is None:
            value = cls()
        elif isinstance(value, Mapping):
            unknown = set(value) - {"before_hamming", "before_sum", "during_sum"}
            if unknown:
                raise InputError("dropouts", value, f"unknown stages {sorted(unknown)}")
            value = cls(
                before_hamming=frozenset(value.get("before_hamming", ())),
                before_sum=frozenset(value.get("before_sum", ())),
                during_sum=dict(value.get("during_sum", {})),
            )
        elif not isinstance(value, cls):
            raise InputError("dropouts", value, "must be None, a Dropouts or a mapping of stages")
        stages = [set(value.before_hamming), set(value.before_sum), set(value.during_sum)]
        for stage in stages:
            bad = [c for c in stage if not isinstance(c, (int, np.integer)) or not 0 <= c < parties]
            if bad:
                raise InputError("dropouts", value, f"client ids {bad} not in 0..{parties - 1}")
        if stages[0] & stages[1] or stages[0] & stages[2] or stages[1] & stages[2]:
            raise InputError("dropouts", value, "a client can drop at one stage only")
        return value


@dataclass
class CrossClientLPClient:
    """Client j of Algorithm 3 between its steps: its typed state.

    What it was told and drew, never its data: the data (features V_j, labels Y_j, the
    class count C) stay with the node and are passed in where a step needs them.  The
    client steps (:mod:`securefl.protocols.crossclient.client_steps`) keep this state in
    the client's state Record between exchanges with :mod:`securefl.runtime.state_codec`.

    ``party``: j, its position among ``members`` (the round's client ids); ``session``:
    the round session; ``share``: its LSH seed share; ``private`` / ``peer_keys``: the
    seed agreement's X25519 key and the peers' verified public keys (real mode);
    ``features``: V_j until hashed; ``codes``: its LSH codes; ``hamming_backend``: the
    backend its node's policy resolved; ``s_l`` and the row layout (``layout_parties``,
    ``layout_sizes``, ``sum_parties``) from line 12; ``sum_members``: how many clients
    entered the sum (the fixed-point scale's headroom); ``pad_seed``: the self-pad seed.
    """

    party: int
    session: bytes
    members: np.ndarray
    share: bytes = b""
    private: X25519PrivateKey | None = None
    peer_keys: dict[int, bytes] = field(default_factory=dict)
    features: np.ndarray | None = None
    codes: np.ndarray | None = None
    hamming_backend: str = ""
    s_l: np.ndarray | None = None
    layout_parties: np.ndarray | None = None
    layout_sizes: np.ndarray | None = None
    sum_parties: np.ndarray | None = None
    sum_members: int = 0
    pad_seed: bytes = b""

    def agreement(self, **settings) -> SeedAgreementClient:
        """The seed-agreement party this state holds (``settings``: its other fields)."""
        agreement = SeedAgreementClient(party=self.party, session=self.session, **settings)
        agreement.share = self.share
        if self.private is not None:
            agreement.keys = KeyPair(self.private, self.private.public_key().public_bytes_raw())
        agreement.peer_keys = dict(self.peer_keys)
        return agreement

    def keep_agreement(self, agreement: SeedAgreementClient) -> None:
        """Store the seed-agreement party's share, key and peers' keys."""
        self.share = agreement.share
        self.private = agreement.keys.private if agreement.keys is not None else None
        self.peer_keys = dict(agreement.peer_keys)

    def hash_features(self, lsh_seed: bytes, L: int) -> np.ndarray:
        """Lines 3-4: codes of V_j under the L hyperplanes of the agreed seed (V_j is
        forgotten once hashed)."""
        if self.features is None:
            raise ProtocolError(f"client {self.party} has no features to hash")
        self.codes = lsh_codes(self.features, hyperplanes(lsh_seed, self.features.shape[1], L))
        self.features = None
        return self.codes

    def request_columns(self, labels: np.ndarray) -> Message:
        """Line 12 (request): positions of the labeled points in this client's block."""
        positions = np.flatnonzero(labels >= 0).astype(np.int64)
        return Message(self.party, SERVER, TAG_COLUMNS, (positions,))

    def receive_columns(self, message: Message, labels: np.ndarray) -> None:
        """Store S_L^(j) and the row layout (graph parties, block sizes, sum parties)."""
        _expect(message, TAG_S_L, self.party)
        if len(message.arrays) != 4:
            raise ProtocolError(f"S_L for client {self.party} must hold four arrays")
        self.s_l, self.layout_parties, self.layout_sizes, self.sum_parties = message.arrays
        expected = (int(self.layout_sizes.sum()), int((labels >= 0).sum()))
        if self.s_l.shape != expected:
            raise ProtocolError(
                f"S_L for client {self.party} has shape {self.s_l.shape}, expected {expected}"
            )

    def local_scores(self, labels: np.ndarray, num_classes: int) -> np.ndarray:
        """Line 13: Zbar^(j) = S_L^(j) Y_L^(j), an N x C float matrix."""
        return self.s_l @ one_hot(labels[labels >= 0], num_classes)

    def _pad_key(self, sender: int, receiver: int) -> bytes:
        if sender == receiver == self.party:
            return self.pad_seed
        peer = receiver if sender == self.party else sender
        return self.agreement().pairwise_key(peer, "pad")[:SEED_BYTES]

    def _block_slices(self) -> dict[int, slice]:
        offsets = np.concatenate([[0], np.cumsum(self.layout_sizes)])
        return {
            int(p): slice(int(offsets[i]), int(offsets[i + 1]))
            for i, p in enumerate(self.layout_parties)
        }

    def sum_input(self, labels: np.ndarray, num_classes: int, *, padded: bool) -> np.ndarray:
        """Line 14 (input): enc(Zbar^(j)) rows of every receiver, each block padded for it
        (``FixedPoint(sum_members)``)."""
        encoding = FixedPoint(self.sum_members)
        z_bar = self.local_scores(labels, num_classes)
        blocks = self._block_slices()
        parts = []
        for receiver in self.sum_parties:
            rows = encoding.encode(z_bar[blocks[int(receiver)]].ravel(), name="local_scores")
            if padded:
                rows += expand(
                    self._pad_key(self.party, int(receiver)),
                    rows.size,
                    np.uint64,
                    nonce=_nonce(self.party, int(receiver)),
                )
            parts.append(rows)
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)

    def finish(self, message: Message, num_classes: int, *, padded: bool) -> LabelPropagationResult:
        """Lines 15-16: remove the survivors' pads, decode, normalise, label, weigh."""
        _expect(message, TAG_ROWS, self.party)
        if len(message.arrays) != 2:
            raise ProtocolError(f"rows for client {self.party} must hold the block and the survivors")
        rows, survivors = message.arrays
        n_own = int(self.layout_sizes[list(self.layout_parties).index(self.party)])
        if rows.shape != (n_own * num_classes,) or rows.dtype != np.uint64:
            raise ProtocolError(f"client {self.party} received rows of shape {rows.shape}")
        ring = rows.astype(np.uint64, copy=True)
        if padded:
            for sender in survivors:
                ring -= expand(
                    self._pad_key(int(sender), self.party),
                    ring.size,
                    np.uint64,
                    nonce=_nonce(int(sender), self.party),
                )
        z_rows = FixedPoint(self.sum_members).decode(ring).reshape(n_own, num_classes)
        return labels_from_scores(z_rows, num_classes)


@dataclass
class CrossClientLPServer:
    """The server of Algorithm 3: builds the graph from H and serves columns of S."""

    k: int
    alpha: float
    L: int
    num_classes: int
    solver: str = "sparse"
    graph_parties: list[int] = field(default_factory=list)
    block_sizes: list[int] = field(default_factory=list)
    hamming: np.ndarray | None = None
    w_normalized: sp.csr_matrix | None = None
    requests: dict[int, np.ndarray] = field(default_factory=dict)
    sum_parties: list[int] = field(default_factory=list)
    total_received: np.ndarray | None = None
    s_l: np.ndarray | None = None

    def receive_hamming(self, hamming: np.ndarray, parties: list[int], sizes: list[int]) -> None:
        """Lines 6-9: A = cos(pi H / L), k-NN graph, W = B + B^T, normalisation.

        cos(pi H / L) is strictly decreasing in H on [0, L], so the k nearest neighbours
        are selected on -H directly (same set, same ties) and A is evaluated only on the
        n k selected entries instead of all n^2.
        """
        self.hamming = hamming
        self.graph_parties, self.block_sizes = list(parties), list(sizes)
        order = knn_select(-hamming, k=self.k)
        similarity = cosine_from_hamming(np.take_along_axis(hamming, order, axis=1), self.L)
        self.w_normalized = normalize_graph(graph_from_neighbours(order, similarity))

    def serve_columns(self, requests: list[Message]) -> list[Message]:
        """Lines 10-12: solve only for the requested (labeled) columns; send S_L^(j) to j."""
        offsets = dict(
            zip(self.graph_parties, np.concatenate([[0], np.cumsum(self.block_sizes)])[:-1])
        )
        sizes = dict(zip(self.graph_parties, self.block_sizes))
        columns, seen = [], set()
        for message in requests:
            _expect(message, TAG_COLUMNS, SERVER)
            if message.sender in seen:
                raise ProtocolError(f"client {message.sender} sent a second column request")
            seen.add(message.sender)
            positions = _checked_positions(message, sizes)
            self.requests[message.sender] = positions
            columns.append(offsets[message.sender] + positions)
        self.sum_parties = [m.sender for m in requests]
        n = int(sum(self.block_sizes))
        wanted = np.concatenate(columns) if columns else np.zeros(0, dtype=np.int64)
        rhs = np.zeros((n, wanted.size))
        rhs[wanted, np.arange(wanted.size)] = 1.0
        s_l = propagate(self.w_normalized, rhs, alpha=self.alpha, solver=self.solver)
        self.s_l = s_l
        layout = (
            np.array(self.graph_parties, dtype=np.int32),
            np.array(self.block_sizes, dtype=np.int64),
            np.array(self.sum_parties, dtype=np.int32),
        )
        out, start = [], 0
        for message in requests:
            width = self.requests[message.sender].size
            out.append(
                Message(SERVER, message.sender, TAG_S_L, (s_l[:, start : start + width], *layout))
            )
            start += width
        return out

    def label_mass(self, contributors: Sequence[int]) -> np.ndarray:
        """m = sum over the labeled columns of ``contributors`` of S_L: the label mass
        sum_c Z_ic that reached every graph point i (``(N,)``, graph order).

        Each labeled row of Y sums to 1, so sum_c Z_ic = sum_{l in L} S_il whatever the
        classes: the server computes the mass from the columns it solved and the
        positions it was sent, learning nothing new (no label, no Z).  ``contributors``
        are the parties whose Zbar entered the sum (its survivors)."""
        if self.s_l is None:
            raise ProtocolError("label_mass before serve_columns")
        mass = np.zeros(self.s_l.shape[0])
        start = 0
        for party in self.sum_parties:
            width = self.requests[party].size
            if party in contributors:
                mass += self.s_l[:, start : start + width].sum(axis=1)
            start += width
        return np.maximum(mass, 0.0)

    def forward_rows(
        self, total: np.ndarray, survivors: Sequence[int], receivers: Sequence[int]
    ) -> list[Message]:
        """After line 14: block k of the padded total to each receiver k, with the survivors."""
        self.total_received = total
        offsets = np.concatenate(
            [
                [0],
                np.cumsum(
                    [self.block_sizes[self.graph_parties.index(p)] for p in self.sum_parties]
                ),
            ]
        )
        where = {p: i for i, p in enumerate(self.sum_parties)}
        ids = np.array(sorted(survivors), dtype=np.int32)
        out = []
        for receiver in receivers:
            i = where[receiver]
            block = total[offsets[i] * self.num_classes : offsets[i + 1] * self.num_classes]
            out.append(Message(SERVER, receiver, TAG_ROWS, (block, ids)))
        return out




def _nonce(sender: int, receiver: int) -> int:
    return (int(sender) << 32) | int(receiver)


def _checked_positions(message: Message, sizes: Mapping[int, int]) -> np.ndarray:
    """A client's column request, validated before the server sizes anything by it:
    one 1-D integer array of distinct positions inside the sender's block, so that all
    requests together ask for at most N columns (ProtocolError otherwise)."""
    sender = message.sender
    if sender not in sizes:
        raise ProtocolError(f"column request from party {sender}, which is not in the graph")
    if len(message.arrays) != 1:
        raise ProtocolError(f"client {sender}: a column request holds exactly one array")
    positions = message.arrays[0]
    if positions.ndim != 1 or positions.dtype.kind not in "iu":
        raise ProtocolError(f"client {sender}: column positions must be a 1-D integer array")
    if positions.size > sizes[sender]:
        raise ProtocolError(
            f"client {sender} requested {positions.size} columns, its block has {sizes[sender]}"
        )
    positions = positions.astype(np.int64)
    if positions.size and (positions.min() < 0 or positions.max() >= sizes[sender]):
        raise ProtocolError(f"client {sender} requested columns outside its block")
    if np.unique(positions).size != positions.size:
        raise ProtocolError(f"client {sender} requested a column twice")
    return positions


def _expect(message: Message, tag: str, receiver: int) -> None:
    if message.tag != tag or message.receiver != receiver:
        raise ProtocolError(
            f"expected {tag!r} for party {receiver}, got {message.tag!r} for {message.receiver}"
        )


