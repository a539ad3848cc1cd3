"""CrossClientLP's client steps (FedProp Algorithm 3 at the client), one exchange each.

Every CrossClientLP party a client plays runs here, at the client, on its own data; the
server (:mod:`securefl.protocols.crossclient.server_round`) only relays, assembles the
Hamming matrix, solves for columns and forwards rows.  :class:`CrossClientSteps` is the
step table; what it needs from the node's owner (a method, or a node that holds features)
comes through four hooks: :attr:`~CrossClientSteps.cclp` (the mode ``secure``, the code
length ``L``, the Hamming backend and ``crypto_seed_for("lsh", round)``, the seed of the
LSH seed share), :meth:`~CrossClientSteps.features` (V_j), :meth:`~CrossClientSteps.labels`
(Y_j, ``-1`` unlabeled) and :meth:`~CrossClientSteps.num_classes`; the node's credentials,
policy and ledger come from its :class:`~securefl.runtime.transport.NodeContext`.
:class:`FeatureClient` is the protocol's own client, for nodes whose data are their
features (:class:`FeatureData`); FedProp's client (:mod:`securefl.methods.fedprop.client`)
embeds by the round's model.  Steps (``j`` is the client's party index in the round: its
position among the round's selected clients, config ``cclp/party``):

``cclp/advertise``
    request: arrays ``cclp/members`` (the round's client ids in party order: this client's own id must
    be at its position), config ``round``, ``cclp/party``, ``cclp/session`` (8 bytes).  The client takes its features
    V_j (:meth:`CrossClientSteps.features`: a method embeds its points by the request's
    model; kept in its state until hashed), and starts the LSH seed
    agreement (:class:`~securefl.protocols.lsh.SeedAgreementClient`: public key up; the
    share from ``cclp.crypto_seed_for("lsh", round)``) and opens its links
    to the round's members (:func:`securefl.runtime.links.open_links`: keys derived from
    the node's identity and the members' roster entries, nothing sent).  Plaintext: the
    share itself goes up.
``cclp/shares``
    real: the relayed public keys down; the seed shares up, each sealed under a key that
    binds the ephemeral exchange to the pair key of the two roster identities, the round's
    members and this session (:mod:`securefl.protocols.lsh`: a share sealed to a
    substituted key is unreadable to the server).  Plaintext: all shares down; the client hashes its features and sends its
    LSH codes in the clear (the placeholder computes H from them).
``cclp/codes`` (real)
    the relayed sealed shares down; the client derives the common seed, hashes (lines
    3-4), sends its own block of distances to the server and starts SHADE
    (:mod:`securefl.crypto.shade_hops` hop 1) with every live peer it is OT receiver of.
``cclp/shade/1`` .. ``cclp/shade/4`` (real)
    the SHADE hops of all its pairs at once (``cclp/shade/3`` repeats: the bounded stream of
    :mod:`securefl.crypto.shade_hops`, ``cclp/shade/4`` is its last exchange; config
    ``cclp/chunk-bytes`` bounds a pair's SHADE bytes per message): one batch per peer sealed through
    :mod:`securefl.runtime.links` (``relay/to/<peer>`` up, ``relay/from/<peer>`` down), the
    shares of finished pairs up to the server (``cclp/share/<a>-<b>``).  Config array
    ``cclp/alive`` names the peers still in the protocol: a pair with a peer that left is
    abandoned.  The pair's IKNP setup (:class:`~securefl.crypto.ot.SenderSetup` or
    :class:`~securefl.crypto.ot.ReceiverSetup`, one per peer client id and role) persists
    across rounds in the client's state under ``ot/<peer id>/<role>/``, bound to the
    transport session (the federation) and the two client ids: the base OTs run when a
    pair first meets in a role, later rounds are new sessions of the same extension
    (:mod:`securefl.crypto.ot`).  It never leaves the client: ``ot/`` is session-scoped
    (:data:`securefl.runtime.transport.SESSION_SCOPED`), so no checkpoint holds it (a resumed
    run sets the pairs up afresh).
``cclp/lwe/1`` .. ``cclp/lwe/3`` (real, ``hamming_backend="lwe"`` or ``"rlwe"``, instead of SHADE)
    only where the node's policy allows the backend (the strict default allows SHADE only,
    ``auto`` resolves by :meth:`securefl.runtime.policy.PrivacyPolicy.hamming_backend`; the
    evaluation hop is first counted against the node's LWE flooding cap,
    :meth:`securefl.runtime.policy.PrivacyLedger.serve_lwe`);
    :mod:`securefl.crypto.lwe_hops`: the LWE public key rides on ``cclp/codes``, signed for
    the transport and round sessions and the live members (:mod:`securefl.crypto.lwe_keys`);
    then the relayed keys down (each checked against the node's roster) and every ``C``
    block and the hint ``H'`` up (slots ``cclp/lwe/in``,
    ``cclp/lwe/out``, each forward with its own end-to-end tag); the relayed ``C`` blocks
    down, the answers ``D`` up in sealed batches to their encryptors and the evaluator's
    shares; the relayed hints and answers down, the encryptor's shares up.  State: the
    party's seed, X25519 key and the public keys (``cclp/lwe/state/...``).
``cclp/columns``
    the positions of the client's labeled points up (line 12, never the labels).
``cclp/sum``
    S_L^(j) and the row layout down; the client forms Zbar^(j) = S_L^(j) Y_L^(j), encodes
    and pads it per receiving block (line 14) and starts the secure sum ``cclp``
    (:mod:`securefl.runtime.secure_sum_steps`; three ``secagg/*`` exchanges follow).
    Plaintext: the unpadded encoding goes up.
After the last step the client holds nothing but its state until the rows arrive
(``cclp/rows/block``, ``cclp/rows/survivors``: FedProp's ``train`` request carries them):
:meth:`CrossClientSteps.finish_rows` removes the survivors' pads, decodes and takes argmax
labels and entropy weights (lines 15-16).

Costs: ``seconds/compute`` (the features) and ``seconds/crypto`` per reply, and the
nominal protocol bytes of the client-to-client frames the server cannot see
(``cclp/link-sent``, ``cclp/link-received``: :func:`securefl.crypto.channel.frame_size`
of the SHADE and LWE messages).

State (session-scoped: never checkpointed, cleared at the next round's advertise): the
party's typed state :class:`~securefl.protocols.crossclient.parties.CrossClientLPClient`
(under ``cclp/party/``, :mod:`securefl.runtime.state_codec`: the round's members, the
agreement's X25519 key, share and peer keys, the features until hashed, the codes, the
resolved backend, S_L and the layout, the self-pad seed), the SHADE pair states
(``cclp/shade/<peer>/``) and LWE session (``cclp/lwe/state/``), the links; and (``ot/...``,
kept across rounds) the IKNP setups with its peers.  Who learns what: exactly the client's
view in :mod:`securefl.protocols.crossclient.parties` (the LSH seed, pairwise keys,
S_L^(j), the layout, the sum's survivors, its own rows).
"""

from __future__ import annotations

import time
from abc import abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np

from securefl.crypto.channel import SERVER, Message
from securefl.crypto.prg import random_seed
from securefl.crypto.secagg import SecAggConfig
from securefl.errors import ConfigError, InputError, ProtocolError
from securefl.protocols.crossclient.parties import TAG_ROWS, CrossClientLPClient
from securefl.protocols.hamming import client as hamming
from securefl.protocols.hamming.client import (
    LWE,
    SHADE,
)
from securefl.protocols.hamming.client import Party as HammingParty
from securefl.protocols.lsh import SeedAgreementClient, common_seed
from securefl.protocols.propagation import LabelPropagationResult, check_labels
from securefl.runtime import links, secure_sum_steps, state_codec
from securefl.runtime.costs import COMPUTE, CRYPTO
from securefl.runtime.engine import Handler, StepTable
from securefl.runtime.links import transport_session
from securefl.runtime.transport import NodeContext, Record, put_message, take_message

ADVERTISE = "cclp/advertise"
SHARES = "cclp/shares"
CODES = "cclp/codes"
COLUMNS = "cclp/columns"
SUM = "cclp/sum"
SUM_NAME = "cclp"
"""Name of CrossClientLP's secure sum (:mod:`securefl.runtime.secure_sum_steps`)."""
PREFIX = "cclp/"
PARTY = "cclp/party/"
"""State prefix of the client's typed state (:class:`CrossClientLPClient`)."""

SLOT_LSH = "cclp/lsh"
SLOT_COLUMNS = "cclp/columns"
SLOT_S_L = "cclp/s-l"


def clear(state: Record) -> None:
    """Forget this round's CrossClientLP state and links."""
    for table in (state.arrays, state.config):
        for key in [k for k in table if k.startswith((PREFIX, "links/"))]:
            del table[key]


def load_party(state: Record) -> CrossClientLPClient:
    """The client's typed state as :func:`keep_party` stored it."""
    if f"{PARTY}party#" not in state.config:
        raise ProtocolError("CrossClientLP step before cclp/advertise")
    return state_codec.load(CrossClientLPClient, state, PARTY)


def keep_party(state: Record, party: CrossClientLPClient) -> None:
    """Store the client's typed state in its state Record."""
    state_codec.save(party, state, PARTY)


class CrossClientConfig(Protocol):
    """What the client steps need of the protocol's configuration (a method's, or
    :class:`FeatureProtocol`): the mode, the code length, the Hamming backend asked for,
    and the seed of the LSH seed share of a round (``None``: the OS CSPRNG)."""

    secure: str
    L: int
    hamming_backend: str

    def crypto_seed_for(self, purpose: str, round_index: int) -> int | None: ...


class CrossClientSteps:
    """CrossClientLP's client steps (a mixin before a client half; module docstring).

    Subclasses give :attr:`cclp`, :meth:`features`, :meth:`labels` and
    :meth:`num_classes`."""

    @property
    @abstractmethod
    def cclp(self) -> CrossClientConfig:
        """The protocol's configuration."""

    @abstractmethod
    def features(self, request: Record, node: NodeContext) -> np.ndarray:
        """V_j: the node's ``(n_j, d)`` features for this round (``request``: the advertise)."""

    @abstractmethod
    def labels(self, node: NodeContext) -> np.ndarray:
        """Y_j: the node's ``(n_j,)`` observed labels, ``-1`` where unlabeled."""

    @abstractmethod
    def num_classes(self, node: NodeContext) -> int:
        """C, the number of classes."""

    def handle(self, step: str, request: Record, state: Record, node: NodeContext) -> Record:
        """Answer ``step`` with the handler :data:`CLIENT_STEPS` names (any other step is the
        next half's)."""
        handler = CLIENT_STEPS.get(step)
        if handler is None:
            return super().handle(step, request, state, node)
        self._node = node
        reply = Record()
        start = time.perf_counter()
        handler(self, request, state, reply)
        reply.config[CRYPTO] = time.perf_counter() - start - float(reply.config.get(COMPUTE, 0.0))
        return reply

    @property
    def real(self) -> bool:
        return self.cclp.secure == "real"

    def finish_rows(self, rows: tuple[np.ndarray, np.ndarray], state: Record,
                    node: NodeContext) -> LabelPropagationResult:
        """Lines 15-16 on the client's ``rows`` (its block of the padded total, the sum's
        survivors): remove the survivors' pads, decode, normalise, label, weigh."""
        client = load_party(state)
        return client.finish(Message(SERVER, client.party, TAG_ROWS, rows),
                             int(self.num_classes(node)), padded=self.real)

    def _agreement(self, state: Record, client: CrossClientLPClient, *,
                   seed: int | None = None) -> SeedAgreementClient:
        """The seed-agreement party of ``client``'s state (``seed``: of its share); in real
        mode with the node's credentials for this transport session, round session and the
        round's members (:mod:`securefl.protocols.lsh`: the seal keys bound to the roster's
        pair keys, a share sealed to a substituted key refused at codes)."""
        if not self.real:
            return client.agreement(seed=seed)
        return client.agreement(
            seed=seed, credentials=self._node.credentials(),
            cohort=[int(m) for m in client.members],
            binding=transport_session(state) + client.session)

    def _labels(self) -> np.ndarray:
        """The node's labels, checked against its class count."""
        labels = np.asarray(self.labels(self._node))
        return check_labels(labels, int(self.num_classes(self._node)), len(labels), name="labels")

    # ----------------------------------------------------------------- steps
    def _advertise(self, request: Record, state: Record, reply: Record) -> None:
        identity = int(self._node.partition)
        clear(state)
        party = int(request.config["cclp/party"])
        members = np.asarray(request.arrays.get("cclp/members", np.zeros(0, np.int64)))
        if members.ndim != 1 or members.dtype.kind not in "iu" or not 0 <= party < len(members) \
                or int(members[party]) != identity or len(set(members.tolist())) != len(members):
            raise ProtocolError(f"client {identity}: cclp/members must list the round's distinct "
                                f"client ids with this client's at position {party}")
        round_index = int(request.config["round"])
        begin = time.perf_counter()
        features = np.asarray(self.features(request, self._node), dtype=np.float64)
        reply.config[COMPUTE] = time.perf_counter() - begin
        if features.ndim != 2 or not np.all(np.isfinite(features)):
            raise InputError("features", "non-finite or not 2-D",
                             f"client {party}'s features must be a finite (n, d) array")
        session = bytes(request.config.get("cclp/session", b""))
        if len(session) != 8:
            raise ProtocolError("cclp/advertise needs an 8-byte cclp/session")
        client = CrossClientLPClient(party, session, members.astype(np.int64), features=features)
        agreement = self._agreement(state, client,
                                    seed=self.cclp.crypto_seed_for("lsh", round_index))
        if self.real:
            put_message(reply, SLOT_LSH, agreement.advertise())
            links.open_links(state, self._node.credentials(), me=party, members=members.tolist(),
                             label=f"cclp/{bytes(session).hex()}")
        else:
            reply.arrays["cclp/share"] = np.frombuffer(agreement.draw_share(), np.uint8).copy()
        client.keep_agreement(agreement)
        keep_party(state, client)
        reply.config["cclp/points"] = len(features)

    def _shares(self, request: Record, state: Record, reply: Record) -> None:
        client = load_party(state)
        if not self.real:
            shares = np.asarray(request.arrays.get("cclp/shares"))
            if shares.ndim != 2 or shares.shape[1] != 16 or shares.dtype != np.uint8:
                raise ProtocolError("cclp/shares must be (parties, 16) uint8 seed shares")
            reply.arrays["cclp/codes"] = client.hash_features(
                common_seed([bytes(s) for s in shares]), int(self.cclp.L))
            keep_party(state, client)
            return
        agreement = self._agreement(state, client)
        message = agreement.send_shares(take_message(request, SLOT_LSH))
        client.keep_agreement(agreement)
        keep_party(state, client)
        put_message(reply, SLOT_LSH, message)

    def _codes(self, request: Record, state: Record, reply: Record) -> None:
        client = load_party(state)
        client.hash_features(
            self._agreement(state, client).receive_shares(take_message(request, SLOT_LSH)),
            int(self.cclp.L))
        sizes = np.asarray(request.arrays.get("cclp/sizes", np.zeros(0, np.int64)))
        alive = np.asarray(request.arrays.get("cclp/alive", np.zeros(0, np.int64)))
        client.hamming_backend = self._node.policy().hamming_backend(  # the node's policy, never the request
            self.cclp.hamming_backend, [int(sizes[p]) for p in alive], int(self.cclp.L))
        keep_party(state, client)
        hamming.open_session(self._hamming_party(client), request, state, reply, self._node)

    @staticmethod
    def _hamming_party(client: CrossClientLPClient) -> HammingParty:
        """The client's part in this round's SecureHamming session (after ``cclp/codes``)."""
        if client.codes is None:
            raise ProtocolError(f"client {client.party}: a SecureHamming step before its codes")
        return HammingParty(client.party, client.codes, tuple(int(m) for m in client.members),
                            client.session, client.hamming_backend)

    def _shade(self, hop: int, request: Record, state: Record, reply: Record) -> None:
        """SHADE hop ``hop`` of every live pair (:func:`securefl.protocols.hamming.client.shade_hop`)."""
        hamming.shade_hop(hop, self._hamming_party(load_party(state)), request, state, reply)

    def _lwe(self, hop: int, request: Record, state: Record, reply: Record) -> None:
        """LWE hop ``hop`` of the session (:func:`securefl.protocols.hamming.client.lwe_hop`)."""
        hamming.lwe_hop(hop, self._hamming_party(load_party(state)), request, state, reply, self._node)

    def _columns(self, request: Record, state: Record, reply: Record) -> None:
        put_message(reply, SLOT_COLUMNS, load_party(state).request_columns(self._labels()))

    def _sum(self, request: Record, state: Record, reply: Record) -> None:
        client, labels = load_party(state), self._labels()
        client.receive_columns(take_message(request, SLOT_S_L), labels)
        client.sum_members = int(request.config["cclp/sum/members"])
        if self.real:
            client.pad_seed = random_seed()
        keep_party(state, client)
        encoded = client.sum_input(labels, int(self.num_classes(self._node)), padded=self.real)
        if not self.real:
            reply.arrays["cclp/input"] = encoded
            return
        members = secure_sum_steps.request_members(request, "cclp/sum/cohort", client.sum_members)
        config = SecAggConfig(bytes(request.config["cclp/sum/session"]), client.sum_members,
                              int(request.config["cclp/sum/threshold"]), int(encoded.size), 64,
                              members=members, consistency=True)
        secure_sum_steps.start(state, reply, index=int(request.config["cclp/sum/index"]),
                               config=config, encoded=encoded, name=SUM_NAME,
                               credentials=self._node.credentials(), policy=self._node.policy())


ClientStep = Callable[[CrossClientSteps, Record, Record, Record], None]
"""A client step: ``(half, request, state, reply)``, filling ``reply`` and updating ``state``."""


def _hop(run: Callable[[CrossClientSteps, int, Record, Record, Record], None], hop: int) -> ClientStep:
    """The client step of hop ``hop`` of a Hamming backend's ``run(half, hop, request, state, reply)``."""
    return lambda half, request, state, reply: run(half, hop, request, state, reply)


CLIENT_STEPS: dict[str, ClientStep] = {
    ADVERTISE: CrossClientSteps._advertise,
    SHARES: CrossClientSteps._shares,
    CODES: CrossClientSteps._codes,
    **{step: _hop(CrossClientSteps._shade, min(hop, 3)) for hop, step in enumerate(SHADE, 1)},
    **{step: _hop(CrossClientSteps._lwe, hop) for hop, step in enumerate(LWE, 1)},
    COLUMNS: CrossClientSteps._columns,
    SUM: CrossClientSteps._sum,
}
"""CrossClientLP's client step table: step name -> handler (the module docstring lists them)."""
STEPS = tuple(CLIENT_STEPS)
"""CrossClientLP's steps before the secure sum's (``secure_sum_steps.STEPS``)."""


@dataclass(frozen=True)
class FeatureProtocol:
    """CrossClientLP's configuration for clients that hold their features already (no
    method): the mode (``secure``), the code length ``L``, the Hamming backend and
    ``seed``, the seed of the clients' LSH seed shares (``None``: the OS CSPRNG)."""

    secure: str
    L: int
    hamming_backend: str = "shade"
    seed: int | None = None

    def crypto_seed_for(self, purpose: str, round_index: int) -> int | None:
        """The seed of the LSH seed shares (the only seed these steps draw from)."""
        return self.seed


@dataclass(frozen=True)
class FeatureData:
    """What a :class:`FeatureClient` node holds: its features V_j ``(n_j, d)``, its labels
    Y_j ``(n_j,)`` (``-1`` unlabeled) and the class count C."""

    features: np.ndarray
    labels: np.ndarray
    num_classes: int


def _secure_sum_reply(request: Record, state: Record, node: NodeContext) -> Record:
    """A secure-sum step answered (peers' keys checked against the node's roster), its time
    reported as cryptography."""
    reply = Record()
    start = time.perf_counter()
    secure_sum_steps.answer(request, state, reply, credentials=node.credentials())
    reply.config[CRYPTO] = time.perf_counter() - start
    return reply


class FeatureClient(CrossClientSteps, StepTable):
    """CrossClientLP's client steps for a node whose data are its features
    (:class:`FeatureData`; :func:`securefl.protocols.cross_client_lp`, ``securefl bench
    crossclient``): the steps exactly as a method's client runs them, the secure sum's
    steps answered as a method's client answers them, any other step refused.  The rows
    are finished by :meth:`~CrossClientSteps.finish_rows`."""

    program = "cclp-features"
    handlers: ClassVar[Mapping[str, Handler]] = {step: _secure_sum_reply for step in secure_sum_steps.STEPS}

    def __init__(self, protocol: FeatureProtocol) -> None:
        self.protocol = protocol

    @property
    def cclp(self) -> FeatureProtocol:
        return self.protocol

    @staticmethod
    def data(node: NodeContext) -> FeatureData:
        """The node's :class:`FeatureData` (ConfigError if it holds none)."""
        if not isinstance(node.data, FeatureData):
            raise ConfigError(f"node {node.partition} holds no FeatureData")
        return node.data

    def features(self, request: Record, node: NodeContext) -> np.ndarray:
        return self.data(node).features

    def labels(self, node: NodeContext) -> np.ndarray:
        return self.data(node).labels

    def num_classes(self, node: NodeContext) -> int:
        return int(self.data(node).num_classes)
