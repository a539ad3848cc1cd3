"""Message rounds on a real Flower deployment (127.0.0.1) vs the in-process transport.

For each ``--modes`` entry a :class:`securefl.fl.flower.LocalFederation` with ``--nodes``
SuperNodes is started (``stock``: Flower's defaults; ``cold``: securefl's polling settings,
a fresh process per message; ``fast``: warm executors that fork per message, see
:mod:`securefl.fl.flower.tuning`), and two programs run on it:

* ``link-check`` (``--rounds`` rounds, 1 KiB frames): the seconds of every exchange -- a
  message round with almost no work, i.e. the deployment's own latency;
* ``pilot-fedavg`` (``--rounds`` rounds of FedAvg with secure aggregation on digits): per
  round, seconds split into compute (local training), cryptography (secure aggregation,
  clients and server) and messaging (the rest of the exchanges), and bytes per client.

The same pilot runs on the in-process transport; ``identical`` is true when every mode's
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


def _pilot_rounds(result: dict[str, Any]) -> list[dict[str, Any]]:
    keys = ("round", "accuracy", "model_digest", "seconds", "compute_seconds", "crypto_seconds",
            "messaging_seconds", "evaluation_seconds", "bytes_down_per_client", "bytes_up_per_client")
    return [{k: r[k] for k in keys} for r in result["rounds"]]


def _run_start(out: Path, submitted: float) -> float | None:
    path = out / "progress.jsonl"
    if not path.exists():
        return None
    first = json.loads(path.read_text().splitlines()[0])
    return first["time"] - submitted


def run(args: argparse.Namespace, progress: Progress) -> dict:
    """Run both programs in every mode and in process; return the JSON record."""
    from securefl.fl.flower.deploy import LocalFederation, wait_result
    from securefl.fl.pilot import PilotClient, PilotServer
    from securefl.fl.transport import InProcessTransport, NodeContext

    validate(args)
    modes = [m for m in args.modes.split(",") if m]
    pilot = {"program": "pilot-fedavg", "rounds": args.rounds, "timeout": 600.0}
    links = {"program": "link-check", "rounds": args.rounds, "payload-bytes": 1024, "timeout": 600.0}
    task = progress.add_task("Flower message rounds", total=len(modes) + 1)
    record: dict[str, Any] = {"nodes": args.nodes, "rounds": args.rounds, "poll": args.poll,
                              "load_average_start": list(os.getloadavg()), "modes": {}}
    run_config = {"num-partitions": args.nodes, **pilot}
    nodes = [NodeContext(i, {"partition-id": i, "num-partitions": args.nodes}, run_config)
             for i in range(args.nodes)]
    start = time.perf_counter()
    reference = PilotServer().run(InProcessTransport(PilotClient(), nodes), run_config)
    record["in_process"] = {"seconds": time.perf_counter() - start, "rounds": _pilot_rounds(reference)}
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
            out = federation.launch(pilot, name="pilot")
            result = wait_result(out, 3600, processes=federation.processes)
            entry["pilot_run_start_seconds"] = _run_start(out, submitted)
            entry["pilot_rounds"] = _pilot_rounds(result)
            entry["pilot_median_round_seconds"] = statistics.median(
                r["seconds"] for r in result["rounds"])
            entry["identical_to_in_process"] = [r["model_digest"] for r in result["rounds"]] == \
                [r["model_digest"] for r in reference["rounds"]]
        record["modes"][mode] = entry
        progress.advance(task)
    record["identical"] = all(m["identical_to_in_process"] for m in record["modes"].values())
    record["load_average_end"] = list(os.getloadavg())
    return record
