"""Secure aggregation (Bonawitz et al. 2017) of N clients' D-entry vectors, with dropouts.

All clients and the server run in this process over the metered channel.  Inputs are
random ``--input-bits``-bit integers summed in Z_(2^modulus_bits); a fraction
``--dropout`` of the clients (chosen at random) drops at ``--drop-round`` (default
``masked_input``: after sharing keys, before sending the masked input, which is the
worst case for the server: it must rebuild every dropped client's pairwise masks).

Reported: wall seconds of the secure and plaintext sums, the server's own seconds and
the mean / max per-client seconds (round handlers only, transport excluded) as wall
time and as CPU time of the thread (the project machine is shared by several jobs, so
wall time includes waiting for a core), bytes,
and, for the 500 x 100K workload of the paper, the speed-up of our server over the
figures Bonawitz et al. report for their single-threaded Java server (2 s, 62 s and
143 s at 0 %, 10 % and 30 % dropout; 0.85 s per client).
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
from rich.progress import Progress

from securefl.crypto.secagg import ROUNDS, plan_survivors
from securefl.crypto.summation import secure_sum
from securefl.errors import InputError

ANCHOR = {
    "source": "Bonawitz et al. 2017, CCS, Sec. 7 (single-threaded Java): 500 clients x 100K entries",
    "client_seconds": 0.85,
    "server_seconds": {"0.0": 2.0, "0.1": 62.0, "0.3": 143.0},
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """CLI options of ``securefl bench secagg``."""
    parser.add_argument("--clients", type=int, default=100, help="number of clients N")
    parser.add_argument("--dim", type=int, default=10_000, help="entries per client vector D")
    parser.add_argument("--dropout", type=float, default=0.0, help="fraction of clients that drop")
    parser.add_argument("--threshold", type=int, default=None, help="Shamir threshold t (default ceil(2N/3))")
    parser.add_argument("--neighbours", type=int, default=None, help="SecAgg+ neighbours k (default: complete graph)")
    parser.add_argument("--modulus-bits", type=int, default=32, help="ring Z_(2^k) (default 32)")
    parser.add_argument("--input-bits", type=int, default=16, help="bits per input entry (default 16)")
    parser.add_argument("--drop-round", choices=ROUNDS, default="masked_input", help="round the dropouts skip")
    parser.add_argument("--seed", type=int, default=0, help="simulation seed (inputs, who drops)")


def run(args: argparse.Namespace, progress: Progress) -> dict:
    """Run the secure and the plaintext sum, verify them, return the JSON record."""
    n, dim = args.clients, args.dim
    if n < 1:
        raise InputError("clients", n, "must be >= 1")
    if dim < 1:
        raise InputError("dim", dim, "must be >= 1")
    if not 0.0 <= args.dropout < 1.0:
        raise InputError("dropout", args.dropout, "must be in [0, 1)")
    if not 1 <= args.input_bits <= args.modulus_bits:
        raise InputError("input_bits", args.input_bits, f"must be in 1..{args.modulus_bits}")
    threshold = args.threshold if args.threshold is not None else math.ceil(2 * n / 3)
    rng = np.random.default_rng(args.seed)
    dropped = sorted(int(u) for u in rng.choice(n, size=int(math.floor(args.dropout * n)), replace=False))
    dropouts = {u: args.drop_round for u in dropped}
    plan_survivors(n, threshold, dropouts, args.neighbours)
    input_dtype = np.uint16 if args.input_bits <= 16 else np.uint32 if args.input_bits <= 32 else np.uint64
    inputs = [rng.integers(0, 1 << args.input_bits, size=dim, dtype=np.uint64).astype(input_dtype) for _ in range(n)]

    task = progress.add_task(f"secagg {n} x {dim}", total=2)
    start = time.perf_counter()
    secure = secure_sum(
        inputs, threshold=threshold, backend="secagg", dropouts=dropouts,
        modulus_bits=args.modulus_bits, neighbours=args.neighbours,
    )
    seconds = time.perf_counter() - start
    progress.advance(task)
    start = time.perf_counter()
    plain = secure_sum(
        inputs, threshold=threshold, backend="plaintext", dropouts=dropouts,
        modulus_bits=args.modulus_bits, neighbours=args.neighbours,
    )
    plaintext_seconds = time.perf_counter() - start
    progress.advance(task)

    reference = np.zeros(dim, dtype=np.uint64)
    for u in plain.survivors:
        reference += inputs[u]
    reference &= np.uint64((1 << args.modulus_bits) - 1)
    verified = bool(
        np.array_equal(secure.total, plain.total)
        and np.array_equal(secure.total.astype(np.uint64), reference)
        and secure.survivors == plain.survivors
    )
    report = secure.report
    record = {
        "clients": n,
        "dim": dim,
        "dropout": args.dropout,
        "drop_round": args.drop_round,
        "threshold": threshold,
        "neighbours": args.neighbours,
        "modulus_bits": args.modulus_bits,
        "input_bits": args.input_bits,
        "seconds": seconds,
        "plaintext_seconds": plaintext_seconds,
        "server_seconds": report.server_seconds,
        "client_seconds_mean": report.client_seconds_mean,
        "client_seconds_max": report.client_seconds_max,
        "server_cpu_seconds": report.server_cpu_seconds,
        "client_cpu_seconds_mean": report.client_cpu_seconds_mean,
        "bytes_total": report.bytes_total,
        "bytes_max_client": report.bytes_max_client,
        "bytes_per_client": report.bytes_per_client,
        "bytes_server": secure.bytes_sent.get(-1, 0),
        "expansion_factor": report.bytes_max_client / (dim * args.input_bits / 8),
        "survived": len(secure.survivors),
        "dropped": len(dropped),
        "verified": verified,
    }
    key = f"{args.dropout:.1f}"
    if n == 500 and dim == 100_000 and key in ANCHOR["server_seconds"] and args.neighbours is None:
        anchor_server = ANCHOR["server_seconds"][key]
        record["anchor"] = {
            "source": ANCHOR["source"],
            "server_seconds": anchor_server,
            "client_seconds": ANCHOR["client_seconds"],
        }
        record["server_speedup_vs_anchor"] = anchor_server / report.server_seconds
        record["server_cpu_speedup_vs_anchor"] = anchor_server / report.server_cpu_seconds
        record["client_speedup_vs_anchor"] = ANCHOR["client_seconds"] / report.client_seconds_mean
    return record
