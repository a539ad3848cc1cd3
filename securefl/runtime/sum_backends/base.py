"""The secure-sum backend interface (:class:`SumBackend`) and the in-process simulator
of a deployable backend; the registry is :mod:`securefl.runtime.sum_backends`."""

from __future__ import annotations

import time
from abc import ABC
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np

from securefl.crypto.channel import SERVER
from securefl.crypto.identity import CREDENTIALS, Credentials
from securefl.crypto.secagg import SurvivorPlan
from securefl.errors import InputError, ProtocolError
from securefl.runtime.engine import StepTable
from securefl.runtime.policy import PrivacyPolicy
from securefl.runtime.secure_sum_steps import SumResult, merged_dropped
from securefl.runtime.state_codec import load, save
from securefl.runtime.transport import Exchange, InProcessTransport, NodeContext, Record, Transport

CONTRIBUTE = "sum/contribute"
"""The simulator's step that produces each client's vector (round 0 rides on its reply)."""
SPEC = "sum/spec/"
SEED = "sum-seed"
"""Simulator node config: the seed of the node's reproducible protocol randomness."""
AUTHENTICATED = "sum-authenticated"
"""Simulator node config: whether the node signs its keys (``credentials[u]``, whose roster
id must be ``u``) or runs the unauthenticated semi-honest variant."""


@dataclass(frozen=True)
class SumSpec:
    """Public parameters of one secure sum, as each of its members receives them:
    a fresh 16-byte ``session``, the number of ``members``, the ``threshold``, the ring
    vector's ``dim`` and ``modulus_bits``, the ``cohort``: the members' roster ids in index
    order (empty: the unauthenticated semi-honest variant, simulator only) and
    the SecAgg+ ``neighbours`` (``None``: complete graph)."""

    session: bytes
    members: int
    threshold: int
    dim: int
    modulus_bits: int
    cohort: tuple[int, ...] = ()
    neighbours: int | None = None


@dataclass(frozen=True)
class SimulatedSum:
    """One in-process run: the ring ``total`` over ``survivors``, the protocol bytes each
    party sent and received (``SERVER`` included), the server's wall and CPU seconds and
    each client's (round handlers), and backend-specific figures in ``extra``."""

    total: np.ndarray
    survivors: tuple[int, ...]
    bytes_sent: dict[int, int]
    bytes_received: dict[int, int]
    server_seconds: float
    server_cpu_seconds: float
    client_seconds: np.ndarray
    client_cpu_seconds: np.ndarray
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class SumOutcome:
    """What :meth:`SumBackend.collect` returns: per sum name a :class:`SumResult` (ring
    ``total``, ``survivors``, ``dropped`` per round, bytes); who failed, the server's CPU
    seconds of this thread, its wall and process-CPU seconds, and the exchanges run."""

    sums: dict[str, SumResult]
    failed: dict[int, str]
    server_seconds: float
    server_wall_seconds: float = 0.0
    server_cpu_seconds: float = 0.0
    exchanges: list[Exchange] = field(default_factory=list)

    @property
    def dropped(self) -> dict[str, tuple[int, ...]]:
        """Who dropped at which round, over all sums (a client dropping from any)."""
        return merged_dropped(self.sums)


class SumBackend(ABC):
    """A secure-sum backend (module docstring).  Class attributes:

    ``name``; ``secure`` (False only for the plaintext oracle); ``deployable`` (it runs as
    transport exchanges; otherwise simulated in process only); ``neighbours`` (it has a
    SecAgg+ graph); ``max_clients``; ``needs_unmaskers`` (it stops when fewer than
    ``threshold`` clients answer its last round, as pairwise masking does; ``he`` does
    not); ``client_steps`` (the steps its client answers after round 0);
    ``round_steps`` (the step at which a client of the simulator drops at each protocol
    round of :data:`~securefl.crypto.secagg.ROUNDS`; a drop at a round past the last
    changes nothing: the client has sent all it sends)."""

    name: ClassVar[str]
    secure: ClassVar[bool] = True
    deployable: ClassVar[bool] = True
    neighbours: ClassVar[bool] = False
    max_clients: ClassVar[int | None] = None
    needs_unmaskers: ClassVar[bool] = True
    client_steps: ClassVar[tuple[str, ...]] = ()
    round_steps: ClassVar[tuple[str, ...]] = (CONTRIBUTE,)

    # ------------------------------------------------------------------ client side

    def contribute(self, state: Record, reply: Record, *, name: str, spec: SumSpec, index: int,
                   encoded: np.ndarray, credentials: Credentials | None, policy: PrivacyPolicy,
                   seed: bytes | None = None) -> None:
        """Client ``index``'s round 0 of sum ``name``: its message for ``encoded`` (ring
        vector of ``spec``) into ``reply``, what it must remember into ``state``."""
        raise InputError("backend", self.name, "runs no exchanges (simulated in process only)")

    def answer(self, request: Record, state: Record, reply: Record, *,
               credentials: Credentials | None, seed: bytes | None = None) -> None:
        """Answer one of :attr:`client_steps` for every sum ``request`` carries."""
        raise ProtocolError(f"secure-sum backend {self.name!r} has no steps after round 0")

    def clear(self, state: Record) -> None:
        """Forget every sum of this backend in progress in ``state``."""

    # ------------------------------------------------------------------ server side

    def new_spec(self, members: Sequence[int], *, threshold: int, dim: int,
                 modulus_bits: int) -> SumSpec:
        """A fresh :class:`SumSpec` for a sum among ``members`` (roster ids, index order)."""
        raise InputError("backend", self.name, "runs no exchanges (simulated in process only)")

    def collect(self, transport: Transport, specs: Mapping[str, SumSpec],
                members: Mapping[str, Sequence[int]], first: Exchange, *,
                timeout: float | None = None) -> SumOutcome:
        """Every sum of ``specs`` after ``first`` (whose replies hold their round 0)."""
        raise InputError("backend", self.name, "runs no exchanges (simulated in process only)")

    # ------------------------------------------------------------------ simulator

    def simulate(self, encoded: Sequence[np.ndarray], *, plan: SurvivorPlan, modulus_bits: int,
                 session: bytes, seed: bytes | None = None,
                 credentials: Sequence[Credentials] | None = None) -> SimulatedSum:
        """All parties in this process (module docstring): ``encoded[u]`` is client u's
        ring vector, ``plan`` who drops at which round, ``credentials`` one per client
        (``None``: unauthenticated), ``seed`` the reproducible randomness."""
        return _simulate(self, encoded, plan=plan, modulus_bits=modulus_bits, session=session,
                         seed=seed, credentials=credentials)


# ----------------------------------------------------------------------------- simulator


class _SimulatedClient(StepTable):
    """A simulator node: contributes its data (an encoded vector) to the sum the request
    names and answers the backend's later steps, timing each handler (wall and process CPU)
    into :attr:`clock` and keeping its exception in :attr:`errors` (in-process metadata
    only; the parties exchange nothing but Records)."""

    program = "secure-sum"

    def __init__(self, backend: SumBackend, clients: int) -> None:
        self.backend = backend
        self.clock = np.zeros((clients, 2))
        self.errors: dict[int, Exception] = {}
        self.handlers = {CONTRIBUTE: self._contribute,
                         **{step: self._answer for step in backend.client_steps}}

    def _timed(self, node: NodeContext, work) -> Record:
        begin = np.array([time.perf_counter(), time.process_time()])
        try:
            return work()
        except Exception as exc:
            self.errors[node.partition] = exc
            raise
        finally:
            now = np.array([time.perf_counter(), time.process_time()])
            self.clock[node.partition] += now - begin

    def _contribute(self, request: Record, state: Record, node: NodeContext) -> Record:
        def work() -> Record:
            reply = Record()
            self.backend.contribute(state, reply, name="sum", spec=load(SumSpec, request, SPEC),
                                    index=node.partition, encoded=node.data,
                                    credentials=_credentials(node), policy=node.policy(),
                                    seed=node.node_config.get(SEED))
            return reply
        return self._timed(node, work)

    def _answer(self, request: Record, state: Record, node: NodeContext) -> Record:
        def work() -> Record:
            reply = Record()
            self.backend.answer(request, state, reply, credentials=_credentials(node),
                                seed=node.node_config.get(SEED))
            return reply
        return self._timed(node, work)


def _credentials(node: NodeContext) -> Credentials | None:
    return node.credentials() if node.node_config.get(AUTHENTICATED) else None


class _AbortingTransport(InProcessTransport):
    """The simulator's transport: a client's error aborts the sum with that exception."""

    def _exchange(self, step: str, requests: dict[int, Record], timeout: float | None) -> Exchange:
        result = super()._exchange(step, requests, timeout)
        if result.failed:
            raise self.half.errors[min(result.failed)]
        return result


def _simulate(backend: SumBackend, encoded: Sequence[np.ndarray], *, plan: SurvivorPlan,
              modulus_bits: int, session: bytes, seed: bytes | None,
              credentials: Sequence[Credentials] | None) -> SimulatedSum:
    n = len(encoded)
    if plan.n != n:
        raise InputError("plan", plan, f"is for {plan.n} clients, got {n} inputs")
    if credentials is not None and len(credentials) != n:
        raise InputError("credentials", len(credentials), f"need one per client ({n})")
    if plan.neighbours is not None and not backend.neighbours:
        raise InputError("neighbours", plan.neighbours,
                         f"the {backend.name} backend has no neighbour graph")
    dim = int(np.asarray(encoded[0]).size)
    spec = replace(backend.new_spec(range(n), threshold=plan.threshold, dim=dim,
                                    modulus_bits=modulus_bits),
                   session=session, neighbours=plan.neighbours)
    if credentials is None:
        spec = replace(spec, cohort=())
    half = _SimulatedClient(backend, n)
    nodes = [NodeContext(u, {AUTHENTICATED: credentials is not None,
                             **({} if credentials is None else {CREDENTIALS: credentials[u]}),
                             **({} if seed is None else {SEED: seed})}, {}, np.asarray(encoded[u]))
             for u in range(n)]
    dropouts = {u: backend.round_steps[r] for u, r in enumerate(plan.drop_round)
                if r < len(backend.round_steps)}
    transport = _AbortingTransport(half, nodes, dropouts=dropouts)
    request = Record()
    save(spec, request, SPEC)
    first = transport.exchange(CONTRIBUTE, {u: request for u in range(n)})
    outcome = backend.collect(transport, {"sum": spec}, {"sum": range(n)}, first)
    result = outcome.sums["sum"]
    received = {SERVER: result.bytes_received.get(SERVER, 0),
                **{u: result.bytes_received.get(u, 0) for u in range(n)}}
    sent = {party: size for party, size in ((SERVER, result.server_bytes_sent),
                                            *((u, result.bytes_sent.get(u, 0)) for u in range(n)))
            if size}  # the parties that sent anything, as a metered network lists them
    return SimulatedSum(result.total, tuple(result.survivors), sent, received,
                        outcome.server_wall_seconds, outcome.server_cpu_seconds,
                        half.clock[:, 0].copy(), half.clock[:, 1].copy())
