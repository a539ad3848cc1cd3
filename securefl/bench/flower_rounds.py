"""Message rounds on a real Flower deployment (127.0.0.1) vs the in-process transport.

For each ``--modes`` entry a :class:`securefl.fl.flower.LocalFederation` with ``--nodes``
SuperNodes is started (``stock``: Flower's defaults; ``cold``: securefl's polling settings,
a fresh process per message; ``fast``: warm executors that fork per message, see
:mod:`securefl.fl.flower.tuning`), and two programs run on it:

* ``link-check`` (``--rounds`` rounds, 1 KiB frames): the seconds of every exchange -- a
  message round with almost no work, i.e. the deployment's own latency;
* program ``method`` with ``fedavg-labeled`` in real mode (``--rounds`` rounds of FedAvg
  with secure aggregation on digits split over ``--nodes`` clients,
  :func:`securefl.experiments.deployment.program_config`): per round, seconds split into
  compute (local training), cryptography (secure aggregation, clients and server) and
  messaging (the rest of the exchanges), and bytes per client.

The same job runs on the in-process transport; ``identical`` is true when every mode's
model digests equal the in-process ones round for round.  ``run_start_seconds`` is the
time from submitting a run (``flwr run``) to its ServerApp's first exchange.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from rich.progress import Progress

from securefl.errors import InputError

MODES = ("fast", "cold", "stock")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """CLI options of ``securefl bench flower-rounds``."""
    parser.add_argument("--nodes", type=int, default=3, help="SuperNodes (clients)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each program")
    parser.add_argument("--modes", default="fast,cold,stock", help="comma-separated: fast, cold, stock")
    parser.add_argument("--poll", type=float, default=0.1, help="poll interval of fast/cold modes (s)")


def validate(args: argparse.Namespace) -> None:
    """Reject bad options before any work."""
    if args.nodes < 2:
        raise InputError("nodes", args.nodes, "must be >= 2")
    if args.rounds < 1:
        raise InputError("rounds", args.rounds, "must be >= 1")
    modes = [m for m in args.modes.split(",") if m]
    if not modes or set(modes) - set(MODES):
        raise InputError("modes", args.modes, f"must be a comma-separated subset of {MODES}")


def _method_rounds(result: dict[str, Any]) -> list[dict[str, Any]]:
    keys = ("round", "test_accuracy", "model_digest", "seconds", "train_seconds", "crypto_seconds",
            "messaging_seconds", "evaluation_seconds", "bytes_down_per_client", "bytes_up_per_client")
    return [{k: r[k] for k in keys} for r in result["rounds"]]


def job_config(nodes: int, rounds: int) -> dict[str, Any]:
    """The run config of the FedAvg job: the digits default over ``nodes`` clients."""
    from securefl.experiments.config import load_config
    from securefl.experiments.deployment import program_config

    config = load_config(None, settings=[f"partition.num_clients={nodes}"], rounds=rounds,
                         methods=["fedavg-labeled"])
    return program_config(config, "fedavg-labeled", secure="real", timeout=600.0)


def _run_start(out: Path, submitted: float) -> float | None:
    path = out / "progress.jsonl"
    if not path.exists():
        return None
    first = json.loads(path.read_text().splitlines()[0])
    return first["time"] - submitted


def run(args: argparse.Namespace, progress: Progress) -> dict:
    """Run both programs in every mode and in process; return the JSON record."""
    from securefl.experiments.deployment import in_process
    from securefl.fl.flower.deploy import LocalFederation, wait_result

    validate(args)
    modes = [m for m in args.modes.split(",") if m]
    job = job_config(args.nodes, args.rounds)
    links = {"program": "link-check", "rounds": args.rounds, "payload-bytes": 1024, "timeout": 600.0}
    task = progress.add_task("Flower message rounds", total=len(modes) + 1)
    record: dict[str, Any] = {"nodes": args.nodes, "rounds": args.rounds, "poll": args.poll,
                              "load_average_start": list(os.getloadavg()), "modes": {}}
    start = time.perf_counter()
    reference = in_process(job)
    record["in_process"] = {"seconds": time.perf_counter() - start, "rounds": _method_rounds(reference)}
    progress.advance(task)
    for mode in modes:
        started = time.perf_counter()
        with LocalFederation(nodes=args.nodes, mode=mode, poll=args.poll) as federation:
            entry: dict[str, Any] = {"federation_start_seconds": time.perf_counter() - started}
            submitted = time.time()
            out = federation.launch(links, name="link-check")
            checked = wait_result(out, 3600, processes=federation.processes)
            entry["link_check_run_start_seconds"] = _run_start(out, submitted)
            exchanges = [s for step in checked["exchange_seconds"].values() for s in step]
            entry["link_check"] = {"verified": checked["verified"], "exchange_seconds": exchanges,
                                   "median_exchange_seconds": statistics.median(exchanges)}
            submitted = time.time()
            out = federation.launch(job, name="fedavg-labeled")
            result = wait_result(out, 3600, processes=federation.processes)
            entry["method_run_start_seconds"] = _run_start(out, submitted)
            entry["method_rounds"] = _method_rounds(result)
            entry["method_median_round_seconds"] = statistics.median(
                r["seconds"] for r in result["rounds"])
            entry["identical_to_in_process"] = [r["model_digest"] for r in result["rounds"]] == \
                [r["model_digest"] for r in reference["rounds"]]
        record["modes"][mode] = entry
        progress.advance(task)
    record["identical"] = all(m["identical_to_in_process"] for m in record["modes"].values())
    record["load_average_end"] = list(os.getloadavg())
    return record
