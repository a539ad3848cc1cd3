"""Command line: ``securefl run`` (experiments) and ``securefl bench NAME`` (benchmarks).

Errors from :mod:`securefl.errors` are printed as one line and exit with status 2;
nothing else is caught.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from securefl.bench import BENCHMARKS
from securefl.errors import SecureFLError


def make_progress(console: Console | None = None) -> Progress:
    """The progress bar style used by every long-running command (stderr, transient)."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console or Console(stderr=True),
        transient=True,
    )


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="securefl",
        description="Privacy-preserving federated semi-supervised learning with real cryptography.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    from securefl.experiments import cli as run_cli

    run_parser = commands.add_parser("run", help="run FSSL experiments (the main job)")
    run_cli.add_arguments(run_parser)
    bench_parser = commands.add_parser("bench", help="benchmarks writing JSON")
    benches = bench_parser.add_subparsers(dest="bench", required=True)
    for name, module_name in BENCHMARKS.items():
        module = importlib.import_module(module_name)
        sub = benches.add_parser(name, help=(module.__doc__ or "").strip().splitlines()[0])
        module.add_arguments(sub)
        sub.add_argument("--json", metavar="PATH", help="write the JSON record here")
    return parser


def _print_record(console: Console, title: str, record: dict) -> None:
    table = Table(title=title, show_header=True, header_style="bold")
    table.add_column("field")
    table.add_column("value", justify="right")
    for key, value in record.items():
        if isinstance(value, dict):
            continue
        if isinstance(value, float):
            value = f"{value:.6g}"
        table.add_row(key, str(value))
    console.print(table)


def run_bench(args: argparse.Namespace, console: Console) -> int:
    """Run one benchmark, print its table and write its JSON."""
    from securefl.bench.common import machine_info, write_json

    module = importlib.import_module(BENCHMARKS[args.bench])
    with make_progress() as progress:
        record = module.run(args, progress)
    record["machine"] = machine_info()
    _print_record(console, f"securefl bench {args.bench}", record)
    if args.json:
        console.print(f"wrote {write_json(record, args.json)}")
    return 0 if record.get("verified", True) else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``securefl`` console script."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    console = Console()
    try:
        if args.command == "bench":
            return run_bench(args, console)
        from securefl.experiments import cli as run_cli

        return run_cli.main(args, console)
    except SecureFLError as exc:
        print(f"securefl: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("securefl: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
