"""Client halves of FedProp and FedProp+MT: CrossClientLP's client parties as steps.

FedProp's round (``docs/method-halves.md``, "Per method") is CrossClientLP
(:mod:`securefl.protocols.crossclient`, FedProp Algorithm 3) followed by FedAvg's
``train``.  Every CrossClientLP party a client plays runs here, at the client, on its own
data; the server half (:class:`securefl.methods.fedprop.server.FedProp`) only relays, assembles
the Hamming matrix, solves for columns and forwards rows.  Steps, one exchange each
(request -> reply); ``j`` is the client's party index in the round (its position among the
round's selected clients, config ``cclp/party``):

``cclp/advertise``
    request: arrays ``model`` (the feature model: the global model, FedProp+MT's teacher)
    and ``cclp/members`` (the round's client ids in party order: this client's own id must
    be at its position), config ``round``, ``cclp/party``, ``cclp/session`` (8 bytes).  The client embeds all
    its points, V_j = f(X_j) (kept in its state until hashed), and starts the LSH seed
    agreement (:class:`~securefl.protocols.lsh.SeedAgreementClient`: public key up, signed
    in real mode; the share from ``crypto_seed_for("lsh", round)``) and its links
    (:func:`securefl.runtime.links.advertise`).  Plaintext: the share itself goes up.
``cclp/shares``
    real: the relayed public keys down, each checked against the node's roster (signed by
    its party's member for this session and the round's members, :mod:`securefl.protocols.lsh`:
    a substituted, stranger's, unsigned or re-bound key is refused before any share is
    sealed); the sealed seed shares up; the links' key table installed.  Plaintext: all shares down; the client hashes its features and sends its
    LSH codes in the clear (the placeholder computes H from them).
``cclp/codes`` (real)
    the relayed sealed shares down; the client derives the common seed, hashes (lines
    3-4), sends its own block of distances to the server and starts SHADE
    (:mod:`securefl.crypto.shade_hops` hop 1) with every live peer it is OT receiver of.
``cclp/shade/1`` .. ``cclp/shade/4`` (real)
    the SHADE hops of all its pairs at once: one batch per peer sealed through
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
``train``
    as :class:`~securefl.methods.fedavg.client.PseudoLabelClient`, with the client's rows
    of the padded total (``cclp/rows/block``, ``cclp/rows/survivors``) in the request: the client removes the survivors'
    pads, decodes and takes argmax labels and entropy weights (lines 15-16), trains on
    them, and reports them (:func:`securefl.methods.halves.report_pseudo_labels`) where
    the run asks.  A client without rows (it left CrossClientLP) trains on its labels.
    With ``min_label_mass`` or ``mass_weighting`` set (an option, off by default; not the
    paper) the client gates or weighs its pseudo-labels by the label mass sum_c Z_ic of
    its own rows (:func:`~securefl.protocols.propagation.gate_by_mass`): only its rows
    and its labeled mask, nothing more leaves or enters it.

Costs: ``seconds/compute`` (embedding, training) and ``seconds/crypto`` per reply, and the
nominal protocol bytes of the client-to-client frames the server cannot see
(``cclp/link-sent``, ``cclp/link-received``: :func:`securefl.crypto.channel.frame_size`
of the SHADE messages, as the in-process protocol meters them).

State (``cclp/...``, session-scoped: never checkpointed, cleared at the next round's
advertise and after ``train``): the features until hashed, the codes, the round's
members, the agreement's X25519 key, share and peer keys, SHADE pair states, the
self-pad seed, S_L and the layout; and (``ot/...``, session-scoped, kept across rounds)
the IKNP setups with its peers.  Who learns what: exactly the client's view in
:mod:`securefl.protocols.crossclient` (the LSH seed, pairwise keys, S_L^(j), the layout,
the sum's survivors, its own rows).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from securefl.crypto import lwe_hops, shade_hops
from securefl.crypto.channel import SERVER, Message, frame_size
from securefl.crypto.fixed_point import FixedPoint
from securefl.crypto.hamming import own_block, pair_roles
from securefl.crypto.keys import KeyPair
from securefl.crypto.lwe import statistical_distance
from securefl.crypto.ot import ReceiverSetup, SenderSetup, setup_context
from securefl.crypto.prg import random_seed
from securefl.crypto.rand import RandomSource
from securefl.crypto.secagg import SecAggConfig
from securefl.errors import InputError, ProtocolError
from securefl.fl import extract_features
from securefl.methods.fedavg.client import TRAIN, PseudoLabelClient, PseudoLabelMTClient
from securefl.methods.halves import LocalData, MethodClient
from securefl.protocols.crossclient import TAG_ROWS, CrossClientLPClient
from securefl.protocols.lsh import SeedAgreementClient, common_seed
from securefl.protocols.propagation import LabelPropagationResult, gate_by_mass
from securefl.runtime import links, secure_sum_steps
from securefl.runtime.costs import COMPUTE, CRYPTO
from securefl.runtime.engine import Handler, StepTable
from securefl.runtime.links import transport_session
from securefl.runtime.transport import NodeContext, Record, put_message, take_message

ADVERTISE = "cclp/advertise"
SHARES = "cclp/shares"
CODES = "cclp/codes"
SHADE = tuple(f"cclp/shade/{hop}" for hop in range(1, shade_hops.HOPS + 1))
LWE = tuple(f"cclp/lwe/{hop}" for hop in range(1, lwe_hops.HOPS + 1))
"""The LWE backend's hops after ``cclp/codes`` (``hamming_backend="lwe"``)."""
COLUMNS = "cclp/columns"
SUM = "cclp/sum"
SUM_NAME = "cclp"
"""Name of CrossClientLP's secure sum (:mod:`securefl.runtime.secure_sum_steps`)."""
PREFIX = "cclp/"
OT_PREFIX = "ot/"
"""State prefix of the IKNP setups kept with each peer across rounds (``ot/<peer id>/<role>/``)."""

SLOT_LSH = "cclp/lsh"
SLOT_OWN = "cclp/own"
SLOT_LWE_KEY = "cclp/lwe/key"
SLOT_LWE_IN = "cclp/lwe/in"
SLOT_LWE_OUT = "cclp/lwe/out"
SLOT_COLUMNS = "cclp/columns"
SLOT_S_L = "cclp/s-l"
ROWS_BLOCK = "cclp/rows/block"
ROWS_SURVIVORS = "cclp/rows/survivors"
LINK_SENT = "cclp/link-sent"
LINK_RECEIVED = "cclp/link-received"


def share_slot(a: int, b: int) -> str:
    """Reply slot of a client's share of the SHADE block of the pair ``a < b``."""
    return f"cclp/share/{a}-{b}"


def put_messages(record: Record, slot: str, messages: list[Message]) -> None:
    """Several protocol messages under ``slot/<i>`` (their count in config ``slot/n``)."""
    for i, message in enumerate(messages):
        put_message(record, f"{slot}/{i}", message)
    record.config[f"{slot}/n"] = len(messages)


def take_messages(record: Record, slot: str) -> list[Message]:
    """The messages :func:`put_messages` stored (none: an empty list)."""
    return [take_message(record, f"{slot}/{i}") for i in range(int(record.config.get(f"{slot}/n", 0)))]


def clear(state: Record) -> None:
    """Forget this round's CrossClientLP state and links."""
    for table in (state.arrays, state.config):
        for key in [k for k in table if k.startswith((PREFIX, "links/"))]:
            del table[key]


class CrossClientSteps:
    """CrossClientLP's client steps (mixin before a :class:`PseudoLabelClient`; see the
    module docstring)."""

    reports_pseudo_labels = True

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

    # ----------------------------------------------------------------- pieces
    @property
    def real(self) -> bool:
        return self.method.secure == "real"

    @staticmethod
    def _party(state: Record) -> int:
        try:
            return int(state.config["cclp/party"])
        except KeyError:
            raise ProtocolError("CrossClientLP step before cclp/advertise") from None

    def _agreement(self, state: Record, *, checked: bool = False) -> SeedAgreementClient:
        """The seed-agreement party as stored in ``state`` (``checked``: with the node's
        credentials, to verify the peers' keys)."""
        party = self._party(state)
        session = bytes(state.config["cclp/session"])
        agreement = self._new_agreement(state, party, session) if checked else \
            SeedAgreementClient(party=party, session=session)
        agreement.share = bytes(state.arrays["cclp/lsh/share"])
        if "cclp/lsh/private" in state.arrays:
            private = X25519PrivateKey.from_private_bytes(bytes(state.arrays["cclp/lsh/private"]))
            agreement.keys = KeyPair(private, private.public_key().public_bytes_raw())
        if "cclp/lsh/ids" in state.arrays:
            agreement.peer_keys = {int(p): bytes(k) for p, k in
                                   zip(state.arrays["cclp/lsh/ids"], state.arrays["cclp/lsh/keys"])}
        return agreement

    def _new_agreement(self, state: Record, party: int, session: bytes,
                       seed: int | None = None) -> SeedAgreementClient:
        """The seed-agreement party; in real mode its keys are signed with the node's
        credentials for this transport session, round session and the round's members
        (:mod:`securefl.protocols.lsh`), and peers' keys are checked the same way."""
        if not self.real:
            return SeedAgreementClient(party=party, session=session, seed=seed)
        return SeedAgreementClient(
            party=party, session=session, seed=seed, credentials=self._node.credentials(),
            cohort=[int(m) for m in state.arrays["cclp/members"]],
            binding=transport_session(state) + session)

    def _protocol_client(self, state: Record, data: LocalData) -> CrossClientLPClient:
        """The CrossClientLP client party (features are not kept: no step needs them now)."""
        labels = data.client.observed_labels().astype(np.int64)
        client = CrossClientLPClient(
            party=self._party(state), features=np.zeros((len(labels), 1)), labels=labels,
            num_classes=int(data.num_classes), L=int(self.method.L),
            agreement=self._agreement(state),
            private_pad_seed=bytes(state.arrays.get("cclp/pad", np.zeros(0, np.uint8))))
        if "cclp/s-l" in state.arrays:
            client.s_l = state.arrays["cclp/s-l"]
            client.layout_parties = state.arrays["cclp/layout-parties"]
            client.layout_sizes = state.arrays["cclp/layout-sizes"]
            client.sum_parties = state.arrays["cclp/sum-parties"]
        return client

    def _features(self, request: Record, data: LocalData) -> np.ndarray:
        """V_j = f(X_j): the client's points embedded by the request's feature model."""
        return extract_features(self.build(data, request.arrays["model"]), data.client.x).astype(np.float64)

    # ----------------------------------------------------------------- steps
    def _advertise(self, request: Record, state: Record, reply: Record) -> None:
        data, identity = self.data(self._node), int(self._node.partition)
        clear(state)
        party = int(request.config["cclp/party"])
        members = np.asarray(request.arrays.get("cclp/members", np.zeros(0, np.int64)))
        if members.ndim != 1 or members.dtype.kind not in "iu" or not 0 <= party < len(members) \
                or int(members[party]) != identity or len(set(members.tolist())) != len(members):
            raise ProtocolError(f"client {identity}: cclp/members must list the round's distinct "
                                f"client ids with this client's at position {party}")
        state.arrays["cclp/members"] = members.astype(np.int64)
        round_index = int(request.config["round"])
        begin = time.perf_counter()
        features = self._features(request, data)
        reply.config[COMPUTE] = time.perf_counter() - begin
        if not np.all(np.isfinite(features)):
            raise InputError("features", "non-finite", f"client {party}'s features contain NaN or inf")
        session = bytes(request.config.get("cclp/session", b""))
        if len(session) != 8:
            raise ProtocolError("cclp/advertise needs an 8-byte cclp/session")
        state.config["cclp/party"] = party
        state.config["cclp/session"] = session
        state.arrays["cclp/features"] = features
        agreement = self._new_agreement(state, party, session,
                                        seed=self.method.crypto_seed_for("lsh", round_index))
        if self.real:
            message = agreement.advertise()
            state.arrays["cclp/lsh/private"] = np.frombuffer(
                agreement.keys.private.private_bytes_raw(), np.uint8).copy()
            put_message(reply, SLOT_LSH, message)
            reply.arrays["cclp/link-key"] = links.advertise(state, self._node.credentials(), me=party,
                                                            label=f"cclp/{bytes(session).hex()}")
        else:
            reply.arrays["cclp/share"] = np.frombuffer(agreement.draw_share(), np.uint8).copy()
        state.arrays["cclp/lsh/share"] = np.frombuffer(agreement.share, np.uint8).copy()
        reply.config["cclp/points"] = len(data.client)

    def _hash(self, state: Record, seed: bytes) -> np.ndarray:
        client = CrossClientLPClient(
            party=self._party(state), features=state.arrays.pop("cclp/features"),
            labels=np.zeros(0, np.int64), num_classes=1, L=int(self.method.L),
            agreement=SeedAgreementClient(party=self._party(state), session=b""))
        client.agreement.lsh_seed = seed
        codes = client.hash_features()
        state.arrays["cclp/codes"] = codes
        return codes

    def _shares(self, request: Record, state: Record, reply: Record) -> None:
        party = self._party(state)
        if not self.real:
            shares = np.asarray(request.arrays.get("cclp/shares"))
            if shares.ndim != 2 or shares.shape[1] != 16 or shares.dtype != np.uint8:
                raise ProtocolError("cclp/shares must be (parties, 16) uint8 seed shares")
            reply.arrays["cclp/codes"] = self._hash(state, common_seed([bytes(s) for s in shares]))
            return
        agreement = self._agreement(state, checked=True)
        message = agreement.send_shares(take_message(request, SLOT_LSH))
        state.arrays["cclp/lsh/ids"] = np.array(sorted(agreement.peer_keys), dtype=np.int64)
        state.arrays["cclp/lsh/keys"] = np.stack(
            [np.frombuffer(agreement.peer_keys[p], np.uint8) for p in sorted(agreement.peer_keys)])
        links.install(state, request.arrays["cclp/link-ids"], request.arrays["cclp/link-keys"],
                      me=party, credentials=self._node.credentials())
        put_message(reply, SLOT_LSH, message)

    def _codes(self, request: Record, state: Record, reply: Record) -> None:
        party = self._party(state)
        agreement = self._agreement(state)
        codes = self._hash(state, agreement.receive_shares(take_message(request, SLOT_LSH)))
        sizes = np.asarray(request.arrays.get("cclp/sizes", np.zeros(0, np.int64)))
        alive = np.asarray(request.arrays.get("cclp/alive", np.zeros(0, np.int64)))
        chosen = self._node.policy().hamming_backend(  # the node's policy, never the request
            self.method.hamming_backend, [int(sizes[p]) for p in alive], int(self.method.L))
        state.config["cclp/hamming-backend"] = chosen
        backend = "lwe" if chosen in ("lwe", "rlwe") else "shade"
        put_message(reply, SLOT_OWN, Message(party, SERVER, f"{backend}/own/{party}", (own_block(codes),)))
        if backend == "lwe":
            self._lwe(0, request, state, reply)
        else:
            self._shade(0, request, state, reply)

    def _pairs(self, request: Record, state: Record) -> list[tuple[int, int, int, int]]:
        """``(peer, a, b, sender)`` of every live pair of this client (``a < b``)."""
        me = self._party(state)
        alive = np.asarray(request.arrays.get("cclp/alive", np.zeros(0, np.int64)))
        pairs = []
        for peer in sorted(int(p) for p in alive):
            if peer == me:
                continue
            a, b = min(me, peer), max(me, peer)
            pairs.append((peer, a, b, pair_roles(a, b)[0]))
        return pairs

    def _shade(self, hop: int, request: Record, state: Record, reply: Record) -> None:
        """SHADE hop ``hop + 1`` of every live pair (hop 0 rides on ``cclp/codes``)."""
        me = self._party(state)
        codes = state.arrays.get("cclp/codes")
        if codes is None:
            raise ProtocolError(f"client {me}: SHADE step before its codes")
        sizes = np.asarray(request.arrays.get("cclp/sizes", np.zeros(0, np.int64)))
        members = [int(m) for m in state.arrays["cclp/members"]]
        sent = received = 0
        for peer, a, b, sender in self._pairs(request, state):
            receiver = b if sender == a else a
            i_send = sender == me
            # who sends in this hop: receiver at hops 0 and 2, sender at hops 1 and 3
            acting = (hop in (1, 3)) == i_send
            if hop == 4 and i_send:
                continue
            prefix = f"cclp/shade/{peer}/"
            pair = {k[len(prefix):]: v for k, v in state.arrays.items() if k.startswith(prefix)}
            incoming: list[Message] = []
            if hop > 0 and (hop == 4 or acting):
                incoming = links.receive_batch(request, state, me=me, peer=peer)
                received += sum(frame_size(m) for m in incoming)
            outgoing: list[Message] = []
            share = None
            if not 0 <= peer < len(members):
                raise ProtocolError(f"client {me}: SHADE peer {peer} is not among the round's members")
            setup = self._setup(state, members[peer], "sender" if i_send else "receiver")
            context = setup_context(transport_session(state), members[sender], members[receiver])
            if hop == 0 and acting:
                outgoing = [shade_hops.receiver_base(pair, setup=setup, context=context, sender=sender,
                                                     receiver=receiver, rng=RandomSource())]
            elif hop == 1 and acting:
                answer, setup = shade_hops.sender_base(pair, _one(incoming), setup=setup, context=context,
                                                       rng=RandomSource())
                outgoing = [answer]
            elif hop == 2 and acting:
                outgoing, setup = shade_hops.receiver_extend(pair, _one(incoming), codes, setup=setup,
                                                             context=context, sender=sender,
                                                             receiver=receiver)
            elif hop == 3 and acting:
                outgoing, share = shade_hops.sender_correct(
                    pair, incoming, codes, setup=setup, receivers=int(sizes[receiver]), sender=sender,
                    receiver=receiver)
            elif hop == 4:
                share = shade_hops.receiver_finish(pair, incoming, codes, setup=setup,
                                                   senders=int(sizes[sender]), sender=sender,
                                                   receiver=receiver)
            if hop <= 2 and acting and setup is not None:  # hops 1-3 advance or replace it
                self._keep_setup(state, members[peer], setup)
            for key in [k for k in state.arrays if k.startswith(prefix)]:
                del state.arrays[key]
            state.arrays.update({prefix + k: v for k, v in pair.items()})
            if outgoing:
                links.send_batch(reply, state, outgoing, me=me, peer=peer)
                sent += sum(frame_size(m) for m in outgoing)
            if share is not None:
                oriented = share if sender == a else share.T
                put_message(reply, share_slot(a, b), Message(
                    me, SERVER, f"shade/share/{a}-{b}", (np.ascontiguousarray(oriented),)))
        reply.config[LINK_SENT] = sent
        reply.config[LINK_RECEIVED] = received

    @staticmethod
    def _setup(state: Record, peer: int, role: str) -> SenderSetup | ReceiverSetup | None:
        """This client's IKNP setup with client ``peer`` in ``role``, if it holds one."""
        prefix = f"{OT_PREFIX}{peer}/{role}/"
        arrays = {k[len(prefix):]: v for k, v in state.arrays.items() if k.startswith(prefix)}
        if not arrays:
            return None
        return (SenderSetup if role == "sender" else ReceiverSetup).from_arrays(arrays)

    @staticmethod
    def _keep_setup(state: Record, peer: int, setup: SenderSetup | ReceiverSetup) -> None:
        """Store (replace) this client's IKNP setup with client ``peer``."""
        role = "sender" if isinstance(setup, SenderSetup) else "receiver"
        prefix = f"{OT_PREFIX}{peer}/{role}/"
        for key in [k for k in state.arrays if k.startswith(prefix)]:
            del state.arrays[key]
        state.arrays.update({prefix + k: v for k, v in setup.to_arrays().items()})

    def _lwe(self, hop: int, request: Record, state: Record, reply: Record) -> None:
        """LWE hop ``hop`` of the session (:mod:`securefl.crypto.lwe_hops`; hop 0 rides on
        ``cclp/codes``): keys, broadcasts and hints relayed by the server with their
        per-recipient tags (slots ``cclp/lwe/in``, ``cclp/lwe/out``), the answers ``D``
        in sealed batches (:mod:`securefl.runtime.links`), the shares up."""
        me = self._party(state)
        codes = state.arrays.get("cclp/codes")
        if codes is None:
            raise ProtocolError(f"client {me}: LWE step before its codes")
        if hop and state.config.get("cclp/hamming-backend") not in ("lwe", "rlwe"):
            raise ProtocolError(f"client {me}: an LWE hop in a session this client runs with "
                                f"{state.config.get('cclp/hamming-backend')!r} (its policy's choice)")
        session = bytes(state.config["cclp/session"])
        prefix = "cclp/lwe/state/"
        saved = {k[len(prefix):]: v for k, v in state.arrays.items() if k.startswith(prefix)}
        sizes = np.asarray(request.arrays.get("cclp/sizes", np.zeros(0, np.int64)))
        alive = [int(p) for p in np.asarray(request.arrays.get("cclp/alive", np.zeros(0, np.int64)))]
        if any(not 0 <= p < len(sizes) for p in alive) or me not in alive:
            raise ProtocolError(f"client {me}: LWE hop {hop} with alive parties {alive}")
        members = alive if hop <= 1 else [int(p) for p in saved.get("ids", ())]
        in_session = {p: int(sizes[p]) for p in members}
        sent = received = 0
        ring = state.config["cclp/hamming-backend"] == "rlwe"
        if hop == 0:
            roster = [int(m) for m in state.arrays["cclp/members"]]
            put_message(reply, SLOT_LWE_KEY, lwe_hops.start(
                saved, index=me, codes=codes, session=session, rng=RandomSource(),
                credentials=self._node.credentials(), clients={p: roster[p] for p in alive},
                context=transport_session(state) + b"|" + session))
        elif hop == 1:
            put_messages(reply, SLOT_LWE_OUT, lwe_hops.broadcast(
                saved, take_messages(request, SLOT_LWE_IN), index=me, codes=codes,
                sizes=in_session, session=session, credentials=self._node.credentials(),
                ring=ring))
        elif hop == 2:  # the flooded answers leave here: counted against the node's cap first
            lwe_hops.HopState.load(saved, me, 2)  # a hop that ran already is refused before the ledger
            self._node.ledger().serve_lwe(
                session=transport_session(state) + session,
                distance=statistical_distance(list(in_session.values()), int(self.method.L)),
                cap=self._node.policy().lwe_max_distance)
            answers, shares = lwe_hops.evaluate(saved, take_messages(request, SLOT_LWE_IN), index=me,
                                                codes=codes, sizes=in_session, alive=alive,
                                                session=session, ring=ring)
            for answer in answers:
                links.send_batch(reply, state, [answer], me=me, peer=answer.receiver)
                sent += frame_size(answer)
        else:
            answers = []
            for encryptor, evaluator in lwe_hops.session_pairs(alive):
                if encryptor == me:
                    batch = links.receive_batch(request, state, me=me, peer=evaluator)
                    received += sum(frame_size(m) for m in batch)
                    answers += batch
            shares = lwe_hops.finish(saved, take_messages(request, SLOT_LWE_IN), answers, index=me,
                                     codes=codes, sizes=in_session, alive=alive, session=session,
                                     ring=ring)
        if hop >= 2:
            for message in lwe_hops.share_messages(me, shares):
                put_message(reply, f"cclp/share/{message.tag[len('lwe/share/'):]}", message)
        for key in [k for k in state.arrays if k.startswith(prefix)]:
            del state.arrays[key]
        state.arrays.update({prefix + k: v for k, v in saved.items()})
        reply.config[LINK_SENT] = sent
        reply.config[LINK_RECEIVED] = received

    def _columns(self, request: Record, state: Record, reply: Record) -> None:
        put_message(reply, SLOT_COLUMNS,
                    self._protocol_client(state, self.data(self._node)).request_columns())

    def _sum(self, request: Record, state: Record, reply: Record) -> None:
        client = self._protocol_client(state, self.data(self._node))
        client.receive_columns(take_message(request, SLOT_S_L))
        members = int(request.config["cclp/sum/members"])
        state.arrays["cclp/s-l"] = np.ascontiguousarray(client.s_l)
        state.arrays["cclp/layout-parties"] = np.asarray(client.layout_parties)
        state.arrays["cclp/layout-sizes"] = np.asarray(client.layout_sizes)
        state.arrays["cclp/sum-parties"] = np.asarray(client.sum_parties)
        state.config["cclp/sum/members"] = members
        if self.real:
            client.private_pad_seed = random_seed()
            state.arrays["cclp/pad"] = np.frombuffer(client.private_pad_seed, np.uint8).copy()
        encoded = client.sum_input(FixedPoint(members), padded=self.real)
        if not self.real:
            reply.arrays["cclp/input"] = encoded
            return
        config = SecAggConfig(bytes(request.config["cclp/sum/session"]), members,
                              int(request.config["cclp/sum/threshold"]), int(encoded.size), 64,
                              cohort=bytes(request.config["cclp/sum/cohort"]), consistency=True)
        secure_sum_steps.start(state, reply, index=int(request.config["cclp/sum/index"]),
                               config=config, encoded=encoded, name=SUM_NAME,
                               credentials=self._node.credentials(), policy=self._node.policy())

    # ----------------------------------------------------------------- train
    def pseudo_labels(self, request, models, data):
        if ROWS_BLOCK not in request.arrays:
            return None
        state = self._train_state
        client = self._protocol_client(state, data)
        encoding = FixedPoint(int(state.config["cclp/sum/members"]))
        message = Message(SERVER, client.party, TAG_ROWS,
                          (request.arrays[ROWS_BLOCK], request.arrays.get(ROWS_SURVIVORS)))
        output = client.finish(message, encoding, padded=self.real)
        return gate_by_mass(output.pseudo_labels, output.weights, output.mass,
                            unlabeled=~data.client.labeled,
                            min_label_mass=self.method.min_label_mass,
                            mass_weighting=self.method.mass_weighting)


ClientStep = Callable[[CrossClientSteps, Record, Record, Record], None]
"""A client step: ``(half, request, state, reply)``, filling ``reply`` and updating ``state``."""


def _hop(run: Callable[[CrossClientSteps, int, Record, Record, Record], None], hop: int) -> ClientStep:
    """The client step of hop ``hop`` of a Hamming backend's ``run(half, hop, request, state, reply)``."""
    return lambda half, request, state, reply: run(half, hop, request, state, reply)


CLIENT_STEPS: dict[str, ClientStep] = {
    ADVERTISE: CrossClientSteps._advertise,
    SHARES: CrossClientSteps._shares,
    CODES: CrossClientSteps._codes,
    **{step: _hop(CrossClientSteps._shade, hop) for hop, step in enumerate(SHADE, 1)},
    **{step: _hop(CrossClientSteps._lwe, hop) for hop, step in enumerate(LWE, 1)},
    COLUMNS: CrossClientSteps._columns,
    SUM: CrossClientSteps._sum,
}
"""CrossClientLP's client step table: step name -> handler (the module docstring lists them)."""
STEPS = tuple(CLIENT_STEPS)
"""CrossClientLP's steps before the secure sum's (``secure_sum_steps.STEPS``) and ``train``."""


class _TrainState:
    """Gives :meth:`CrossClientSteps.pseudo_labels` the state of the ``train`` request and
    clears CrossClientLP's state after it."""

    def handle(self, step: str, request: Record, state: Record, node: NodeContext) -> Record:
        if step != TRAIN:
            return super().handle(step, request, state, node)
        self._train_state = state
        try:
            return super().handle(step, request, state, node)
        finally:
            clear(state)


def _one(messages: list[Message]) -> Message:
    if len(messages) != 1:
        raise ProtocolError(f"SHADE: expected one message in the batch, got {len(messages)}")
    return messages[0]


class FedPropClient(_TrainState, CrossClientSteps, PseudoLabelClient):
    """FedProp's client: CrossClientLP's steps, then FedProp's ClientUpdate."""


class FedPropMTClient(_TrainState, CrossClientSteps, PseudoLabelMTClient):
    """FedProp+MT's client: CrossClientLP's steps (on the teacher's features, which the
    server sends as the round's feature model), then FedProp+MT's ClientUpdate."""


@dataclass(frozen=True)
class FeatureProtocol:
    """CrossClientLP's parameters for clients that hold their features already (no method):
    the mode (``secure``), the code length ``L``, the Hamming backend and ``seed``, the
    seed of the clients' LSH seed shares (``None``: the OS CSPRNG), as a method's
    ``crypto_seed_for("lsh", round)`` gives it."""

    secure: str
    L: int
    hamming_backend: str = "shade"
    seed: int | None = None

    def crypto_seed_for(self, purpose: str, round_index: int) -> int | None:
        """The seed of the LSH seed shares (the only seed these steps draw from)."""
        return self.seed


class FeatureClient(CrossClientSteps, StepTable):
    """CrossClientLP's client steps, exactly as :class:`FedPropClient` runs them, for a node
    whose data ``x`` already are its features V_j (``securefl bench crossclient``): the
    embedding is the identity, the secure sum's steps are answered as a method's client
    answers them, any other step is refused.  The rows are finished by
    :meth:`finish_rows`, the work of the ``train`` step (lines 15-16)."""

    program = "cclp-features"
    handlers: ClassVar[Mapping[str, Handler]] = {
        step: MethodClient.secure_sum_reply for step in secure_sum_steps.STEPS}

    def __init__(self, protocol: FeatureProtocol) -> None:
        self.method = protocol

    data = staticmethod(MethodClient.data)

    def _features(self, request: Record, data: LocalData) -> np.ndarray:
        return np.asarray(data.client.x, dtype=np.float64)

    def finish_rows(self, rows: tuple[np.ndarray, np.ndarray], state: Record,
                    data: LocalData) -> LabelPropagationResult:
        """Lines 15-16 on the client's ``rows`` (block of the padded total, survivors)."""
        client = self._protocol_client(state, data)
        return client.finish(Message(SERVER, client.party, TAG_ROWS, rows),
                             FixedPoint(int(state.config["cclp/sum/members"])), padded=self.real)
