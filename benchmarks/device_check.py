"""Device check: does securefl train on ``--device`` as it does on the CPU, and how fast?

    python benchmarks/device_check.py --device cuda --out benchmarks/results/device_check_<gpu>.json

One JSON record with four parts, run in the order of ``--parts`` (default: all, as listed)
and saved after each, so that a run stopped at a lent machine's time limit keeps what it
measured; a part that raises is recorded as ``{"failed": error}`` and the others still run.

``round``
    FedProp rounds of FedProp's CIFAR-10 setting (``experiments/cifar10-fedprop.toml``:
    ``cnn13``, 100 clients of which 5 train per round, E = 5 local epochs, 10 % labeled,
    LSH L = 4096, k = 10, α = 0.99, horizontal flips; plaintext, since the paper's table
    uses plaintext placeholders) on synthetic CIFAR-sized data (50,000 training and 10,000
    test images by default), on ``--device`` only: one warm-up round, then ``--round-rounds``
    FedProp rounds, each evaluated on validation and test.  ``round_seconds`` are the
    method's own seconds per round (local training, embeddings, CrossClientLP);
    ``wall_seconds_between_rounds`` the wall time from the end of one round to the end of
    the next, evaluation and checkpoint included (issue 22's goal: <= 20 s).
``throughput``
    Training images per second of ``cnn13`` (FedProp's CIFAR CNN) and ``wrn28_2``
    (FedAnchor's Wide ResNet-28-2): SGD steps on a fixed random batch after warm-up steps,
    timed with the device synchronised, on the CPU with one thread (issue 22's reference:
    one core), on the CPU with ``--threads`` and on the device; ``speedup_over_one_core``
    divides each rate by the one-thread rate.
``job``
    A short CIFAR-shaped ``securefl run`` (plaintext) on synthetic 32x32x3 images (0.8 x a
    sparse coarse colour mosaic per class + 0.2 x uniform noise; written as an ``.npz`` in a
    temporary folder, nothing downloaded), with the job's own learning settings
    (:data:`JOB_HYPER`), run through ``securefl.cli.main`` on the CPU at
    seeds 0 .. ``--reference-seeds`` - 1 and twice on ``--device`` at seed 0.  Checks:
    ``protocol_outputs_equal`` (every method's rounds, bytes per client per round and
    evaluated rounds agree between the CPU run and the device runs at seed 0: the protocol
    does not depend on where the model trains), ``accuracies_within_noise`` (each method's
    final test accuracy on the device lies within the range of the CPU seeds' widened by 4
    binomial standard errors, ``4 sqrt(p (1 - p) / n_test)``: a device draws its own random
    streams, so a device run is one more draw of the training randomness and only
    statistical agreement is promised; on a job this short that randomness is large), and
    ``device_runs_identical`` (the two device runs agree in every accuracy and pseudo-label
    digest of every round: CUDA's deterministic settings hold).  ``results.json``'s
    ``device`` and ``device_name`` are kept per run.
``hamming``
    ``securefl bench hamming --n N --parties P --backend lwe|rlwe --device D`` for each of
    ``--hamming-shapes`` on the CPU and the device: its record (``verified``: the secure
    matrix equals plaintext; ``seconds``, ``cpu_seconds``, ``fixed_seconds`` and
    ``per_pair_seconds``), or ``failed`` with the error.  ``hamming_exact`` says every one
    verified, and ``passed`` requires it.

``environment`` holds torch's version and CUDA build, the device's name and the load average.
``--device cpu`` runs the same parts on the CPU (the test suite does so at tiny sizes, so
that this script cannot rot).  Exit status 0 when every check holds, 1 otherwise.

Every method imports securefl's cryptography, so the machine needs cryptography,
pycryptodome, numba, faiss-cpu, dp-accounting and tenseal (wheels: docs/install.md), though
every run here is plaintext.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

JOB_METHODS = ("fedavg-labeled", "fedprop", "fedsemi-mt", "fedanchor", "protofssl",
               "fedavg-fixmatch")
THROUGHPUT_MODELS = ("cnn13", "wrn28_2")
PARTS = ("round", "throughput", "job", "hamming")
JOB_HYPER = {"fedavg-labeled": {"lr": 0.03}, "fedprop": {"lr": 0.03},
             "fedavg-fixmatch": {"lr": 0.03}, "fedanchor": {"server_batch_size": 64}}
"""The job's settings that differ from the methods' defaults, so that each method trains on
the synthetic job at every seed instead of sometimes collapsing to one class (which would
make a device's accuracy one more draw of a bimodal outcome).  Measured on the CPU, seeds
0-5, 3 rounds (AMD EPYC, 2026-11-27): at the digits lr 0.1 labeled-only FedAvg ended between
8.5 % and 89 % and FedProp at chance at every seed; FedAnchor's digits server batch of 16
collapsed in pre-training at 2 of 6 seeds (at 6 of 6 with temperature 0.1), at 64 at none.
With these settings FedProp, FedAnchor and ProtoFSSL reached 100 % at every seed, FedSemi-MT
89-100 %, labeled-only FedAvg and FedAvg+FixMatch 62-100 % (three rounds of 45 labels per
client leave them short of converged)."""
NOISE_SE = 4.0
"""Accuracies agree "within noise" when they differ by at most this many standard errors."""


def synthetic_cifar(path: Path, *, n_train: int, n_test: int, classes: int, seed: int) -> Path:
    """Write a CIFAR-shaped ``.npz`` (``x_train, y_train, x_test, y_test``; images
    ``(n, 3, 32, 32)`` uint8): image = 0.8 template[y] + 0.2 uniform noise, each template a
    random 4 x 4 mosaic of 8 x 8 blocks per colour channel, each block lit (1) with
    probability 0.3 and dark (0) otherwise.  Coarse, so that a convolutional network with
    global pooling learns it in a few steps (pixel-level random templates it cannot); sparse,
    so that the inputs' mean (about 0.34) stays near MNIST's rather than 0.5 (on dense
    uniform mosaics FedSemi-MT ended at 41 % and 72 % at two of five CPU seeds, at 89 % or
    more at all six here)."""
    rng = np.random.default_rng(seed)
    lit = (rng.uniform(size=(classes, 3, 4, 4)) < 0.3).astype(np.float64)
    templates = np.kron(lit, np.ones((8, 8)))

    def split(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = rng.integers(0, classes, size=n)
        x = 0.8 * templates[y] + 0.2 * rng.uniform(size=(n, 3, 32, 32))
        return np.round(255 * x).astype(np.uint8), y.astype(np.int64)

    x_train, y_train = split(n_train)
    x_test, y_test = split(n_test)
    np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    return path


def job_config(path: Path, *, methods: tuple[str, ...], model: str, clients: int, rounds: int,
               local_epochs: int, batch_size: int, threads: int) -> Path:
    """The TOML of the short job (plaintext; FedAnchor with its anchors at the server; every
    method on ``model``; FedProp's warm-up one round; :data:`JOB_HYPER`)."""
    listed = ", ".join(f'"{m}"' for m in methods)
    sections = {**JOB_HYPER, "fedprop": {**JOB_HYPER["fedprop"], "warmup_rounds": 1, "L": 256}}
    hyper = "".join(f"\n[hyper.{method}]\n" + "".join(f"{key} = {value}\n" for key, value in values.items())
                    for method, values in sections.items())
    path.write_text(f"""name = "device-check"
methods = [{listed}]
secure = "plaintext"
rounds = {rounds}
seed = 0
threads = {threads}

[partition]
scheme = "iid"
num_clients = {clients}
labeled_fraction = 0.2
validation_fraction = 0.1

[partition.fedanchor]
labels_at = "server"

[hyper]
model = "{model}"
clients_per_round = {clients}
local_epochs = {local_epochs}
batch_size = {batch_size}
{hyper}""")
    return path


def run_job(config: Path, dataset: Path, device: str, out: Path, *, seed: int = 0
            ) -> dict[str, Any]:
    """``securefl run`` of ``config`` on ``dataset``, ``device`` and ``seed`` into ``out``;
    its results.json (stdout of the run is captured, not shown)."""
    from securefl.cli import main

    with contextlib.redirect_stdout(io.StringIO()):
        status = main(["run", "--config", str(config), "--dataset", str(dataset),
                       "--device", device, "--seed", str(seed), "--out", str(out)])
    if status != 0:
        raise RuntimeError(f"securefl run on {device} exited with {status}")
    return json.loads((out / "results.json").read_text())


def _protocol(document: dict[str, Any]) -> list[dict[str, Any]]:
    """What must not depend on the device: per method the rounds run, the selection rule,
    the bytes per client and round, and which rounds were evaluated."""
    return [{key: summary[key] for key in ("method", "rounds_completed", "selected_by",
                                           "bytes_per_client_per_round")}
            | {"evaluated": [a is not None for a in summary["accuracy_by_round"]]}
            for summary in document["methods"]]


def _trajectory(document: dict[str, Any]) -> list[dict[str, Any]]:
    """Everything a run's numbers show per round: equal in two runs on one device."""
    keys = ("method", "accuracy_by_round", "validation_accuracy_by_round",
            "pseudo_label_digest_by_round", "pseudo_label_accuracy_by_round")
    return [{key: summary[key] for key in keys} for summary in document["methods"]]


def compare_jobs(references: list[dict[str, Any]], first: dict[str, Any],
                 second: dict[str, Any], test_size: int) -> dict[str, Any]:
    """The three checks of the job (module docstring) and the per-method accuracies;
    ``references[0]`` is the CPU run at the device runs' seed."""
    reference = references[0]
    methods = []
    for index, dev in enumerate(first["methods"]):
        seeds = [ref["methods"][index]["final_accuracy"] for ref in references]
        p = dev["final_accuracy"]
        bound = NOISE_SE * math.sqrt(max(p * (1 - p), 1.0 / test_size) / test_size)
        methods.append({"method": dev["method"], "accuracy_cpu": seeds[0],
                        "accuracy_cpu_seeds": seeds, "accuracy_device": p,
                        "difference": p - seeds[0], "noise_bound": bound,
                        "within_noise": min(seeds) - bound <= p <= max(seeds) + bound,
                        "seconds_cpu": reference["methods"][index]["seconds"],
                        "seconds_device": dev["seconds"]})
    return {
        "protocol_outputs_equal": _protocol(reference) == _protocol(first) == _protocol(second),
        "accuracies_within_noise": all(m["within_noise"] for m in methods),
        "device_runs_identical": _trajectory(first) == _trajectory(second),
        "methods": methods,
        "devices": {"reference": {k: reference.get(k) for k in ("device", "device_name")},
                    "device": {k: first.get(k) for k in ("device", "device_name")}},
    }


def images_per_second(model_name: str, device: str, *, batch: int, steps: int, warmup: int,
                      seed: int, threads: int) -> dict[str, Any]:
    """Training throughput of ``model_name`` on ``device``: ``steps`` SGD steps (after
    ``warmup`` untimed ones) on one random CIFAR-shaped batch of ``batch`` images, with
    torch on ``threads`` CPU threads."""
    import torch
    import torch.nn.functional as F

    from securefl.crypto.linalg import torch_threads
    from securefl.fl.device import configure_determinism, resolve_device
    from securefl.fl.training import make_optimizer
    from securefl.models import build_model, dropout_generator

    with torch_threads(threads):
        target = resolve_device(device)
        configure_determinism(target)
        model = build_model(model_name, input_shape=(3, 32, 32), num_classes=10, seed=seed,
                            device=target)
        generator = torch.Generator(device=target) if target.type == "cuda" else torch.Generator()
        generator.manual_seed(seed)
        x = torch.rand((batch, 3, 32, 32), generator=generator, device=target)
        y = torch.randint(0, 10, (batch,), generator=generator, device=target)
        optimizer = make_optimizer(model, lr=0.01)
        model.train()

        def step() -> None:
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

        def synchronise() -> None:
            if target.type == "cuda":
                torch.cuda.synchronize(target)

        with dropout_generator(model, generator):
            for _ in range(warmup):
                step()
            synchronise()
            start = time.perf_counter()
            for _ in range(steps):
                step()
            synchronise()
            seconds = time.perf_counter() - start
        return {"model": model_name, "device": str(target), "batch": batch, "steps": steps,
                "warmup_steps": warmup, "seconds": seconds,
                "images_per_second": batch * steps / seconds,
                "threads": torch.get_num_threads()}


ROUND_CONFIG = Path(__file__).resolve().parents[1] / "experiments" / "cifar10-fedprop.toml"
"""FedProp's CIFAR-10 setting, the round part's configuration."""


def fedprop_round(device: str, dataset: Path, out: Path, *, rounds: int, clients: int,
                  threads: int, settings: tuple[str, ...] = ()) -> dict[str, Any]:
    """FedProp rounds of :data:`ROUND_CONFIG` on ``dataset`` and ``device`` (one warm-up
    round, then ``rounds`` rounds, each evaluated; ``clients`` clients in all; ``settings``
    further ``--set KEY=VALUE`` overrides): the method's seconds per round and the wall time
    between the ends of consecutive rounds."""
    from securefl.experiments.cli import add_arguments, prepare_new

    flags = argparse.ArgumentParser()
    add_arguments(flags)
    args = flags.parse_args([
        "--config", str(ROUND_CONFIG), "--method", "fedprop", "--dataset", str(dataset),
        "--secure", "plaintext", "--rounds", str(rounds), "--device", device, "--eval-every", "1",
        "--threads", str(threads), "--out", str(out), "--set", "hyper.fedprop.warmup_rounds=1",
        "--set", f"partition.num_clients={clients}",
        *[flag for setting in settings for flag in ("--set", setting)]])
    runner = prepare_new(args)
    ends: list[float] = []
    runner.after_round = lambda job, index: ends.append(time.perf_counter())
    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        document = runner.run()
    summary = document["methods"][0]
    if summary["status"] != "complete":
        raise RuntimeError(f"the FedProp round job ended {summary['status']}: {summary['error']}")
    between = [b - a for a, b in itertools.pairwise(ends)]
    return {"config": ROUND_CONFIG.name, "settings": list(settings),
            "device": document.get("device"),
            "device_name": document.get("device_name"), "clients": clients, "rounds": rounds,
            "hyper": {k: summary["hyper"].get(k) for k in
                      ("model", "clients_per_round", "local_epochs", "batch_size", "L", "k",
                       "alpha", "hflip", "warmup_rounds")},
            "setup_seconds": summary["setup_seconds"], "round_seconds": summary["seconds_by_round"],
            "wall_seconds_between_rounds": between,
            "wall_seconds": time.perf_counter() - started,
            "test_accuracy_by_round": summary["accuracy_by_round"]}


HAMMING_BACKENDS = ("lwe", "rlwe")
"""The secure Hamming backends whose products run on a torch device."""


def hamming_timing(device: str, *, n: int, parties: int, L: int) -> dict[str, Any]:
    """``securefl bench hamming --n n --parties parties --L L --backend B --device device``
    for each of :data:`HAMMING_BACKENDS`: its JSON record (``verified``: the matrix equals
    plaintext), or ``{"failed": last line of its error}``."""
    command = [sys.executable, "-m", "securefl.cli", "bench", "hamming"]
    timings: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as folder:
        for backend in HAMMING_BACKENDS:
            target = Path(folder) / f"{backend}.json"
            done = subprocess.run(command + ["--n", str(n), "--parties", str(parties),
                                             "--L", str(L), "--backend", backend,
                                             "--device", device, "--json", str(target)],
                                  capture_output=True, text=True, check=False)
            if done.returncode != 0:
                timings[backend] = {"failed": (done.stderr.strip().splitlines() or
                                               [f"exit {done.returncode}"])[-1]}
            else:
                timings[backend] = json.loads(target.read_text())
    return timings


def hamming_shape(text: str) -> tuple[int, int]:
    """``"N"`` or ``"NxP"``: N points in all over P parties (2 when omitted)."""
    n, _, parties = text.partition("x")
    try:
        shape = int(n), int(parties or 2)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--hamming-shapes={text}: must be N or NxP") from None
    if shape[0] < 1 or shape[1] < 2:
        raise argparse.ArgumentTypeError(f"--hamming-shapes={text}: needs N >= 1 and P >= 2")
    return shape


def environment(device: str) -> dict[str, Any]:
    """torch's version and CUDA build, the device and its name, Python, the load average."""
    import torch

    from securefl.fl.device import describe_device, resolve_device

    return {"torch": torch.__version__, "torch_cuda": torch.version.cuda,
            "cuda_available": torch.cuda.is_available(), **describe_device(resolve_device(device)),
            "python": platform.python_version(), "load_average": os.getloadavg()}


def _part(record: dict[str, Any], name: str, save: Callable[[dict[str, Any]], None],
          work: Callable[[], Any]) -> None:
    """``record[name] = work()``, or ``{"failed": the error}`` (the other parts still run,
    on a machine lent for minutes); the record is saved either way."""
    try:
        record[name] = work()
    except Exception as exc:  # noqa: BLE001 - recorded, and ``passed`` turns false
        record[name] = {"failed": f"{type(exc).__name__}: {exc}"}
    save(record)


def check(args: argparse.Namespace,
          save: Callable[[dict[str, Any]], None] = lambda record: None) -> dict[str, Any]:
    """Run the four parts (module docstring) and return the record; ``save(record)`` after
    each part, so that a run stopped at its time limit keeps what it measured."""
    from securefl.fl.device import resolve_device

    device = str(resolve_device(args.device))
    devices = ["cpu"] if device == "cpu" else ["cpu", device]
    record: dict[str, Any] = {
        "schema": "securefl.device_check/2",
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "environment": environment(device),
    }
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)

        def job() -> dict[str, Any]:
            dataset = synthetic_cifar(root / "synthetic-cifar.npz", n_train=args.train_images,
                                      n_test=args.test_images, classes=10, seed=0)
            config = job_config(root / "job.toml", methods=tuple(args.methods), model=args.model,
                                clients=args.clients, rounds=args.rounds,
                                local_epochs=args.local_epochs, batch_size=args.batch_size,
                                threads=args.threads)
            references = [run_job(config, dataset, "cpu", root / f"job-cpu-{seed}", seed=seed)
                          for seed in range(args.reference_seeds)]
            first, second = (run_job(config, dataset, device, root / f"job-{i}")
                             for i in range(2))
            return {"methods": list(args.methods), "model": args.model, "clients": args.clients,
                    "rounds": args.rounds, "train_images": args.train_images,
                    "test_images": args.test_images, "reference_seeds": args.reference_seeds,
                    "hyper": {m: JOB_HYPER[m] for m in args.methods if m in JOB_HYPER},
                    **compare_jobs(references, first, second, args.test_images)}

        def throughput() -> list[dict[str, Any]]:
            rates = []
            for name in args.throughput_models:
                settings = [("cpu", 1)] + [(d, args.threads) for d in devices]
                timed = [images_per_second(
                    name, d, batch=args.throughput_batch,
                    steps=args.throughput_steps if d != "cpu" else args.throughput_cpu_steps,
                    warmup=min(args.throughput_warmup, 1) if d == "cpu" else args.throughput_warmup,
                    seed=0, threads=t) for d, t in settings]
                one_core = timed[0]["images_per_second"]
                rates += [t | {"speedup_over_one_core": t["images_per_second"] / one_core}
                          for t in timed]
            return rates

        def one_round() -> dict[str, Any]:
            dataset = synthetic_cifar(root / "synthetic-cifar-round.npz",
                                      n_train=args.round_train_images,
                                      n_test=args.round_test_images, classes=10, seed=1)
            return fedprop_round(device, dataset, root / "round", rounds=args.round_rounds,
                                 clients=args.round_clients, threads=args.threads,
                                 settings=tuple(args.round_set))

        parts = {"round": one_round, "throughput": throughput, "job": job,
                 "hamming": lambda: {d: {f"{n}x{parties}": hamming_timing(
                                         d, n=n, parties=parties, L=args.hamming_L)
                                         for n, parties in args.hamming_shapes}
                                     for d in devices}}
        for name in args.parts:
            _part(record, name, save, parts[name])
    failed = [name for name in args.parts if "failed" in record[name]]
    checks = ("protocol_outputs_equal", "accuracies_within_noise", "device_runs_identical")
    record["hamming_exact"] = ("hamming" in args.parts and "hamming" not in failed and
                               all(t.get("verified") is True
                                   for shapes in record["hamming"].values()
                                   for timings in shapes.values()
                                   for t in timings.values()))
    record["failed_parts"] = failed
    record["passed"] = (not failed and
                        ("job" not in args.parts or all(record["job"][k] for k in checks)) and
                        ("hamming" not in args.parts or record["hamming_exact"]))
    save(record)
    return record


def parser() -> argparse.ArgumentParser:
    """The flags (every size explicit; the defaults are the GPU machine's check)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda",
                   help="device under test: auto, cpu, cuda, cuda:<i> (default: cuda)")
    p.add_argument("--out", required=True, help="the JSON record to write")
    p.add_argument("--methods", nargs="+", default=list(JOB_METHODS), help="methods of the job")
    p.add_argument("--model", default="cnn",
                   help="the job's model (default: FedSemi's MNIST CNN, small enough for the "
                        "CPU reference run)")
    p.add_argument("--clients", type=int, default=4, help="clients (all train every round)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of the job")
    p.add_argument("--local-epochs", type=int, default=2, help="local epochs per round")
    p.add_argument("--batch-size", type=int, default=10,
                   help="local batch size (10: five steps an epoch on each client's 45 labels)")
    p.add_argument("--reference-seeds", type=int, default=3,
                   help="CPU runs of the job (seeds 0, 1, ...) whose accuracies bound the device's")
    p.add_argument("--train-images", type=int, default=1000, help="synthetic training images")
    p.add_argument("--test-images", type=int, default=1000, help="synthetic test images")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                   help="torch CPU threads")
    p.add_argument("--throughput-models", nargs="+", default=list(THROUGHPUT_MODELS))
    p.add_argument("--throughput-batch", type=int, default=100, help="images per timed step")
    p.add_argument("--throughput-steps", type=int, default=20, help="timed steps")
    p.add_argument("--throughput-cpu-steps", type=int, default=3,
                   help="timed steps on the CPU (one core takes seconds per step)")
    p.add_argument("--throughput-warmup", type=int, default=3,
                   help="untimed steps first (at most one on the CPU)")
    p.add_argument("--hamming-shapes", nargs="+", type=hamming_shape,
                   default=[(1000, 2), (2500, 5), (5000, 2)], metavar="N[xP]",
                   help="points in all x parties of the LWE Hamming timings (default: 1000x2 "
                        "2500x5 5000x2; the issue's goal: n = 5000 exact in <= 2 s)")
    p.add_argument("--hamming-L", type=int, default=4096,
                   help="code length of the LWE Hamming timing")
    p.add_argument("--round-train-images", type=int, default=50_000,
                   help="synthetic training images of the FedProp round (CIFAR-10: 50,000)")
    p.add_argument("--round-test-images", type=int, default=10_000,
                   help="synthetic test images of the FedProp round (CIFAR-10: 10,000)")
    p.add_argument("--round-clients", type=int, default=100,
                   help="clients of the FedProp round (FedProp's CIFAR-10 setting: 100)")
    p.add_argument("--round-rounds", type=int, default=3,
                   help="FedProp rounds after the warm-up round")
    p.add_argument("--round-set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a key of the FedProp round's config (repeatable; the suite "
                        "shrinks the round with it)")
    p.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS),
                   help="parts to run, in this order (default: all)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Check the flags (one line and status 2 on a bad one, a device torch lacks
    included), run :func:`check`, write the record; 0 when every check holds."""
    args = parser().parse_args(argv)
    for name in ("clients", "rounds", "local_epochs", "batch_size", "train_images", "test_images",
                 "threads", "throughput_batch", "throughput_steps", "throughput_cpu_steps",
                 "hamming_L", "round_train_images", "round_test_images", "reference_seeds",
                 "round_clients", "round_rounds"):
        if getattr(args, name) < 1:
            parser().error(f"--{name.replace('_', '-')}={getattr(args, name)}: must be >= 1")
    if args.throughput_warmup < 0:
        parser().error(f"--throughput-warmup={args.throughput_warmup}: must be >= 0")
    from securefl.errors import InputError
    from securefl.fl.device import resolve_device

    try:
        resolve_device(args.device)
    except InputError as exc:
        parser().error(str(exc))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)

    def save(record: dict[str, Any]) -> None:
        out.write_text(json.dumps(record, indent=2) + "\n")
        print(f"{out}: saved after {', '.join(k for k in PARTS if k in record) or 'nothing'}",
              flush=True)

    record = check(args, save)
    print(f"wrote {out}: passed={record['passed']}")
    return 0 if record["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
