"""Secure all-pairs Hamming matrix (SHADE over IKNP OT) vs plaintext, on random codes.

``securefl bench hamming --n N --L L [--parties P] [--backend shade|plaintext]``
draws random 0/1 codes for N points (``--seed``), splits them evenly over P parties,
computes the N x N matrix the FedProp server receives and verifies it against the
plaintext kernel.  Besides the contract fields it records the AES throughput of this
machine measured in the same run (``prg_gbps``) and ``seconds_lower_bound``: the AES
output bytes the run needed (OT extension, hashing and the expansion of every OT
message) divided by that throughput, i.e. the time of the AES work alone on one core;
``seconds_over_lower_bound_per_worker`` compares against that work spread perfectly over
``--workers`` threads (the fair bound when several cores run).  The compiled kernels are
loaded by a tiny warm-up run before the clock starts.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from securefl.bench.common import add_workers_argument, peak_memory_mb
from securefl.crypto import prg
from securefl.crypto.shade import BACKENDS, ot_roles, secure_hamming_matrix
from securefl.errors import InputError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """CLI options of ``securefl bench hamming``."""
    parser.add_argument("--n", type=int, default=1000, help="total number of points N")
    parser.add_argument("--L", type=int, default=4096, help="code length in bits")
    parser.add_argument("--parties", type=int, default=2, help="parties the points are split over")
    parser.add_argument("--backend", choices=BACKENDS, default="shade")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random codes (not of the crypto)")
    add_workers_argument(parser)


def _split(n: int, parties: int) -> list[int]:
    base, extra = divmod(n, parties)
    return [base + (1 if p < extra else 0) for p in range(parties)]


def cost_model_bytes(sizes: list[int], length: int) -> int:
    """Bytes SHADE must move: per pair (OT sender ``s``, receiver ``r``, :func:`ot_roles`)
    ``n_r * L`` OTs of ``16 * ceil(n_s / 8)`` bytes plus 16 bytes of IKNP matrix per OT,
    then two ``n_s x n_r`` uint16 shares per pair and the ``n_j x n_j`` own blocks to the
    server (frame headers and base OTs excluded)."""
    total = sum(2 * n * n for n in sizes)
    for a in range(len(sizes)):
        for b in range(a + 1, len(sizes)):
            n_s, n_r = (sizes[p] for p in ot_roles(a, b))
            total += n_r * length * (16 * -(-n_s // 8) + 16) + 2 * 2 * n_s * n_r
    return total


def total_ots(sizes: list[int], length: int) -> int:
    """OTs of all pairs: ``L`` per point of each pair's OT receiver."""
    return sum(
        sizes[ot_roles(a, b)[1]] * length for a in range(len(sizes)) for b in range(a + 1, len(sizes))
    )


def run(args: argparse.Namespace, progress) -> dict:
    """Run the benchmark and return its JSON record."""
    if args.n < args.parties:
        raise InputError("n", args.n, f"must be at least --parties={args.parties}")
    if args.parties < 1:
        raise InputError("parties", args.parties, "must be positive")
    sizes = _split(args.n, args.parties)
    rng = np.random.default_rng(args.seed)
    codes = [rng.integers(0, 2, size=(size, args.L), dtype=np.uint8) for size in sizes]
    gbps_before = prg.measure_throughput()
    start = time.perf_counter()
    plain = secure_hamming_matrix(codes, backend="plaintext")
    plaintext_seconds = time.perf_counter() - start
    if args.backend == "shade":
        secure_hamming_matrix([c[:8, :64] for c in codes], workers=args.workers)  # compiles the kernels
    task = progress.add_task(f"{args.backend} {args.n}x{args.n}", total=max(total_ots(sizes, args.L), 1))
    start, cpu_start = time.perf_counter(), time.process_time()
    result = secure_hamming_matrix(
        codes,
        backend=args.backend,
        workers=args.workers,
        progress=lambda k: progress.advance(task, k),
    )
    seconds = time.perf_counter() - start
    cpu_seconds = time.process_time() - cpu_start
    gbps_after = prg.measure_throughput()
    prg_gbps = max(gbps_before, gbps_after)
    verified = bool(np.array_equal(result.matrix, plain.matrix))
    lower_bound = result.prg_bytes / (prg_gbps * 1e9)
    client_bytes = [v for k, v in result.bytes_sent.items() if k >= 0]
    return {
        "n": args.n,
        "L": args.L,
        "parties": args.parties,
        "party_sizes": sizes,
        "backend": args.backend,
        "workers": args.workers,
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "plaintext_seconds": plaintext_seconds,
        "ratio": seconds / plaintext_seconds,
        "ots": result.ots,
        "ots_per_second": result.ots / seconds if result.ots else 0.0,
        "bytes_total": result.bytes_total,
        "bytes_max_party": max(client_bytes, default=0),
        "bytes_sent": {str(k): v for k, v in sorted(result.bytes_sent.items())},
        "bytes_cost_model": cost_model_bytes(sizes, args.L) if args.backend == "shade" else 0,
        "prg_bytes": result.prg_bytes,
        "prg_gbps": prg_gbps,
        "prg_gbps_before_after": [gbps_before, gbps_after],
        "seconds_lower_bound": lower_bound,
        "seconds_over_lower_bound": seconds / lower_bound if lower_bound else None,
        "seconds_over_lower_bound_per_worker": seconds * args.workers / lower_bound if lower_bound else None,
        "peak_memory_mb": peak_memory_mb(),
        "verified": verified,
    }
