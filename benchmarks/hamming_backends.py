"""SHADE, LWE and ring-LWE secure Hamming backends measured back to back, one record per shape.

    python benchmarks/hamming_backends.py --out benchmarks/results [--workers W] [--shape NAME ...]

For each shape it runs the benchmark with SHADE, LWE and ring-LWE (``rlwe``) on the same
inputs, each in a fresh process (so that each peak memory is its own), and writes
``hamming_backends_<shape>.json`` with the records, the load average before and after
each run (the machine is shared: CPU seconds are the robust figure), and the ratios
SHADE / LWE, SHADE / RLWE and LWE / RLWE.  Shapes:

* ``securefl bench hamming`` at n = 1000 and n = 5000 (L = 4096, 2 parties), at
  FedProp's CIFAR-10 round shape (5 x 500) and its digits round (5 x 135, L = 1024): bytes (every message once, at its sender;
  and the busiest client's link), CPU seconds, wall seconds, projected seconds;
* ``securefl bench crossclient`` (the whole CrossClientLP round, real vs plaintext) at the
  CIFAR-10 round shape (5 x 500) and the MNIST round shape (10 x 600): projected round
  seconds on 100 Mbit/s, 1 Gbit/s and 10 Gbit/s links.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SHAPES = {
    "n1000_L4096": ("hamming", ["--n", "1000", "--L", "4096", "--parties", "2"]),
    "n5000_L4096": ("hamming", ["--n", "5000", "--L", "4096", "--parties", "2"]),
    "fedprop_cifar10_5x500": ("hamming", ["--n", "2500", "--L", "4096", "--parties", "5"]),
    "fedprop_digits_5x135": ("hamming", ["--n", "675", "--L", "1024", "--parties", "5"]),
    "crossclient_cifar10_5x500": ("crossclient", ["--n", "2500", "--parties", "5", "--L", "4096"]),
    "crossclient_mnist_10x600": ("crossclient", ["--n", "6000", "--parties", "10", "--L", "4096"]),
}
BACKENDS = ("shade", "lwe", "rlwe")
BACKEND_FLAG = {"hamming": "--backend", "crossclient": "--hamming-backend"}
RATIOS = {
    "hamming": ("bytes_clients_sent", "bytes_total", "link_bytes_max_party", "cpu_seconds", "seconds"),
    "crossclient": ("bytes_per_client", "link_bytes_max_client", "seconds_real"),
}


def _ratios(bench: str, over: dict, under: dict) -> dict[str, float]:
    ratios = {key: over[key] / under[key] for key in RATIOS[bench]}
    ratios.update({f"seconds_at_{label}": over["seconds_at_bandwidth"][label] / under["seconds_at_bandwidth"][label]
                   for label in under["seconds_at_bandwidth"]})
    return ratios


def _workers(bench: str, workers: int) -> list[str]:
    """The ``--workers`` flag where the benchmark takes one (``bench crossclient`` runs the
    deployed hops, which have no worker threads)."""
    return ["--workers", str(workers)] if bench == "hamming" else []


def _bench(bench: str, arguments: list[str], backend: str, workers: int) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        target = Path(folder) / "record.json"
        load_before = os.getloadavg()
        subprocess.run(
            [sys.executable, "-m", "securefl.cli", "bench", bench, *arguments, BACKEND_FLAG[bench], backend,
             *_workers(bench, workers), "--json", str(target)],
            check=True,
        )
        record = json.loads(target.read_text())
    record["load_average_before_after"] = [load_before, os.getloadavg()]
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results", help="folder of the JSON records")
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--shape", choices=list(SHAPES), nargs="*", default=list(SHAPES))
    args = parser.parse_args()
    for name in args.shape:
        bench, arguments = SHAPES[name]
        records = {backend: _bench(bench, arguments, backend, args.workers) for backend in BACKENDS}
        ratios = {f"{over}_over_{under}": _ratios(bench, records[over], records[under])
                  for over, under in (("shade", "lwe"), ("shade", "rlwe"), ("lwe", "rlwe"))}
        record = {
            "shape": name,
            "command": " ".join([f"securefl bench {bench}", *arguments, *_workers(bench, args.workers)]),
            **records,
            **ratios,
            "verified": all(r["verified"] for r in records.values()),
        }
        path = Path(args.out) / f"hamming_backends_{name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, indent=2) + "\n")
        print(f"wrote {path}: " + ", ".join(f"shade/rlwe {key} {value:.2f}x"
                                            for key, value in ratios["shade_over_rlwe"].items()))


if __name__ == "__main__":
    main()
