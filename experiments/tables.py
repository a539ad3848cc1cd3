"""The README's result tables, regenerated from the records (never typed by hand).

    python experiments/tables.py                          # every record under experiments/results
    python experiments/tables.py runs/seed*/ --plot-dir runs   # chosen run folders, + seed plots
    python experiments/tables.py --readme README.md [--check]  # regenerate (check) README blocks

Reads every ``results.json`` under the given folders (default: ``experiments/results``),
groups the runs by setting (the same configuration up to seed, methods, cryptography mode
and threads) and prints one Markdown table per setting: the test accuracy of the round
selected on validation, as mean ± sample standard deviation over the seeds, beside it the
last round's (what a fixed-length run would report), the paired differences to
``--baseline`` at the selected and at the last rounds (default ``fedavg-labeled``:
labeled-only FedAvg with the augmentation every FedAvg-family method trains with, FedSemi's
"FedAvg+" comparator), the validation accuracy, the selected rounds and the cost columns
(:mod:`securefl.experiments.records`).  Records
without a validation split (results schema 1) are listed on stderr and left out.
``--plot-dir DIR`` also writes ``DIR/<setting>-seeds.png`` for every setting run with
more than one seed (:func:`securefl.experiments.plots.plot_seeds`).

``--readme FILE`` rewrites, in place, every block of FILE between a line
``<!-- tables.py: FOLDER ... -->`` and the next ``<!-- /tables.py -->``: the block becomes the
title and table of the one setting the named folders hold, each folder relative to FILE's own
folder as a Markdown link is (``../experiments/results/...`` from ``docs/``); text outside the
blocks is left as it is.  A block opened by ``<!-- tables.py goals: FOLDER ... -->`` becomes
instead the table of the stated goals of every setting the folders hold, each measured from
the records (:mod:`securefl.experiments.goals`).  With ``--check`` nothing is written: the exit status is 1, with the stale blocks
named, when any block differs from what the records give (``tests/test_readme.py`` runs this
on the README, so a table typed by hand or left behind by new records fails the suite).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from securefl.experiments.goals import goals_table
from securefl.experiments.plots import plot_seeds
from securefl.experiments.records import (
    group_settings,
    load_records,
    setting_table,
    setting_title,
    settings_markdown,
)

RECORDS = Path(__file__).resolve().parent / "results"
BLOCK = re.compile(r"(?P<open><!-- tables\.py(?P<goals> goals)?: (?P<folders>[^>]*?) -->\n)"
                   r"(?P<body>.*?)(?P<close><!-- /tables\.py -->)", re.DOTALL)
LEGEND = (
    "Accuracies in % on the test set of the round selected by validation accuracy "
    "(mean ± sample std over seeds where there are several); `last-round acc` is the last "
    "round's test accuracy; `vs {baseline}` / `last round vs {baseline}`: mean paired "
    "difference in points at the selected / last rounds (seeds higher); `val acc` is the "
    "selected round's validation accuracy, `selected round` 1-based per seed; seconds and MB "
    "per client per round are means."
)


def block_body(folders: str, *, baseline: str, root: Path, goals: bool = False) -> str:
    """What a README block naming ``folders`` (relative to ``root``) holds: the table of
    their one setting, or with ``goals`` the goals table of every setting they hold."""
    paths = [root / folder for folder in folders.split()]
    missing = [str(path) for path in paths if not path.exists()]
    if missing:
        raise SystemExit(f"tables.py: block {folders!r} names {', '.join(missing)}, which does not "
                         "exist (folders are relative to the Markdown file's folder)")
    records, _ = load_records(paths)
    settings = group_settings(records)
    if goals:
        return goals_table(settings) + "\n"
    if len(settings) != 1:
        raise SystemExit(f"tables.py: block {folders!r} holds {len(settings)} settings; name "
                         "folders of exactly one")
    setting = settings[0]
    return f"`{setting_title(setting)}`:\n\n{setting_table(setting, baseline=baseline)}\n"


def match_body(match: re.Match, *, baseline: str, root: Path) -> str:
    """What the :data:`BLOCK` ``match`` of a file in ``root`` should hold."""
    return block_body(match["folders"], baseline=baseline, root=root, goals=bool(match["goals"]))


def update_readme(path: Path, *, baseline: str, check: bool) -> int:
    """Regenerate (or with ``check`` compare) the blocks of ``path``; returns the exit status."""
    text = path.read_text()
    stale: list[str] = []

    def regenerate(match: re.Match) -> str:
        body = match_body(match, baseline=baseline, root=path.resolve().parent)
        if body != match["body"]:
            stale.append(match["folders"])
        return match["open"] + body + match["close"]

    updated, count = BLOCK.subn(regenerate, text)
    if count == 0:
        print(f"tables.py: {path} has no <!-- tables.py: ... --> blocks", file=sys.stderr)
        return 1
    if check:
        for folders in stale:
            print(f"stale table in {path}: {folders} (run python experiments/tables.py "
                  f"--readme {path})", file=sys.stderr)
        return 1 if stale else 0
    if updated != text:
        path.write_text(updated)
    print(f"{path}: {count} blocks, {len(stale)} regenerated", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path, default=[RECORDS],
                        help="run folders or folders holding them (default: experiments/results)")
    parser.add_argument("--baseline", default="fedavg-labeled",
                        help="method the others are compared with (default: fedavg-labeled)")
    parser.add_argument("--plot-dir", type=Path, help="write one seed plot per multi-seed setting")
    parser.add_argument("--readme", type=Path,
                        help="regenerate the <!-- tables.py: ... --> blocks of this Markdown file")
    parser.add_argument("--check", action="store_true",
                        help="with --readme: write nothing, exit 1 if a block is stale")
    args = parser.parse_args(argv)
    if args.check and args.readme is None:
        parser.error("--check needs --readme")
    if args.readme is not None:
        return update_readme(args.readme, baseline=args.baseline, check=args.check)
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
