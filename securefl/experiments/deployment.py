"""Program ``"method"``: one job of an experiment -- a split method, its data and its
evaluation -- as a server half and a client half for any transport (Flower's app serves
it: ``securefl/fl/flower/app.py:PROGRAMS``).

Run config (Flower's ``run_config``, flat scalars; the same dict in process;
:func:`program_config` writes it):

=================  ===========================================================================
``method``         the method's name (:func:`securefl.methods.method_names`; every method
                   runs on any transport)
``secure``         ``real`` or ``plaintext`` (default: the experiment's mode; ``both`` -> real)
``experiment``     JSON of an experiment configuration (the TOML-shaped dict of
                   :func:`securefl.experiments.config.config_from_dict`; default: the digits
                   default).  Its ``[partition] num_clients`` must equal the number of nodes
``rounds``         overrides the experiment's rounds (optional)
``reports``        whether clients send the simulation's reports (pseudo-label digest and
                   accuracy; :mod:`securefl.methods.halves`), default true
``timeout``        seconds an exchange waits for replies (0: forever); a client that has not
                   answered is a dropout at that step
=================  ===========================================================================

Node config: ``partition-id`` (the client index), ``num-partitions`` (must equal the
experiment's ``num_clients``), ``data-dir`` (where MNIST etc. are; digits needs none).

**Same split as the simulator.**  Every party loads the dataset and calls
:func:`securefl.data.partition` with the experiment's partition keywords and seed -- the
call :func:`securefl.experiments.load_federations` makes -- so node *k* holds exactly
simulator client *k*'s data.  The server half keeps the validation and test sets (the
runner's evaluation, :func:`securefl.experiments.evaluate_round`) and gives the method
the federation's training view, of which a method reads only public facts.
The method is built as the runner builds it (:func:`securefl.experiments.runner.build_job_method`)
with the crypto seed of :func:`job_crypto_seed`: the experiment's ``crypto_seed`` where it
sets one, the plaintext seed in plaintext mode, else none (real mode: every secret from
each party's OS CSPRNG; a secret seed never travels in a run config).

So the program over :class:`~securefl.runtime.transport.InProcessTransport` gives, round for
round, what ``securefl run`` gives for the job, and on Flower the same (the deployment
test checks it on a SuperLink with three SuperNodes).

Result (``ServerHalf.run``): ``{"program", "method", "secure", "rounds": [per round: the
RoundResult fields, validation and test accuracy, model digest], "final_accuracy",
"model_digest"}``.

Who learns what: the method's (see its module); the server half additionally holds the
held-out sets, as the runner does.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from securefl.errors import ConfigError, InputError
from securefl.methods.halves import PROGRAM, LocalData, MethodProgramClient, local_data, run_config
from securefl.runtime.transport import (
    ClientHalf,
    InProcessTransport,
    NodeContext,
    Record,
    ServerHalf,
    Transport,
)

SECURE = ("real", "plaintext")


@dataclass(frozen=True, eq=False)
class Job:
    """One job of program ``method``: the experiment, the method, its mode and rounds."""

    config: Any
    method: str
    secure: str
    rounds: int
    reports: bool
    timeout: float | None
    method_run: dict[str, Any]
    """The method's client run config (:func:`securefl.methods.halves.run_config`)."""


def _experiment(text: str | None) -> Any:
    from securefl.experiments.config import DEFAULT_CONFIG, config_from_dict, read_toml

    raw = read_toml(DEFAULT_CONFIG) if text is None else json.loads(text)
    return config_from_dict(raw, source=None if text is not None else str(DEFAULT_CONFIG))


@lru_cache(maxsize=8)
def _job(method: str, secure: str | None, experiment: str | None, rounds: int | None,
         reports: bool, timeout: float) -> Job:
    from securefl.methods import METHOD_NAMES

    try:
        config = _experiment(experiment)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"run config 'experiment' is not JSON: {exc}") from None
    if method not in METHOD_NAMES:
        raise InputError("method", method, f"must be one of {METHOD_NAMES}")
    mode = secure or ("real" if config.secure == "both" else config.secure)
    if mode not in SECURE:
        raise InputError("secure", mode, f"must be one of {SECURE}")
    if rounds is not None:
        if int(rounds) < 1:
            raise InputError("rounds", rounds, "must be >= 1")
        config = replace(config, rounds=int(rounds))
    job = Job(config, method, mode, config.rounds, bool(reports), float(timeout) or None, {})
    job.method_run.update(run_config(build(job), reports=job.reports))
    return job


def job_of(run: Mapping[str, Any]) -> Job:
    """The :class:`Job` a run config describes (cached per process)."""
    if "method" not in run:
        raise ConfigError("program 'method' needs run config 'method' (a method name)")
    rounds = run.get("rounds")
    return _job(str(run["method"]), run.get("secure"), run.get("experiment"),
                None if rounds is None else int(rounds), bool(run.get("reports", True)),
                float(run.get("timeout", 0.0)))


def program_config(config: Any, method: str, *, secure: str | None = None,
                   rounds: int | None = None, reports: bool = True,
                   timeout: float = 0.0) -> dict[str, Any]:
    """The run config of one job of ``config`` (an :class:`ExperimentConfig`)."""
    run: dict[str, Any] = {"program": PROGRAM, "method": method,
                           "experiment": json.dumps(config.to_dict(), sort_keys=True),
                           "reports": bool(reports), "timeout": float(timeout),
                           "num-partitions": int(config.partition_for(method)["num_clients"])}
    if secure is not None:
        run["secure"] = secure
    if rounds is not None:
        run["rounds"] = int(rounds)
    return run


def job_crypto_seed(job: Job) -> int | None:
    """The crypto seed the job's method gets (module docstring)."""
    from securefl.methods.base import plaintext_crypto_seed

    if job.config.crypto_seed is not None:
        return job.config.crypto_seed
    return plaintext_crypto_seed(job.config.seed) if job.secure == "plaintext" else None


def build(job: Job) -> Any:
    """The job's method, built as the runner builds it."""
    from securefl.experiments.runner import build_job_method

    return build_job_method(job.method, secure=job.secure, seed=job.config.seed,
                            crypto_seed=job_crypto_seed(job), sum_backend=job.config.aggregation,
                            hyper=job.config.hyper_for(job.method))


def dataset(name: str, data_dir: str | None = None) -> Any:
    """:func:`securefl.data.load_dataset`, cached per process (a warm executor loads the
    default once and every forked message handler inherits it).  The cache key is always
    ``(name, data_dir)``: ``dataset("digits")`` and ``dataset("digits", None)`` share it."""
    return _cached_dataset(name, data_dir)


@lru_cache(maxsize=2)
def _cached_dataset(name: str, data_dir: str | None) -> Any:
    from securefl.data import load_dataset

    return load_dataset(name, data_dir=data_dir)


@lru_cache(maxsize=4)
def _federation(experiment: str | None, method: str, data_dir: str | None) -> Any:
    from securefl.data import partition
    from securefl.experiments.config import with_data_dir

    config = with_data_dir(_experiment(experiment), data_dir)
    data = dataset(config.dataset, config.data_dir)
    try:
        return partition(data, seed=config.seed, **config.partition_for(method))
    except TypeError as exc:
        raise ConfigError(f"partition={config.partition_for(method)!r}: {exc}") from None


def federation_of(run: Mapping[str, Any], data_dir: str | None = None) -> Any:
    """The job's federation, as :func:`securefl.experiments.load_federations` splits it
    (cached per process; ``data_dir`` from the node config replaces the experiment's)."""
    return _federation(run.get("experiment"), str(run["method"]), data_dir or None)


def model_digest(method: Any) -> str:
    """SHA-256 of the state dicts of ``method``'s public ``nn.Module`` attributes (sorted
    by name, then state key: dtype, shape and bytes of every tensor)."""
    from torch import nn

    digest = hashlib.sha256()
    for name in sorted(vars(method)):
        module = vars(method)[name]
        if name.startswith("_") or not isinstance(module, nn.Module):
            continue
        digest.update(name.encode() + b"\0")
        for key, tensor in module.state_dict().items():
            array = tensor.detach().cpu().contiguous().numpy()
            digest.update(f"{key}|{array.dtype}|{array.shape}".encode())
            digest.update(array.tobytes())
    return digest.hexdigest()


class ExperimentServer(ServerHalf):
    """Server half of program ``method``: the runner's loop for one job over a transport."""

    program = PROGRAM

    def run(self, transport: Transport, run_config: Mapping[str, Any]) -> dict[str, Any]:
        import torch

        from securefl.experiments.runner import evaluate_round

        job = job_of(run_config)
        torch.set_num_threads(job.config.threads)
        federation = federation_of(run_config, run_config.get("data-dir"))
        expected = tuple(range(federation.num_clients))
        if tuple(transport.clients) != expected:
            raise InputError("clients", transport.clients,
                             f"the experiment's partition needs clients {expected}")
        method = build(job)
        transport.timeout = job.timeout
        method.setup(federation.for_training(), transport=transport)
        rounds = []
        for r in range(job.rounds):
            start = time.perf_counter()
            result = method.run_round(r)
            record = {**result.to_dict(), **evaluate_round(method, federation),
                      "model_digest": model_digest(method),
                      "evaluation_seconds": time.perf_counter() - start - result.seconds}
            rounds.append(record)
            transport.log({"event": "round", "round": r, "test_accuracy": record["test_accuracy"]})
        return {"program": PROGRAM, "method": job.method, "secure": job.secure, "rounds": rounds,
                "final_accuracy": rounds[-1]["test_accuracy"],
                "model_digest": rounds[-1]["model_digest"]}


class ExperimentClient(ClientHalf):
    """Client half of program ``method``: loads the node's partition and serves the
    method's client half (:class:`securefl.methods.halves.MethodProgramClient`)."""

    program = PROGRAM

    @classmethod
    def warm_up(cls) -> None:
        """Import every method's module and the experiment configuration (validating the
        digits default imports them all), load the default dataset (digits), and take
        torch's first training step (about 3 s the first time in a process; single-threaded,
        so that no thread pool exists when a warm executor forks)."""
        import torch

        from securefl.experiments.config import load_config
        from securefl.fl import train_supervised
        from securefl.methods import METHOD_NAMES, method_class

        for name in METHOD_NAMES:
            method_class(name)
        load_config(None)
        dataset("digits")
        torch.set_num_threads(1)
        model = torch.nn.Linear(4, 2)
        train_supervised(model, torch.zeros(2, 4).numpy(), torch.zeros(2, dtype=torch.int64).numpy(),
                         epochs=1, batch_size=2, lr=0.1, generator=torch.Generator().manual_seed(0))

    def handle(self, step: str, request: Record, state: Record, node: NodeContext) -> Record:
        import torch

        job = job_of(node.run_config)
        # the experiment's thread count, as the simulator trains: a fresh ClientApp process
        # (Flower's stock and cold modes) starts with torch's default, whose float
        # reductions differ in the last bits
        torch.set_num_threads(job.config.threads)
        data = node.data
        if data is None:
            federation = federation_of(node.run_config, node.node_config.get("data-dir"))
            declared = node.node_config.get("num-partitions")
            if declared is not None and int(declared) != federation.num_clients:
                raise InputError("num-partitions", declared,
                                 f"node config disagrees with the partition's {federation.num_clients}")
            if not 0 <= node.partition < federation.num_clients:
                raise InputError("partition-id", node.partition,
                                 f"must lie in 0..{federation.num_clients - 1}")
            data = local_data(federation, node.partition)
        if not isinstance(data, LocalData):
            raise ConfigError(f"node {node.partition}: local data must be a LocalData")
        local = NodeContext(node.partition, node.node_config, job.method_run, data)
        return MethodProgramClient().handle(step, request, state, local)


def in_process(run: Mapping[str, Any], **options: Any) -> dict[str, Any]:
    """Program ``method`` with run config ``run`` on an
    :class:`~securefl.runtime.transport.InProcessTransport` whose nodes load their own data,
    as SuperNodes do (``options``: the transport's ``dropouts``, ``intercept``, ...)."""
    federation = federation_of(run)
    count = federation.num_clients
    nodes = [NodeContext(k, {"partition-id": k, "num-partitions": count}, dict(run))
             for k in range(count)]
    return ExperimentServer().run(InProcessTransport(ExperimentClient(), nodes, **options), run)
