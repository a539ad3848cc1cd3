"""Run the methods of an experiment round by round, resumably.

The run is a list of jobs, one per (method, cryptography mode) — with ``--secure both``
each method runs twice with the same seed, real then plaintext.  Each job builds its
method with :func:`securefl.methods.build_method`, calls ``setup`` (warm-up /
pre-training) on the federation's training view and then ``run_round`` for every round.

**Evaluation is the runner's.**  The method never holds a held-out image or label:
``setup`` gets :meth:`~securefl.data.federation.Federation.for_training` (no validation
and no test set).  After every round the runner scores the method's predictions
(:meth:`~securefl.methods.base.Method.score`) on the validation split and on the test set
(:func:`evaluate_round`); the round is selected on validation alone
(:func:`securefl.experiments.results.select_round`), and test accuracy is only reported.

After every round the runner also asks the method for its simulation-only diagnostic
(:meth:`~securefl.methods.base.Method.label_coverage`, FedProp's label coverage; computed
from the simulation's labels, which the runner holds, never sent over the transport) and
stores it in the round's ``label_coverage``.

After every round the runner *commits*: it appends the round's
:class:`~securefl.methods.base.RoundResult`, writes ``checkpoint.pkl`` (the jobs' logs,
the current method's ``state_dict()`` and the run header) and then ``results.json`` —
each file atomically (temporary file + rename), with Ctrl-C deferred until both are on
disk.  So at any moment the output folder holds a valid ``results.json`` of the completed
rounds and a checkpoint consistent with it.  Resuming (:func:`load_state`, then a
:class:`Runner` on it) rebuilds the federation from the stored configuration (the
partition is seeded), runs ``setup`` again, restores the method with ``load_state_dict``
and continues with the next round; because method state includes every RNG state, a
resumed run reproduces the uninterrupted one exactly (same accuracies, same pseudo-label
digests).  Completed jobs are never rerun.

**Randomness.**  Every job gets the simulation seed ``seed`` (the partition too, so every
run with one ``seed`` trains on the same split) and a crypto seed for the secrets that
shape its outputs (:mod:`securefl.methods.base`: FedProp's LSH hyperplanes, ProtoFSSL's
DP noise), chosen once per run by :func:`choose_crypto_seed`:

- ``--secure real``: 128 bits drawn from the OS CSPRNG (``secrets``), so two runs with
  one ``--seed`` use different hyperplanes and noise.  It is kept **only** in
  ``checkpoint.pkl`` -- a resumed run continues with the same secrets and reproduces the
  uninterrupted run exactly -- and erased from it when the run completes; results.json
  says ``crypto_seed: null``.
- ``--secure both``: one seed for the real and the plaintext job of every method (their
  outputs are then bit-identical), drawn from the OS CSPRNG below 2^63 and published in
  results.json (so that run's secrets are not secret).
- ``--secure plaintext``: :func:`~securefl.methods.base.plaintext_crypto_seed` of
  ``seed`` (the placeholder protects nothing; plaintext runs stay reproducible from
  ``seed``), published.

A ``crypto_seed`` in the config replaces the draw in every mode and is published.
results.json states each job's source of randomness (``randomness``).  Keys and masks
that cannot change an output come from the OS CSPRNG in every mode.

Torch runs with ``threads`` CPU threads (config key, default 1): small models on shared
cores are many times faster single-threaded than with oversubscribed OpenMP threads.
FedProp's real SHADE uses the same number of OT worker threads (its outputs do not
depend on it).

**Device.**  The config's ``device`` is resolved once when the run starts
(:func:`securefl.fl.device.resolve_device`; ``auto`` is CUDA when torch sees one), CUDA's
deterministic settings are switched on for it (:func:`securefl.fl.device.configure_determinism`)
and every job's method is built with the resolved name (``cpu``, ``cuda:0``);
results.json records it (``device``, ``device_name``).  A checkpoint from before the key
existed resumes on the CPU, where it ran.

**Evaluation every N rounds.**  With ``eval_every = N`` the runner scores the model after
rounds N, 2N, ... and after the last round; the other rounds' records carry
``validation_accuracy = test_accuracy = None`` and the selection picks among the
evaluated rounds.
"""

from __future__ import annotations

import json
import os
import pickle
import secrets
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol

from securefl.errors import ConfigError
from securefl.experiments.config import ExperimentConfig, config_from_dict, with_data_dir
from securefl.experiments.results import (
    JobLog,
    build_results,
    job_from_dict,
    job_to_dict,
    read_pickle,
    write_pickle,
    write_results,
)

CHECKPOINT_FILE = "checkpoint.pkl"
CHECKPOINT_VERSION = 2


class MethodFactory(Protocol):
    """Builds one job's method (no work beyond validating its keywords)."""

    def __call__(self, name: str, *, secure: str, seed: int, crypto_seed: int | None,
                 sum_backend: str, hyper: dict[str, Any], device: str) -> Any: ...


def build_job_method(name: str, *, secure: str, seed: int, crypto_seed: int | None,
                     sum_backend: str, hyper: dict[str, Any], device: str = "cpu") -> Any:
    """The default factory: :func:`securefl.methods.build_method`; bad keywords -> ConfigError."""
    from securefl.methods import build_method

    try:
        return build_method(name, secure=secure, seed=seed, crypto_seed=crypto_seed,
                            sum_backend=sum_backend, device=device, **hyper)
    except TypeError as exc:
        raise ConfigError(f"hyper[{name}]={hyper!r}: {exc}") from None


def choose_crypto_seed(config: ExperimentConfig) -> tuple[int, bool]:
    """This run's crypto seed and whether it is published in results.json (see the module
    docstring)."""
    from securefl.methods.base import plaintext_crypto_seed

    if config.crypto_seed is not None:
        return config.crypto_seed, True
    if config.secure == "real":
        return secrets.randbits(128), False
    if config.secure == "both":
        return secrets.randbelow(2**63), True
    return plaintext_crypto_seed(config.seed), True


def describe_randomness(config: ExperimentConfig, published: bool) -> list[dict[str, str]]:
    """Each job's source of randomness, for results.json."""
    if config.crypto_seed is not None:
        origin = "the configured crypto_seed (published here: reproducible, not secret)"
    elif not published:
        origin = ("a 128-bit crypto seed drawn from the OS CSPRNG for this run, kept only in "
                  "checkpoint.pkl for --resume and erased when the run completes")
    elif config.secure == "both":
        origin = ("crypto_seed, drawn from the OS CSPRNG for this run and shared by the real "
                  "and plaintext jobs for their bit-identical comparison (published here, so "
                  "this run's secrets are not secret)")
    else:
        origin = "crypto_seed = plaintext_crypto_seed(seed), fixed by the simulation seed"
    jobs = []
    for job in plan_jobs(config):
        secrets_of = ("secrets (LSH seed shares, DP noise)" if job.secure == "real"
                      else "the placeholder's LSH seeds and noise (no secrets in plaintext mode)")
        keys = "; keys and masks from the OS CSPRNG" if job.secure == "real" else ""
        jobs.append({
            "method": job.method,
            "secure": job.secure,
            "randomness": f"simulation from seed {config.seed}; {secrets_of} from {origin}{keys}",
        })
    return jobs


def load_federations(config: ExperimentConfig) -> dict[str, Any]:
    """Load the dataset once and partition it for every method (seeded by the run's seed).

    Methods with the same partition keywords share one :class:`Federation` object.
    """
    from securefl.data import load_dataset, partition

    dataset = load_dataset(config.dataset, data_dir=config.data_dir)
    shared: dict[str, Any] = {}
    federations: dict[str, Any] = {}
    for name in config.methods:
        options = config.partition_for(name)
        key = json.dumps(options, sort_keys=True)
        if key not in shared:
            try:
                shared[key] = partition(dataset, seed=config.seed, **options)
            except TypeError as exc:
                raise ConfigError(f"partition={options!r}: {exc}") from None
        federations[name] = shared[key]
    return federations


def evaluates(round_index: int, rounds: int, eval_every: int) -> bool:
    """Whether the runner scores the model after 0-based round ``round_index`` of
    ``rounds``: every ``eval_every``-th round and always the last (module docstring)."""
    return (round_index + 1) % eval_every == 0 or round_index == rounds - 1


NOT_EVALUATED = {"validation_accuracy": None, "test_accuracy": None}
"""The accuracies of a round the runner did not evaluate (``eval_every``)."""


def evaluate_round(method: Any, federation: Any) -> dict[str, float | None]:
    """The runner's evaluation of ``method``'s current model: ``validation_accuracy``
    (``None`` without a validation split) and ``test_accuracy``."""
    validation, test = federation.validation, federation.test
    return {
        "validation_accuracy": (
            None if validation is None else method.score(validation.x, validation.y)
        ),
        "test_accuracy": method.score(test.x, test.y),
    }


def held_out_sizes(federations: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Per method: the sizes of its validation and test sets (the same for every method
    of a run unless a config gives one method another dataset)."""
    return {
        name: {
            "validation": 0 if fed.validation is None else len(fed.validation),
            "test": len(fed.test),
        }
        for name, fed in federations.items()
    }


@dataclass
class RunState:
    """What ``checkpoint.pkl`` holds: enough to continue the run exactly.

    ``method_state`` is the current job's ``state_dict()`` pickled right after its last
    completed round — a frozen snapshot, so a later interrupt cannot capture half-updated
    weights.  ``crypto_seed`` is the run's crypto seed (a secret in real mode: this file is
    its only copy, until the run completes).
    """

    config: dict[str, Any]
    header: dict[str, Any]
    jobs: list[JobLog]
    current_job: int = 0
    method_state: bytes | None = None
    status: str = "running"
    crypto_seed: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": CHECKPOINT_VERSION,
            "config": self.config,
            "header": self.header,
            "jobs": [job_to_dict(job) for job in self.jobs],
            "current_job": self.current_job,
            "method_state": self.method_state,
            "status": self.status,
            "crypto_seed": self.crypto_seed,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RunState":
        if data.get("version") != CHECKPOINT_VERSION:
            raise ConfigError(
                f"checkpoint version={data.get('version')!r}: expected {CHECKPOINT_VERSION}"
            )
        return cls(
            config=data["config"],
            header=data["header"],
            jobs=[job_from_dict(job) for job in data["jobs"]],
            current_job=data["current_job"],
            method_state=data["method_state"],
            status=data["status"],
            crypto_seed=data["crypto_seed"],
        )


def plan_jobs(config: ExperimentConfig) -> list[JobLog]:
    """One job per method and cryptography mode, methods in config order."""
    return [
        JobLog(method=name, secure=mode, rounds=config.rounds, hyper=config.hyper_for(name))
        for name in config.methods
        for mode in config.secure_modes
    ]


def check_methods(config: ExperimentConfig, factory: MethodFactory = build_job_method) -> None:
    """Build every job's method once, so bad hyper-parameters fail before anything runs."""
    for job in plan_jobs(config):
        factory(job.method, secure=job.secure, seed=config.seed, crypto_seed=None,
                sum_backend=config.aggregation, hyper=job.hyper, device=config.device)


@contextmanager
def _interrupts_deferred() -> Iterator[None]:
    """Hold Ctrl-C (SIGINT) and SIGTERM while the round's files are written; raise
    KeyboardInterrupt right after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = {
        signum: signal.signal(signum, lambda number, frame: received.append(number))
        for signum in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if received:
        raise KeyboardInterrupt


def _accuracies(record: dict[str, Any], *, show_test: bool = True) -> str:
    """``val 91.1% test 90.4%`` of a round record (validation first: it selects), ``val
    91.1%`` alone when ``show_test`` is false, or ``not evaluated``."""
    if record["test_accuracy"] is None:
        return "not evaluated"
    validation = record["validation_accuracy"]
    shown = [] if validation is None else [f"val {100 * validation:.1f}%"]
    if show_test:
        shown.append(f"test {100 * record['test_accuracy']:.1f}%")
    return " ".join(shown) or "test accuracy withheld"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def warm_up_process() -> float:
    """Pay the process's one-time imports that every job would pay, before any job's clock
    starts; returns the seconds spent (the run records them as ``process_warmup_seconds``).

    The first optimizer a process builds imports ``torch._dynamo`` (1-3 s on this project's
    machines): timed inside the first job's setup it was charged to whichever job ran first,
    the real one under ``--secure both``, inflating its time ratio by that much."""
    import torch

    started = time.perf_counter()
    torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    return time.perf_counter() - started


@dataclass
class Runner:
    """Runs (or continues) the jobs of ``state``, writing into ``out``.

    ``federations`` maps each method name to the federation it trains on.

    ``progress`` is an optional rich Progress (or :class:`securefl.progress.PlainProgress`):
    one task per job, advanced per round, its description naming the current phase — the
    runner sets each method's ``on_phase`` callback so that long phases (FedProp's warm-up,
    CrossClientLP) show up there; ``after_round(job, round_index)`` is called after each
    committed round;
    ``artifacts(document, out)`` (plots, README) when the run ends or stops.
    ``show_test`` false keeps test accuracy out of what the runner prints (the progress and
    each job's closing line; the records keep it): for choosing hyper-parameters on
    validation (``securefl run --validation-only``).
    """

    state: RunState
    federations: dict[str, Any]
    out: Path
    factory: MethodFactory = build_job_method
    progress: Any = None
    after_round: Callable[[JobLog, int], None] | None = None
    artifacts: Callable[[dict[str, Any], Path], Any] | None = None
    show_test: bool = True

    @property
    def dataset(self) -> str:
        return self.state.config["dataset"]["name"]

    def document(self) -> dict[str, Any]:
        """The ``results.json`` document of the committed state."""
        header = {**self.state.header, "updated": _now(), "load_average": os.getloadavg()}
        return build_results(
            jobs=self.state.jobs, dataset=self.dataset, status=self.state.status, header=header
        )

    def _record_warm_up(self, seconds: float) -> None:
        """Add this process's warm-up to the run's: a resumed run is several processes, each
        paying its own imports (``process_warmup_seconds_by_process``, in order; their sum is
        ``process_warmup_seconds``, the time no method was charged)."""
        header = self.state.header
        earlier = header.get("process_warmup_seconds_by_process")
        if earlier is None:  # a checkpoint written before the list was kept holds one process's
            earlier = [header["process_warmup_seconds"]] if "process_warmup_seconds" in header else []
        header["process_warmup_seconds_by_process"] = [*earlier, seconds]
        header["process_warmup_seconds"] = sum(header["process_warmup_seconds_by_process"])

    def _commit(self) -> None:
        write_pickle(self.state.to_dict(), self.out / CHECKPOINT_FILE)
        write_results(self.document(), self.out)

    def run(self) -> dict[str, Any]:
        """Run every unfinished job; return the final ``results.json`` document."""
        import torch

        from securefl.fl.device import configure_determinism, describe_device, resolve_device

        torch.set_num_threads(self.state.config.get("threads", 1))
        device = resolve_device(self.state.config.get("device", "cpu"))
        configure_determinism(device)
        self.state.header.update(describe_device(device))
        self._record_warm_up(warm_up_process())
        self.out.mkdir(parents=True, exist_ok=True)
        if "held_out" not in self.state.header:
            self.state.header["held_out"] = held_out_sizes(self.federations)
        with _interrupts_deferred():
            self.state.status = "running"
            self._commit()
        try:
            for index, job in enumerate(self.state.jobs):
                if job.status != "complete":
                    self._run_job(index, job)
        except KeyboardInterrupt:
            self._stop("interrupted")
            raise
        except Exception as exc:
            self.state.jobs[self.state.current_job].error = f"{type(exc).__name__}: {exc}"
            self._stop("failed")
            raise
        with _interrupts_deferred():
            self.state.status = "complete"
            self.state.method_state = None
            if self.state.header.get("crypto_seed") is None:
                self.state.crypto_seed = None  # a secret no longer needed for --resume
            self._commit()
        document = self.document()
        if self.artifacts is not None:
            self.artifacts(document, self.out)
        return document

    def _stop(self, status: str) -> None:
        with _interrupts_deferred():
            self.state.status = status
            job = self.state.jobs[self.state.current_job]
            if job.status == "running":
                job.status = status
            self._commit()
        if self.artifacts is not None and any(j.rounds_completed for j in self.state.jobs):
            self.artifacts(self.document(), self.out)

    def _run_job(self, index: int, job: JobLog) -> None:
        config = self.state.config
        resuming = self.state.current_job == index and self.state.method_state is not None
        self.state.current_job = index
        label = f"{job.method} ({job.secure})"
        task = self._task(job, f"{label}: setup")
        method = self.factory(
            job.method, secure=job.secure, seed=config["seed"], crypto_seed=self.state.crypto_seed,
            sum_backend=config["aggregation"], hyper=job.hyper, device=self.state.header["device"],
        )
        stage = [f"{label}: setup"]
        method.on_phase = lambda text: self._describe(task, f"{stage[0]}: {text}")
        federation = self.federations[job.method]
        started = time.perf_counter()
        training = federation.for_training()
        method.setup(training)
        setup_seconds = time.perf_counter() - started
        if resuming:
            method.load_state_dict(pickle.loads(self.state.method_state))
        with _interrupts_deferred():
            if not resuming:
                job.setup_seconds = setup_seconds
            job.status = "running"
            self._commit()
        self._describe(task, label)
        for round_index in range(job.rounds_completed, job.rounds):
            stage[0] = f"{label} round {round_index + 1}/{job.rounds}"
            result = method.run_round(round_index)
            if result.round != round_index:
                raise ConfigError(
                    f"round={result.round!r}: {job.method} reported a different round than "
                    f"{round_index}"
                )
            result.label_coverage = method.label_coverage(training)
            scored = evaluates(round_index, job.rounds, config.get("eval_every", 1))
            record = {**result.to_dict(),
                      **(evaluate_round(method, federation) if scored else NOT_EVALUATED)}
            state = pickle.dumps(method.state_dict(), protocol=pickle.HIGHEST_PROTOCOL)
            with _interrupts_deferred():
                job.round_results.append(record)
                self.state.method_state = state
                self._commit()
            if self.progress is not None:
                self.progress.update(task, completed=job.rounds_completed)
                self._describe(task, f"{label}: {_accuracies(record, show_test=self.show_test)}")
            if self.after_round is not None:
                self.after_round(job, round_index)
        with _interrupts_deferred():
            job.status = "complete"
            self.state.method_state = None
            self._commit()
        if self.progress is not None:
            summary = job.summary(self.dataset)
            if self.show_test:
                score = (f"test accuracy {100 * summary['selected_test_accuracy']:.2f}% "
                         f"(final {100 * summary['final_accuracy']:.2f}%)")
            elif summary["selected_validation_accuracy"] is None:
                score = "no validation split, test accuracy withheld"
            else:
                score = ("validation accuracy "
                         f"{100 * summary['selected_validation_accuracy']:.2f}%")
            self.progress.console.print(
                f"{job.method} ({job.secure}): round {summary['selected_round'] + 1} selected "
                f"by {summary['selected_by']}, {score}, {summary['seconds']:.1f} s"
            )

    def _task(self, job: JobLog, description: str) -> Any:
        if self.progress is None:
            return None
        return self.progress.add_task(
            description, total=job.rounds, completed=job.rounds_completed
        )

    def _describe(self, task: Any, text: str) -> None:
        if self.progress is not None:
            self.progress.update(task, description=text)


def new_state(config: ExperimentConfig, header: dict[str, Any]) -> RunState:
    """A fresh run of ``config``, with its crypto seed (:func:`choose_crypto_seed`)."""
    crypto_seed, published = choose_crypto_seed(config)
    randomness = {
        "crypto_seed": crypto_seed if published else None,
        "randomness": describe_randomness(config, published),
    }
    return RunState(
        config=config.to_dict(),
        header={**header, **randomness, "started": _now()},
        jobs=plan_jobs(config),
        crypto_seed=crypto_seed,
    )


def load_state(folder: str | Path) -> RunState:
    """The checkpoint of an earlier run in ``folder`` (ConfigError if absent or unreadable)."""
    path = Path(folder) / CHECKPOINT_FILE
    if not path.is_file():
        raise ConfigError(f"resume={str(folder)!r}: no {CHECKPOINT_FILE} there (not a run folder)")
    try:
        data = read_pickle(path)
    except Exception as exc:  # any unpickling failure means an unusable checkpoint
        raise ConfigError(f"resume={str(folder)!r}: unreadable checkpoint ({exc})") from None
    return RunState.from_dict(data)


def state_config(state: RunState, data_dir: str | None = None) -> ExperimentConfig:
    """The validated configuration stored in a checkpoint (optionally with a new data folder)."""
    return with_data_dir(config_from_dict(state.config), data_dir)
