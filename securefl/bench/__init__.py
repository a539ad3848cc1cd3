"""``securefl bench ...``: micro- and protocol benchmarks, each writing JSON.

Each benchmark is a module here exposing

- ``add_arguments(parser: argparse.ArgumentParser) -> None`` and
- ``run(args: argparse.Namespace, progress: Progress) -> dict`` returning the JSON record.

The CLI adds the machine description, prints the record as a table and writes
``--json PATH``.  Speed is always reported as a ratio measured in the same run
(real vs plaintext, ours vs a bound), because the machines are shared and noisy.
"""

BENCHMARKS = {
    "ot": "securefl.bench.ot",
    "hamming": "securefl.bench.hamming",
    "secagg": "securefl.bench.secagg",
    "lp": "securefl.bench.lp",
    "crossclient": "securefl.bench.crossclient",
    "flower-secagg": "securefl.bench.flower_secagg",
    "flower-rounds": "securefl.bench.flower_rounds",
}
"""Benchmark name -> module implementing it."""
