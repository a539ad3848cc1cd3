"""Weighted averages of client vectors over a transport: FedAvg's ServerUpdate split into
what a client uploads (:func:`upload`) and what the server collects (:class:`UploadPlan`).

Each client k of a round's ``members`` uploads, for every named vector ``v`` of the
round (FedAvg: ``model``; FedAvg+MT: ``model`` and ``teacher``), the vector
``[w_k v_k, w_k]`` (``w_k``: its weight, |D_k| for FedAvg); the server learns, per name,

    average = (sum_k w_k v_k) / (sum_k w_k)      over the sum's survivors,

exactly as :func:`securefl.fl.aggregate` computes it in process, bit for bit:

* ``secure="real"`` with a deployable backend of :mod:`securefl.runtime.sum_backends`
  (``secagg``: the exchanges of :mod:`securefl.runtime.secure_sum_steps`): each name is one
  secure sum in fixed point (:class:`~securefl.crypto.FixedPoint`
  with the parties and defaults of :func:`securefl.runtime.secure_sum`, so the same
  encoding, the same ring total, the same decoded average).  Round 0 rides on the reply
  of the step that produced the vectors (:func:`upload` puts the advertise messages in
  it, :meth:`~securefl.runtime.sum_backends.SumBackend.contribute`);
  :meth:`UploadPlan.collect` runs the backend's remaining exchanges for all names at
  once (:meth:`~securefl.runtime.sum_backends.SumBackend.collect`).  The server learns each
  sum over the survivors and who dropped, nothing else.
* ``secure="plaintext"``: the placeholder.  Clients upload ``v_k`` and ``w_k`` in the
  clear (``upload/<name>`` arrays, ``upload/weight``) and the server sums them with the
  plaintext oracle (:func:`securefl.fl.aggregate`).  It protects nothing.
* ``secure="real"`` with a backend that runs no exchanges (``he``): simulated in process
  only.  No HE exchanges exist yet, so clients upload as in plaintext mode to the *simulator*, which runs the
  HE protocol with every party in its own process (:func:`securefl.fl.aggregate`,
  backend ``he``): the cost figures are the protocol's, the privacy is not a
  deployment's.  :meth:`UploadPlan.collect` refuses it on any transport other than
  :class:`~securefl.runtime.transport.InProcessTransport`.

**Who decides the mode.**  The client: :func:`upload` takes ``secure`` and
``sum_backend`` from the client's own configuration (the run's agreement), never from the
request.  A request of a real-mode secagg run that lacks the secure-sum parameters makes
the client raise :class:`~securefl.errors.ProtocolError`; no request makes it upload a
vector in the clear.

**Costs** (:class:`UploadOutcome`): ``protocol_bytes_per_client`` is
:class:`securefl.fl.AggregationReport`'s figure -- per name, a client's mean secure-sum
traffic (the frames it sent, :func:`securefl.crypto.channel.frame_size`) minus the
float32 payload ``4 (dim + 1)``; 0 in plaintext mode -- summed over names, so a method's
protocol bytes are the same on every transport.  ``crypto_seconds``: the clients'
secure-sum handler seconds (as they report them) plus the server's (real secagg), or the
in-process sum's wall time (plaintext, he).

**Dropouts.**  A member that does not answer the upload step is not in any sum
(``dropped["upload"]``); in real mode the secure sums' own semantics follow
(:mod:`securefl.runtime.secure_sum_steps`).  Fewer than ``threshold`` uploads:
:class:`~securefl.errors.DropoutError`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from securefl.crypto.fixed_point import FixedPoint
from securefl.crypto.identity import Credentials
from securefl.errors import DropoutError, InputError, ProtocolError
from securefl.runtime import secure_sum_steps, sum_backends
from securefl.runtime.costs import CRYPTO
from securefl.runtime.policy import PrivacyPolicy
from securefl.runtime.sum_backends import SumSpec
from securefl.runtime.transport import Exchange, InProcessTransport, Record, Transport

PLAIN = "upload/"
WEIGHT = "upload/weight"
MEMBERS = "upload/members"
INDEX = "upload/index"
THRESHOLD = "upload/threshold"
SESSION = "upload/session/"
COHORT = "upload/cohort"
MODES = ("real", "plaintext")


def check_mode(secure: str, sum_backend: str) -> sum_backends.SumBackend:
    """The backend of a ``secure`` mode and ``sum_backend`` (a secure backend of the
    registry); a bad value: InputError naming it."""
    if secure not in MODES:
        raise InputError("secure", secure, f"must be one of {MODES}")
    return sum_backends.get(sum_backend, parameter="sum_backend", secure=True)


def exchanged(secure: str, sum_backend: str) -> bool:
    """Whether the sums run as the backend's exchanges (real mode, a deployable backend)."""
    return secure == "real" and check_mode(secure, sum_backend).deployable


# ----------------------------------------------------------------------------- client


def upload(reply: Record, state: Record, request: Record, *, secure: str, sum_backend: str,
           vectors: Mapping[str, np.ndarray], weight: float,
           credentials: Credentials | None = None, policy: PrivacyPolicy | None = None) -> float:
    """Client side: put ``[weight * v, weight]`` of every named vector into ``reply`` as
    the client's configuration (``secure``, ``sum_backend``) requires; returns the seconds
    spent on cryptography (encoding and secure-sum round 0).  ``credentials`` (the node's
    own) sign the secure sums' keys and ``policy`` (the node's own) bounds the cohort and
    threshold the request may set; both required in real secagg mode."""
    backend = check_mode(secure, sum_backend)
    sum_backends.clear(state)
    w = np.float64(weight)
    if not exchanged(secure, sum_backend):
        for name, vector in vectors.items():
            reply.arrays[f"{PLAIN}{name}"] = np.asarray(vector, dtype=np.float64)
        reply.config[WEIGHT] = float(w)
        return 0.0
    start = time.perf_counter()
    try:
        members = int(request.config[MEMBERS])
        index = int(request.config[INDEX])
        threshold = int(request.config[THRESHOLD])
        sessions = {name: bytes(request.config[f"{SESSION}{name}"]) for name in vectors}
    except KeyError as missing:
        raise ProtocolError(f"a real-mode upload needs the secure-sum parameter {missing}") from None
    if credentials is None or policy is None:
        raise InputError("credentials", credentials,
                         "a real-mode upload needs the node's credentials and policy")
    policy.check_cohort(members, threshold)  # before anything is derived from the vectors
    cohort = secure_sum_steps.request_members(request, COHORT, members)
    encoding = FixedPoint(members)
    for name, vector in vectors.items():
        payload = np.append(np.asarray(vector, dtype=np.float64) * w, w)
        spec = SumSpec(sessions[name], members, threshold, payload.size, encoding.modulus_bits,
                       cohort)
        backend.contribute(state, reply, name=name, spec=spec, index=index,
                           encoded=encoding.encode(payload, name=name), credentials=credentials,
                           policy=policy)
    return time.perf_counter() - start


# ----------------------------------------------------------------------------- server


def refuse_simulated_backend(secure: str, sum_backend: str, transport: Transport) -> None:
    """A real sum whose backend runs no exchanges (``he``, simulated by the in-process
    transport) is refused on any other transport: a deployment would otherwise upload in the
    clear.  Shared by :class:`UploadPlan` and :class:`securefl.fl.group_sums.GroupSumPlan`."""
    if secure == "real" and not isinstance(transport, InProcessTransport):
        raise InputError("sum_backend", sum_backend,
                         "is simulated in process only; on a deployment use one of "
                         f"{tuple(n for n in sum_backends.names(secure=True) if sum_backends.get(n).deployable)}")


@dataclass
class UploadOutcome:
    """The averages of one upload, who took part, and what it cost (module docstring)."""

    averages: dict[str, np.ndarray]
    survivors: tuple[int, ...]
    dropped: dict[str, tuple[int, ...]]
    failed: dict[int, str]
    protocol_bytes_per_client: float
    crypto_seconds: float
    exchanges: list[Exchange] = field(default_factory=list)


@dataclass
class UploadPlan:
    """One round's upload: members (in secure-aggregation index order), threshold and, when
    the sums run as exchanges, one fresh :class:`~securefl.runtime.sum_backends.SumSpec` per name.
    Build with :meth:`new`."""

    secure: str
    sum_backend: str
    members: tuple[int, ...]
    dims: dict[str, int]
    threshold: int
    specs: dict[str, SumSpec] = field(default_factory=dict)

    @classmethod
    def new(cls, *, secure: str, sum_backend: str, members: Sequence[int],
            dims: Mapping[str, int], threshold: int | None = None) -> UploadPlan:
        """``dims``: name -> length of the vector (the sums carry one entry more, the
        weight); ``threshold``: default a majority of the members (as
        :func:`securefl.fl.aggregate`)."""
        backend = check_mode(secure, sum_backend)
        members = tuple(int(c) for c in members)
        if not members or len(set(members)) != len(members):
            raise InputError("members", members, "must be distinct clients, at least one")
        for name in dims:
            secure_sum_steps.slot_up(name)
        t = len(members) // 2 + 1 if threshold is None else int(threshold)
        plan = cls(secure, sum_backend, members, {str(k): int(v) for k, v in dims.items()}, t)
        if exchanged(secure, sum_backend):
            bits = FixedPoint(len(members)).modulus_bits
            plan.specs = {name: backend.new_spec(members, threshold=t, dim=dim + 1,
                                                 modulus_bits=bits)
                          for name, dim in plan.dims.items()}
        return plan

    def request(self, client: int, arrays: Mapping[str, np.ndarray] | None = None,
                config: Mapping[str, Any] | None = None) -> Record:
        """The upload step's request to ``client``: ``arrays`` and ``config`` plus, when the
        sums run as exchanges, their public parameters (the member list as an array)."""
        record = Record(dict(arrays or {}), dict(config or {}))
        if self.specs:
            record.config.update({MEMBERS: len(self.members), INDEX: self.members.index(int(client)),
                                  THRESHOLD: self.threshold})
            record.config.update({f"{SESSION}{name}": c.session for name, c in self.specs.items()})
            record.arrays[COHORT] = secure_sum_steps.packed_members(self.members)
        return record

    def collect(self, transport: Transport, first: Exchange, *,
                timeout: float | None = None) -> UploadOutcome:
        """The averages, from ``first`` (the upload step's exchange) and, when the sums run
        as exchanges, the backend's exchanges that follow."""
        if self.specs:
            return self._collect_masked(transport, first, timeout)
        refuse_simulated_backend(self.secure, self.sum_backend, transport)
        return self._collect_plain(first)

    def _collect_plain(self, first: Exchange) -> UploadOutcome:
        from securefl.fl.aggregation import aggregate

        survivors = tuple(c for c in self.members if c in first.replies)
        dropped = {"upload": tuple(c for c in self.members if c not in first.replies)}
        if len(survivors) < self.threshold:
            raise DropoutError(f"{len(survivors)} of {len(self.members)} clients uploaded, "
                               f"fewer than the threshold {self.threshold}")
        weights = [float(first.replies[c].config[WEIGHT]) for c in survivors]
        averages, protocol_bytes, seconds = {}, 0.0, 0.0
        for name, dim in self.dims.items():
            vectors = []
            for c in survivors:
                vector = np.asarray(first.replies[c].arrays.get(f"{PLAIN}{name}"))
                if vector.shape != (dim,):
                    raise ProtocolError(f"client {c}: upload {name!r} must have shape ({dim},)")
                vectors.append(vector)
            average, report = aggregate(vectors, weights, secure=self.secure,
                                        sum_backend=self.sum_backend)
            averages[name] = average
            protocol_bytes += report.protocol_bytes_per_client
            seconds += report.crypto_seconds
        return UploadOutcome(averages, survivors, dropped, dict(first.failed), protocol_bytes,
                             seconds)

    def _collect_masked(self, transport: Transport, first: Exchange,
                        timeout: float | None) -> UploadOutcome:
        backend = sum_backends.get(self.sum_backend)
        outcome = backend.collect(transport, self.specs, {name: self.members for name in self.specs},
                                  first, timeout=timeout)
        encoding = FixedPoint(len(self.members))
        averages, protocol_bytes = {}, 0.0
        survivors: set[int] | None = None
        for name, result in outcome.sums.items():
            total = encoding.decode(result.total)
            averages[name] = total[:-1] / float(total[-1])
            payload = 4.0 * (self.dims[name] + 1)
            sent = [result.bytes_sent.get(c, 0) for c in self.members]
            protocol_bytes += max(float(np.mean(sent)) - payload, 0.0)
            survivors = set(result.survivors) if survivors is None else survivors & set(result.survivors)
        crypto = outcome.server_seconds
        for exchange in (first, *outcome.exchanges):
            crypto += sum(float(r.config.get(CRYPTO, 0.0)) for r in exchange.replies.values())
        return UploadOutcome(averages, tuple(sorted(survivors or ())), outcome.dropped,
                             outcome.failed, protocol_bytes, crypto, list(outcome.exchanges))
