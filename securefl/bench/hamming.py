"""Secure all-pairs Hamming matrix (SHADE over IKNP OT, or LWE) vs plaintext, on random codes.

``securefl bench hamming --n N --L L [--parties P] [--backend shade|lwe|plaintext]``
draws random 0/1 codes for N points (``--seed``), splits them evenly over P parties,
computes the N x N matrix the FedProp server receives and verifies it against the
plaintext kernel.  Every backend reports ``cpu_seconds`` (process CPU time of all
parties, worker threads included), the bytes each party sent and received, and
``seconds_at_bandwidth``: the run projected onto 100 Mbit/s, 1 Gbit/s and 10 Gbit/s
links as ``cpu_seconds + 8 * link_bytes_max_party / bandwidth``
(:mod:`securefl.crypto.projection`; ``link_bytes_max_party`` is the busiest client's
traffic in its busier direction).  ``bytes_clients_sent`` counts every message once, at
the client that sends it: SHADE's client-to-client frames are metered once, and so are
LWE's broadcasts, which ``bytes_total`` counts twice (the client's upload and the
server's forwards).

SHADE also records the AES throughput of this machine measured in the same run
(``prg_gbps``) and ``seconds_lower_bound``: the AES output bytes the run needed divided
by that throughput.  For LWE and RLWE ``seconds_lower_bound`` is the arithmetic of their
products (:func:`securefl.crypto.hamming.arithmetic`: float64 multiply-adds and 2,048-point
FFTs, the fewest the protocol allows) at this machine's GEMM and FFT rates, measured in the
same run on one thread of their device; ``lower_bound_parts`` says what each bound is made
of.  ``seconds_over_lower_bound_per_worker`` compares against that work
spread over ``--workers`` threads (SHADE: 1, each client's hops on one thread as deployed;
``--workers`` above 1 with SHADE exits 2).  SHADE's pairs keep their OT setups across rounds
(:class:`~securefl.crypto.ot.OTSetups`), so the fixed cost is reported apart:
``setup_seconds`` (every pair's setup hops, CPU of both parties: 128 X25519 base OTs each in
the first round, ``fresh_setups`` of them), ``pair_seconds`` (each pair's stream hops),
``seconds_after_setup`` = ``seconds - setup_seconds`` (what every later round costs) and its
ratio to the AES bound; ``shade_expansion`` says how the OT messages were expanded
(``"aes-ni fused"``: compiled AES-NI inside the share arithmetic, :mod:`securefl.crypto.aesni`;
``"openssl tiles"``: elsewhere, or with ``SECUREFL_AESNI=0``); ``ghash`` which GHASH the
links' GMAC tags ran through (``"vpclmulqdq"``, :mod:`securefl.crypto.ghash`, or ``"openssl"``); ``--rounds R`` runs ``R - 1`` more rounds on fresh codes with the
same setups (``later_rounds``: seconds, setup seconds, fresh setups, verified).  LWE also
records the CPU seconds of each party and the bytes of each message kind, LWE and RLWE
``fixed_seconds`` / ``per_pair_seconds``: the CPU seconds of the products with the public
matrix (``C`` and the hints, once per party) and of the per-pair work (``C Y'^T``, answers,
decryption); ``--device`` runs their products on a torch device (``cpu``, ``cuda``).  The
compiled kernels are loaded by a tiny warm-up run before the clock starts.
"""

from __future__ import annotations

import argparse
import functools
import time

import numpy as np
import torch

from securefl.bench.common import (
    add_workers_argument,
    best_seconds,
    default_workers,
    peak_memory_mb,
)
from securefl.crypto import aesni, ghash, linalg, lwe, prg
from securefl.crypto.hamming import BACKENDS, SHARE_BITS, arithmetic, pair_roles
from securefl.crypto.ot import OTSetups
from securefl.crypto.projection import busiest_link_bytes, seconds_at_bandwidth
from securefl.errors import InputError
from securefl.protocols.hamming.matrix import secure_hamming_matrix, total_ots


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """CLI options of ``securefl bench hamming``."""
    parser.add_argument("--n", type=int, default=1000, help="total number of points N")
    parser.add_argument("--L", type=int, default=4096, help="code length in bits")
    parser.add_argument("--parties", type=int, default=2, help="parties the points are split over")
    parser.add_argument("--backend", choices=BACKENDS, default="shade")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random codes (not of the crypto)")
    parser.add_argument(
        "--rounds", type=int, default=1,
        help="rounds with fresh codes; SHADE keeps each pair's OT setup (base OTs) from round 1",
    )
    parser.add_argument("--device", default="cpu", help="torch device of the lwe/rlwe products: cpu, cuda, cuda:<k>")
    add_workers_argument(parser)


def validate(args: argparse.Namespace) -> None:
    """Check every flag before any work; :class:`InputError` names the flag."""
    if args.parties < 2:
        raise InputError("--parties", args.parties, "must be at least 2 (a secure matrix needs two parties)")
    if not 1 <= args.L < 1 << SHARE_BITS:
        raise InputError("--L", args.L, f"must be a code length in [1, 2^{SHARE_BITS})")
    if args.n < args.parties:
        raise InputError("--n", args.n, f"must give every one of the --parties={args.parties} parties a point")
    if args.workers is not None and args.workers < 1:
        raise InputError("--workers", args.workers, "must be a positive number of threads")
    default_workers(args, single_threaded=args.backend == "shade")
    if args.seed < 0:
        raise InputError("--seed", args.seed, "must be non-negative")
    if args.rounds < 1:
        raise InputError("--rounds", args.rounds, "must be a positive number of rounds")
    if args.device != "cpu":
        if args.backend not in ("lwe", "rlwe"):
            raise InputError("--device", args.device, f"only the lwe and rlwe backends run on a device, not {args.backend!r}")
        try:
            linalg.resolve_device(args.device)
        except InputError as error:
            raise InputError("--device", args.device, error.problem) from None
    if args.backend in ("lwe", "rlwe"):
        sizes = _split(args.n, args.parties)
        bound = lwe.statistical_distance(sizes, args.L)
        if bound > lwe.STATISTICAL_BOUND:
            raise InputError(
                "--n", args.n, f"too many points for one LWE session (statistical bound 2^{np.log2(bound):.1f} > 2^-40)"
            )


def _split(n: int, parties: int) -> list[int]:
    base, extra = divmod(n, parties)
    return [base + (1 if p < extra else 0) for p in range(parties)]


def cost_model_bytes(sizes: list[int], length: int) -> int:
    """Bytes SHADE must move: per pair (OT sender ``s``, receiver ``r``, :func:`pair_roles`)
    ``n_r * L`` OTs of ``16 * ceil(n_s / 8)`` bytes plus 16 bytes of IKNP matrix per OT,
    then two ``n_s x n_r`` uint16 shares per pair and the ``n_j x n_j`` own blocks to the
    server (frame headers and base OTs excluded)."""
    total = sum(2 * n * n for n in sizes)
    for a in range(len(sizes)):
        for b in range(a + 1, len(sizes)):
            n_s, n_r = (sizes[p] for p in pair_roles(a, b))
            total += n_r * length * (16 * -(-n_s // 8) + 16) + 2 * 2 * n_s * n_r
    return total


def lwe_cost_model_bytes(sizes: list[int], length: int, *, ring: bool = False) -> int:
    """Bytes the clients of the LWE backend send, each message once: ``13 n_a (L + L')`` for
    each encryptor's ``C`` (with ``ring``, the packed ``13 (n_a L + ceil(n_a / P) L')``:
    :func:`securefl.crypto.lwe.ciphertext_bytes`) and ``4 n n_b`` for each evaluator's hint's top limb (once per session),
    ``3 n_a n_b + 16`` per pair's answer, two ``n_a x n_b`` uint16 shares per pair and the own
    blocks (frame headers, tags and the 32-byte public keys excluded; the server's forwards
    of the broadcasts are not counted)."""
    pairs = [pair_roles(a, b) for a in range(len(sizes)) for b in range(a + 1, len(sizes))]
    encryptors, evaluators = {a for a, _ in pairs}, {b for _, b in pairs}
    total = sum(2 * n * n for n in sizes)
    total += sum(lwe.ciphertext_bytes(sizes[a], length, ring=ring) for a in encryptors)
    total += sum(lwe.HINT_BYTES * lwe.LWE_DIMENSION * sizes[b] for b in evaluators)
    total += sum(sizes[a] * sizes[b] * (3 + 4) + 16 for a, b in pairs)
    return total


def _progress_total(backend: str, sizes: list[int], length: int) -> int:
    if backend == "shade":
        return total_ots(sizes, length)
    if backend in ("lwe", "rlwe"):
        return lwe.progress_total(len(sizes), length, ring=backend == "rlwe")
    return 1


def arithmetic_rates(device: torch.device) -> tuple[float, float]:
    """This machine's float64 GEMM rate (flop/s) and seconds per complex FFT of 2,048 points on
    ``device``, one thread, the best of several timings: a 768 x 2048 by 2048 x 768 product
    (2.4 GFLOP; near the peak of this machine's BLAS, so that the bound stays below what any
    shape achieves) and a batch of 256 transforms."""
    generator = torch.Generator(device=device).manual_seed(0)  # operands only, not key material
    left = torch.rand(768, 2048, dtype=torch.float64, device=device, generator=generator)
    right = torch.rand(2048, 768, dtype=torch.float64, device=device, generator=generator)
    batch = torch.rand(256, 2048, dtype=torch.complex128, device=device, generator=generator)
    with linalg.torch_threads(1):
        gemm = best_seconds(lambda: torch.matmul(left, right), device)
        fft = best_seconds(lambda: torch.fft.fft(batch, dim=-1), device, repeats=10)
    return 2 * 768 * 2048 * 768 / gemm, fft / batch.shape[0]


def _lower_bound(args: argparse.Namespace, sizes: list[int], prg_bytes: int,
                 prg_gbps: float | None) -> tuple[float, dict[str, float]]:
    """``seconds_lower_bound`` and what it is made of: SHADE's AES output bytes at this run's AES
    throughput; the LWE backends' products (:func:`securefl.crypto.hamming.arithmetic`) at this
    run's GEMM and FFT rates on their device (:func:`arithmetic_rates`)."""
    if args.backend == "shade":
        return prg_bytes / (prg_gbps * 1e9), {"aes_bytes": prg_bytes, "aes_gbps": prg_gbps}
    if args.backend == "plaintext":
        return 0.0, {}
    multiply_adds, ffts = arithmetic(args.backend, sizes, args.L)
    gemm_flops, fft_seconds = arithmetic_rates(linalg.resolve_device(args.device))
    parts = {"gemm_multiply_adds": multiply_adds, "gemm_gflops": gemm_flops / 1e9,
             "ffts": ffts, "fft_seconds": fft_seconds}
    return 2 * multiply_adds / gemm_flops + ffts * fft_seconds, parts


def run(args: argparse.Namespace, progress) -> dict:
    """Run the benchmark and return its JSON record."""
    validate(args)
    sizes = _split(args.n, args.parties)
    rng = np.random.default_rng(args.seed)
    codes = [rng.integers(0, 2, size=(size, args.L), dtype=np.uint8) for size in sizes]
    shade = args.backend == "shade"
    setups = OTSetups() if shade else None
    gbps_before = prg.measure_throughput() if shade else None
    start = time.perf_counter()
    plain = secure_hamming_matrix(codes, backend="plaintext")
    plaintext_seconds = time.perf_counter() - start
    device = {"device": args.device} if args.backend in ("lwe", "rlwe") else {}
    if args.backend != "plaintext":  # compiles or loads the kernels
        secure_hamming_matrix([c[:2, :64] for c in codes[:2]], backend=args.backend, workers=args.workers, **device)
    task = progress.add_task(f"{args.backend} {args.n}x{args.n}", total=max(_progress_total(args.backend, sizes, args.L), 1))
    start, cpu_start = time.perf_counter(), time.process_time()
    result = secure_hamming_matrix(
        codes,
        backend=args.backend,
        workers=args.workers,
        progress=lambda k: progress.advance(task, k),
        **device,
        setups=setups,
    )
    seconds = time.perf_counter() - start
    cpu_seconds = time.process_time() - cpu_start
    later = []
    for round_index in range(1, args.rounds):
        fresh = [rng.integers(0, 2, size=(size, args.L), dtype=np.uint8) for size in sizes]
        tick, cpu_tick = time.perf_counter(), time.process_time()
        again = secure_hamming_matrix(
            fresh, backend=args.backend, workers=args.workers, setups=setups
        )
        plain_again = secure_hamming_matrix(fresh, backend="plaintext")
        later.append({
            "round": round_index + 1,
            "seconds": time.perf_counter() - tick,
            "cpu_seconds": time.process_time() - cpu_tick,
            "setup_seconds": again.setup_seconds,
            "fresh_setups": again.fresh_setups,
            "verified": bool(np.array_equal(again.matrix, plain_again.matrix)),
        })
    gbps_after = prg.measure_throughput() if shade else None
    prg_gbps = max(gbps_before, gbps_after) if shade else None
    verified = bool(np.array_equal(result.matrix, plain.matrix))
    lower_bound, lower_bound_parts = _lower_bound(args, sizes, result.prg_bytes, prg_gbps)
    after_setup = seconds - result.setup_seconds
    client_bytes = [v for k, v in result.bytes_sent.items() if k >= 0]
    link_bytes = busiest_link_bytes(result.bytes_sent, result.bytes_received)
    projected = seconds_at_bandwidth(cpu_seconds, link_bytes)
    model = {"shade": cost_model_bytes, "lwe": lwe_cost_model_bytes,
             "rlwe": functools.partial(lwe_cost_model_bytes, ring=True)}.get(args.backend)
    return {
        "n": args.n,
        "L": args.L,
        "parties": args.parties,
        "party_sizes": sizes,
        "backend": args.backend,
        "workers": args.workers,
        "device": args.device,
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "cpu_seconds_by_party": {str(k): v for k, v in sorted(result.cpu_seconds_by_party.items())},
        **({"fixed_seconds": result.cpu_seconds_by_phase["fixed"],
            "per_pair_seconds": result.cpu_seconds_by_phase["per_pair"]} if result.cpu_seconds_by_phase else {}),
        "plaintext_seconds": plaintext_seconds,
        "ratio": seconds / plaintext_seconds,
        "ots": result.ots,
        "ots_per_second": result.ots / seconds if result.ots else 0.0,
        "bytes_total": result.bytes_total,
        "bytes_clients_sent": sum(client_bytes),
        "bytes_max_party": max(client_bytes, default=0),
        "link_bytes_max_party": link_bytes,
        "bytes_sent": {str(k): v for k, v in sorted(result.bytes_sent.items())},
        "bytes_received": {str(k): v for k, v in sorted(result.bytes_received.items())},
        "bytes_by_message": dict(sorted(result.bytes_by_message.items())),
        "bytes_cost_model": model(sizes, args.L) if model else 0,
        "seconds_at_bandwidth": projected,
        **{f"seconds_at_{label}": value for label, value in projected.items()},
        "shade_expansion": ("aes-ni fused" if aesni.available() else "openssl tiles") if shade else None,
        "ghash": ghash.path(),
        "prg_bytes": result.prg_bytes,
        "prg_gbps": prg_gbps,
        "prg_gbps_before_after": [gbps_before, gbps_after],
        "seconds_lower_bound": lower_bound,
        "lower_bound_parts": lower_bound_parts,
        "seconds_over_lower_bound": seconds / lower_bound if lower_bound else None,
        "seconds_over_lower_bound_per_worker": seconds * args.workers / lower_bound if lower_bound else None,
        "setup_seconds": result.setup_seconds,
        "fresh_setups": result.fresh_setups,
        "pair_seconds": dict(sorted(result.pair_seconds.items())),
        "seconds_after_setup": after_setup,
        "seconds_after_setup_over_lower_bound": after_setup / lower_bound if lower_bound else None,
        "later_rounds": later,
        "peak_memory_mb": peak_memory_mb(),
        "verified": verified and all(r["verified"] for r in later),
    }
