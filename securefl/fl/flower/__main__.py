"""``python -m securefl.fl.flower``: run a program on Flower, locally or on a deployment.

    python -m securefl.fl.flower local [--nodes N] [--mode fast|cold|stock] [--poll S]
                                       [--program NAME] [--config TOML] [--set KEY=VALUE ...]
                                       [--out DIR]
        start a SuperLink and N SuperNodes on 127.0.0.1, run the program, print and write
        its result (``DIR/result.json``), stop every process started.

    python -m securefl.fl.flower app DIR [--program NAME] [--nodes N] [--config TOML]
                                         [--set KEY=VALUE ...] --out RESULT-DIR
        write a Flower app directory for ``flwr run DIR <connection>`` on a deployment
        started by hand (``docs/flower.md``); the ServerApp writes its result to
        RESULT-DIR on the SuperLink's machine.

``--set`` values are parsed as TOML scalars (``rounds=3``, ``method="fedavg-labeled"``);
keys are the program's run-config keys (:mod:`securefl.experiments.deployment` for
``method``, the default program; :mod:`securefl.runtime.linkcheck`).  ``--config`` names an
experiment configuration (TOML, as ``securefl run --config``) whose contents become the
run config's ``experiment``; its ``[partition] num_clients`` must equal ``--nodes``.
Bad arguments print one line and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from securefl.errors import InputError, SecureFLError


def _assignments(pairs: Sequence[str]) -> dict[str, Any]:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib

    values: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise InputError("--set", pair, "expected KEY=VALUE")
        try:
            values[key] = tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError:
            values[key] = text
    return values


def _experiment(path: str | None) -> dict[str, Any]:
    """``{"experiment": JSON of the TOML file}`` (empty without a path)."""
    if path is None:
        return {}
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    try:
        with open(path, "rb") as handle:
            return {"experiment": json.dumps(tomllib.load(handle))}
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise InputError("--config", path, f"unreadable experiment configuration ({exc})") from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m securefl.fl.flower")
    commands = parser.add_subparsers(dest="command", required=True)
    local = commands.add_parser("local", help="run a program on a local SuperLink + N SuperNodes")
    local.add_argument("--nodes", type=int, default=3)
    local.add_argument("--mode", choices=("fast", "cold", "stock"), default="fast")
    local.add_argument("--poll", type=float, default=0.1)
    local.add_argument("--program", default="method")
    local.add_argument("--config", default=None, help="experiment configuration (TOML)")
    local.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    local.add_argument("--timeout", type=float, default=3600.0)
    local.add_argument("--out", default=None, help="directory for result.json (default: print only)")
    app = commands.add_parser("app", help="write a Flower app directory for flwr run")
    app.add_argument("directory")
    app.add_argument("--program", default="method")
    app.add_argument("--nodes", type=int, default=3)
    app.add_argument("--config", default=None, help="experiment configuration (TOML)")
    app.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    app.add_argument("--out", required=True, help="result directory on the SuperLink's machine")
    args = parser.parse_args(argv)
    try:
        from securefl.fl.flower.app import PROGRAMS
        from securefl.fl.flower.deploy import LocalFederation, write_app

        if args.program not in PROGRAMS:
            raise InputError("--program", args.program, f"must be one of {sorted(PROGRAMS)}")
        if args.nodes < 1:
            raise InputError("--nodes", args.nodes, "must be >= 1")
        settings = {"program": args.program, **_experiment(args.config), **_assignments(args.set)}
        if args.command == "app":
            target = write_app(args.directory, {"num-partitions": args.nodes, **settings,
                                                "out": str(Path(args.out).resolve())})
            print(f"wrote {target / 'pyproject.toml'}; run it with: flwr run {target} <connection>")
            return 0
        with LocalFederation(nodes=args.nodes, mode=args.mode, poll=args.poll) as federation:
            result = federation.run(settings, name="run", timeout=args.timeout)
    except SecureFLError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    text = json.dumps(result, indent=1, default=str)
    if args.out:
        target = Path(args.out)
        target.mkdir(parents=True, exist_ok=True)
        (target / "result.json").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
