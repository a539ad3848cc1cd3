"""The README's result tables, regenerated from the records (never typed by hand).

    python experiments/tables.py                          # every record under experiments/results
    python experiments/tables.py runs/seed*/ --plot-dir runs   # chosen run folders, + seed plots

Reads every ``results.json`` under the given folders (default: ``experiments/results``),
groups the runs by setting (the same configuration up to seed, methods, cryptography mode
and threads) and prints one Markdown table per setting: the test accuracy of the round
selected on validation, as mean ± sample standard deviation over the seeds, the
validation and final accuracies, the selected rounds, the paired difference to
``--baseline`` and the cost columns (:mod:`securefl.experiments.records`).  Records
without a validation split (results schema 1) are listed on stderr and left out.
``--plot-dir DIR`` also writes ``DIR/<setting>-seeds.png`` for every setting run with
more than one seed (:func:`securefl.experiments.plots.plot_seeds`).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from securefl.experiments.plots import plot_seeds
from securefl.experiments.records import group_settings, load_records, settings_markdown

RECORDS = Path(__file__).resolve().parent / "results"
LEGEND = (
    "Accuracies in % on the test set of the round selected by validation accuracy "
    "(mean ± sample std over seeds where there are several); `val acc` is that round's "
    "validation accuracy, `final acc` the last round's test accuracy, `selected round` "
    "1-based per seed; `vs {baseline}`: mean paired difference in points (seeds higher); "
    "seconds and MB per client per round are means."
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path, default=[RECORDS],
                        help="run folders or folders holding them (default: experiments/results)")
    parser.add_argument("--baseline", default="fedavg-labeled",
                        help="method the others are compared with (default: fedavg-labeled)")
    parser.add_argument("--plot-dir", type=Path, help="write one seed plot per multi-seed setting")
    args = parser.parse_args(argv)
    records, skipped = load_records(args.paths)
    for note in skipped:
        print(f"skipped {note}", file=sys.stderr)
    settings = group_settings(records)
    if not settings:
        print("no records of the current schema found", file=sys.stderr)
        return 1
    print(LEGEND.format(baseline=args.baseline) + "\n")
    print(settings_markdown(settings, baseline=args.baseline), end="")
    if args.plot_dir is not None:
        args.plot_dir.mkdir(parents=True, exist_ok=True)
        used: set[str] = set()
        for setting in settings:
            if len(setting.seeds) > 1:
                slug = base = re.sub(r"[^A-Za-z0-9_.-]+", "-", setting.name)
                while slug in used:
                    slug = f"{base}-{len(used) + 1}"
                used.add(slug)
                path = plot_seeds([r.document for r in setting.records],
                                  args.plot_dir / f"{slug}-seeds.png", baseline=args.baseline)
                print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
