"""Command line: ``securefl run`` (experiments), ``securefl bench NAME`` (benchmarks) and
``securefl keys new|show`` (a deployment's identities and roster,
:mod:`securefl.crypto.identity`).

Every request is checked completely before any work: argparse checks the syntax (known
flags, integers, choices), then :func:`validate_arguments` checks every value (a
benchmark's ``validate`` hook, or the run's configuration), then the output paths are
checked (``--json`` a writable file whose folder exists; ``--out`` a folder that can be
created).  Every failure is one line on stderr, ``securefl: <Error>: <flag>=<value>:
<problem>``, and exit status 2; errors from :mod:`securefl.errors` raised later are
printed the same way.  Nothing else is caught.

``--help`` shows every flag's default and choices; ``securefl --version`` the version.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import textwrap
from typing import Any, Sequence

from rich.console import Console
from rich.table import Table

from securefl import __version__
from securefl.bench import BENCHMARKS
from securefl.errors import InputError, SecureFLError
from securefl.memory import retain_freed_memory


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Adds ``(default: X)`` to every option whose help does not state its default yet
    (flags without a fixed default, ``None``, and on/off switches are left alone), and
    never breaks a line inside a hyphenated name such as ``fedavg-labeled``."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (
            "default" in text
            or not action.option_strings
            or action.default is None
            or action.default is argparse.SUPPRESS
            or isinstance(action.default, bool)
        ):
            return text
        return f"{text} (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """argparse with :class:`HelpFormatter` and one-line errors (``securefl: ArgumentError:
    ...``, exit status 2) instead of the usage block."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        default = kwargs.get("default")
        if not kwargs.get("help") and default is not None and not isinstance(default, bool):
            kwargs["help"] = "(default: %(default)s)"  # argparse shows nothing without a help
        return super().add_argument(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"securefl: ArgumentError: {message} (see: {self.prog} --help)\n")


def build_parser() -> Parser:
    """The parser of the ``securefl`` command with all its subcommands."""
    parser = Parser(
        prog="securefl",
        description="Privacy-preserving federated semi-supervised learning with real cryptography.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="{run,bench,keys}")
    from securefl.experiments import cli as run_cli

    run_parser = commands.add_parser(
        "run", help="run FSSL experiments (the main job)", description=run_cli.DESCRIPTION
    )
    run_cli.add_arguments(run_parser)
    bench_parser = commands.add_parser("bench", help="benchmarks writing JSON")
    benches = bench_parser.add_subparsers(
        dest="bench", required=True, metavar="{" + ",".join(BENCHMARKS) + "}"
    )
    for name, module_name in BENCHMARKS.items():
        module = importlib.import_module(module_name)
        summary = (module.__doc__ or "").strip().splitlines()[0]
        sub = benches.add_parser(name, help=summary, description=summary)
        module.add_arguments(sub)
        sub.add_argument(
            "--json", metavar="PATH",
            help="write the JSON record here (a file; its folder must exist)",
        )
    keys_parser = commands.add_parser(
        "keys", help="a deployment's client identities and roster",
        description="Create Ed25519 client identities and the roster every node pins "
                    "(securefl.crypto.identity), or show a roster's federation id.")
    keys = keys_parser.add_subparsers(dest="keys", required=True, metavar="{new,show}")
    new = keys.add_parser("new", help="create N identities and their roster in a new folder",
                          description="Writes OUT/roster.json (public: give it to every node) and "
                                      "OUT/client-<c>.key (mode 0600: give it to node c only).")
    new.add_argument("--out", required=True, metavar="DIR", help="folder to create (must not hold a roster)")
    new.add_argument("--clients", required=True, type=int, metavar="N", help="number of clients (ids 0..N-1)")
    new.add_argument("--federation", default="securefl", metavar="NAME", help="the federation's name")
    show = keys.add_parser("show", help="print a roster's federation id (compare it out of band)")
    show.add_argument("roster", metavar="ROSTER", help="a roster.json")
    return parser


def run_keys(args: argparse.Namespace, console: Console) -> int:
    """``securefl keys new`` / ``securefl keys show``."""
    from securefl.crypto.identity import Roster, write_federation

    if args.keys == "new":
        if args.clients < 1:
            raise InputError("--clients", args.clients, "must be a positive integer")
        out = write_federation(args.out, args.federation, args.clients)
        roster = Roster.load(out / "roster.json")
        console.print(f"wrote {out}/roster.json and {args.clients} client keys (mode 0600); "
                      f"federation {roster.name!r} id {roster.id.hex()}")
        return 0
    roster = Roster.load(args.roster)
    console.print(f"federation {roster.name!r} id {roster.id.hex()} clients {len(roster.keys)}")
    return 0


def validate_arguments(args: argparse.Namespace) -> None:
    """Every check of parsed arguments that needs neither data nor output files.

    ``bench``: the shared flags and the benchmark's ``validate`` hook (if it has one);
    ``run``: flags and configuration (:func:`securefl.experiments.cli.validate`).
    Raises a :class:`~securefl.errors.SecureFLError` naming the flag and value.
    """
    if args.command == "bench":
        from securefl.bench.common import validate_shared

        validate_shared(args)
        hook = getattr(importlib.import_module(BENCHMARKS[args.bench]), "validate", None)
        if hook is not None:
            hook(args)
        return
    from securefl.experiments import cli as run_cli

    run_cli.validate(args)


def print_record(console: Console, title: str, record: dict) -> None:
    """A benchmark record as a two-column table in human units (the JSON keeps raw numbers)."""
    from securefl.bench.common import record_rows

    table = Table(title=title, show_header=True, header_style="bold")
    table.add_column("field")
    table.add_column("value", justify="right")
    for label, value in record_rows(record):
        table.add_row(label, value)
    console.print(table)


def run_bench(args: argparse.Namespace, console: Console) -> int:
    """Check the request, run one benchmark, print its table and write its JSON."""
    from securefl.bench.common import check_output_file, machine_info, write_json
    from securefl.progress import make_progress

    module = importlib.import_module(BENCHMARKS[args.bench])
    validate_arguments(args)
    if args.json:
        check_output_file(args.json, "--json")
    with make_progress() as progress:
        record = module.run(args, progress)
    record["machine"] = machine_info()
    print_record(console, f"securefl bench {args.bench}", record)
    if args.json:
        console.print(f"wrote {write_json(record, args.json)}")
    return 0 if record.get("verified", True) else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``securefl`` console script."""
    args = build_parser().parse_args(argv)
    console = Console()
    try:
        if args.command == "bench":
            return run_bench(args, console)
        if args.command == "keys":
            return run_keys(args, console)
        from securefl.experiments import cli as run_cli

        return run_cli.main(args, console)
    except SecureFLError as exc:
        print(f"securefl: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("securefl: interrupted", file=sys.stderr)
        return 130


def console() -> None:
    """The ``securefl`` console script and ``python -m securefl``: this process keeps freed
    memory for reuse (:func:`securefl.memory.retain_freed_memory`), then :func:`main`."""
    retain_freed_memory()
    sys.exit(main())


if __name__ == "__main__":
    console()
