"""Device check: does securefl train on ``--device`` as it does on the CPU, and how fast?

    python benchmarks/device_check.py --device cuda --out benchmarks/results/device_check_<gpu>.json

One JSON record with four parts:

``job``
    A short CIFAR-shaped ``securefl run`` (plaintext) on synthetic 32x32x3 images (a
    random template per class plus uniform noise, so there is something to learn; written
    as an ``.npz`` in a temporary folder, nothing downloaded), run once on the CPU and twice
    on ``--device``, each with the same seed, through ``securefl.cli.main``.  Checks:
    ``protocol_outputs_equal`` (every method's rounds, bytes per client per round and
    evaluated rounds agree between the CPU run and the device run: the protocol does not
    depend on where the model trains), ``accuracies_within_noise`` (each method's final test
    accuracy on the device is within 4 binomial standard errors of the CPU's, ``4 sqrt(2
    p (1 - p) / n_test)``: different devices draw different random streams, so only
    statistical agreement is promised), and ``device_runs_identical`` (the two device runs
    agree in every accuracy and pseudo-label digest of every round: CUDA's deterministic
    settings hold).  ``results.json``'s ``device`` and ``device_name`` are kept per run.
``throughput``
    Training images per second of ``cnn13`` (FedProp's CIFAR CNN) and ``wrn28_2``
    (FedAnchor's Wide ResNet-28-2) on each device: SGD steps on a fixed random batch after
    warm-up steps, timed with the device synchronised.
``hamming``
    ``securefl bench hamming --backend lwe|rlwe --device D`` on each device: its record
    (``verified``: the secure matrix equals plaintext; ``fixed_seconds`` and
    ``per_pair_seconds``), or ``failed`` with the error.  ``hamming_exact`` says every one
    verified, and ``passed`` requires it.
``environment``
    torch's version and CUDA build, the device's name, the load average.

``--device cpu`` runs the same three jobs on the CPU (the test suite does so at tiny sizes,
so that this script cannot rot).  Exit status 0 when every check holds, 1 otherwise.

The job imports every method, and with them securefl's cryptography: the machine needs
cryptography, pycryptodome, numba, faiss-cpu, dp-accounting and tenseal installed (wheels,
README "Installation"), though the job itself runs in plaintext.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

JOB_METHODS = ("fedavg-labeled", "fedprop", "fedsemi-mt", "fedanchor", "protofssl",
               "fedavg-fixmatch")
THROUGHPUT_MODELS = ("cnn13", "wrn28_2")
NOISE_SE = 4.0
"""Accuracies agree "within noise" when they differ by at most this many standard errors."""


def synthetic_cifar(path: Path, *, n_train: int, n_test: int, classes: int, seed: int) -> Path:
    """Write a CIFAR-shaped ``.npz`` (``x_train, y_train, x_test, y_test``; images
    ``(n, 3, 32, 32)`` uint8): image = 0.6 template[y] + 0.4 uniform noise."""
    rng = np.random.default_rng(seed)
    templates = rng.uniform(size=(classes, 3, 32, 32))

    def split(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = rng.integers(0, classes, size=n)
        x = 0.6 * templates[y] + 0.4 * rng.uniform(size=(n, 3, 32, 32))
        return np.round(255 * x).astype(np.uint8), y.astype(np.int64)

    x_train, y_train = split(n_train)
    x_test, y_test = split(n_test)
    np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    return path


def job_config(path: Path, *, methods: tuple[str, ...], model: str, clients: int, rounds: int,
               local_epochs: int, batch_size: int, threads: int) -> Path:
    """The TOML of the short job (plaintext; FedAnchor with its anchors at the server; every
    method on ``model``; FedProp's warm-up one round)."""
    listed = ", ".join(f'"{m}"' for m in methods)
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

[hyper.fedprop]
warmup_rounds = 1
L = 256
""")
    return path


def run_job(config: Path, dataset: Path, device: str, out: Path) -> dict[str, Any]:
    """``securefl run`` of ``config`` on ``dataset`` and ``device`` into ``out``; its
    results.json (stdout of the run is captured, not shown)."""
    from securefl.cli import main

    with contextlib.redirect_stdout(io.StringIO()):
        status = main(["run", "--config", str(config), "--dataset", str(dataset),
                       "--device", device, "--out", str(out)])
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


def compare_jobs(reference: dict[str, Any], first: dict[str, Any], second: dict[str, Any],
                 test_size: int) -> dict[str, Any]:
    """The three checks of the job (module docstring) and the per-method accuracies."""
    methods = []
    for ref, dev in zip(reference["methods"], first["methods"]):
        p = ref["final_accuracy"]
        bound = NOISE_SE * math.sqrt(2 * max(p * (1 - p), 1.0 / test_size) / test_size)
        methods.append({"method": ref["method"], "accuracy_cpu": p,
                        "accuracy_device": dev["final_accuracy"],
                        "difference": dev["final_accuracy"] - p, "noise_bound": bound,
                        "within_noise": abs(dev["final_accuracy"] - p) <= bound,
                        "seconds_cpu": ref["seconds"], "seconds_device": dev["seconds"]})
    return {
        "protocol_outputs_equal": _protocol(reference) == _protocol(first) == _protocol(second),
        "accuracies_within_noise": all(m["within_noise"] for m in methods),
        "device_runs_identical": _trajectory(first) == _trajectory(second),
        "methods": methods,
        "devices": {"reference": {k: reference.get(k) for k in ("device", "device_name")},
                    "device": {k: first.get(k) for k in ("device", "device_name")}},
    }


def images_per_second(model_name: str, device: str, *, batch: int, steps: int, warmup: int,
                      seed: int) -> dict[str, Any]:
    """Training throughput of ``model_name`` on ``device``: ``steps`` SGD steps (after
    ``warmup`` untimed ones) on one random CIFAR-shaped batch of ``batch`` images."""
    import torch
    import torch.nn.functional as F

    from securefl.fl.device import configure_determinism, resolve_device
    from securefl.fl.training import make_optimizer
    from securefl.models import build_model, dropout_generator

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


HAMMING_BACKENDS = ("lwe", "rlwe")
"""The secure Hamming backends whose products run on a torch device."""


def hamming_timing(device: str, *, n: int, L: int) -> dict[str, Any]:
    """``securefl bench hamming --backend B --device device`` for each of
    :data:`HAMMING_BACKENDS`: its JSON record (``verified``: the matrix equals plaintext),
    or ``{"failed": last line of its error}``."""
    command = [sys.executable, "-m", "securefl.cli", "bench", "hamming"]
    timings: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as folder:
        for backend in HAMMING_BACKENDS:
            target = Path(folder) / f"{backend}.json"
            done = subprocess.run(command + ["--n", str(n), "--L", str(L), "--backend", backend,
                                             "--device", device, "--json", str(target)],
                                  capture_output=True, text=True)
            if done.returncode != 0:
                timings[backend] = {"failed": (done.stderr.strip().splitlines() or
                                               [f"exit {done.returncode}"])[-1]}
            else:
                timings[backend] = json.loads(target.read_text())
    return timings


def environment(device: str) -> dict[str, Any]:
    """torch's version and CUDA build, the device and its name, Python, the load average."""
    import torch

    from securefl.fl.device import describe_device, resolve_device

    return {"torch": torch.__version__, "torch_cuda": torch.version.cuda,
            "cuda_available": torch.cuda.is_available(), **describe_device(resolve_device(device)),
            "python": platform.python_version(), "load_average": os.getloadavg()}


def check(args: argparse.Namespace) -> dict[str, Any]:
    """Run the three parts (module docstring) and return the record."""
    from securefl.fl.device import resolve_device

    device = str(resolve_device(args.device))
    record: dict[str, Any] = {
        "schema": "securefl.device_check/1",
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "environment": environment(device),
    }
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        dataset = synthetic_cifar(root / "synthetic-cifar.npz", n_train=args.train_images,
                                  n_test=args.test_images, classes=10, seed=0)
        config = job_config(root / "job.toml", methods=tuple(args.methods), model=args.model,
                            clients=args.clients, rounds=args.rounds,
                            local_epochs=args.local_epochs, batch_size=args.batch_size,
                            threads=args.threads)
        reference = run_job(config, dataset, "cpu", root / "cpu")
        first = run_job(config, dataset, device, root / "device-1")
        second = run_job(config, dataset, device, root / "device-2")
    record["job"] = {"methods": list(args.methods), "model": args.model, "clients": args.clients,
                     "rounds": args.rounds, "train_images": args.train_images,
                     "test_images": args.test_images,
                     **compare_jobs(reference, first, second, args.test_images)}
    devices = ["cpu"] if device == "cpu" else ["cpu", device]
    record["throughput"] = [
        images_per_second(name, d, batch=args.throughput_batch, steps=args.throughput_steps,
                          warmup=args.throughput_warmup, seed=0)
        for name in args.throughput_models for d in devices]
    record["hamming"] = {d: hamming_timing(d, n=args.hamming_n, L=args.hamming_L) for d in devices}
    checks = ("protocol_outputs_equal", "accuracies_within_noise", "device_runs_identical")
    record["hamming_exact"] = all(t.get("verified") is True for timings in record["hamming"].values()
                                  for t in timings.values())
    record["passed"] = all(record["job"][k] for k in checks) and record["hamming_exact"]
    return record


def parser() -> argparse.ArgumentParser:
    """The flags (every size explicit; the defaults are the GPU machine's check)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda",
                   help="device under test: auto, cpu, cuda, cuda:<i> (default: cuda)")
    p.add_argument("--out", required=True, help="the JSON record to write")
    p.add_argument("--methods", nargs="+", default=list(JOB_METHODS), help="methods of the job")
    p.add_argument("--model", default="cnn_cifar",
                   help="the job's model (default: FedSemi's CIFAR CNN)")
    p.add_argument("--clients", type=int, default=4, help="clients (all train every round)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of the job")
    p.add_argument("--local-epochs", type=int, default=1, help="local epochs per round")
    p.add_argument("--batch-size", type=int, default=50, help="local batch size")
    p.add_argument("--train-images", type=int, default=1000, help="synthetic training images")
    p.add_argument("--test-images", type=int, default=1000, help="synthetic test images")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                   help="torch CPU threads")
    p.add_argument("--throughput-models", nargs="+", default=list(THROUGHPUT_MODELS))
    p.add_argument("--throughput-batch", type=int, default=100, help="images per timed step")
    p.add_argument("--throughput-steps", type=int, default=20, help="timed steps")
    p.add_argument("--throughput-warmup", type=int, default=3, help="untimed steps first")
    p.add_argument("--hamming-n", type=int, default=5000,
                   help="points of the LWE Hamming timings (the issue's goal: n = 5000 exact in <= 2 s)")
    p.add_argument("--hamming-L", type=int, default=4096,
                   help="code length of the LWE Hamming timing")
    return p


def main(argv: list[str] | None = None) -> int:
    """Check the flags (one line and status 2 on a bad one, a device torch lacks
    included), run :func:`check`, write the record; 0 when every check holds."""
    args = parser().parse_args(argv)
    for name in ("clients", "rounds", "local_epochs", "batch_size", "train_images", "test_images",
                 "threads", "throughput_batch", "throughput_steps", "hamming_n", "hamming_L"):
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
    record = check(args)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {out}: passed={record['passed']}")
    return 0 if record["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
