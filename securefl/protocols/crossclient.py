"""CrossClientLP, FedProp Algorithm 3: label propagation over all clients' points, privately.

Parties: clients 0..P-1 holding features V^(j) (n_j x d) and partial labels Y^(j), and
a semi-honest server.  Rounds (sans-I/O: every party is a dataclass whose methods take
and return :class:`~securefl.crypto.channel.Message` objects; :func:`cross_client_lp`
moves them over a metered :class:`~securefl.crypto.channel.Network`):

1. **Setup (line 1).**  X25519 key pairs, signed with Ed25519 roster identities (here a
   throwaway roster per call); the server relays public keys; every pair (j, k) verifies
   and derives pairwise keys; the clients agree on a common LSH seed from AES-GCM
   sealed shares (:mod:`securefl.protocols.lsh`).
2. **LSH (lines 3-4).**  Each client hashes its features with the same L hyperplanes.
3. **SecureHamming (line 5).**  :func:`securefl.crypto.secure_hamming_matrix` (SHADE or
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
* ``during_sum``: ``{client: secagg round}`` passed to the secure sum (rounds of
  :data:`securefl.crypto.secagg.ROUNDS`): a client dropping before its masked input
  contributes nothing; one dropping at ``"unmask"`` still contributes.  Neither gets an
  output.  Fewer than ``threshold`` survivors raise :class:`DropoutError`.

Fixed-point bound: each entry of Z^(k) is within m / 2^33 + 2^-53 (sum |Zbar| + m / 2^33)
of the float sum over the m contributing clients (:meth:`FixedPoint.error_bound`); the
``plaintext`` backend sums the very same encodings without pads or masks, so real and
plaintext outputs are bit-identical.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from securefl.crypto.channel import SERVER, Message, Network
from securefl.crypto.fixed_point import FixedPoint
from securefl.crypto.identity import new_federation
from securefl.crypto.keys import deterministic_bytes
from securefl.crypto.ot import OTSetups
from securefl.crypto.prg import SEED_BYTES, expand, random_seed
from securefl.crypto.projection import busiest_link_bytes
from securefl.errors import DropoutError, InputError, ProtocolError
from securefl.protocols.lsh import (
    SeedAgreementClient,
    agree_seed,
    common_seed,
    cosine_from_hamming,
    hyperplanes,
    lsh_codes,
)
from securefl.protocols.propagation import (
    SOLVERS,
    LabelPropagationResult,
    check_labels,
    check_num_classes,
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
PHASES = ("setup", "hamming", "columns", "sum", "rows")


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
    """Client j of Algorithm 3.  Holds its own data and what it has been sent."""

    party: int
    features: np.ndarray
    labels: np.ndarray
    num_classes: int
    L: int
    agreement: SeedAgreementClient
    private_pad_seed: bytes = b""
    codes: np.ndarray | None = None
    s_l: np.ndarray | None = None
    layout_parties: np.ndarray | None = None
    layout_sizes: np.ndarray | None = None
    sum_parties: np.ndarray | None = None
    rows_received: np.ndarray | None = None
    z_rows: np.ndarray | None = None
    output: LabelPropagationResult | None = None

    def hash_features(self) -> np.ndarray:
        """Lines 3-4: codes of the features under the agreed hyperplanes."""
        if self.agreement.lsh_seed is None:
            raise ProtocolError(f"client {self.party} has no LSH seed yet")
        planes = hyperplanes(self.agreement.lsh_seed, self.features.shape[1], self.L)
        self.codes = lsh_codes(self.features, planes)
        return self.codes

    def request_columns(self) -> Message:
        """Line 12 (request): positions of the labeled points in this client's block."""
        positions = np.flatnonzero(self.labels >= 0).astype(np.int64)
        return Message(self.party, SERVER, TAG_COLUMNS, (positions,))

    def receive_columns(self, message: Message) -> None:
        """Store S_L^(j) and the row layout (graph parties, block sizes, sum parties)."""
        _expect(message, TAG_S_L, self.party)
        self.s_l, self.layout_parties, self.layout_sizes, self.sum_parties = message.arrays
        expected = (int(self.layout_sizes.sum()), int((self.labels >= 0).sum()))
        if self.s_l.shape != expected:
            raise ProtocolError(
                f"S_L for client {self.party} has shape {self.s_l.shape}, expected {expected}"
            )

    def local_scores(self) -> np.ndarray:
        """Line 13: Zbar^(j) = S_L^(j) Y_L^(j), an N x C float matrix."""
        y_l = one_hot(self.labels[self.labels >= 0], self.num_classes)
        return self.s_l @ y_l

    def _pad_key(self, sender: int, receiver: int) -> bytes:
        if sender == receiver == self.party:
            return self.private_pad_seed
        peer = receiver if sender == self.party else sender
        return self.agreement.pairwise_key(peer, "pad")[:SEED_BYTES]

    def _block_slices(self) -> dict[int, slice]:
        offsets = np.concatenate([[0], np.cumsum(self.layout_sizes)])
        return {
            int(p): slice(int(offsets[i]), int(offsets[i + 1]))
            for i, p in enumerate(self.layout_parties)
        }

    def sum_input(self, encoding: FixedPoint, *, padded: bool) -> np.ndarray:
        """Line 14 (input): enc(Zbar^(j)) rows of every receiver, each block padded for it."""
        z_bar = self.local_scores()
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

    def finish(
        self, message: Message, encoding: FixedPoint, *, padded: bool
    ) -> LabelPropagationResult:
        """Lines 15-16: remove the survivors' pads, decode, normalise, label, weigh."""
        _expect(message, TAG_ROWS, self.party)
        rows, survivors = message.arrays
        self.rows_received = rows
        n_own = int(self.layout_sizes[list(self.layout_parties).index(self.party)])
        if rows.shape != (n_own * self.num_classes,):
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
        self.z_rows = encoding.decode(ring).reshape(n_own, self.num_classes)
        self.output = labels_from_scores(self.z_rows, self.num_classes)
        return self.output


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


@dataclass
class CrossClientLPResult:
    """Per-client outputs (``None`` for dropped clients) and the costs of the run.

    Iterating yields ``(pseudo_labels, weights)`` per client in input order
    (``(None, None)`` for a client that dropped out).  ``bytes_sent`` and
    ``bytes_received`` map phase -> party -> bytes (the server is ``SERVER``; the setup,
    columns and rows phases on this protocol's network; hamming and sum as reported by
    the crypto room, where the secure sum reports sent bytes only).  ``clients`` and
    ``server`` are the final party states (for inspection of views in tests).
    ``hamming_setup_seconds`` and ``hamming_pair_seconds`` split SHADE's time into the
    pairs' OT setup steps and each pair's work after them
    (:class:`~securefl.crypto.hamming.HammingResult`).
    """

    outputs: list[LabelPropagationResult | None]
    backend: str
    bytes_sent: dict[str, dict[int, int]]
    bytes_received: dict[str, dict[int, int]]
    crypto_seconds: float
    server_seconds: float
    client_seconds: float
    seconds: float
    graph_parties: list[int]
    sum_survivors: list[int]
    clients: list[CrossClientLPClient] = field(repr=False)
    server: CrossClientLPServer = field(repr=False)
    hamming_setup_seconds: float = 0.0
    hamming_pair_seconds: dict[str, float] = field(default_factory=dict)

    def __iter__(self):
        for output in self.outputs:
            yield (None, None) if output is None else (output.pseudo_labels, output.weights)

    def __len__(self) -> int:
        return len(self.outputs)

    def __getitem__(self, index: int) -> tuple[np.ndarray | None, np.ndarray | None]:
        output = self.outputs[index]
        return (None, None) if output is None else (output.pseudo_labels, output.weights)

    def link_bytes(self) -> int:
        """The busiest client's bytes in its busier direction, ``max_j max(sent_j, received_j)``
        summed over the phases (what :func:`securefl.crypto.seconds_at_bandwidth` projects)."""
        sent = {c.party: sum(phase.get(c.party, 0) for phase in self.bytes_sent.values()) for c in self.clients}
        received = {c.party: sum(phase.get(c.party, 0) for phase in self.bytes_received.values()) for c in self.clients}
        return busiest_link_bytes(sent, received)

    def bytes_per_client(self) -> dict[int, int]:
        """Bytes each client sent plus bytes it received, summed over all phases."""
        totals = {c.party: 0 for c in self.clients}
        for table in (self.bytes_sent, self.bytes_received):
            for phase in table.values():
                for party, count in phase.items():
                    if party in totals:
                        totals[party] += count
        return totals


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


def _check_inputs(features, labels, num_classes, k, alpha, L, backend, solver, hamming_backend, ot_setups):
    check_num_classes(num_classes)
    if backend not in BACKENDS:
        raise InputError("backend", backend, f"must be one of {BACKENDS}")
    if hamming_backend not in HAMMING_BACKENDS:
        raise InputError("hamming_backend", hamming_backend, f"must be one of {HAMMING_BACKENDS}")
    if ot_setups is not None and (hamming_backend != "shade" or not isinstance(ot_setups, OTSetups)):
        raise InputError("ot_setups", ot_setups, "must be an OTSetups, and only with hamming_backend='shade'")
    if solver not in SOLVERS:
        raise InputError("solver", solver, f"must be one of {SOLVERS}")
    if not isinstance(k, (int, np.integer)) or k < 1:
        raise InputError("k", k, "must be a positive integer")
    if not (isinstance(alpha, (int, float, np.floating)) and 0.0 < float(alpha) < 1.0):
        raise InputError("alpha", alpha, "must lie strictly between 0 and 1")
    if not isinstance(L, (int, np.integer)) or not 1 <= L < 1 << 16:
        raise InputError("L", L, "must be an integer in [1, 2^16)")
    if isinstance(features, np.ndarray) or len(features) == 0:
        raise InputError(
            "features", features, "must be a non-empty sequence of per-client (n_j, d) arrays"
        )
    if len(labels) != len(features):
        raise InputError(
            "labels", labels, f"must hold one label vector per client ({len(features)})"
        )
    checked_features, checked_labels = [], []
    dim = None
    for j, (x, y) in enumerate(zip(features, labels)):
        x = np.asarray(x)
        if x.ndim != 2 or x.shape[0] == 0 or x.dtype.kind not in "fiu":
            raise InputError(f"features[{j}]", x, "must be a real (n_j, d) array with n_j >= 1")
        if not np.all(np.isfinite(x)):
            raise InputError(f"features[{j}]", x, "contains NaN or infinity")
        dim = x.shape[1] if dim is None else dim
        if x.shape[1] != dim:
            raise InputError(
                f"features[{j}]", x, f"dimension {x.shape[1]} differs from d={dim} of features[0]"
            )
        checked_features.append(x.astype(np.float64))
        checked_labels.append(check_labels(y, num_classes, x.shape[0], name=f"labels[{j}]"))
    return checked_features, checked_labels


def cross_client_lp(
    features: Sequence[np.ndarray],
    labels: Sequence[np.ndarray],
    *,
    num_classes: int,
    k: int = 10,
    alpha: float = 0.99,
    L: int = 4096,
    backend: str = "real",
    seed: int | None = None,
    crypto_seed: int | None = None,
    dropouts: Dropouts | Mapping | None = None,
    threshold: int | None = None,
    solver: str = "sparse",
    network: Network | None = None,
    workers: int = 1,
    hamming_backend: str = "shade",
    ot_setups: OTSetups | None = None,
) -> CrossClientLPResult:
    """Run FedProp's CrossClientLP among ``len(features)`` clients and a server.

    ``features[j]`` is client j's ``(n_j, d)`` embedding matrix, ``labels[j]`` its
    ``(n_j,)`` labels with ``-1`` for unlabeled.  ``backend="real"`` runs X25519/AES-GCM
    seed agreement, SHADE and the padded secure aggregation; ``"plaintext"`` computes
    the same pseudo-labels and weights (bit-identical) with the crypto replaced by
    direct computation.

    ``seed`` (simulation seed) fixes the clients' seed shares, hence the LSH
    hyperplanes: the only randomness the outputs depend on, so real and plaintext runs
    with the same ``seed`` give bit-identical pseudo-labels and weights.  A server that
    knows ``seed`` knows the hyperplanes, so production leaves it ``None`` (shares from
    the OS CSPRNG).  ``crypto_seed`` additionally fixes keys, pads and the SHADE and
    secure-sum randomness (deterministic transcripts, tests only); it never changes the
    outputs.
    ``threshold`` is the secure sum's t (default: a majority of the clients entering
    it).  ``solver`` is the server's solver for S_L.  ``network`` lets a test observe
    traffic.  ``workers`` threads share each SHADE pair's OT work (simulation speed
    only; the outputs do not depend on it).  ``ot_setups`` (SHADE only) keeps every
    pair's IKNP setup from one call to the next, keyed by client index
    (:class:`~securefl.crypto.ot.OTSetups`: the base OTs of a pair run in the first round
    it meets, later rounds are new sessions of the extension).  See the module docstring
    for the protocol, the views and ``dropouts``.
    """
    from securefl.crypto import secure_hamming_matrix
    from securefl.runtime.summation import secure_sum

    start_all = time.perf_counter()
    features, labels = _check_inputs(
        features, labels, num_classes, k, alpha, L, backend, solver, hamming_backend, ot_setups
    )
    parties = len(features)
    drops = Dropouts.coerce(dropouts, parties)
    real = backend == "real"
    if network is None:
        network = (
            Network()
            if crypto_seed is None
            else Network(session=deterministic_bytes(crypto_seed, "session", length=8))
        )
    meter = _Meter(network)
    crypto_seconds = server_seconds = client_seconds = 0.0
    # a throwaway roster signs the seed-agreement keys, as a deployment's does
    credentials = new_federation("cross_client_lp", parties)[1] if real else [None] * parties

    clients = [
        CrossClientLPClient(
            party=j,
            features=features[j],
            labels=labels[j],
            num_classes=num_classes,
            L=int(L),
            agreement=SeedAgreementClient(
                party=j, session=network.session, seed=seed, key_seed=crypto_seed,
                credentials=credentials[j], cohort=range(parties), binding=network.session,
            ),
            private_pad_seed=(
                random_seed()
                if crypto_seed is None
                else deterministic_bytes(crypto_seed, "self-pad", j, length=SEED_BYTES)
            ),
        )
        for j in range(parties)
    ]
    server = CrossClientLPServer(
        k=int(k), alpha=float(alpha), L=int(L), num_classes=num_classes, solver=solver
    )

    tick = time.perf_counter()
    if real:
        agree_seed([c.agreement for c in clients], network)
    else:
        lsh_seed = common_seed([c.agreement.draw_share() for c in clients])
        for c in clients:
            c.agreement.lsh_seed = lsh_seed
    crypto_seconds += time.perf_counter() - tick
    meter.close("setup")

    in_graph = [c for c in clients if c.party not in drops.before_hamming]
    if not in_graph:
        raise DropoutError("every client dropped out before SecureHamming")
    tick = time.perf_counter()
    codes = [c.hash_features() for c in in_graph]
    client_seconds += time.perf_counter() - tick

    tick = time.perf_counter()
    hamming = secure_hamming_matrix(
        codes,
        backend=hamming_backend if real else "plaintext",
        seed=crypto_seed,
        workers=workers,
        setups=ot_setups if real else None,
        identities=[c.party for c in in_graph],
    )
    crypto_seconds += time.perf_counter() - tick
    meter.add("hamming", hamming.bytes_sent, hamming.bytes_received, [c.party for c in in_graph])

    tick = time.perf_counter()
    server.receive_hamming(
        hamming.matrix, [c.party for c in in_graph], [c.features.shape[0] for c in in_graph]
    )
    server_seconds += time.perf_counter() - tick

    in_sum = [c for c in in_graph if c.party not in drops.before_sum]
    if not in_sum:
        raise DropoutError("every client dropped out before SecureSum")
    requests = [network.deliver(c.request_columns()) for c in in_sum]
    tick = time.perf_counter()
    replies = server.serve_columns(requests)
    server_seconds += time.perf_counter() - tick
    for reply in replies:
        clients[reply.receiver].receive_columns(network.deliver(reply))
    meter.close("columns")

    sum_threshold = len(in_sum) // 2 + 1 if threshold is None else threshold
    encoding = FixedPoint(len(in_sum))
    tick = time.perf_counter()
    inputs = [c.sum_input(encoding, padded=real) for c in in_sum]
    client_seconds += time.perf_counter() - tick
    position = {c.party: i for i, c in enumerate(in_sum)}
    sum_drops = {position[p]: r for p, r in drops.during_sum.items() if p in position}
    if set(drops.during_sum) - set(position):
        raise InputError("dropouts", drops, "during_sum names clients that left before the sum")
    tick = time.perf_counter()
    summed = secure_sum(
        inputs,
        threshold=sum_threshold,
        backend="secagg" if real else "plaintext",
        seed=crypto_seed,
        dropouts=sum_drops or None,
    )
    crypto_seconds += time.perf_counter() - tick
    meter.add("sum", summed.bytes_sent, {}, [c.party for c in in_sum])
    survivors = [in_sum[i].party for i in summed.survivors]
    receivers = [c.party for c in in_sum if c.party not in drops.during_sum]

    tick = time.perf_counter()
    forwards = server.forward_rows(summed.total, survivors, receivers)
    server_seconds += time.perf_counter() - tick
    outputs: list[LabelPropagationResult | None] = [None] * parties
    tick = time.perf_counter()
    for message in forwards:
        outputs[message.receiver] = clients[message.receiver].finish(
            network.deliver(message), encoding, padded=real
        )
    client_seconds += time.perf_counter() - tick
    meter.close("rows")

    return CrossClientLPResult(
        outputs=outputs,
        backend=backend,
        bytes_sent=meter.sent,
        bytes_received=meter.received,
        crypto_seconds=crypto_seconds,
        server_seconds=server_seconds,
        client_seconds=client_seconds,
        seconds=time.perf_counter() - start_all,
        graph_parties=[c.party for c in in_graph],
        sum_survivors=survivors,
        clients=clients,
        server=server,
        hamming_setup_seconds=hamming.setup_seconds,
        hamming_pair_seconds=dict(hamming.pair_seconds),
    )


@dataclass
class _Meter:
    """Per-phase byte counts per client: network snapshots, plus crypto-room reports."""

    network: Network
    sent: dict[str, dict[int, int]] = field(default_factory=dict)
    received: dict[str, dict[int, int]] = field(default_factory=dict)
    _last_sent: dict = field(default_factory=dict)
    _last_received: dict = field(default_factory=dict)

    def close(self, phase: str) -> None:
        """Attribute the network traffic since the last snapshot to ``phase``."""
        sent, received = {}, {}
        for party, stats in self.network.stats.items():
            sent[party] = stats.bytes_sent - self._last_sent.get(party, 0)
            received[party] = stats.bytes_received - self._last_received.get(party, 0)
            self._last_sent[party] = stats.bytes_sent
            self._last_received[party] = stats.bytes_received
        self.sent[phase] = sent
        self.received[phase] = received

    def add(
        self, phase: str, sent: Mapping[int, int], received: Mapping[int, int], parties: list[int]
    ) -> None:
        """Record a crypto-room report whose party indices are positions in ``parties``."""
        self.sent[phase] = {
            (SERVER if i == SERVER else parties[i]): int(b) for i, b in sent.items()
        }
        self.received[phase] = {
            (SERVER if i == SERVER else parties[i]): int(b) for i, b in received.items()
        }
