"""Secure aggregation of N clients' D-entry vectors, with dropouts: pairwise masks or HE.

All clients and the server run in this process: the backend's simulator
(:meth:`securefl.runtime.sum_backends.SumBackend.simulate`; for ``secagg`` the exchanges a
deployment runs, driven on the in-process transport, each client's party saved into and
rebuilt from its state between rounds), so the figures are the deployed code path's.  Inputs are
random ``--input-bits``-bit integers summed in Z_(2^modulus_bits); a fraction
``--dropout`` of the clients (chosen at random) drops at ``--drop-round`` (default
``masked_input``: after sharing keys, before sending the input, which is the worst case
for pairwise masking: the server must rebuild every dropped client's masks).
``--backend`` names a secure backend of the registry (:mod:`securefl.runtime.sum_backends`):
``secagg`` runs Bonawitz et al.'s protocol (:mod:`securefl.crypto.secagg`), ``he`` BFV
homomorphic aggregation (:mod:`securefl.crypto.he`); the same inputs, encoding and
dropouts, verified against the plaintext sum.

Reported: wall seconds of the secure and plaintext sums, the server's own seconds and
the per-client seconds (round handlers only, transport excluded) as wall time and as
process CPU time (the project machine is shared by several jobs, so wall time includes
waiting for a core); bytes sent and received per client (mean, median, max) and by the
server; for ``he`` the dealer's and the decryptor's CPU seconds and bytes and the bytes
of the key distribution; and, for the 500 x 100K workload of the paper, the speed-up of
our server over the figures Bonawitz et al. report for their single-threaded Java server
(2 s, 62 s and 143 s at 0 %, 10 % and 30 % dropout; 0.85 s per client).  The load
average before and after the run is recorded: compare backends by ratios of runs taken
back to back.  ``--authenticated`` (default) runs the protocol a deployment runs: every
client binds its ephemeral keys to its roster identity (``secagg``: a pair-key tag for each
peer; ``he``: signatures, on its ciphertexts too) and checks the others'
(:mod:`securefl.crypto.identity`); ``--no-authenticated`` the semi-honest variant, whose
cost the authenticated one is compared with.  A node derives its pair keys once (its warm
executor, before any message); the bench does so before the timed round and reports that
CPU apart (``pair_key_cpu_seconds_per_client``), or, with ``--cold-pair-keys``, inside the
round (a federation's first round on a node without a warm executor).
"""

from __future__ import annotations

import argparse
import math
import os
import secrets
import time

import numpy as np
from rich.progress import Progress

from securefl.crypto.channel import SERVER
from securefl.crypto.identity import new_federation
from securefl.crypto.secagg import ROUNDS, plan_survivors
from securefl.errors import DropoutError, InputError
from securefl.runtime import sum_backends
from securefl.runtime.summation import make_encoding, secure_sum

ANCHOR = {
    "source": "Bonawitz et al. 2017, CCS, Sec. 7 (single-threaded Java): 500 clients x 100K entries",
    "client_seconds": 0.85,
    "server_seconds": {"0.0": 2.0, "0.1": 62.0, "0.3": 143.0},
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """CLI options of ``securefl bench secagg``."""
    parser.add_argument("--backend", default="secagg",
                        help=f"secure sum: {' | '.join(sum_backends.names(secure=True))}")
    parser.add_argument("--clients", type=int, default=100, help="number of clients N")
    parser.add_argument("--dim", type=int, default=10_000, help="entries per client vector D")
    parser.add_argument("--dropout", type=float, default=0.0, help="fraction of clients that drop")
    parser.add_argument(
        "--threshold", type=int, default=None, help="Shamir threshold t (default ceil(2N/3))"
    )
    parser.add_argument(
        "--neighbours",
        type=int,
        default=None,
        help="SecAgg+ neighbours k (default: complete graph)",
    )
    parser.add_argument("--modulus-bits", type=int, default=32, help="ring Z_(2^k) (default 32)")
    parser.add_argument(
        "--input-bits", type=int, default=16, help="bits per input entry (default 16)"
    )
    parser.add_argument(
        "--drop-round", choices=ROUNDS, default="masked_input", help="round the dropouts skip"
    )
    parser.add_argument("--seed", type=int, default=0, help="simulation seed (inputs, who drops)")
    parser.add_argument("--authenticated", action=argparse.BooleanOptionalAction, default=True,
                        help="clients bind their keys to roster identities and check each "
                             "other's (a deployment's protocol; default); --no-authenticated: "
                             "the semi-honest variant, for comparison")
    parser.add_argument("--cold-pair-keys", action="store_true",
                        help="derive the clients' pair keys inside the timed round (a "
                             "federation's first round on a node without a warm executor)")


def _threshold(args: argparse.Namespace) -> int:
    return args.threshold if args.threshold is not None else math.ceil(2 * args.clients / 3)


def _dropped(args: argparse.Namespace) -> int:
    return int(math.floor(args.dropout * args.clients))


def validate(args: argparse.Namespace) -> None:
    """Check every flag before any work; a bad one raises :class:`InputError` naming it."""
    backend = sum_backends.get(args.backend, parameter="--backend", secure=True)
    top = backend.max_clients
    if args.clients < 1 or (top is not None and args.clients > top):
        raise InputError(
            "--clients", args.clients, f"must be in 1..{top}" if top else "must be >= 1"
        )
    if args.dim < 1:
        raise InputError("--dim", args.dim, "must be >= 1")
    if not 0.0 <= args.dropout < 1.0:
        raise InputError("--dropout", args.dropout, "must be in [0, 1)")
    if not 1 <= args.modulus_bits <= 64:
        raise InputError("--modulus-bits", args.modulus_bits, "must be in 1..64")
    if not 1 <= args.input_bits <= args.modulus_bits:
        raise InputError(
            "--input-bits", args.input_bits, f"must be in 1..{args.modulus_bits} (--modulus-bits)"
        )
    if args.neighbours is not None and not backend.neighbours:
        raise InputError(
            "--neighbours", args.neighbours, f"--backend {args.backend} has no neighbour graph"
        )
    threshold = _threshold(args)
    try:
        plan_survivors(args.clients, threshold, None, args.neighbours, check=False)
    except InputError as exc:  # the protocol's own rules on t and k, named as flags
        raise InputError(f"--{exc.parameter}", exc.value, exc.problem) from None
    dropped = _dropped(args)
    summed_drops = backend.needs_unmaskers or ROUNDS.index(args.drop_round) < ROUNDS.index(
        "unmask"
    )
    if summed_drops and args.clients - dropped < threshold:
        raise InputError(
            "--dropout",
            args.dropout,
            f"drops {dropped} of {args.clients} clients; threshold {threshold} tolerates at most "
            f"{args.clients - threshold}",
        )


def run(args: argparse.Namespace, progress: Progress | None) -> dict:
    """Run the chosen secure sum and the plaintext sum, verify them, return the JSON record."""
    validate(args)
    backend = sum_backends.get(args.backend)
    n, dim, k = args.clients, args.dim, args.modulus_bits
    threshold = _threshold(args)
    rng = np.random.default_rng(args.seed)
    dropped = sorted(int(u) for u in rng.choice(n, size=_dropped(args), replace=False))
    dropouts = {u: args.drop_round for u in dropped}
    plan = plan_survivors(n, threshold, dropouts, args.neighbours, check=backend.needs_unmaskers)
    input_dtype = (
        np.uint16 if args.input_bits <= 16 else np.uint32 if args.input_bits <= 32 else np.uint64
    )
    inputs = [
        rng.integers(0, 1 << args.input_bits, size=dim, dtype=np.uint64).astype(input_dtype)
        for _ in range(n)
    ]

    task = (
        progress.add_task(f"{args.backend} {n} x {dim}", total=2) if progress is not None else None
    )
    load_before = os.getloadavg()
    start = time.perf_counter()
    encoding = make_encoding(inputs, modulus_bits=k)
    encoded = [encoding.encode(x) for x in inputs]
    # long-term identities, and (unless --cold-pair-keys) the pair keys a node derives once
    # (its warm executor, securefl.fl.flower.node), exist before any round: outside the timing
    begin_keys = time.perf_counter()
    credentials = new_federation("bench", n)[1] if args.authenticated else None
    pair_cpu = 0.0
    if credentials is not None and not args.cold_pair_keys:
        begin_pairs = time.process_time()
        for held in credentials:
            held.derive_pair_keys()
        pair_cpu = (time.process_time() - begin_pairs) / n
    start += time.perf_counter() - begin_keys
    outcome = backend.simulate(encoded, plan=plan, modulus_bits=k, session=secrets.token_bytes(16),
                               credentials=credentials)
    seconds = time.perf_counter() - start
    if progress is not None:
        progress.advance(task)
    start = time.perf_counter()
    plain = (
        secure_sum(
            inputs,
            threshold=threshold,
            backend="plaintext",
            dropouts=dropouts,
            modulus_bits=k,
            neighbours=args.neighbours,
        )
        if _plain_ok(plan)
        else None  # he also finishes where the oracle's rule stops
    )
    plaintext_seconds = time.perf_counter() - start
    if progress is not None:
        progress.advance(task)
    load_after = os.getloadavg()

    reference = np.zeros(dim, dtype=np.uint64)
    for u in plan.summed:
        reference += inputs[u]
    reference &= np.uint64((1 << k) - 1)
    total = encoding.decode(outcome.total)
    verified = bool(
        np.array_equal(total.astype(np.uint64), reference)
        and outcome.survivors == plan.summed
        and (plain is None or np.array_equal(total, plain.total))
    )
    record = {
        "backend": args.backend,
        "authenticated": bool(args.authenticated),
        "pair_keys": ("derived in the round" if args.cold_pair_keys or not args.authenticated
                      else "derived before the round (once per node)"),
        "pair_key_cpu_seconds_per_client": pair_cpu,
        "clients": n,
        "dim": dim,
        "dropout": args.dropout,
        "drop_round": args.drop_round,
        "threshold": threshold,
        "neighbours": args.neighbours,
        "modulus_bits": k,
        "input_bits": args.input_bits,
        "seconds": seconds,
        "plaintext_seconds": plaintext_seconds,
        **_costs(outcome, n, dim, args.input_bits),
        "survived": len(outcome.survivors),
        "dropped": len(dropped),
        "verified": verified,
        "load_average_before": load_before,
        "load_average_after": load_after,
    }
    record.update(outcome.extra)
    key = f"{args.dropout:.1f}"
    if n == 500 and dim == 100_000 and key in ANCHOR["server_seconds"] and args.neighbours is None:
        anchor_server = ANCHOR["server_seconds"][key]
        record["anchor"] = {
            "source": ANCHOR["source"],
            "server_seconds": anchor_server,
            "client_seconds": ANCHOR["client_seconds"],
        }
        record["server_speedup_vs_anchor"] = anchor_server / record["server_seconds"]
        record["server_cpu_speedup_vs_anchor"] = anchor_server / record["server_cpu_seconds"]
        record["client_speedup_vs_anchor"] = (
            ANCHOR["client_seconds"] / record["client_seconds_mean"]
        )
    return record


def _plain_ok(plan) -> bool:
    """Whether the plaintext oracle's stricter dropout rule (every round keeps t) holds."""
    try:
        plan.check()
    except DropoutError:
        return False
    return True


def _costs(outcome: sum_backends.SimulatedSum, n: int, dim: int, input_bits: int) -> dict:
    """Seconds, CPU seconds and bytes per party of one protocol run."""
    sent = np.array([outcome.bytes_sent.get(u, 0) for u in range(n)], dtype=np.float64)
    received = np.array([outcome.bytes_received.get(u, 0) for u in range(n)], dtype=np.float64)
    return {
        "server_seconds": outcome.server_seconds,
        "server_cpu_seconds": outcome.server_cpu_seconds,
        "client_seconds_mean": float(outcome.client_seconds.mean()),
        "client_seconds_max": float(outcome.client_seconds.max()),
        "client_cpu_seconds_mean": float(outcome.client_cpu_seconds.mean()),
        "client_cpu_seconds_median": float(np.median(outcome.client_cpu_seconds)),
        "client_cpu_seconds_max": float(outcome.client_cpu_seconds.max()),
        "bytes_total": int(sum(outcome.bytes_sent.values())),
        "bytes_per_client": float(sent.mean()),
        "bytes_per_client_median": float(np.median(sent)),
        "bytes_max_client": int(sent.max()),
        "bytes_received_per_client": float(received.mean()),
        "bytes_received_max_client": int(received.max()),
        "bytes_server": int(outcome.bytes_sent.get(SERVER, 0)),
        "bytes_server_received": int(outcome.bytes_received.get(SERVER, 0)),
        "expansion_factor": float(sent.max()) / (dim * input_bits / 8),
        "expansion_factor_median": float(np.median(sent)) / (dim * input_bits / 8),
    }
