"""``secure_sum``: sum per-client vectors without the server seeing any single one.

    secure_sum(inputs, *, threshold, backend="secagg", seed=None, dropouts=None,
               scale=None, clip=None, modulus_bits=None, neighbours=None) -> SecureSumResult

``backend`` names a secure-sum backend of the registry :mod:`securefl.runtime.sum_backends`
(:func:`securefl.runtime.sum_backends.names`), whose
:meth:`~securefl.runtime.sum_backends.SumBackend.simulate` runs every client and the server in this process.  ``backend="secagg"`` runs the
four-round protocol of Bonawitz et al. 2017 (:mod:`securefl.crypto.secagg`) as a
deployment runs it: the exchanges of :mod:`securefl.runtime.secure_sum_steps` driven by
:func:`securefl.runtime.engine.drive` on an :class:`~securefl.runtime.transport.InProcessTransport`
(each client's party saved into and rebuilt from its state Record between rounds).
``backend="he"`` adds BFV ciphertexts under a key the clients share and the server lacks
(:mod:`securefl.crypto.he`; another trust model: one client colluding with the server
reads every input).  ``backend="plaintext"`` is their oracle: the same fixed-point
encoding (:mod:`securefl.crypto.fixed_point`), the same dropout semantics and the same
sum in Z_(2^k), without masks.  For the same arguments every registered backend returns a
**bit-identical** total or raises the same error (class and parameter): each
validates in one order (arguments, every input's encoding, then the dropout pattern),
and a property test runs them all on degenerate inputs (zero-length vectors, which sum
to an empty total, one client, threshold edges, integer and float dtypes).  Dropouts:
``he`` raises only when fewer than ``threshold`` inputs arrive or no client is left to
deal or decrypt, so it also finishes where the others stop after round 2.

Inputs: a sequence of n 1-D arrays of equal length, all real (float) or all integer.
Reals are encoded with scale ``scale`` (a power of two, default 2^32), clipped to
``[-clip, clip]`` if ``clip`` is given and otherwise checked against the overflow-safe
bound; integers are summed mod 2^k (two's complement if any input dtype is signed).
``modulus_bits`` is k (default 64).

Dropouts: a mapping ``{client: round}`` or a sequence of four collections (clients
dropping at each round).  A round is an index or name from :data:`ROUNDS`:

- ``0`` / ``"advertise"``: the client never sends its public keys (not in the sum);
- ``1`` / ``"share"``: it sends keys but not its key shares (not in the sum);
- ``2`` / ``"masked_input"``: it sent shares but not its masked input (not in the
  sum; the server recovers its pairwise masks from the others' shares);
- ``3`` / ``"unmask"``: it sent its masked input but not its unmasking shares (its
  input **is** in the sum).

If fewer than ``threshold`` clients remain at any round (more than n - t dropouts),
or, with ``neighbours=k`` (SecAgg+ sparse graph), some client's neighbourhood keeps
fewer shares than its per-neighbourhood threshold or the graph induced on the survivors
is not connected (its parts' sums would be revealed), :class:`DropoutError` is raised
and no partial result is returned.

``authenticated`` (default): the clients hold identities of a throwaway roster
(:func:`securefl.crypto.identity.new_federation`) and sign their ephemeral keys (and, with
``secagg``, the survivor list in the consistency round), exactly the protocol a deployment
runs (and meters the same bytes); ``False`` runs the
unauthenticated semi-honest variant (for cost comparisons only: a server that swaps keys
reads every input).

``seed`` (int or bytes) makes the protocol's key pairs, masks and nonces deterministic
(for reproducible tests); ``None`` draws them from the OS CSPRNG.  The total never
depends on it.

``threshold`` t must satisfy n/2 < t <= n (:class:`~securefl.errors.InputError`
otherwise, in every backend; ``threshold=1`` is accepted only for a single client).

Who learns what (backend ``"secagg"``; details and proofs in
:mod:`securefl.crypto.secagg`): the server learns the sum of the surviving clients'
encoded inputs and which clients dropped.  With the complete graph
(``neighbours=None``) a coalition of fewer than ``threshold`` clients together with the
semi-honest server learns nothing else about an honest client's input, and a server
that sends inconsistent survivor lists cannot unmask any single input (it may learn the
sum of fewer than t survivors).  With ``neighbours=k`` (SecAgg+, a fixed public graph)
only the server alone is covered: t' = ceil(t (k+1) / n) colluding neighbours of a
client recover its input (:func:`securefl.crypto.secagg.collusion_tolerance` is 0).
``backend="plaintext"`` protects nothing; it is the oracle.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from securefl.crypto.channel import SERVER
from securefl.crypto.fixed_point import DEFAULT_MODULUS_BITS, DEFAULT_SCALE, FixedPoint
from securefl.crypto.identity import new_federation
from securefl.crypto.secagg import ROUNDS, party_rng, plan_survivors
from securefl.errors import InputError
from securefl.runtime import sum_backends


@dataclass(frozen=True)
class SecureSumReport:
    """Costs of one secure sum.  Seconds are spent in the server's round handlers and in
    each client's (encoding and round handlers; mean and max over clients), as wall
    time and as CPU time of this thread (the fair measure on a shared machine)."""

    backend: str
    clients: int
    dim: int
    threshold: int
    neighbours: int | None
    dropped: dict[str, tuple[int, ...]]
    bytes_total: int
    bytes_per_client: float
    bytes_max_client: int
    server_seconds: float
    client_seconds_mean: float
    client_seconds_max: float
    server_cpu_seconds: float
    client_cpu_seconds_mean: float
    error_bound: float


@dataclass(frozen=True)
class SecureSumResult:
    """``total``: float64 (real inputs) or int64/uint64 (integer inputs) sum over
    ``survivors``; ``bytes_sent``: party -> bytes (server is ``SERVER == -1``)."""

    total: np.ndarray
    survivors: tuple[int, ...]
    bytes_sent: dict[int, int]
    report: SecureSumReport
    encoding: FixedPoint = field(repr=False)


def _check_inputs(inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    if isinstance(inputs, np.ndarray) and inputs.ndim == 2:
        arrays = list(inputs)
    elif isinstance(inputs, (str, bytes)) or not isinstance(inputs, Sequence):
        raise InputError("inputs", inputs, "must be a sequence of 1-D arrays")
    else:
        arrays = [np.asarray(x) for x in inputs]
    if not arrays:
        raise InputError("inputs", inputs, "need at least one client")
    for i, x in enumerate(arrays):
        if x.ndim != 1:
            raise InputError(f"inputs[{i}]", x, "must be 1-D")
        if x.shape != arrays[0].shape:
            raise InputError(f"inputs[{i}]", x, f"length {x.size} != length {arrays[0].size} of inputs[0]")
        if x.dtype.kind not in "fiu":
            raise InputError(f"inputs[{i}]", x, "must be float or integer")
    kinds = {"f" if x.dtype.kind == "f" else "i" for x in arrays}
    if len(kinds) > 1:
        raise InputError("inputs", [x.dtype.name for x in arrays], "must be all float or all integer")
    return arrays


def make_encoding(
    inputs: Sequence[np.ndarray],
    *,
    scale: float | None = None,
    clip: float | None = None,
    modulus_bits: int | None = None,
) -> FixedPoint:
    """The :class:`FixedPoint` that :func:`secure_sum` uses for ``inputs``."""
    arrays = _check_inputs(inputs)
    bits = DEFAULT_MODULUS_BITS if modulus_bits is None else modulus_bits
    if arrays[0].dtype.kind in "iu":
        if scale is not None or clip is not None:
            raise InputError("scale", scale if scale is not None else clip, "integer inputs take no scale or clip")
        signed = any(x.dtype.kind == "i" for x in arrays)
        return FixedPoint(len(arrays), bits, 1.0, None, integer=True, signed=signed)
    return FixedPoint(len(arrays), bits, DEFAULT_SCALE if scale is None else float(scale), clip)


def secure_sum(
    inputs: Sequence[np.ndarray],
    *,
    threshold: int,
    backend: str = "secagg",
    seed: int | bytes | None = None,
    dropouts: Mapping[int, int | str] | Sequence[Sequence[int]] | None = None,
    scale: float | None = None,
    clip: float | None = None,
    modulus_bits: int | None = None,
    neighbours: int | None = None,
    authenticated: bool = True,
) -> SecureSumResult:
    """Sum ``inputs`` over the surviving clients; see the module docstring for every
    keyword.  Raises :class:`InputError` on bad arguments and :class:`DropoutError`
    when more than n - threshold clients drop."""
    if not isinstance(authenticated, bool):
        raise InputError("authenticated", authenticated, "must be True or False")
    arrays = _check_inputs(inputs)
    n, dim = len(arrays), arrays[0].size
    sum_backend = sum_backends.get(backend)
    encoding = make_encoding(arrays, scale=scale, clip=clip, modulus_bits=modulus_bits)
    # Every backend validates in one order (arguments, then every input's encoding, then
    # the dropout pattern), so they raise the same error on the same call.  The plaintext
    # oracle checks the dropout pattern itself; the protocol's own parties detect it (and
    # raise the same DropoutError) in a secure backend.
    plan = plan_survivors(n, threshold, dropouts, neighbours, check=False)
    client_seconds, client_cpu = np.zeros(n), np.zeros(n)
    encoded = []
    for i, x in enumerate(arrays):
        start, start_cpu = time.perf_counter(), time.thread_time()
        encoded.append(encoding.encode(x, name=f"inputs[{i}]"))
        client_seconds[i] += time.perf_counter() - start
        client_cpu[i] += time.thread_time() - start_cpu
    raw_seed = None if seed is None else seed if isinstance(seed, bytes) else str(int(seed)).encode()
    credentials = new_federation("secure-sum", n)[1] if authenticated and sum_backend.secure else None
    outcome = sum_backend.simulate(encoded, plan=plan, modulus_bits=encoding.modulus_bits,
                                   session=party_rng(raw_seed, SERVER - 1)(16), seed=raw_seed,
                                   credentials=credentials)
    ring_total = outcome.total
    server_seconds, server_cpu = outcome.server_seconds, outcome.server_cpu_seconds
    client_seconds += outcome.client_seconds
    client_cpu += outcome.client_cpu_seconds
    bytes_sent = outcome.bytes_sent
    total = encoding.decode(ring_total)
    abs_sum = float(sum(np.abs(arrays[i]).astype(np.float64).sum() for i in plan.summed)) if not encoding.integer else 0.0
    client_bytes = [bytes_sent.get(i, 0) for i in range(n)]
    report = SecureSumReport(
        backend=backend,
        clients=n,
        dim=dim,
        threshold=threshold,
        neighbours=neighbours,
        dropped={name: tuple(plan.dropped_at(r)) for r, name in enumerate(ROUNDS)},
        bytes_total=int(sum(bytes_sent.values())),
        bytes_per_client=float(np.mean(client_bytes)),
        bytes_max_client=int(max(client_bytes)),
        server_seconds=server_seconds,
        client_seconds_mean=float(client_seconds.mean()),
        client_seconds_max=float(client_seconds.max()),
        server_cpu_seconds=float(server_cpu),
        client_cpu_seconds_mean=float(client_cpu.mean()),
        error_bound=float(encoding.error_bound(len(plan.summed), abs_sum)),
    )
    return SecureSumResult(total, tuple(plan.summed), bytes_sent, report, encoding)
