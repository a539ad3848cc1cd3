"""Choose hyper-parameters on validation: one ``securefl run`` per grid point and seed.

    python experiments/sweep.py --config experiments/mnist-fedsemi-iid.toml --method fedprop \\
        --grid hyper.fedprop.alpha=0.9,0.99 --grid hyper.fedprop.warmup_rounds=5,10 \\
        --seed 1234 --secure plaintext --out runs/fedprop-alpha-warmup

Every grid point (the Cartesian product of the ``--grid`` axes, each ``KEY=V1,V2,...`` in
``--set`` syntax) runs as ``securefl run ... --set KEY=VALUE ... --seed S --out
OUT/<point>/seed<S>``, so each point is a complete record that ``securefl run`` re-creates
from its own ``command``.  Points already complete are kept, interrupted ones resumed: run
the same command again to continue a sweep.  The table printed at the end (and
``OUT/sweep.json``) shows validation accuracy only — mean over the seeds of the accuracy
of the round each run selected on validation — and marks each method's chosen point
(:mod:`securefl.experiments.grid`).  Test accuracy plays no part in the choice and is never
printed: every run goes with ``--validation-only`` (its progress lines and summaries show
validation accuracy alone, its result tables are withheld); each run folder's files hold
it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import sys
from pathlib import Path

from securefl.cli import main as securefl
from securefl.errors import SecureFLError
from securefl.experiments.grid import grid_points, point_folder, summarize, summary_markdown
from securefl.experiments.results import RESULTS_FILE

PASSED_ON = ("config", "dataset", "data_dir", "secure", "rounds", "threads")


def run_folder(out: Path, point: list[str], seed: int | None) -> Path:
    return out / point_folder(point) / ("config-seed" if seed is None else f"seed{seed}")


def complete(folder: Path) -> bool:
    try:
        return json.loads((folder / RESULTS_FILE).read_text()).get("status") == "complete"
    except (OSError, ValueError):
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", action="append", required=True, metavar="KEY=V1,V2,...",
                        help="one axis of the grid (repeatable)")
    parser.add_argument("--out", type=Path, required=True, help="folder of the sweep's runs")
    parser.add_argument("--seed", type=int, nargs="+", default=[None],
                        help="seeds to average validation accuracy over (default: the config's)")
    parser.add_argument("--method", nargs="+", dest="methods", help="method(s) to tune")
    parser.add_argument("--set", action="append", default=[], dest="settings",
                        metavar="KEY=VALUE", help="fixed override for every point (repeatable)")
    for flag in PASSED_ON:
        parser.add_argument(f"--{flag.replace('_', '-')}", dest=flag)
    args = parser.parse_args(argv)
    try:
        return sweep(args)
    except SecureFLError as exc:
        print(f"sweep: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


def sweep(args: argparse.Namespace) -> int:
    """Run the missing points of the grid, then summarise and choose on validation."""
    points = grid_points(args.grid)
    fixed = [word for flag in PASSED_ON if getattr(args, flag) is not None
             for word in (f"--{flag.replace('_', '-')}", str(getattr(args, flag)))]
    fixed += ["--method", *args.methods] if args.methods else []
    folders: dict[int, list[Path]] = {}
    for index, point in enumerate(points):
        folders[index] = []
        for seed in args.seed:
            folder = run_folder(args.out, point, seed)
            folders[index].append(folder)
            if complete(folder):
                continue
            if (folder / "checkpoint.pkl").is_file():
                command = ["run", "--validation-only", "--resume", str(folder)]
                if args.data_dir is not None:
                    command += ["--data-dir", args.data_dir]
            else:
                command = ["run", "--validation-only", *fixed,
                           *[w for s in [*args.settings, *point] for w in ("--set", s)],
                           *([] if seed is None else ["--seed", str(seed)]),
                           "--out", str(folder)]
            print(f"sweep: securefl {shlex.join(command)}", file=sys.stderr)
            with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):
                code = securefl(command)
            if code != 0:
                print(f"sweep: stopped, securefl run exited with {code}", file=sys.stderr)
                return code
    summary = summarize(points, folders)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "sweep.json").write_text(json.dumps(
        {"command": shlex.join([sys.executable, *sys.argv]), "grid": args.grid,
         "seeds": args.seed, "fixed": args.settings, **summary}, indent=2) + "\n")
    print(summary_markdown(summary), end="")
    for method, point in summary["chosen"].items():
        print(f"{method}: chosen on validation: {' '.join(point)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
