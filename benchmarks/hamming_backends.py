"""SHADE and LWE secure Hamming matrices measured back to back, one record per shape.

    python benchmarks/hamming_backends.py --out benchmarks/results [--workers W]

For each shape (n = 1000 and n = 5000 at L = 4096 over 2 parties, and FedProp's CIFAR-10
round, 5 x 500) it runs ``securefl bench hamming --backend shade`` and then
``--backend lwe`` on the same codes, each in a fresh process (so that each peak memory is
its own), and writes ``hamming_backends_<shape>.json`` with both records, the load
average before and after each run (the machine is shared: CPU seconds are the robust
figure), and the ratios LWE / SHADE of bytes (every message once, at its sender; and the
busiest client's link), CPU seconds and wall seconds.
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
    "n1000_L4096": ["--n", "1000", "--L", "4096", "--parties", "2"],
    "n5000_L4096": ["--n", "5000", "--L", "4096", "--parties", "2"],
    "fedprop_cifar10_5x500": ["--n", "2500", "--L", "4096", "--parties", "5"],
}


def _bench(arguments: list[str], backend: str, workers: int) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        target = Path(folder) / "record.json"
        load_before = os.getloadavg()
        subprocess.run(
            [sys.executable, "-m", "securefl.cli", "bench", "hamming", *arguments, "--backend", backend,
             "--workers", str(workers), "--json", str(target)],
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
        shade = _bench(SHAPES[name], "shade", args.workers)
        lwe = _bench(SHAPES[name], "lwe", args.workers)
        record = {
            "shape": name,
            "command": " ".join(["securefl bench hamming", *SHAPES[name], "--workers", str(args.workers)]),
            "shade": shade,
            "lwe": lwe,
            "shade_over_lwe": {
                "bytes_clients_sent": shade["bytes_clients_sent"] / lwe["bytes_clients_sent"],
                "bytes_total": shade["bytes_total"] / lwe["bytes_total"],
                "link_bytes_max_party": shade["link_bytes_max_party"] / lwe["link_bytes_max_party"],
                "cpu_seconds": shade["cpu_seconds"] / lwe["cpu_seconds"],
                "seconds": shade["seconds"] / lwe["seconds"],
                **{
                    f"seconds_at_{label}": shade["seconds_at_bandwidth"][label] / lwe["seconds_at_bandwidth"][label]
                    for label in lwe["seconds_at_bandwidth"]
                },
            },
            "verified": shade["verified"] and lwe["verified"],
        }
        path = Path(args.out) / f"hamming_backends_{name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, indent=2) + "\n")
        print(f"wrote {path}: bytes {record['shade_over_lwe']['bytes_clients_sent']:.1f}x fewer, "
              f"CPU s shade/lwe {record['shade_over_lwe']['cpu_seconds']:.2f}")


if __name__ == "__main__":
    main()
