"""``securefl run``: the main job.

With no arguments it runs the digits default (``securefl/experiments/default.toml``):
the four FSSL methods and the labeled-only FedAvg baseline on scikit-learn's bundled
digits with real cryptography, and writes ``results.json``, ``accuracy.png`` and
``cost.png`` into a new folder under ``./runs``.  ``--config`` picks another TOML file;
the other flags override it.  ``--secure both`` runs every method with real and with
plaintext cryptography from the same seed and reports the difference (the pseudo-labels
must be identical; the exit status is 1 if they are not).  ``--resume DIR`` continues an
interrupted run from its last completed round.

Everything that can be wrong with the request is checked before any data is loaded or
any file is written: :func:`validate` checks the flags and the configuration (file,
method and dataset names, numbers, hyper-parameters), then the data folder and the
output folder.  ``--out DIR`` may name a folder that does not exist yet, also under
folders that do not exist yet (they are created, like ``mkdir -p``, when the run starts,
as the default ``./runs/...`` is); what must hold before the run is that the nearest
existing ancestor is a folder in which folders can be created (tested by creating and
removing one).  So a bad request exits with one line and status 2 and writes nothing.

Progress goes to stderr: a bar on a terminal; plain lines otherwise (one per round with
method, round, accuracy and seconds, one per long phase, and a heartbeat; see
:mod:`securefl.progress`).  ``--validation-only`` keeps test accuracy off the terminal
(progress, job summaries, results tables) for choosing hyper-parameters on validation;
the files of the run hold it as always.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rich.console import Console

from securefl.errors import ConfigError
from securefl.experiments.config import (
    DEFAULT_CONFIG,
    SECURE_CHOICES,
    ExperimentConfig,
    load_config,
    read_toml,
)
from securefl.experiments.plots import COVERAGE_PLOT, write_plots
from securefl.experiments.provenance import collect_provenance
from securefl.experiments.report import comparison_table, results_table, write_readme
from securefl.experiments.results import privacy_lines
from securefl.experiments.runner import (
    JobLog,
    Runner,
    build_job_method,
    check_methods,
    load_federations,
    load_state,
    new_state,
    state_config,
)
from securefl.output import format_seconds

RUNS_FOLDER = Path("runs")
FILE_DATASETS = {
    "mnist": "the MNIST IDX gzip files (train-images-idx3-ubyte.gz, ...) in {root}/mnist/",
    "fashion-mnist": "the Fashion-MNIST IDX gzip files in {root}/fashion-mnist/",
    "cifar10": "the CIFAR-10 python batches (data_batch_1..5, test_batch) in {root}/cifar10/",
    "cifar100": "the CIFAR-100 python files (train, test) in {root}/cifar100/",
    "svhn": "the SVHN files train_32x32.mat and test_32x32.mat in {root}/svhn/",
    "stl10": "the STL-10 binary files (train_X.bin, train_y.bin, test_X.bin, test_y.bin) in "
             "{root}/stl10/",
}
"""Datasets read from files, and where their files go (the hint of a missing folder)."""


DESCRIPTION = (
    "Run FSSL methods round by round and write results.json, accuracy.png and cost.png. "
    "Without flags: the digits default (securefl/experiments/default.toml). Flags override "
    "the config."
)


PIPED_WIDTH = 80
"""Columns of the results tables when the output is not a terminal."""


def _default(raw: dict[str, Any], key: str) -> str:
    value = raw.get(key)
    if isinstance(value, list):
        value = " ".join(map(str, value))
    return f"the config's; digits default: {value}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``securefl run`` (help texts list the known names and the defaults)."""
    from securefl.data import DATASET_NAMES
    from securefl.methods import METHOD_NAMES

    digits = read_toml(DEFAULT_CONFIG)
    parser.add_argument(
        "--config", metavar="PATH", help=f"TOML experiment file (default: {DEFAULT_CONFIG.name}, "
        "the digits default shipped with securefl)"
    )
    parser.add_argument(
        "--method",
        metavar="NAME",
        nargs="+",
        action="extend",
        dest="methods",
        help=f"method(s) to run: {', '.join(METHOD_NAMES)}, or all "
        f"(default: {_default(digits, 'methods')})",
    )
    parser.add_argument(
        "--dataset", metavar="NAME",
        help=f"dataset: {', '.join(DATASET_NAMES)}, or a path "
        f"(default: {_default(digits.get('dataset', {}), 'name')})",
    )
    parser.add_argument(
        "--data-dir", metavar="DIR", help="dataset folder (default: $SECUREFL_DATA, else ./data)"
    )
    parser.add_argument(
        "--secure", metavar="{" + ",".join(SECURE_CHOICES) + "}",
        help="real: every cross-party step runs the cryptographic protocol; plaintext: a "
        "placeholder with identical outputs; both: each method twice, same seed, compared "
        f"(default: {_default(digits, 'secure')})",
    )
    parser.add_argument(
        "--aggregation", metavar="{secagg,he}",
        help="secure sums of real mode: secagg (pairwise masks) | he (TenSEAL BFV) "
        "(default: secagg)",
    )
    parser.add_argument(
        "--rounds", metavar="R",
        help=f"communication rounds per method (default: {_default(digits, 'rounds')})",
    )
    parser.add_argument(
        "--seed", metavar="S",
        help=f"simulation seed: partition, sampling, init (default: {_default(digits, 'seed')})",
    )
    parser.add_argument(
        "--threads", metavar="N",
        help="CPU threads for torch and SHADE's OT workers "
        f"(default: {_default(digits, 'threads')})",
    )
    parser.add_argument(
        "--device", metavar="{auto,cpu,cuda,cuda:i}",
        help="where the models train: auto (CUDA when torch sees one, else the CPU), cpu, "
        "cuda or cuda:<index> (default: the config's; else auto)",
    )
    parser.add_argument(
        "--eval-every", metavar="N", dest="eval_every",
        help="score validation and test accuracy every N rounds; the last round always "
        "(default: the config's; else 1)",
    )
    parser.add_argument(
        "--out", metavar="DIR",
        help="output folder, created with any missing parents; must be empty if it exists "
        "(default: a new folder under ./runs)",
    )
    parser.add_argument(
        "--resume", metavar="DIR",
        help="continue the interrupted run in DIR with its own config (only --data-dir may be "
        "given with it)",
    )
    parser.add_argument(
        "--set", metavar="KEY=VALUE", action="append", dest="settings",
        help="override one config key by its dotted path, e.g. hyper.fedprop.alpha=0.9 "
        "(repeatable; applied before the other flags)",
    )
    parser.add_argument(
        "--validation-only", action="store_true", dest="validation_only",
        help="print validation accuracy only (progress, summaries; no results tables), for "
        "choosing hyper-parameters; results.json and README.md still hold test accuracy. "
        "Changes what is printed, not the run: allowed with --resume, not in the recorded "
        "command",
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
        ("--threads", args.threads), ("--device", args.device),
        ("--eval-every", args.eval_every), ("--out", args.out), ("--resume", args.resume),
    ):
        if value is not None:
            words += [flag, str(value)]
    for setting in args.settings or []:
        words += ["--set", setting]
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


def check_writable_folder(folder: Path, flag: str) -> None:
    """``folder`` exists or can be created (with missing parents), before any work.

    Every existing part of the path must be a folder, and the nearest existing one must
    accept a new folder (probed by creating and removing one).  Raises ConfigError naming
    ``flag``.
    """
    for ancestor in (folder, *folder.parents):
        if not ancestor.exists():
            continue
        if not ancestor.is_dir():
            raise ConfigError(
                f"{flag}={str(folder)!r}: {str(ancestor)!r} exists and is not a folder"
            )
        try:
            os.rmdir(tempfile.mkdtemp(dir=ancestor, prefix=".securefl-probe-"))
        except OSError as exc:
            raise ConfigError(
                f"{flag}={str(folder)!r}: cannot create folders in {str(ancestor)!r} "
                f"({exc.strerror or exc})"
            ) from None
        return


def _new_out_folder(out: str | None, name: str) -> Path:
    if out is None:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
        base = RUNS_FOLDER / f"{stamp}-{name}"
        folder, counter = base, 1
        while folder.exists():
            counter += 1
            folder = base.with_name(f"{base.name}-{counter}")
        check_writable_folder(folder, "--out")
        return folder
    folder = Path(out)
    try:
        occupied = folder.exists() and (not folder.is_dir() or any(folder.iterdir()))
    except OSError as exc:
        raise ConfigError(f"--out={out!r}: cannot read ({exc.strerror or exc})") from None
    if occupied:
        raise ConfigError(
            f"--out={out!r}: exists and is not an empty folder "
            "(continue a run there with --resume, or choose another --out)"
        )
    check_writable_folder(folder, "--out")
    return folder


def _header(config: ExperimentConfig, args: argparse.Namespace) -> dict[str, Any]:
    return {
        **collect_provenance(command_line(args)),
        "config_source": config.source,
        "config": config.to_dict(),
        "seed": config.seed,
    }


RESUME_FIXED = (
    "config", "methods", "dataset", "secure", "aggregation", "rounds", "seed", "threads",
    "device", "eval_every", "out", "settings",
)
"""Flags a resumed run takes from its checkpoint (``--data-dir`` alone may change)."""


def validate(args: argparse.Namespace) -> ExperimentConfig | None:
    """Check the flags and the configuration without touching data or output folders.

    Returns the validated configuration of a new run (every method is built once, so
    bad hyper-parameters fail here too), or ``None`` for ``--resume`` (whose
    configuration is in the checkpoint; only the flags that cannot change it are checked).
    """
    if args.resume is not None:
        given = [name for name in RESUME_FIXED if getattr(args, name) is not None]
        if given:
            flag = {"methods": "--method", "settings": "--set",
                "eval_every": "--eval-every"}.get(given[0], f"--{given[0]}")
            raise ConfigError(
                f"resume={args.resume!r}: {flag} cannot change a stored run "
                "(only --data-dir may be given with --resume)"
            )
        return None
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
        device=args.device,
        eval_every=_int_flag(args.eval_every, "eval_every"),
        settings=args.settings,
    )
    check_device(config.device)
    check_methods(config, build_job_method)
    return config


def check_device(device: str) -> None:
    """ConfigError (one line, naming ``device``) unless this machine has ``device``."""
    from securefl.errors import InputError
    from securefl.fl.device import resolve_device

    try:
        resolve_device(device)
    except InputError as exc:
        raise ConfigError(str(exc)) from None


def prepare_new(args: argparse.Namespace) -> Runner:
    """Validate a fresh run completely (config, data, methods, output folder); write nothing."""
    config = validate(args)
    out = _new_out_folder(args.out, config.name)
    check_data_folder(config)
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
    validate(args)
    state = load_state(args.resume)
    check_writable_folder(Path(args.resume), "--resume")
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


def round_line(job: JobLog, round_index: int, *, show_test: bool = True) -> str:
    """The plain progress line of a completed round: method, round, validation and test
    accuracy (validation alone when ``show_test`` is false), seconds."""
    result = job.round_results[-1]
    parts = []
    if result.get("validation_accuracy") is not None:
        parts.append(f"validation {100 * result['validation_accuracy']:.2f} %")
    if result.get("test_accuracy") is None:
        parts.append("not evaluated")
    elif show_test:
        parts.append(f"test {100 * result['test_accuracy']:.2f} %")
    if result.get("pseudo_label_accuracy") is not None:
        parts.append(f"pseudo-labels {100 * result['pseudo_label_accuracy']:.2f} %")
    parts.append(format_seconds(result["seconds"]))
    if result.get("crypto_seconds"):
        crypto = "crypto" if job.secure == "real" else "placeholder"
        parts.append(f"{crypto} {format_seconds(result['crypto_seconds'])}")
    return f"{job.method} ({job.secure}) round {round_index + 1}/{job.rounds}: " + ", ".join(parts)


def main(args: argparse.Namespace, console: Console) -> int:
    """Run ``securefl run``; 0 on success, 1 if real and plaintext pseudo-labels differ."""
    from securefl.progress import PlainProgress, make_progress

    runner = prepare_resume(args) if args.resume else prepare_new(args)
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        with make_progress() as progress:
            runner.progress = progress
            runner.show_test = not args.validation_only
            if isinstance(progress, PlainProgress):
                runner.after_round = lambda job, index: progress.console.print(
                    round_line(job, index, show_test=runner.show_test)
                )
            document = runner.run()
    except KeyboardInterrupt:
        console.print(
            f"interrupted: results of the completed rounds are in {runner.out}; continue with "
            f"[bold]securefl run --resume {shlex.quote(str(runner.out))}[/bold]"
        )
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    if not console.is_terminal:  # a pipe or a log: the 80 columns every reader has
        console = Console(file=console.file, width=PIPED_WIDTH)
    if args.validation_only:
        console.print("results tables withheld (--validation-only): they show test accuracy")
    else:
        console.print(results_table(document, width=console.width))
        if document.get("comparison"):
            console.print(comparison_table(document, width=console.width))
    for line in privacy_lines(document):
        console.print(line, markup=False)
    coverage = ", coverage.png" if (runner.out / COVERAGE_PLOT).exists() else ""
    console.print(f"wrote {runner.out}/results.json, README.md, accuracy.png, cost.png{coverage}")
    mismatch = [c for c in document.get("comparison", []) if c["pseudo_labels_identical"] is False]
    for row in mismatch:
        console.print(f"[red]{row['method']}: real and plaintext pseudo-labels differ[/red]")
    return 1 if mismatch else 0
