"""``securefl run``: the main job.

With no arguments it runs the digits default (``securefl/experiments/default.toml``):
the four FSSL methods and the labeled-only FedAvg baseline on scikit-learn's bundled
digits with real cryptography, and writes ``results.json``, ``accuracy.png`` and
``cost.png`` into a new folder under ``./runs``.  ``--config`` picks another TOML file;
the other flags override it.  ``--secure both`` runs every method with real and with
plaintext cryptography from the same seed and reports the difference (the pseudo-labels
must be identical; the exit status is 1 if they are not).  ``--resume DIR`` continues an
interrupted run from its last completed round.

Everything that can be wrong with the request (config file, method or dataset names,
numbers, data folder, output folder) is checked before the output folder is created, so
a bad request exits with one line and status 2 and writes nothing.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rich.console import Console

from securefl.errors import ConfigError
from securefl.experiments.config import SECURE_CHOICES, ExperimentConfig, load_config
from securefl.experiments.plots import write_plots
from securefl.experiments.report import comparison_table, results_table, write_readme
from securefl.experiments.runner import (
    Runner,
    build_job_method,
    check_methods,
    load_federations,
    load_state,
    new_state,
    state_config,
)

RUNS_FOLDER = Path("runs")
FILE_DATASETS = {
    "mnist": "the MNIST IDX gzip files (train-images-idx3-ubyte.gz, ...) in {root}/mnist/",
    "fashion-mnist": "the Fashion-MNIST IDX gzip files in {root}/fashion-mnist/",
    "cifar10": "the CIFAR-10 python batches (data_batch_1..5, test_batch) in {root}/cifar10/",
    "cifar100": "the CIFAR-100 python files (train, test) in {root}/cifar100/",
    "svhn": "the SVHN files train_32x32.mat and test_32x32.mat in {root}/svhn/",
}
"""Datasets read from files, and where their files go (the hint of a missing folder)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``securefl run``."""
    parser.add_argument("--config", metavar="PATH", help="TOML experiment file (default: digits)")
    parser.add_argument(
        "--method",
        metavar="NAME",
        nargs="+",
        action="extend",
        dest="methods",
        help="method(s) to run, or 'all' (default: the config's)",
    )
    parser.add_argument("--dataset", metavar="NAME", help="digits, mnist, fashion-mnist, ...")
    parser.add_argument(
        "--data-dir", metavar="DIR", help="dataset folder (default: $SECUREFL_DATA, else ./data)"
    )
    parser.add_argument(
        "--secure", metavar="MODE", help=f"cryptography: {' | '.join(SECURE_CHOICES)}"
    )
    parser.add_argument(
        "--aggregation", metavar="BACKEND",
        help="secure sums of real mode: secagg (pairwise masks) | he (TenSEAL BFV)",
    )
    parser.add_argument("--rounds", metavar="R", help="communication rounds per method")
    parser.add_argument("--seed", metavar="S", help="simulation seed (partition, sampling, init)")
    parser.add_argument(
        "--threads", metavar="N", help="CPU threads for torch and SHADE's OT workers (default: 1)"
    )
    parser.add_argument(
        "--out", metavar="DIR", help="output folder (default: a new folder under ./runs)"
    )
    parser.add_argument(
        "--resume", metavar="DIR", help="continue the interrupted run in DIR (its own config)"
    )


def _int_flag(value: str | None, name: str) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"{name}={value!r}: must be an integer") from None


def command_line(args: argparse.Namespace) -> str:
    """The ``securefl run`` command that reproduces ``args``."""
    words = ["securefl", "run"]
    for flag, value in (
        ("--config", args.config), ("--dataset", args.dataset), ("--data-dir", args.data_dir),
        ("--secure", args.secure), ("--aggregation", args.aggregation),
        ("--rounds", args.rounds), ("--seed", args.seed),
        ("--threads", args.threads), ("--out", args.out), ("--resume", args.resume),
    ):
        if value is not None:
            words += [flag, str(value)]
    if args.methods:
        words += ["--method", *args.methods]
    return shlex.join(words)


def check_data_folder(config: ExperimentConfig) -> None:
    """A dataset read from files needs an existing data folder; say where the files go."""
    hint = FILE_DATASETS.get(config.dataset)
    if hint is None:
        return
    from securefl.data import data_root

    root = data_root(config.data_dir)
    if not root.is_dir():
        raise ConfigError(
            f"data_dir={str(root)!r}: no such folder; put {hint.format(root=root)} "
            "(or pass --data-dir DIR / set SECUREFL_DATA)"
        )


def write_artifacts(document: dict[str, Any], out: Path) -> None:
    """The plots and the README.md of a run folder."""
    write_plots(document, out)
    write_readme(document, out)


def _new_out_folder(out: str | None, name: str) -> Path:
    if out is None:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
        base = RUNS_FOLDER / f"{stamp}-{name}"
        folder, counter = base, 1
        while folder.exists():
            counter += 1
            folder = base.with_name(f"{base.name}-{counter}")
        return folder
    folder = Path(out)
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise ConfigError(
            f"out={out!r}: exists and is not an empty folder "
            "(continue a run there with --resume, or choose another --out)"
        )
    return folder


def _uncommitted_changes() -> bool | None:
    """Whether the source tree differs from ``commit`` (None outside a git checkout)."""
    try:
        out = subprocess.run(
            ["git", "status", "--porcelain"], capture_output=True, text=True, timeout=10,
            cwd=Path(__file__).resolve().parent,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return bool(out.stdout.strip()) if out.returncode == 0 else None


def _header(config: ExperimentConfig, args: argparse.Namespace) -> dict[str, Any]:
    from securefl.bench.common import machine_info

    machine = machine_info()
    return {
        "command": command_line(args),
        "config_source": config.source,
        "config": config.to_dict(),
        "seed": config.seed,
        "commit": machine.get("commit"),
        "uncommitted_changes": _uncommitted_changes(),
        "load_average_at_start": os.getloadavg(),
        "machine": machine,
    }


def prepare_new(args: argparse.Namespace) -> Runner:
    """Validate a fresh run completely (config, data, methods, output folder); write nothing."""
    config = load_config(
        args.config,
        methods=args.methods,
        dataset=args.dataset,
        data_dir=args.data_dir,
        secure=args.secure,
        aggregation=args.aggregation,
        rounds=_int_flag(args.rounds, "rounds"),
        seed=_int_flag(args.seed, "seed"),
        threads=_int_flag(args.threads, "threads"),
    )
    out = _new_out_folder(args.out, config.name)
    check_data_folder(config)
    check_methods(config, build_job_method)
    federations = load_federations(config)
    return Runner(
        state=new_state(config, _header(config, args)),
        federations=federations,
        out=out,
        factory=build_job_method,
        artifacts=write_artifacts,
    )


def prepare_resume(args: argparse.Namespace) -> Runner:
    """Reload an interrupted run from ``args.resume`` (only ``--data-dir`` may change)."""
    given = [
        flag for flag, value in (
            ("--config", args.config), ("--method", args.methods), ("--dataset", args.dataset),
            ("--secure", args.secure), ("--aggregation", args.aggregation),
            ("--rounds", args.rounds), ("--seed", args.seed),
            ("--threads", args.threads), ("--out", args.out),
        ) if value is not None
    ]
    if given:
        raise ConfigError(
            f"resume={args.resume!r}: {given[0]} cannot change a stored run "
            "(only --data-dir may be given with --resume)"
        )
    state = load_state(args.resume)
    config = state_config(state, args.data_dir)
    state.config = config.to_dict()
    state.header.setdefault("resumed", []).append(command_line(args))
    check_data_folder(config)
    federations = load_federations(config) if state.status != "complete" else {}
    return Runner(
        state=state,
        federations=federations,
        out=Path(args.resume),
        factory=build_job_method,
        artifacts=write_artifacts,
    )


def _terminate(signum: int, frame: Any) -> None:
    """SIGTERM (``kill``, ``timeout``) stops a run like Ctrl-C: completed rounds are kept."""
    raise KeyboardInterrupt


def main(args: argparse.Namespace, console: Console) -> int:
    """Run ``securefl run``; 0 on success, 1 if real and plaintext pseudo-labels differ."""
    from securefl.cli import make_progress

    runner = prepare_resume(args) if args.resume else prepare_new(args)
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        with make_progress() as progress:
            runner.progress = progress
            document = runner.run()
    except KeyboardInterrupt:
        console.print(
            f"interrupted: results of the completed rounds are in {runner.out}; continue with "
            f"[bold]securefl run --resume {shlex.quote(str(runner.out))}[/bold]"
        )
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    if not console.is_terminal:
        console = Console(file=console.file, width=max(console.width, 160))
    console.print(results_table(document))
    if document.get("comparison"):
        console.print(comparison_table(document))
    console.print(f"wrote {runner.out}/results.json, README.md, accuracy.png, cost.png")
    mismatch = [c for c in document.get("comparison", []) if c["pseudo_labels_identical"] is False]
    for row in mismatch:
        console.print(f"[red]{row['method']}: real and plaintext pseudo-labels differ[/red]")
    return 1 if mismatch else 0
