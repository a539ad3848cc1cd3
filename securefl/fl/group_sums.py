"""Weighted sums over groups of a round's clients, as exchanges: each named sum has members
of its own (FedSemi: the teachers of every client of the round, and each chosen layer's
student deltas among that layer's uploaders), all sums travel in the same exchanges.

Client ``k`` in sum ``name`` contributes ``[w_k v_k, w_k]``; the server learns, per name,

    total = sum_k w_k v_k,    weight = sum_k w_k        (k over the sum's survivors),

the raw sums (not the average: FedSemi divides a layer's delta sum by the *teacher's*
total weight), bit for bit what :func:`securefl.fl.secure_weighted_sum` returns in process
for the same inputs:

* ``secure="real"`` with a deployable backend of :mod:`securefl.runtime.sum_backends`
  (``secagg``: :mod:`securefl.runtime.secure_sum_steps`): each name is one secure sum among its
  own members, in the fixed point of
  :func:`securefl.runtime.secure_sum` for that many parties (the same encoding, ring total
  and decode).  Round 0 rides on the reply of the step that produced the vectors
  (:func:`contribute`); :meth:`GroupSumPlan.collect` runs the backend's remaining
  exchanges for every name at once (its
  :meth:`~securefl.runtime.sum_backends.SumBackend.collect` with one member list per sum).
* ``secure="plaintext"``: the placeholder.  Clients put ``v_k`` (``sums/<name>``) and
  ``w_k`` (``sums/weight``) in the clear; the server sums them with the plaintext oracle.
* ``secure="real"`` with a backend that runs no exchanges (``he``): simulated in process only, as
  :mod:`securefl.fl.uploads` (clients upload to the simulator, which runs the HE
  protocol); :meth:`GroupSumPlan.collect` refuses it on any other transport.

A plan with ``weighted=False`` sums the vectors themselves (no weight entry: ProtoFSSL's
global prototypes, whose inputs carry their own per-class weights), bit for bit
:func:`securefl.runtime.secure_sum` of those inputs.

Every request of the contributing step names the sums its client takes part in
(``sums/<name>/members``, ``/index``, ``/threshold`` and, in real secagg mode,
``/session`` and ``/cohort``, the digest of its members' ids that the keys' signatures
bind), in every mode, so that a client learns from the request which sums the
server asks of it (:func:`requested`) and can refuse one it did not agree to.  The client's
own configuration (``secure``, ``sum_backend``) decides how it contributes: a real-mode
client never sends a vector in the clear.

Costs (:class:`GroupSumOutcome`): per name the payload ``4 (dim + 1)`` (float32, as
:class:`securefl.fl.AggregationReport`) and the protocol overhead per member (mean frame
bytes a member sent minus the payload; 0 in plaintext mode); ``crypto_seconds`` the
clients' reported secure-sum seconds plus the server's (secagg), or the in-process sum's
time (plaintext, he).

Dropouts: a member that does not answer the contributing step is in none of its sums;
after that each sum follows secure aggregation (:mod:`securefl.runtime.secure_sum_steps`:
dropped before its masked input -> not in the sum; at unmask -> in it).  A sum left with
fewer than its threshold (a majority of its members) raises
:class:`~securefl.errors.DropoutError` for the whole call: no partial result.

Who learns what: the server learns each sum over its survivors, who is in which sum (it
chose the groups) and who dropped; never one client's vector (real secagg mode).
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from securefl.crypto.fixed_point import FixedPoint
from securefl.crypto.identity import Credentials
from securefl.errors import DropoutError, InputError, ProtocolError
from securefl.fl.uploads import check_mode, exchanged, refuse_simulated_backend
from securefl.runtime import secure_sum_steps, sum_backends
from securefl.runtime.costs import CRYPTO
from securefl.runtime.policy import PrivacyPolicy
from securefl.runtime.sum_backends import SumSpec
from securefl.runtime.transport import Exchange, Record, Transport

PREFIX = "sums/"
WEIGHT = "sums/weight"
_MEMBERS = re.compile(r"sums/([a-z0-9][a-z0-9_-]*)/members\Z")


def _key(name: str, field_name: str) -> str:
    return f"{PREFIX}{name}/{field_name}"


# ----------------------------------------------------------------------------- client


def requested(request: Record) -> dict[str, int]:
    """The sums ``request`` asks its client to join: name -> number of members."""
    return {m.group(1): int(value) for key, value in sorted(request.config.items())
            if (m := _MEMBERS.match(key))}


def contribute(reply: Record, state: Record, request: Record, *, secure: str, sum_backend: str,
               vectors: Mapping[str, np.ndarray], weight: float | None,
               credentials: Credentials | None = None, policy: PrivacyPolicy | None = None) -> float:
    """Client side: ``[weight * v, weight]`` of every named vector into ``reply`` as the
    client's configuration requires (module docstring); ``weight=None``: ``v`` itself (a
    plain sum, :class:`GroupSumPlan` with ``weighted=False``).  Returns the seconds spent
    on cryptography.  ``vectors`` must name exactly the sums the request asks for;
    ``credentials`` (the node's own) sign the secure sums' keys and ``policy`` (the node's
    own) bounds each sum's cohort and threshold (both required in real secagg mode)."""
    backend = check_mode(secure, sum_backend)
    asked = requested(request)
    if set(asked) != set(vectors):
        raise ProtocolError(f"the request asks for sums {sorted(asked)}, the client contributes "
                            f"{sorted(vectors)}")
    sum_backends.clear(state)
    w = None if weight is None else np.float64(weight)
    if not exchanged(secure, sum_backend):
        for name, vector in vectors.items():
            reply.arrays[f"{PREFIX}{name}"] = np.asarray(vector, dtype=np.float64)
        if w is not None:
            reply.config[WEIGHT] = float(w)
        return 0.0
    if credentials is None or policy is None:
        raise InputError("credentials", credentials, "a real-mode sum needs the node's credentials and policy")
    start = time.perf_counter()
    for name, vector in vectors.items():
        try:
            members = int(request.config[_key(name, "members")])
            index = int(request.config[_key(name, "index")])
            threshold = int(request.config[_key(name, "threshold")])
            session = bytes(request.config[_key(name, "session")])
        except KeyError as missing:
            raise ProtocolError(f"a real-mode sum needs the secure-sum parameter {missing}") from None
        policy.check_cohort(members, threshold)
        cohort = secure_sum_steps.request_members(request, _key(name, "cohort"), members)
        encoding = FixedPoint(members)
        payload = (np.asarray(vector, dtype=np.float64) if w is None else
                   np.append(np.asarray(vector, dtype=np.float64) * w, w))
        spec = SumSpec(session, members, threshold, payload.size, encoding.modulus_bits, cohort)
        backend.contribute(state, reply, name=name, spec=spec, index=index,
                           encoded=encoding.encode(payload, name=name), credentials=credentials,
                           policy=policy)
    return time.perf_counter() - start


# ----------------------------------------------------------------------------- server


@dataclass
class GroupSumOutcome:
    """Per name: ``totals`` (sum of ``w_k v_k``; of ``v_k`` in a plain sum), ``weights``
    (sum of ``w_k``; absent for a plain sum) and ``survivors``; who dropped, who failed,
    and the costs of the module docstring (``bytes_per_member``: the mean bytes a member
    sent in the sum, frames in real mode and the encoded vector in plaintext mode, as
    :func:`securefl.runtime.secure_sum` meters them)."""

    totals: dict[str, np.ndarray]
    weights: dict[str, float]
    survivors: dict[str, tuple[int, ...]]
    dropped: dict[str, tuple[int, ...]]
    failed: dict[int, str]
    payload_bytes: dict[str, float]
    protocol_bytes_per_member: dict[str, float]
    crypto_seconds: float
    exchanges: list[Exchange] = field(default_factory=list)
    bytes_per_member: dict[str, float] = field(default_factory=dict)


@dataclass
class GroupSumPlan:
    """One step's sums: per name its members (secure-aggregation index order), length and
    threshold (a majority of its members), and when the sums run as exchanges a fresh
    :class:`~securefl.runtime.sum_backends.SumSpec`; ``weighted=False``: plain sums of the members' vectors (no
    weight entry).  Build with :meth:`new`."""

    secure: str
    sum_backend: str
    groups: dict[str, tuple[int, ...]]
    dims: dict[str, int]
    thresholds: dict[str, int]
    specs: dict[str, SumSpec] = field(default_factory=dict)
    weighted: bool = True

    @classmethod
    def new(cls, *, secure: str, sum_backend: str, groups: Mapping[str, Sequence[int]],
            dims: Mapping[str, int], weighted: bool = True) -> GroupSumPlan:
        """``groups``: name -> its members; ``dims``: name -> length of its vector."""
        backend = check_mode(secure, sum_backend)
        if set(groups) != set(dims) or not groups:
            raise InputError("groups", sorted(groups), f"need one length per sum (dims {sorted(dims)})")
        members = {}
        for name, clients in groups.items():
            secure_sum_steps.slot_up(name)
            if not _MEMBERS.match(_key(name, "members")):
                raise InputError("groups", name, "a sum's name is lower-case letters, digits, '-', '_'")
            clients = tuple(int(c) for c in clients)
            if not clients or len(set(clients)) != len(clients):
                raise InputError("groups", {name: clients}, "a sum needs distinct members, at least one")
            members[str(name)] = clients
        thresholds = {name: len(clients) // 2 + 1 for name, clients in members.items()}
        plan = cls(secure, sum_backend, members, {str(k): int(v) for k, v in dims.items()}, thresholds,
                   weighted=bool(weighted))
        extra = 1 if plan.weighted else 0
        if exchanged(secure, sum_backend):
            plan.specs = {name: backend.new_spec(clients, threshold=thresholds[name],
                                                 dim=plan.dims[name] + extra,
                                                 modulus_bits=FixedPoint(len(clients)).modulus_bits)
                          for name, clients in members.items()}
        return plan

    def request(self, client: int, arrays: Mapping[str, np.ndarray] | None = None,
                config: Mapping[str, Any] | None = None) -> Record:
        """The contributing step's request to ``client``: ``arrays`` and ``config`` plus the
        parameters of every sum it is a member of (a sum's member list as an array)."""
        record = Record(dict(arrays or {}), dict(config or {}))
        for name, clients in self.groups.items():
            if int(client) not in clients:
                continue
            record.config[_key(name, "members")] = len(clients)
            record.config[_key(name, "index")] = clients.index(int(client))
            record.config[_key(name, "threshold")] = self.thresholds[name]
            if name in self.specs:
                record.config[_key(name, "session")] = self.specs[name].session
                record.arrays[_key(name, "cohort")] = secure_sum_steps.packed_members(clients)
        return record

    def collect(self, transport: Transport, first: Exchange, *,
                timeout: float | None = None) -> GroupSumOutcome:
        """The sums, from ``first`` (the contributing step's exchange) and, when the sums run
        as exchanges, the backend's exchanges that follow."""
        if self.specs:
            return self._collect_masked(transport, first, timeout)
        refuse_simulated_backend(self.secure, self.sum_backend, transport)
        return self._collect_plain(first)

    def _collect_plain(self, first: Exchange) -> GroupSumOutcome:
        from securefl.fl.aggregation import secure_backend, secure_weighted_sum
        from securefl.runtime.summation import secure_sum

        totals, weights, survivors, overhead, payload, sent = {}, {}, {}, {}, {}, {}
        seconds = 0.0
        for name, clients in self.groups.items():
            alive = tuple(c for c in clients if c in first.replies)
            if len(alive) < self.thresholds[name]:
                raise DropoutError(f"sum {name!r}: {len(alive)} of {len(clients)} members "
                                   f"contributed, fewer than the threshold {self.thresholds[name]}")
            vectors = []
            for c in alive:
                vector = np.asarray(first.replies[c].arrays.get(f"{PREFIX}{name}"))
                if vector.shape != (self.dims[name],):
                    raise ProtocolError(f"client {c}: sum {name!r} must have shape ({self.dims[name]},)")
                vectors.append(vector)
            survivors[name] = alive
            if not self.weighted:
                begin = time.perf_counter()
                result = secure_sum(vectors, threshold=len(alive) // 2 + 1,
                                    backend=secure_backend(self.secure, self.sum_backend))
                seconds += time.perf_counter() - begin
                totals[name] = np.asarray(result.total, dtype=np.float64)
                payload[name] = 4.0 * self.dims[name]
                sent[name] = float(np.mean([result.bytes_sent.get(i, 0) for i in range(len(alive))]))
                overhead[name] = max(sent[name] - payload[name], 0.0) if self.secure == "real" else 0.0
                continue
            sizes = [float(first.replies[c].config[WEIGHT]) for c in alive]
            total, weight, report = secure_weighted_sum(vectors, sizes, secure=self.secure,
                                                        sum_backend=self.sum_backend)
            totals[name], weights[name] = total, weight
            overhead[name] = report.protocol_bytes_per_client
            payload[name] = report.payload_bytes
            sent[name] = float(np.mean([report.bytes_sent.get(i, 0) for i in range(len(alive))]))
            seconds += report.crypto_seconds
        everyone = sorted({c for clients in self.groups.values() for c in clients})
        dropped = {"upload": tuple(c for c in everyone if c not in first.replies)}
        return GroupSumOutcome(totals, weights, survivors, dropped, dict(first.failed), payload,
                               overhead, seconds, bytes_per_member=sent)

    def _collect_masked(self, transport: Transport, first: Exchange,
                        timeout: float | None) -> GroupSumOutcome:
        outcome = sum_backends.get(self.sum_backend).collect(transport, self.specs, self.groups,
                                                             first, timeout=timeout)
        totals, weights, survivors, overhead, payload, sent = {}, {}, {}, {}, {}, {}
        extra = 1 if self.weighted else 0
        for name, result in outcome.sums.items():
            total = FixedPoint(len(self.groups[name])).decode(result.total)
            if self.weighted:
                totals[name], weights[name] = total[:-1], float(total[-1])
            else:
                totals[name] = total
            survivors[name] = tuple(result.survivors)
            payload[name] = 4.0 * (self.dims[name] + extra)
            sent[name] = float(np.mean([result.bytes_sent.get(c, 0) for c in self.groups[name]]))
            overhead[name] = max(sent[name] - payload[name], 0.0)
        crypto = outcome.server_seconds
        for exchange in (first, *outcome.exchanges):
            crypto += sum(float(r.config.get(CRYPTO, 0.0)) for r in exchange.replies.values())
        return GroupSumOutcome(totals, weights, survivors, outcome.dropped, outcome.failed,
                               payload, overhead, crypto, list(outcome.exchanges), sent)
