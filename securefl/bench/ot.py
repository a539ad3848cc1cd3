"""IKNP random OT throughput (both parties in one process), verified.

``securefl bench ot --m M`` runs the 128 X25519 base OTs of one setup
(``base_ot_seconds``: both parties, hello and answer included; ``base_ot_setups_per_second``),
then ``M`` random 1-out-of-2 OTs of 128-bit messages by IKNP extension, and checks that the receiver
got exactly the chosen message of every OT and never the other.  ``ots_per_second``
counts the extension (the part that scales with ``M``, wall clock); the base OTs are
reported separately and in ``ots_per_second_with_base``; ``ots_per_cpu_second`` divides
by the process CPU time of the extension, which is what to compare on a shared box.
The three output arrays are allocated and touched, and the compiled kernels loaded
by one warm-up chunk, before the clock starts (as OT libraries write into caller
buffers and are compiled ahead of time); everything else is timed.  Anchor: libOTe's semi-honest IKNP
ran ~28 M OT/s per thread on a 2016 Xeon (``libote_ratio`` = ours / 28e6).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from securefl.bench.common import memory_bytes, peak_memory_mb, require_int
from securefl.crypto import prg
from securefl.crypto.ot import DEFAULT_CHUNK, KAPPA, random_ot
from securefl.errors import InputError

LIBOTE_OTS_PER_SECOND = 28e6
OUTPUT_BYTES_PER_OT = 3 * 16
"""The three preallocated (m, 2) uint64 output arrays: 48 bytes per OT."""
SMOKE = {"m": 1 << 16}
"""Caps under which the README check runs ``bench ot`` commands (about a second)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """CLI options of ``securefl bench ot``."""
    parser.add_argument("--m", type=int, default=1 << 22, help="number of random OTs")
    parser.add_argument(
        "--chunk", type=int, default=DEFAULT_CHUNK,
        help="OTs per extension chunk (a multiple of 64)",
    )
    parser.add_argument(
        "--seed", type=int, default=None,
        help="fix the crypto randomness (tests only; default: OS CSPRNG)",
    )


def validate(args: argparse.Namespace) -> None:
    """Check the flags before any work (InputError naming the flag)."""
    require_int(args, "--m", minimum=1)
    require_int(args, "--chunk", minimum=64)
    if args.chunk % 64:
        raise InputError("--chunk", args.chunk, "must be a multiple of 64")
    require_int(args, "--seed", minimum=0, optional=True)
    memory = memory_bytes()
    if memory is not None and args.m * OUTPUT_BYTES_PER_OT > memory:
        raise InputError(
            "--m", args.m, f"needs {args.m * OUTPUT_BYTES_PER_OT / 1e9:.1f} GB for the outputs, "
            f"more than this machine's {memory / 1e9:.1f} GB"
        )


def run(args: argparse.Namespace, progress) -> dict:
    """Run the benchmark and return its JSON record."""
    validate(args)
    gbps_before = prg.measure_throughput()
    outputs = tuple(np.zeros((args.m, 2), dtype=np.uint64) for _ in range(3))
    for array in outputs:
        array.fill(1)
    random_ot(min(args.m, args.chunk), chunk=args.chunk)  # compiles (or loads) the kernels
    task = progress.add_task(f"IKNP {args.m} OTs", total=args.m)
    start, cpu_start = time.perf_counter(), time.process_time()
    result = random_ot(
        args.m,
        seed=args.seed,
        chunk=args.chunk,
        progress=lambda k: progress.advance(task, k),
        out=outputs,
    )
    seconds = time.perf_counter() - start
    cpu_seconds = time.process_time() - cpu_start
    gbps_after = prg.measure_throughput()
    chosen = result.choices.astype(bool)[:, None]
    wanted = np.where(chosen, result.messages1, result.messages0)
    other = np.where(chosen, result.messages0, result.messages1)
    verified = bool(
        np.array_equal(wanted, result.received) and (other != result.received).any(axis=1).all()
    )
    padded = -(-args.m // 64) * 64
    prg_bytes = 3 * KAPPA * padded // 8 + 6 * 16 * args.m
    prg_gbps = max(gbps_before, gbps_after)
    lower_bound = prg_bytes / (prg_gbps * 1e9)
    return {
        "m": args.m,
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "ots_per_second": args.m / result.extension_seconds,
        "ots_per_second_with_base": args.m / seconds,
        "ots_per_cpu_second": args.m / result.extension_cpu_seconds,
        "base_ot_seconds": result.base_seconds,
        "base_ots": KAPPA,
        "base_ot_setups_per_second": 1.0 / result.base_seconds,
        "extension_seconds": result.extension_seconds,
        "bytes_total": result.bytes_total,
        "bytes_per_ot": result.bytes_total / args.m,
        "libote_ratio": args.m / result.extension_seconds / LIBOTE_OTS_PER_SECOND,
        "prg_bytes": prg_bytes,
        "prg_gbps": prg_gbps,
        "prg_gbps_before_after": [gbps_before, gbps_after],
        "seconds_lower_bound": lower_bound,
        "peak_memory_mb": peak_memory_mb(),
        "verified": verified,
    }
