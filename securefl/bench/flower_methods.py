"""Every deployable method on a real Flower deployment (127.0.0.1) vs in process.

One :class:`securefl.fl.flower.LocalFederation` (``--mode``, default ``fast``: warm
executors, see ``docs/flower.md``) with as many SuperNodes as the experiment has clients
(``--config``, default ``experiments/digits-3-nodes.toml``: the digits default over three
clients) runs program ``method`` for each of ``--methods`` (default: every method with
``deployable = True``) in real mode for ``--rounds`` rounds, one method after another; the
same job runs on the in-process transport first
(:func:`securefl.experiments.deployment.in_process`).

Per method and transport: every round's seconds (wall), split into compute (the clients'
local training and the server's own training, summed over parties), cryptography (secure
sums, clients and server) and messaging (the rest of the exchanges,
:class:`securefl.runtime.costs.RoundMeter`), bytes down / up per client (payload the transport
moved), and the medians over the rounds; ``identical`` is true when the Flower run's model
digests equal the in-process ones round for round.  Warm-up rounds (FedAvg+PL,
FedAvg+PL(localLP)) are part of ``setup`` and not in the per-round figures;
``run_seconds`` is the whole run (submission to result, warm-up included).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any

from rich.progress import Progress

from securefl.errors import InputError

DEFAULT_CONFIG = "experiments/digits-3-nodes.toml"
KEYS = ("round", "test_accuracy", "model_digest", "seconds", "train_seconds", "crypto_seconds",
        "messaging_seconds", "bytes_down_per_client", "bytes_up_per_client")
SPLIT = ("seconds", "train_seconds", "crypto_seconds", "messaging_seconds",
         "bytes_down_per_client", "bytes_up_per_client")


def deployable_methods() -> list[str]:
    """Every registered method: each server half reads no client data, so every method
    runs on Flower."""
    from securefl.methods import method_names

    return list(method_names())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """CLI options of ``securefl bench flower-methods``."""
    parser.add_argument("--config", default=DEFAULT_CONFIG, help="experiment TOML (its clients = SuperNodes)")
    parser.add_argument("--methods", default="", help="comma-separated methods (empty: every deployable one)")
    parser.add_argument("--rounds", type=int, default=4, help="rounds of each method")
    parser.add_argument("--mode", default="fast", choices=("fast", "cold", "stock"), help="federation mode")
    parser.add_argument("--poll", type=float, default=0.1, help="poll interval of fast/cold modes (s)")


def validate(args: argparse.Namespace) -> None:
    """Reject bad options before any work."""
    if args.rounds < 1:
        raise InputError("--rounds", args.rounds, "must be >= 1")
    if not Path(args.config).is_file():
        raise InputError("--config", args.config, "no such experiment file")
    allowed = deployable_methods()
    chosen = [m for m in args.methods.split(",") if m]
    unknown = sorted(set(chosen) - set(allowed))
    if unknown:
        raise InputError("--methods", args.methods, f"{unknown} are not deployable methods ({allowed})")


def job_config(path: str, method: str, rounds: int) -> dict[str, Any]:
    """The run config of ``method`` on experiment ``path`` in real mode."""
    from securefl.experiments.config import load_config
    from securefl.experiments.deployment import program_config

    config = load_config(path, methods=[method], rounds=rounds)
    return program_config(config, method, secure="real", timeout=600.0)


def _rounds(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [{k: r[k] for k in KEYS} for r in result["rounds"]]


def _medians(rounds: list[dict[str, Any]]) -> dict[str, float]:
    return {f"median_{k}": statistics.median(float(r[k]) for r in rounds) for k in SPLIT}


def run(args: argparse.Namespace, progress: Progress) -> dict:
    """Every method in process, then on one Flower federation; return the JSON record."""
    from securefl.experiments.deployment import federation_of, in_process
    from securefl.fl.flower.deploy import LocalFederation, wait_result

    validate(args)
    methods = [m for m in args.methods.split(",") if m] or deployable_methods()
    jobs = {m: job_config(args.config, m, args.rounds) for m in methods}
    nodes = federation_of(jobs[methods[0]]).num_clients
    task = progress.add_task("methods on Flower", total=2 * len(methods))
    record: dict[str, Any] = {"config": args.config, "nodes": nodes, "rounds": args.rounds,
                              "mode": args.mode, "poll": args.poll, "secure": "real",
                              "load_average_start": list(os.getloadavg()), "methods": {}}
    for method in methods:
        start = time.perf_counter()
        result = in_process(jobs[method])
        rounds = _rounds(result)
        record["methods"][method] = {"in_process": {"run_seconds": time.perf_counter() - start,
                                                    "rounds": rounds, **_medians(rounds)}}
        progress.advance(task)
    started = time.perf_counter()
    # ProtoFSSL as in the paper shares prototypes without DP: this federation's operator
    # waives the nodes' DP floor (securefl.runtime.policy), the one policy key it relaxes
    with LocalFederation(nodes=nodes, mode=args.mode, poll=args.poll,
                         node_config={"policy-dp-min-noise": 0}) as federation:
        record["federation_start_seconds"] = time.perf_counter() - started
        for method in methods:
            start = time.perf_counter()
            out = federation.launch(jobs[method], name=method)
            result = wait_result(out, 3600, processes=federation.processes)
            rounds = _rounds(result)
            entry = record["methods"][method]
            entry["flower"] = {"run_seconds": time.perf_counter() - start, "rounds": rounds,
                               **_medians(rounds)}
            entry["identical"] = [r["model_digest"] for r in rounds] == \
                [r["model_digest"] for r in entry["in_process"]["rounds"]]
            progress.advance(task)
    record["identical"] = all(m["identical"] for m in record["methods"].values())
    record["load_average_end"] = list(os.getloadavg())
    return record
