"""FedProp's server half of CrossClientLP over a transport (FedProp Algorithm 3, lines 1-14).

The client parties run at the clients (:mod:`securefl.methods.fedprop_clients`, which
lists the steps); :func:`cross_client_round` is everything the server does, one exchange
per step: it relays the LSH seed agreement (:class:`~securefl.protocols.lsh.SeedAgreementServer`)
and the links' public keys, relays the sealed SHADE batches between clients (it cannot read
or alter them: :mod:`securefl.fl.links`), adds the two shares of every pair's block and
places the own blocks into the Hamming matrix H, builds the graph and solves for the
requested columns (:class:`~securefl.protocols.crossclient.CrossClientLPServer`), runs the
padded secure sum (:mod:`securefl.fl.secure_sum_steps`, sum ``cclp``) and returns each
client's block of the total with the survivor list, which the ``train`` request carries.
It reads no client data: what it learns is what the server of
:mod:`securefl.protocols.crossclient` learns (public keys, ciphertexts, H, the labeled
positions, the block sizes, the padded total and its survivors).

**Dropouts** (no reply before the timeout, or an error reply) map onto
:class:`~securefl.protocols.crossclient.Dropouts`:

* at ``cclp/advertise``: the client is left out of the round's protocol (as if not
  sampled: its share is not in the seed); it gets no pseudo-labels;
* at ``cclp/shares``: the others miss its seed share and cannot derive the seed: every
  client fails at ``cclp/codes`` and :class:`~securefl.errors.DropoutError` is raised;
* at ``cclp/codes`` (``before_hamming``) or at any SHADE or LWE hop (during SecureHamming): it is
  left out of the graph -- its pairs are abandoned, the other pairs finish, H is
  assembled over the clients left -- exactly ``before_hamming`` of the in-process protocol;
* at ``cclp/columns`` (``before_sum``): its points are in the graph, its labels do not
  contribute, no output;
* at ``cclp/sum`` or a ``secagg/*`` step (``during_sum`` at the secure-aggregation round
  it missed: :data:`securefl.crypto.secagg.ROUNDS`): before its masked input it
  contributes nothing, at ``unmask`` it still contributes; no output for it.

**Nominal bytes.**  Per client, the frame bytes (:func:`securefl.crypto.channel.frame_size`)
of every CrossClientLP message it sends or receives -- setup, SHADE (the client-to-client
frames as the clients report them, the shares and own block it sends the server), column
request and S_L, the rows -- plus the bytes it sent in the secure sum: the figure
:meth:`securefl.protocols.crossclient.CrossClientLPResult.bytes_per_client` gives for the
same protocol run in process, whatever the transport moves (which
:class:`securefl.fl.costs.RoundMeter` measures).  Plaintext mode meters, as in process,
columns, S_L, rows and the sum's encoded inputs (the placeholder's setup and codes are
free).
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from securefl.crypto import lwe_hops
from securefl.crypto.lwe import check_session
from securefl.crypto.channel import SERVER, Message, frame_size
from securefl.crypto.hamming import check_codes, choose_backend
from securefl.crypto.hamming_plain import hamming_matrix, pack_codes
from securefl.crypto.projection import busiest_link_bytes
from securefl.errors import DropoutError, ProtocolError
from securefl.fl import links, secure_sum_steps
from securefl.fl.costs import COMPUTE, CRYPTO
from securefl.fl.transport import Exchange, Record, Transport, put_message, take_message
from securefl.methods.fedprop_clients import (
    ADVERTISE,
    CODES,
    COLUMNS,
    LINK_RECEIVED,
    LINK_SENT,
    LWE,
    SHADE,
    SHARES,
    SLOT_COLUMNS,
    SLOT_LSH,
    SLOT_LWE_IN,
    SLOT_LWE_KEY,
    SLOT_LWE_OUT,
    SLOT_OWN,
    SLOT_S_L,
    SUM,
    SUM_NAME,
    put_messages,
    take_messages,
)
from securefl.protocols.crossclient import TAG_COLUMNS, CrossClientLPServer
from securefl.protocols.lsh import SeedAgreementServer

_SHARE = re.compile(r"cclp/share/(\d+)-(\d+)/count\Z")


@dataclass
class CrossClientRound:
    """What one CrossClientLP over the transport gave and cost.

    ``rows``: client -> (its block of the padded total, the sum's survivors as party
    indices) for the ``train`` request; ``graph``, ``in_sum``, ``survivors`` as client ids;
    ``failed``: client -> error text of any step; ``bytes_per_client``: nominal bytes
    (module docstring) per member; ``exchanges``: every exchange it ran.
    ``label_mass``: client -> ``(n_k,)`` label mass sum_c Z_ic of each of its points, for
    every client that gets rows (:meth:`CrossClientLPServer.label_mass` over the sum's
    survivors: what the server already holds); ``labeled_positions``: client -> the
    positions of its labeled points that it sent (line 12).
    """

    rows: dict[int, tuple[np.ndarray, np.ndarray]]
    graph: list[int]
    in_sum: list[int]
    survivors: list[int]
    dropped: dict[str, list[int]]
    failed: dict[int, str]
    bytes_sent: dict[int, int]
    bytes_received: dict[int, int]
    server_seconds: float
    exchanges: list[Exchange] = field(default_factory=list, repr=False)
    label_mass: dict[int, np.ndarray] = field(default_factory=dict, repr=False)
    labeled_positions: dict[int, np.ndarray] = field(default_factory=dict, repr=False)

    @property
    def protocol_bytes_per_client(self) -> float:
        """Mean over the members of bytes sent plus received."""
        totals = [self.bytes_sent[c] + self.bytes_received[c] for c in self.bytes_sent]
        return float(np.mean(totals)) if totals else 0.0

    @property
    def link_bytes(self) -> int:
        """The busiest client's bytes in its busier direction."""
        return busiest_link_bytes(self.bytes_sent, self.bytes_received)

    @property
    def crypto_seconds(self) -> float:
        """Clients' cryptography plus the server's share of the protocol."""
        return self.server_seconds + sum(float(r.config.get(CRYPTO, 0.0)) for e in self.exchanges
                                         for r in e.replies.values())

    @property
    def compute_seconds(self) -> float:
        """Clients' embedding time."""
        return sum(float(r.config.get(COMPUTE, 0.0)) for e in self.exchanges
                   for r in e.replies.values())


def cross_client_round(transport: Transport, members: Sequence[int], *, feature_model: np.ndarray,
                       round_index: int, secure: str, k: int, alpha: float, L: int,
                       num_classes: int, timeout: float | None = None,
                       hamming_backend: str = "shade") -> CrossClientRound:
    """Run CrossClientLP among ``members`` (clients, in party order) on ``transport``;
    ``feature_model`` is the vector of the model whose features the clients embed;
    ``hamming_backend`` (real mode) ``"shade"``, ``"lwe"``, ``"rlwe"`` or ``"auto"`` (each client
    resolves it by its own node's policy, :meth:`securefl.fl.policy.PrivacyPolicy.hamming_backend`;
    the server follows what they resolved, :func:`_agreed_backend`), as the clients run it."""
    real = secure == "real"
    members = [int(c) for c in members]
    count = len(members)
    sent = dict.fromkeys(range(count), 0)
    received = dict.fromkeys(range(count), 0)
    exchanges: list[Exchange] = []
    failed: dict[int, str] = {}
    dropped: dict[str, list[int]] = {}
    seconds = 0.0

    def exchange(step: str, requests: dict[int, Record], among: Sequence[int]) -> tuple[Exchange, list[int]]:
        result = transport.exchange(step, {members[j]: requests[j] for j in among}, timeout=timeout)
        exchanges.append(result)
        failed.update(result.failed)
        left = [j for j in among if members[j] not in result.replies]
        if left:
            dropped[step] = [members[j] for j in left]
        return result, [j for j in among if members[j] in result.replies]

    def reply(result: Exchange, j: int) -> Record:
        return result.replies[members[j]]

    def message_from(result: Exchange, j: int, slot: str) -> Message:
        message = take_message(reply(result, j), slot)
        if message.sender != j or message.receiver != SERVER:
            raise ProtocolError(f"client {members[j]} sent {slot} as party {message.sender}")
        sent[j] += frame_size(message)
        return message

    def to_client(record: Record, slot: str, message: Message) -> Record:
        put_message(record, slot, message)
        received[message.receiver] += frame_size(message)
        return record

    session = secrets.token_bytes(8)
    roster = np.array(members, dtype=np.int64)
    first = {j: Record({"model": np.asarray(feature_model, dtype=np.float64), "cclp/members": roster},
                       {"round": int(round_index), "cclp/party": j, "cclp/session": session})
             for j in range(count)}
    result, live = exchange(ADVERTISE, first, range(count))
    sizes = np.zeros(count, dtype=np.int64)
    for j in live:
        sizes[j] = int(reply(result, j).config["cclp/points"])

    begin = time.thread_time()
    if real:
        agreement = SeedAgreementServer()
        keys = agreement.broadcast_keys([message_from(result, j, SLOT_LSH) for j in live])
        ids, table = links.key_table({j: reply(result, j).arrays["cclp/link-key"] for j in live})
        requests = {m.receiver: to_client(Record({"cclp/link-ids": ids, "cclp/link-keys": table}),
                                          SLOT_LSH, m) for m in keys}
        seconds += time.thread_time() - begin
        result, live = exchange(SHARES, requests, live)
        begin = time.thread_time()
        relayed = agreement.relay_shares([message_from(result, j, SLOT_LSH) for j in live])
        requests = {m.receiver: to_client(Record({"cclp/alive": np.array(live, dtype=np.int64),
                                                  "cclp/sizes": sizes}), SLOT_LSH, m)
                    for m in relayed if m.receiver in live}
        seconds += time.thread_time() - begin
        model = choose_backend([int(sizes[j]) for j in live], int(L))
        result, graph = exchange(CODES, requests, live)
        own = {j: message_from(result, j, SLOT_OWN) for j in graph}
        if hamming_backend == "auto":
            hamming_backend = _agreed_backend(own, model)
        for j in graph:
            sent[j] += int(reply(result, j).config.get(LINK_SENT, 0))
        shares: dict[tuple[int, int], dict[int, Message]] = {}

        def collect_shares(result: Exchange, graph: list[int]) -> None:
            for j in graph:
                answer = reply(result, j)
                sent[j] += int(answer.config.get(LINK_SENT, 0))
                received[j] += int(answer.config.get(LINK_RECEIVED, 0))
                for key in list(answer.config):
                    match = _SHARE.match(key)
                    if match:
                        pair = (int(match.group(1)), int(match.group(2)))
                        shares.setdefault(pair, {})[j] = message_from(result, j, key[: -len("/count")])

        if hamming_backend in ("lwe", "rlwe"):
            # lwe_hops: keys relayed (hop 1), each C block to its evaluators (hop 2), each
            # hint to its encryptors (hop 3), every forward with its recipient's own tag;
            # the answers D client to client in sealed batches; shares at hops 2 and 3.
            begin = time.thread_time()
            in_session = list(graph)
            check_session([int(sizes[j]) for j in in_session], int(L), ring=hamming_backend == "rlwe")
            inbox: dict[int, list[tuple[int, Message]]] = {}
            hints: dict[int, list[tuple[int, Message]]] = {}
            for j in graph:
                for forward in lwe_hops.relay(in_session, message_from(result, j, SLOT_LWE_KEY)):
                    inbox.setdefault(forward.receiver, []).append((j, forward))
            for step in LWE:
                requests = {}
                for j in graph:
                    delivered = [m for origin, m in inbox.get(j, []) if origin in graph]
                    requests[j] = Record({"cclp/alive": np.array(graph, dtype=np.int64), "cclp/sizes": sizes})
                    put_messages(requests[j], SLOT_LWE_IN, delivered)
                    received[j] += sum(frame_size(m) for m in delivered)
                _forward_links({j: reply(result, j) for j in graph}, requests)
                seconds += time.thread_time() - begin
                result, graph = exchange(step, requests, graph)
                begin = time.thread_time()
                collect_shares(result, graph)
                inbox = hints if step == LWE[1] else {}
                if step == LWE[0]:
                    for j in graph:
                        for message in take_messages(reply(result, j), SLOT_LWE_OUT):
                            if message.sender != j or message.receiver != SERVER:
                                raise ProtocolError(f"client {members[j]} sent an LWE broadcast as party "
                                                    f"{message.sender}")
                            sent[j] += frame_size(message)
                            target = inbox if message.tag.startswith("lwe/C/") else hints
                            for forward in lwe_hops.relay(in_session, message):
                                target.setdefault(forward.receiver, []).append((j, forward))
            seconds += time.thread_time() - begin
        else:
            for step in SHADE:
                begin = time.thread_time()
                requests = {j: Record({"cclp/alive": np.array(graph, dtype=np.int64), "cclp/sizes": sizes})
                            for j in graph}
                _forward_links({j: reply(result, j) for j in graph}, requests)
                seconds += time.thread_time() - begin
                result, graph = exchange(step, requests, graph)
                collect_shares(result, graph)
        if not graph:
            raise DropoutError("every client dropped out before SecureHamming")
        begin = time.thread_time()
        matrix = _assemble(graph, sizes, own, shares, L,
                           prefix="lwe" if hamming_backend in ("lwe", "rlwe") else "shade")
    else:
        shares_up = np.stack([np.asarray(reply(result, j).arrays["cclp/share"]) for j in live]) \
            if live else np.zeros((0, 16), np.uint8)
        result, graph = exchange(SHARES, {j: Record({"cclp/shares": shares_up}) for j in live}, live)
        if not graph:
            raise DropoutError("every client dropped out before SecureHamming")
        begin = time.thread_time()
        codes = check_codes([reply(result, j).arrays["cclp/codes"] for j in graph])
        for j, block in zip(graph, codes):
            if block.shape != (sizes[j], L):
                raise ProtocolError(f"client {members[j]}: codes must have shape ({sizes[j]}, {L})")
        matrix = hamming_matrix(pack_codes(np.concatenate(codes, axis=0)))

    server = CrossClientLPServer(k=int(k), alpha=float(alpha), L=int(L), num_classes=int(num_classes))
    server.receive_hamming(matrix, list(graph), [int(sizes[j]) for j in graph])
    seconds += time.thread_time() - begin

    result, in_sum = exchange(COLUMNS, {j: Record() for j in graph}, graph)
    if not in_sum:
        raise DropoutError("every client dropped out before SecureSum")
    requests_columns = [message_from(result, j, SLOT_COLUMNS) for j in in_sum]
    for message in requests_columns:
        if message.tag != TAG_COLUMNS:
            raise ProtocolError(f"client {members[message.sender]}: expected {TAG_COLUMNS!r}")
    begin = time.thread_time()
    columns = server.serve_columns(requests_columns)
    threshold = len(in_sum) // 2 + 1
    dim = int(sum(sizes[j] for j in in_sum)) * int(num_classes)
    config = secure_sum_steps.new_config([members[j] for j in in_sum], threshold=threshold, dim=dim) \
        if real else None
    requests = {}
    for message in columns:
        j = message.receiver
        request = to_client(Record(config={"cclp/sum/members": len(in_sum)}), SLOT_S_L, message)
        if real:
            request.config.update({"cclp/sum/index": in_sum.index(j), "cclp/sum/threshold": threshold,
                                   "cclp/sum/session": config.session, "cclp/sum/cohort": config.cohort})
        requests[j] = request
    seconds += time.thread_time() - begin
    result, answered = exchange(SUM, requests, in_sum)
    if real:
        outcome = secure_sum_steps.aggregate_steps(transport, {SUM_NAME: config},
                                                   [members[j] for j in in_sum], result,
                                                   timeout=timeout)
        exchanges.extend(outcome.exchanges)
        failed.update(outcome.failed)
        seconds += outcome.server_seconds
        summed = outcome.sums[SUM_NAME]
        position = {c: j for j, c in enumerate(members)}
        for client, count_sent in summed.bytes_sent.items():
            sent[position[client]] += int(count_sent)
        out_of_sum = {c for clients in summed.dropped.values() for c in clients} | set(outcome.failed)
        for round_name, clients in summed.dropped.items():
            if clients:
                dropped[f"{SUM}/{round_name}"] = list(clients)
        total = summed.total
        survivors = [position[c] for c in summed.survivors]
        receivers = [j for j in in_sum if members[j] not in out_of_sum]
    else:
        if len(answered) < threshold:
            raise DropoutError(f"{len(answered)} of {len(in_sum)} clients entered the sum, "
                               f"fewer than the threshold {threshold}")
        begin = time.thread_time()
        total = np.zeros(dim, dtype=np.uint64)
        for j in answered:
            vector = np.asarray(reply(result, j).arrays.get("cclp/input"))
            if vector.shape != (dim,) or vector.dtype != np.uint64:
                raise ProtocolError(f"client {members[j]}: sum input must be ({dim},) uint64")
            total += vector
            sent[j] += int(vector.nbytes)
        seconds += time.thread_time() - begin
        survivors = receivers = list(answered)
    begin = time.thread_time()
    rows = {}
    for message in server.forward_rows(total, survivors, receivers):
        received[message.receiver] += frame_size(message)
        rows[members[message.receiver]] = (np.asarray(message.arrays[0]), np.asarray(message.arrays[1]))
    mass = server.label_mass(survivors)
    offsets = dict(zip(graph, np.concatenate([[0], np.cumsum([sizes[j] for j in graph])])[:-1]))
    label_mass = {members[j]: mass[offsets[j]: offsets[j] + sizes[j]] for j in receivers}
    seconds += time.thread_time() - begin
    return CrossClientRound(
        rows=rows, graph=[members[j] for j in graph], in_sum=[members[j] for j in in_sum],
        survivors=[members[j] for j in survivors], dropped=dropped, failed=failed,
        bytes_sent={members[j]: b for j, b in sent.items()},
        bytes_received={members[j]: b for j, b in received.items()},
        server_seconds=seconds, exchanges=exchanges, label_mass=label_mass,
        labeled_positions={members[j]: server.requests[j] for j in in_sum})


def _agreed_backend(own: dict[int, Message], model: str) -> str:
    """The backend the clients resolved ``auto`` to, each by its own node's policy: the
    cost model's ``model``, or SHADE where a node's policy does not allow it (the tags of
    their own-code messages say which family).  The server never imposes its own choice;
    clients that disagree fail the round."""
    families = {message.tag.split("/")[0] for message in own.values()}
    if not families:
        return model
    if families == {"shade"}:
        return "shade"
    if families == {"lwe"} and model in ("lwe", "rlwe"):
        return model
    raise ProtocolError(f"clients resolved hamming_backend='auto' to {sorted(families)} "
                        f"where the cost model chose {model!r}")


def _forward_links(replies: dict[int, Record], requests: dict[int, Record]) -> None:
    """Move every sealed batch ``relay/to/<k>`` of party j's reply into party k's request
    as ``relay/from/<j>`` (:mod:`securefl.fl.links`; parties by index)."""
    for j, answer in replies.items():
        for name, blob in answer.arrays.items():
            if name.startswith(links.TO):
                peer = int(name[len(links.TO):])
                if peer in requests:
                    requests[peer].arrays[f"{links.FROM}{j}"] = blob


def _assemble(graph: list[int], sizes: np.ndarray, own: dict[int, Message],
              shares: dict[tuple[int, int], dict[int, Message]], length: int, *,
              prefix: str = "shade") -> np.ndarray:
    """H over ``graph``: the sum of the two shares of every pair's block, the own blocks
    on the diagonal (:func:`securefl.crypto.hamming.server_reconstruct` over a transport)."""
    offsets = np.concatenate([[0], np.cumsum([sizes[j] for j in graph])]).astype(np.int64)
    where = {j: i for i, j in enumerate(graph)}
    matrix = np.empty((offsets[-1], offsets[-1]), dtype=np.int32)

    def block(message: Message, tag: str, shape: tuple[int, int]) -> np.ndarray:
        if message.tag != tag or len(message.arrays) != 1 or message.arrays[0].shape != shape \
                or message.arrays[0].dtype != np.uint16:
            raise ProtocolError(f"{tag} from party {message.sender}: expected one {shape} uint16 array")
        return message.arrays[0]

    for a in graph:
        for b in graph:
            if b <= a:
                continue
            tag, shape = f"{prefix}/share/{a}-{b}", (int(sizes[a]), int(sizes[b]))
            pair = shares.get((a, b), {})
            if a not in pair or b not in pair:
                raise ProtocolError(f"{prefix.upper()} pair {a}-{b}: a share is missing")
            total = (block(pair[a], tag, shape) + block(pair[b], tag, shape)).astype(np.int32)
            ia, ib = where[a], where[b]
            matrix[offsets[ia]: offsets[ia + 1], offsets[ib]: offsets[ib + 1]] = total
            matrix[offsets[ib]: offsets[ib + 1], offsets[ia]: offsets[ia + 1]] = total.T
    for j in graph:
        i = where[j]
        matrix[offsets[i]: offsets[i + 1], offsets[i]: offsets[i + 1]] = block(
            own[j], f"{prefix}/own/{j}", (int(sizes[j]), int(sizes[j])))
    if matrix.size and matrix.max() > length:
        raise ProtocolError(f"reconstructed distance {matrix.max()} exceeds L={length}: shares corrupted")
    return matrix
