"""The transport pilot: FedAvg of a small model with securefl's secure aggregation, written
once as a server half and a client half and run by any transport (program ``pilot-fedavg``).

Each round t: the server samples ``clients-per-round`` clients with
:func:`securefl.fl.sample_clients` from ``SimulationRNG(seed)`` and sends each the global
model theta (float64 vector).  Client k loads its partition -- the same
:func:`securefl.data.partition` call as the simulator with the run's seed, so node k of
a deployment holds exactly simulator client k's data -- trains E epochs of SGD
(:func:`securefl.fl.train_supervised`) with the generator of
:func:`securefl.fl.transport.client_generator` ``(seed, t, k)``, and submits
``[n_k theta_k, n_k]`` in fixed point (Z_(2^64), scale 2^32) to the secure sum of
:mod:`securefl.fl.secure_sum_steps`.  The server decodes the sum and sets
theta = (sum_k n_k theta_k) / (sum_k n_k) over the sum's survivors, then evaluates
theta on the test set.

A round is four exchanges: ``train`` (training + secure-aggregation round 0) and the
three secure-aggregation exchanges.  Run-config keys (Flower's ``run_config``; the same
dict in process): ``dataset``, ``seed``, ``scheme``, ``labeled-fraction``,
``num-partitions``, ``labels`` (``labeled``: train on the client's labels only, like
``fedavg-labeled``; ``all``: every label), ``rounds``, ``clients-per-round``,
``local-epochs``, ``batch-size``, ``lr``, ``momentum``, ``weight-decay``, ``model``,
``threshold`` (0: a majority of the round's clients), ``timeout`` (seconds per exchange;
0: wait for every reply), ``threads`` (torch threads, default 1, so that results do not
depend on the machine's core count).  Node-config keys: ``partition-id``,
``num-partitions`` (must equal the run's), ``data-dir``.

Dropouts follow secure aggregation: a client that stops answering before its masked
input is not in the round's average; one that stops at the unmask step is.  More than
``n - threshold`` dropouts in a round raise :class:`~securefl.errors.DropoutError`.

Who learns what: the server learns each round's average model (and which clients
answered); clients learn the global model.  No party sees another's data or local model.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import numpy as np

from securefl.crypto.fixed_point import FixedPoint
from securefl.crypto.secagg import SecAggConfig
from securefl.errors import InputError
from securefl.fl import secure_sum_steps
from securefl.fl.transport import ClientHalf, NodeContext, Record, ServerHalf, Transport, client_generator

PROGRAM = "pilot-fedavg"

DEFAULTS: dict[str, Any] = {
    "dataset": "digits", "seed": 0, "scheme": "iid", "labeled-fraction": 0.1,
    "num-partitions": 3, "labels": "labeled", "rounds": 2, "clients-per-round": 3,
    "local-epochs": 5, "batch-size": 10, "lr": 0.1, "momentum": 0.9, "weight-decay": 0.0,
    "model": "auto", "threshold": 0, "timeout": 0.0, "threads": 1,
}


def settings(run_config: Mapping[str, Any]) -> dict[str, Any]:
    """``DEFAULTS`` overridden by ``run_config``; unknown keys are ignored."""
    merged = dict(DEFAULTS)
    merged.update({k: v for k, v in run_config.items() if k in DEFAULTS})
    if merged["labels"] not in ("labeled", "all"):
        raise InputError("labels", merged["labels"], "must be 'labeled' or 'all'")
    for name in ("rounds", "clients-per-round", "local-epochs", "batch-size", "num-partitions",
                 "threads"):
        if int(merged[name]) < 1:
            raise InputError(name, merged[name], "must be a positive integer")
    return merged


@lru_cache(maxsize=2)
def dataset(name: str, data_dir: str = "") -> Any:
    """:func:`securefl.data.load_dataset`, cached per process (a warm executor loads the
    default once and every forked message handler inherits it)."""
    from securefl.data import load_dataset

    return load_dataset(name, data_dir=data_dir or None)


@lru_cache(maxsize=4)
def _federation(name: str, data_dir: str, seed: int, scheme: str, num_clients: int,
                labeled_fraction: float) -> Any:
    from securefl.data import partition

    return partition(dataset(name, data_dir), scheme=scheme, num_clients=num_clients, seed=seed,
                     labeled_fraction=labeled_fraction)


def federation(run: Mapping[str, Any], data_dir: str = "") -> Any:
    """The run's federation (cached per process)."""
    return _federation(str(run["dataset"]), data_dir, int(run["seed"]), str(run["scheme"]),
                       int(run["num-partitions"]), float(run["labeled-fraction"]))


def _model(run: Mapping[str, Any], fed: Any) -> Any:
    from securefl.models import build_model

    return build_model(str(run["model"]), input_shape=tuple(fed.input_shape),
                       num_classes=fed.num_classes, seed=int(run["seed"]))


def model_digest(vector: np.ndarray) -> str:
    """SHA-256 of a model vector's float64 bytes."""
    return hashlib.sha256(np.ascontiguousarray(vector, dtype=np.float64).tobytes()).hexdigest()


def local_update(run: Mapping[str, Any], fed: Any, client: int, round_index: int,
                 vector: np.ndarray) -> tuple[np.ndarray, float]:
    """ClientUpdate of ``client`` from global ``vector``: (new vector, examples n_k)."""
    import torch

    from securefl.fl import load_model_vector, model_vector, train_supervised

    torch.set_num_threads(int(run["threads"]))
    data = fed.clients[client]
    mask = data.labeled if run["labels"] == "labeled" else np.ones(len(data), dtype=bool)
    model = _model(run, fed)
    load_model_vector(model, vector)
    train_supervised(model, data.x[mask], data.y[mask], epochs=int(run["local-epochs"]),
                     batch_size=int(run["batch-size"]), lr=float(run["lr"]),
                     momentum=float(run["momentum"]), weight_decay=float(run["weight-decay"]),
                     generator=client_generator(int(run["seed"]), round_index, client))
    return model_vector(model), float(mask.sum())


class PilotClient(ClientHalf):
    """Client half: ``train`` (ClientUpdate + secure-sum round 0), then the secure sum."""

    program = PROGRAM

    def handle(self, step: str, request: Record, state: Record, node: NodeContext) -> Record:
        run = settings(node.run_config)
        reply = Record()
        if step in secure_sum_steps.STEPS:
            start = time.perf_counter()
            secure_sum_steps.answer(request, state, reply)
            reply.config["crypto_seconds"] = time.perf_counter() - start
            return reply
        if step != "train":
            raise InputError("step", step, f"{PROGRAM} knows 'train' and {secure_sum_steps.STEPS}")
        declared = node.node_config.get("num-partitions")
        if declared is not None and int(declared) != int(run["num-partitions"]):
            raise InputError("num-partitions", declared,
                             f"node config disagrees with the run's {run['num-partitions']}")
        fed = federation(run, str(node.node_config.get("data-dir", "")))
        start = time.perf_counter()
        vector, examples = local_update(run, fed, node.partition, int(request.config["round"]),
                                        request.arrays["model"])
        reply.config["train_seconds"] = time.perf_counter() - start
        start = time.perf_counter()
        members = int(request.config["members"])
        encoding = FixedPoint(members)
        config = SecAggConfig(
            bytes(request.config["secagg_session"]), members, int(request.config["threshold"]),
            vector.size + 1, encoding.modulus_bits)
        secure_sum_steps.start(state, reply, index=int(request.config["index"]), config=config,
                               encoded=encoding.encode(np.append(vector * examples, examples),
                                                       name="model"))
        reply.config["crypto_seconds"] = time.perf_counter() - start
        return reply


class PilotServer(ServerHalf):
    """Server half: sampling, secure FedAvg, evaluation; returns per-round records."""

    program = PROGRAM

    def run(self, transport: Transport, run_config: Mapping[str, Any]) -> dict[str, Any]:
        import torch

        from securefl.fl import SimulationRNG, evaluate, load_model_vector, model_vector, sample_clients

        run = settings(run_config)
        torch.set_num_threads(int(run["threads"]))
        fed = federation(run, str(run_config.get("data-dir", "")))
        expected = tuple(range(int(run["num-partitions"])))
        if transport.clients != expected:
            raise InputError("clients", transport.clients, f"the run needs partitions {expected}")
        rng = SimulationRNG.from_seed(int(run["seed"]))
        model = _model(run, fed)
        timeout = float(run["timeout"]) or None
        rounds = []
        for t in range(int(run["rounds"])):
            start = time.perf_counter()
            members = [int(c) for c in sample_clients(
                rng.numpy, len(expected), min(int(run["clients-per-round"]), len(expected)))]
            threshold = int(run["threshold"]) or len(members) // 2 + 1
            vector = model_vector(model)
            config = secure_sum_steps.new_config(members, threshold=threshold, dim=vector.size + 1)
            before = (dict(transport.stats.bytes_down), dict(transport.stats.bytes_up))
            requests = {}
            for index, client in enumerate(members):
                request = Record({"model": vector}, {
                    "round": t, "members": len(members), "index": index,
                    "threshold": threshold, "secagg_session": config.session})
                requests[client] = request
            train = transport.exchange("train", requests, timeout=timeout)
            outcome = secure_sum_steps.aggregate_steps(transport, config, members, train,
                                                       timeout=timeout)
            total = FixedPoint(len(members)).decode(outcome.total)
            load_model_vector(model, total[:-1] / total[-1])
            eval_start = time.perf_counter()
            accuracy = evaluate(model, fed.test.x, fed.test.y)
            eval_seconds = time.perf_counter() - eval_start
            rounds.append(_round_record(t, members, accuracy, model_vector(model), train, outcome,
                                        time.perf_counter() - start, eval_seconds,
                                        transport, before))
            transport.log({"event": "round", "round": t, "accuracy": accuracy})
        return {"program": PROGRAM, "settings": run, "rounds": rounds,
                "final_accuracy": rounds[-1]["accuracy"],
                "model_digest": rounds[-1]["model_digest"]}


def _round_record(t: int, members: list[int], accuracy: float, vector: np.ndarray, train: Any,
                  outcome: secure_sum_steps.SecureSumOutcome, seconds: float, eval_seconds: float,
                  transport: Transport, before: tuple[dict, dict]) -> dict[str, Any]:
    """One round's figures: accuracy, digest, who took part, where the time went, bytes."""
    exchanges = [train, *outcome.exchanges]
    compute = max((r.config.get("train_seconds", 0.0) for r in train.replies.values()), default=0.0)
    client_crypto = sum(max((r.config.get("crypto_seconds", 0.0) for r in e.replies.values()),
                            default=0.0) for e in exchanges)
    handler = sum(max(e.client_seconds.values(), default=0.0) for e in exchanges)
    messaging = sum(e.seconds for e in exchanges) - handler
    down = {c: transport.stats.bytes_down.get(c, 0) - before[0].get(c, 0) for c in members}
    up = {c: transport.stats.bytes_up.get(c, 0) - before[1].get(c, 0) for c in members}
    return {
        "round": t, "accuracy": accuracy, "model_digest": model_digest(vector),
        "members": members, "survivors": list(outcome.survivors),
        "dropped": {k: list(v) for k, v in outcome.dropped.items() if v},
        "failed": {str(c): text for c, text in outcome.failed.items()},
        "seconds": seconds, "compute_seconds": compute,
        "crypto_seconds": client_crypto + outcome.server_seconds,
        "server_crypto_seconds": outcome.server_seconds,
        "messaging_seconds": messaging, "evaluation_seconds": eval_seconds,
        "bytes_down_per_client": float(np.mean(list(down.values()))),
        "bytes_up_per_client": float(np.mean(list(up.values()))),
    }
