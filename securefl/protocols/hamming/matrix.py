"""The all-pairs secure Hamming matrix: SecureHamming driven on a transport, as deployed.

:func:`secure_hamming_matrix` runs the protocol of :mod:`securefl.protocols.hamming.client`
(the clients' hops) and :mod:`securefl.protocols.hamming.relay` (the server's relay and the
reconstruction of H) with the one driver (:func:`securefl.runtime.engine.drive`) on an
:class:`~securefl.runtime.transport.InProcessTransport`: one node per party holding its codes
(:class:`MatrixData`), the client half :class:`MatrixClient`.  The code it times is the code
CrossClientLP runs at its clients and server; only the two setup steps are this protocol's:

1. ``hamming/keys``: each party checks the member list and opens its links, keys derived
   from its node's identity and the members' roster entries
   (:func:`securefl.runtime.links.open_links`; nothing is sent for them);
2. ``hamming/open``: the live parties and block sizes; each party sends its own block and
   hop 0 of the backend (:func:`securefl.protocols.hamming.client.open_session`);

then the backend's hops (:data:`securefl.protocols.hamming.relay.HAMMING`).  Party ``j`` is
client ``identities[j]`` (default ``j``); its SHADE setups are kept by peer client id, so
``setups`` (:class:`~securefl.crypto.ot.OTSetups`) hand each party its own across calls (its
``federation`` is the transport session that binds them).  Who learns what is the protocol's:
the server learns exactly H.  Any failed client step raises
:class:`~securefl.errors.ProtocolError` naming it; ``wrap`` lets tests put a tampering
transport between the server and the clients.

The two-party sessions are the same protocol with two parties: :func:`shade_pair` (with
:func:`shade_one_vs_many`, :func:`shade_distance`) and :func:`lwe_pair` (with
:func:`lwe_one_vs_many`, :func:`lwe_distance`) return the two clients' shares, oriented
``(n_x, n_y)``; no second, pair-level driver exists.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
from threadpoolctl import threadpool_limits

from securefl.crypto import linalg, shade, shade_hops
from securefl.crypto.channel import SERVER
from securefl.crypto.hamming import BACKENDS, choose_backend, plaintext_hamming_matrix
from securefl.crypto.hamming_shares import HammingResult, check_codes, pair_roles
from securefl.crypto.lwe import check_exact_products, check_session
from securefl.crypto.ot import OTSetups, ReceiverSetup, SenderSetup
from securefl.crypto.rand import RandomSource, random_source
from securefl.errors import InputError, ProtocolError
from securefl.protocols.hamming.client import (
    LWE,
    OT_PREFIX,
    SHADE,
    Party,
    lwe_hop,
    open_session,
    shade_hop,
)
from securefl.protocols.hamming.relay import (
    HAMMING,
    HammingState,
    assemble,
    collect_own,
    timed_step,
)
from securefl.runtime import links
from securefl.runtime.engine import Handler, Step, StepTable, drive
from securefl.runtime.transport import Exchange, InProcessTransport, NodeContext, Record, Transport

KEYS = "hamming/keys"
OPEN = "hamming/open"
_PARTY = "cclp/hamming/"
"""Client-state prefix of the party's session (session-scoped, as every ``cclp/`` entry)."""
CPU = "hamming/cpu"
"""Reply config: the client's process CPU seconds on the step."""


@dataclass(frozen=True)
class MatrixData:
    """What a :class:`MatrixClient` node holds: its ``(n, L)`` 0/1 codes, the source of its
    cryptographic randomness, the torch device of its LWE products and the backend it is
    configured to run (its own choice, checked against its policy; never the server's)."""

    codes: np.ndarray
    rng: RandomSource
    device: str = "cpu"
    backend: str = "shade"


def _party(state: Record, node: NodeContext) -> Party:
    """The client's party for this step (its randomness a fresh child of the node's per step)."""
    config = state.config
    if f"{_PARTY}index" not in config:
        raise ProtocolError(f"client {node.partition}: a Hamming step before {KEYS}")
    step = int(config.get(f"{_PARTY}steps", 0))
    config[f"{_PARTY}steps"] = step + 1
    return Party(int(config[f"{_PARTY}index"]), node.data.codes,
                 tuple(int(m) for m in state.arrays[f"{_PARTY}members"]),
                 bytes(config[f"{_PARTY}session"]), str(config[f"{_PARTY}backend"]),
                 node.data.rng.child(f"step{step}"), node.data.device)


def _timed(work: Callable[[Record, Record, NodeContext, Record], None]) -> Handler:
    def handler(request: Record, state: Record, node: NodeContext) -> Record:
        reply = Record()
        start = time.process_time()
        work(request, state, node, reply)
        reply.config[CPU] = time.process_time() - start
        return reply
    return handler


def _keys(request: Record, state: Record, node: NodeContext, reply: Record) -> None:
    for table in (state.arrays, state.config):
        for key in [k for k in table if k.startswith(("cclp/", "links/"))]:
            del table[key]
    index, session = int(request.config["hamming/party"]), bytes(request.config["hamming/session"])
    members = np.asarray(request.arrays["hamming/members"], dtype=np.int64)
    if not 0 <= index < len(members) or int(members[index]) != int(node.partition):
        raise ProtocolError(f"client {node.partition}: not party {index} of {members.tolist()}")
    backend = node.policy().hamming_backend(node.data.backend, (), 0)
    if request.config.get("hamming/backend") != backend:
        raise ProtocolError(f"client {node.partition}: the server asks for backend "
                            f"{request.config.get('hamming/backend')!r}, this node runs {backend!r}")
    state.config.update({f"{_PARTY}index": index, f"{_PARTY}session": session,
                         f"{_PARTY}backend": backend})
    state.arrays[f"{_PARTY}members"] = members
    reply.config["hamming/points"] = int(node.data.codes.shape[0])
    links.open_links(state, node.credentials(), me=index, members=members.tolist(),
                     label=f"hamming/{session.hex()}")


def _open(request: Record, state: Record, node: NodeContext, reply: Record) -> None:
    party = _party(state, node)
    open_session(party, request, state, reply, node)


def _hop(run: Callable, hop: int, with_node: bool) -> Handler:
    def work(request: Record, state: Record, node: NodeContext, reply: Record) -> None:
        args = (node,) if with_node else ()
        run(hop, _party(state, node), request, state, reply, *args)
    return _timed(work)


class MatrixClient(StepTable):
    """A party of the all-pairs matrix: the setup steps, then SecureHamming's hops exactly as
    CrossClientLP's clients run them (:mod:`securefl.protocols.hamming.client`)."""

    program = "hamming"
    handlers: ClassVar[Mapping[str, Handler]] = {
        KEYS: _timed(_keys),
        OPEN: _timed(_open),
        **{step: _hop(shade_hop, min(hop, 3), False) for hop, step in enumerate(SHADE, 1)},
        **{step: _hop(lwe_hop, hop, True) for hop, step in enumerate(LWE, 1)},
    }


@dataclass
class MatrixState(HammingState):
    """The server's state of one matrix session (:class:`HammingState` plus the code length,
    the backend, SHADE's ``chunk_bytes``, the round session, the clients' CPU seconds and
    the progress callback)."""

    L: int = 0
    backend: str = "shade"
    chunk_bytes: int = shade_hops.DEFAULT_CHUNK_BYTES
    session: bytes = field(default_factory=lambda: secrets.token_bytes(8))
    progress: Callable[[int], None] | None = None
    cpu: dict[int, float] = field(default_factory=dict, init=False)


def _require_all(exchange: Exchange) -> None:
    """Any client that failed or did not answer ``exchange`` ends the session."""
    if exchange.failed or exchange.dropped:
        raise ProtocolError(f"Hamming matrix: at {exchange.step} clients failed: "
                            f"{dict(exchange.failed)}, dropped: {list(exchange.dropped)}")


def _add_cpu(state: MatrixState) -> None:
    """Add each live client's reported CPU seconds of the step just collected."""
    for j in state.live:
        state.cpu[j] = state.cpu.get(j, 0.0) + float(state.reply(j).config.get(CPU, 0.0))


def _absorb(state: MatrixState, exchange: Exchange) -> None:
    """Absorb a setup ``exchange`` that every client answered."""
    _require_all(exchange)
    state.absorb(exchange)
    _add_cpu(state)


def _sized(state: MatrixState, exchange: Exchange) -> None:
    _absorb(state, exchange)
    for j in state.live:
        state.sizes[j] = int(state.reply(j).config["hamming/points"])


def _advertise(state: MatrixState) -> dict[int, Record]:
    members = np.array(state.members, dtype=np.int64)
    return state.addressed({j: Record({"hamming/members": members},
                                      {"hamming/party": j, "hamming/session": state.session,
                                       "hamming/backend": state.backend}) for j in state.live})


def _install(state: MatrixState) -> dict[int, Record]:
    return state.addressed({j: state.layout() for j in state.live})


def _opened(state: MatrixState, exchange: Exchange) -> None:
    _absorb(state, exchange)
    collect_own(state)


def _checked(step: Step[HammingState], progress: Callable[[MatrixState, Exchange], int]) -> Step[MatrixState]:
    """A relay step whose exchange must be complete, reporting the work it finished."""
    def collect(state: MatrixState, exchange: Exchange) -> None:
        _require_all(exchange)
        step.collect(state, exchange)
        _add_cpu(state)
        if state.progress is not None:
            state.progress(progress(state, exchange))
    return Step(step.name, step.requests, collect)


def _shade_work(state: MatrixState) -> Callable[[MatrixState, Exchange], int]:
    """OTs finished per SHADE exchange: each stream exchange's share of all pairs' OTs."""
    total = total_ots([int(n) for n in state.sizes], state.L)
    streams = max((len(shade_hops.schedule(int(state.sizes[a]), int(state.sizes[b]), state.L,
                                           state.chunk_bytes)) + 1
                   for a in state.live for b in state.live if a != b), default=1)
    done = {"exchanges": 0}

    def work(_state: MatrixState, exchange: Exchange) -> int:
        if exchange.step in SHADE[:2]:
            return 0
        done["exchanges"] += 1
        before = total * (done["exchanges"] - 1) // streams
        return total * done["exchanges"] // streams - before
    return work


def _lwe_work(state: MatrixState, exchange: Exchange) -> int:
    """Broadcasts (hop 1) and answers (hop 2) the parties sent (:func:`securefl.crypto.lwe.progress_total`)."""
    if exchange.step == LWE[0]:
        return sum(int(state.reply(j).config.get("cclp/lwe/out/n", 0)) for j in state.live)
    if exchange.step == LWE[1]:
        return len(_roles(len(state.members)))
    return 0


def _roles(parties: int) -> list[tuple[int, int]]:
    """``(active, passive)`` of every pair of ``parties`` (OT sender or encryptor first)."""
    return [pair_roles(a, b) for a in range(parties) for b in range(a + 1, parties)]


def total_ots(sizes: Sequence[int], length: int) -> int:
    """SHADE's OTs over all pairs: ``n_receiver * L`` each."""
    return sum(int(sizes[r]) * length for _, r in _roles(len(sizes)))


def matrix_steps(state: MatrixState) -> Iterator[Step[MatrixState]]:
    """The server's steps: the setup, then the backend's relay."""
    yield timed_step(KEYS, _advertise, _sized)
    yield timed_step(OPEN, _install, _opened)
    relay = HAMMING[state.backend]
    work = _shade_work(state) if relay.prefix == "shade" else _lwe_work
    for step in relay.steps(state):
        yield _checked(step, work)


def _prg_bytes(sizes: Sequence[int], length: int) -> int:
    """AES output bytes of all pairs' SHADE sessions (:func:`securefl.crypto.shade.prg_bytes`)."""
    total = 0
    for sender, receiver in _roles(len(sizes)):
        for _, start, stop in shade.chunks(int(sizes[receiver]), length):
            total += shade.prg_bytes((stop - start) * length, int(sizes[sender]))
    return total


def _check_workers(workers: int) -> int:
    """``workers`` as an int, or :class:`~securefl.errors.InputError` naming it."""
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1:
        raise InputError("workers", workers, "must be a positive integer")
    return int(workers)


def _adopt_setups(transport: InProcessTransport, setups: OTSetups, identities: Sequence[int]) -> None:
    """Each party's IKNP setups from ``setups`` into its client's state."""
    states = {}
    for me in identities:
        arrays = {}
        for (peer, role), setup in setups.held.get(me, {}).items():
            arrays.update({f"{OT_PREFIX}{peer}/{role}/{k}": v for k, v in setup.to_arrays().items()})
        states[me] = Record(arrays)
    transport.adopt(states)


def _keep_setups(transport: InProcessTransport, setups: OTSetups, identities: Sequence[int]) -> None:
    """Each party's IKNP setups, as its client now holds them, back into ``setups``."""
    for me in identities:
        found: dict[tuple[int, str], dict[str, np.ndarray]] = {}
        for key, value in transport.states[me].arrays.items():
            if key.startswith(OT_PREFIX):
                peer, role, name = key[len(OT_PREFIX):].split("/", 2)
                found.setdefault((int(peer), role), {})[name] = value
        for (peer, role), arrays in found.items():
            setups.keep(me, peer, (SenderSetup if role == "sender" else ReceiverSetup).from_arrays(arrays))


def _run(parties: list[np.ndarray], *, backend: str, rng: RandomSource, workers: int,
         wrap: Callable[[Transport], Transport] | None = None,
         progress: Callable[[int], None] | None = None, setups: OTSetups | None = None,
         identities: Sequence[int] | None = None, device: str = "cpu",
         chunk_bytes: int = shade_hops.DEFAULT_CHUNK_BYTES) -> MatrixState:
    """One session of ``backend`` among checked ``parties``, driven to its end; the server's
    state (shares and own blocks collected, nothing reconstructed yet)."""
    sizes = [p.shape[0] for p in parties]
    length = parties[0].shape[1]
    ring = backend == "rlwe"
    if backend != "shade":
        check_session(sizes, length, ring=ring)
        linalg.resolve_device(device)
    ids = [int(i) for i in identities] if identities is not None else list(range(len(parties)))
    nodes = [NodeContext(ids[j], {}, {}, MatrixData(parties[j], rng.child(f"party{j}"), device,
                                                    backend))
             for j in range(len(parties))]
    federation = setups.federation if setups is not None else rng.child("federation").bytes(16)
    transport = InProcessTransport(MatrixClient(), nodes, session=federation)
    if setups is not None:
        _adopt_setups(transport, setups, ids)
    state = MatrixState(ids, L=length, backend=backend, chunk_bytes=chunk_bytes,
                        session=rng.child("session").bytes(8), progress=progress)
    with threadpool_limits(limits=workers, user_api="blas"), linalg.torch_threads(workers):
        if backend != "shade" and len(parties) > 1:
            check_exact_products(ring=ring, device=device)
        drive(wrap(transport) if wrap is not None else transport, matrix_steps(state), state)
    if setups is not None:
        _keep_setups(transport, setups, ids)
    return state


def secure_hamming_matrix(
    codes: Sequence[np.ndarray],
    *,
    backend: str = "shade",
    seed: bytes | int | None = None,
    workers: int = 1,
    wrap: Callable[[Transport], Transport] | None = None,
    progress: Callable[[int], None] | None = None,
    setups: OTSetups | None = None,
    identities: Sequence[int] | None = None,
    device: str = "cpu",
    chunk_bytes: int = shade_hops.DEFAULT_CHUNK_BYTES,
) -> HammingResult:
    """The N x N Hamming matrix of all parties' codes, as the FedProp server receives it.

    ``codes`` is a sequence of per-party ``(n_j, L)`` 0/1 arrays (bool or integer dtype,
    ``L < 2^16``).  ``backend`` is ``"shade"`` (SHADE over OT), ``"lwe"`` (LWE encryption,
    linear communication), ``"rlwe"`` (the same with a ring-structured public matrix) or
    ``"plaintext"`` (no cryptography); all return the identical matrix; ``"auto"`` runs
    :func:`~securefl.crypto.hamming.choose_backend`'s pick for these point counts and ``L``
    (the result names it; ``setups`` serve only if it picks SHADE).  The secure backends run
    the deployed protocol on an in-process transport (module docstring).  ``seed`` fixes the
    parties' protocol randomness (their link and signing keys are fresh); ``None`` draws it
    from the OS CSPRNG.  ``workers`` threads run the LWE backends' products; SHADE runs each
    client's hops on one thread, as a deployed client does (its work per pair is one batch
    per exchange), so it takes ``workers=1`` only (``"auto"`` ignores ``workers`` if it picks
    SHADE).  ``wrap(transport)``
    returns the transport the server drives (tests: observe or tamper with the Records; any
    tampering raises :class:`~securefl.errors.ProtocolError`).  ``progress(k)`` is called as
    work completes (SHADE: OTs; LWE: :func:`securefl.crypto.lwe.progress_total`).  ``setups``
    (SHADE only) keeps every pair's IKNP setup from one call to the next (base OTs once per
    pair and direction); ``identities`` names the parties (stable ids, default ``0 .. P-1``),
    so a party keeps its setups when its position changes.  ``device`` is the torch device of
    the LWE backends' products (``"cpu"``, ``"cuda"``, ``"cuda:<k>"``); the other backends run
    on the CPU only.  ``chunk_bytes`` bounds a SHADE pair's bytes per message and peer.
    """
    requested = backend
    if backend == "auto":
        parties = check_codes(codes)
        backend = choose_backend([p.shape[0] for p in parties], parties[0].shape[1])
    if backend not in BACKENDS:
        raise InputError("backend", backend, f"must be 'auto' or one of {BACKENDS}")
    if device != "cpu" and backend not in ("lwe", "rlwe"):
        raise InputError("device", device, f"backend {backend!r} runs on the CPU only (device='cpu')")
    if setups is not None and backend != "shade":
        if requested != "auto":
            raise InputError("setups", setups, f"only the shade backend keeps OT setups, not {backend!r}")
        setups = None
    if identities is not None:
        identities = list(identities)
        if len(identities) != len(codes) or len(set(identities)) != len(identities) or not all(
            isinstance(i, (int, np.integer)) and not isinstance(i, bool) and i >= 0 for i in identities
        ):
            raise InputError("identities", identities, f"must be {len(codes)} distinct non-negative "
                                                       "integers, one per party")
    workers = _check_workers(workers)
    if backend == "shade":
        if workers != 1 and requested != "auto":
            raise InputError("workers", workers, "SHADE runs each client's hops on one thread, as "
                                                 "deployed: only 1 (threads are the LWE backends')")
        workers = 1
    chunk_bytes = shade_hops.check_chunk_bytes(chunk_bytes)
    if backend == "plaintext":
        return plaintext_hamming_matrix(codes)
    parties = check_codes(codes)
    begin = time.perf_counter()
    state = _run(parties, backend=backend, rng=random_source(seed), workers=workers, wrap=wrap,
                 progress=progress, setups=setups, identities=identities, device=device,
                 chunk_bytes=chunk_bytes)
    sizes = [p.shape[0] for p in parties]
    length = parties[0].shape[1]
    matrix = state.clock.run(lambda: assemble(state.live, state.sizes, state.own, state.shares,
                                              length, prefix=HAMMING[backend].prefix))
    cpu = {**state.cpu, SERVER: state.clock.cpu}
    return HammingResult(
        matrix=matrix,
        bytes_sent={**state.sent, SERVER: state.relayed},
        bytes_received={**state.received, SERVER: state.collected},
        backend=backend,
        seconds=time.perf_counter() - begin,
        ots=total_ots(sizes, length) if backend == "shade" else 0,
        prg_bytes=_prg_bytes(sizes, length) if backend == "shade" else 0,
        offsets=tuple(np.cumsum([0, *sizes])[:-1].tolist()),
        cpu_seconds_by_party=cpu if backend != "shade" else {},
        bytes_by_message=dict(state.kinds) if backend != "shade" else {},
        setup_seconds=state.setup_seconds if backend == "shade" else 0.0,
        pair_seconds=dict(state.pair_seconds) if backend == "shade" else {},
        fresh_setups=state.fresh_setups,
        cpu_seconds_by_phase={"fixed": state.phase_seconds.get("fixed", 0.0),
                              "per_pair": state.phase_seconds.get("per_pair", 0.0)}
        if backend != "shade" else {},
    )


def _client_id(name: str, value: int) -> int:
    """A client id (a non-negative int), or :class:`~securefl.errors.InputError` naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise InputError(name, value, "must be a non-negative int (a client id)")
    return int(value)


def _pair_session(x: np.ndarray, y: np.ndarray, backend: str, ids: tuple[str, int, str, int],
                  **run: object) -> tuple[np.ndarray, np.ndarray]:
    """The two-party session of ``backend`` between the client ``ids[1]`` that holds ``x``
    (the OT sender or encryptor, named ``ids[0]``) and the client ``ids[3]`` that holds ``y``
    (named ``ids[2]``): the shares of the active and the passive party, each ``(n_x, n_y)``."""
    x, y = check_codes([x, y])
    active_id, passive_id = _client_id(ids[0], ids[1]), _client_id(ids[2], ids[3])
    if active_id == passive_id:
        raise InputError(ids[2], passive_id, f"must differ from {ids[0]}={active_id}")
    active, passive = pair_roles(0, 1)
    parties, clients = [y, y], [0, 0]
    parties[active], clients[active], clients[passive] = x, active_id, passive_id
    state = _run(parties, backend=backend, identities=clients, **run)
    pair = state.shares.get((0, 1), {})
    if active not in pair or passive not in pair:
        raise ProtocolError(f"{backend} pair: a share is missing")

    def oriented(j: int) -> np.ndarray:
        share = np.asarray(pair[j].arrays[0])
        return np.ascontiguousarray(share if active == 0 else share.T)

    return oriented(active), oriented(passive)


def shade_pair(
    x: np.ndarray,
    y: np.ndarray,
    *,
    sender: int = 0,
    receiver: int = 1,
    seed: bytes | int | None = None,
    setups: OTSetups | None = None,
    chunk_bytes: int = shade_hops.DEFAULT_CHUNK_BYTES,
    wrap: Callable[[Transport], Transport] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """SHADE between clients ``sender`` (the OT sender, holds ``x``, ``(n_a, L)``) and
    ``receiver`` (holds ``y``, ``(n_b, L)``): the two-party session of
    :func:`secure_hamming_matrix` (the same hops, the server relaying), returning the
    sender's and the receiver's ``(n_a, n_b)`` uint16 shares, whose sum mod 2^16 is
    ``HD(x_i, y_j)``.  ``seed`` fixes the parties' protocol randomness, ``setups`` keeps the
    pair's IKNP setup across calls (base OTs on the first only), ``chunk_bytes`` bounds the
    pair's SHADE bytes per message, ``wrap`` puts a transport between the server and the
    clients (tests: what each party receives)."""
    return _pair_session(x, y, "shade", ("sender", sender, "receiver", receiver),
                         rng=random_source(seed), workers=1, wrap=wrap, setups=setups,
                         chunk_bytes=shade_hops.check_chunk_bytes(chunk_bytes))


def _one_vs_many(pair: Callable[..., tuple[np.ndarray, np.ndarray]], many: np.ndarray,
                 one: np.ndarray, **run: object) -> tuple[np.ndarray, np.ndarray]:
    """``pair`` of ``many`` against the single code ``one``: the two ``(n,)`` share vectors."""
    one = np.asarray(one)
    if one.ndim != 1:
        raise InputError("one", one, "must be a single (L,) code")
    active, passive = pair(many, one[None, :], **run)
    return active[:, 0], passive[:, 0]


def _distance(one_vs_many: Callable[..., tuple[np.ndarray, np.ndarray]], x: np.ndarray,
              y: np.ndarray, seed: bytes | int | None) -> tuple[int, int]:
    """``one_vs_many`` for one pair of ``(L,)`` codes: the two shares of ``HD(x, y)``."""
    x = np.asarray(x)
    if x.ndim != 1:
        raise InputError("x", x, "must be a single (L,) code")
    active, passive = one_vs_many(x[None, :], y, seed=seed)
    return int(active[0]), int(passive[0])


def shade_one_vs_many(many: np.ndarray, one: np.ndarray, *, seed: bytes | int | None = None,
                      wrap: Callable[[Transport], Transport] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """SHADE of one code ``one`` (``(L,)``, the OT receiver's) against ``many`` (``(n, L)``, the
    sender's): ``L`` OTs whatever ``n`` (GSHADE batching); the sender's and the receiver's
    ``(n,)`` uint16 shares of ``HD(many[i], one)``."""
    return _one_vs_many(shade_pair, many, one, seed=seed, wrap=wrap)


def shade_distance(x: np.ndarray, y: np.ndarray, *, seed: bytes | int | None = None) -> tuple[int, int]:
    """SHADE for one pair of ``(L,)`` codes: the two parties' shares of ``HD(x, y)`` mod 2^16."""
    return _distance(shade_one_vs_many, x, y, seed)


def lwe_pair(
    x: np.ndarray,
    y: np.ndarray,
    *,
    encryptor: int = 0,
    evaluator: int = 1,
    seed: bytes | int | None = None,
    workers: int = 1,
    ring: bool = False,
    device: str = "cpu",
    wrap: Callable[[Transport], Transport] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """LWE between clients ``encryptor`` (holds ``x``, ``(n_a, L)``) and ``evaluator`` (holds
    ``y``, ``(n_b, L)``): the two-party session of :func:`secure_hamming_matrix` (the same
    steps, the server relaying), returning the encryptor's and the evaluator's ``(n_a, n_b)``
    uint16 shares, whose sum mod 2^16 is ``HD(x_i, y_j)``.  ``ring`` selects the
    ring-structured ``M`` (:mod:`securefl.crypto.rlwe`), ``device`` the torch device of the
    products, ``seed`` the parties' randomness, ``wrap`` a transport between the server and
    the clients (tests: what each party receives)."""
    return _pair_session(x, y, "rlwe" if ring else "lwe",
                         ("encryptor", encryptor, "evaluator", evaluator), rng=random_source(seed),
                         workers=_check_workers(workers), wrap=wrap, device=device)


def lwe_one_vs_many(many: np.ndarray, one: np.ndarray, *, seed: bytes | int | None = None,
                    wrap: Callable[[Transport], Transport] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """LWE of one code ``one`` (``(L,)``, the evaluator's) against ``many`` (``(n, L)``, encrypted):
    the encryptor's and the evaluator's ``(n,)`` uint16 shares of ``HD(many[i], one)``."""
    return _one_vs_many(lwe_pair, many, one, seed=seed, wrap=wrap)


def lwe_distance(x: np.ndarray, y: np.ndarray, *, seed: bytes | int | None = None) -> tuple[int, int]:
    """LWE for one pair of ``(L,)`` codes: the two parties' shares of ``HD(x, y)`` mod 2^16."""
    return _distance(lwe_one_vs_many, x, y, seed)
