"""FedProp's test accuracy against the label coverage of the sampled clients, from records.

    python experiments/label_coverage.py FOLDER [FOLDER ...]

Reads every ``results.json`` under the folders and, per folder, pools the rounds of every
job that has ``label_coverage_by_round`` (FedProp; the simulation-only diagnostic of
:meth:`securefl.methods.fedprop.server.FedProp.label_coverage`).  It prints, per folder: the
number of such rounds, the Pearson correlation between a round's ``uncovered_count`` (the
classes no sampled client holds a label of) and its test accuracy, the rounds and mean test
accuracy per uncovered count, and the medians over rounds of the per-round median label mass
of covered and uncovered points.  Descriptive only: no choice is made from it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np


def coverage_rounds(folder: Path) -> list[tuple[dict, float]]:
    """``(label coverage, test accuracy)`` of every evaluated FedProp round under ``folder``."""
    rounds = []
    for path in sorted(Path(folder).rglob("results.json")):
        for job in json.loads(path.read_text()).get("methods", []):
            for coverage, accuracy in zip(job.get("label_coverage_by_round") or [],
                                          job.get("accuracy_by_round") or []):
                if coverage is not None and accuracy is not None:
                    rounds.append((coverage, float(accuracy)))
    return rounds


def summary(rounds: list[tuple[dict, float]]) -> dict:
    """Correlation, per-count means (in %) and label-mass medians of ``rounds``."""
    if len(rounds) < 2:
        raise SystemExit(f"label_coverage.py: {len(rounds)} rounds with label coverage; need 2 or more")
    counts = np.array([c["uncovered_count"] for c, _ in rounds], dtype=float)
    accuracy = 100 * np.array([a for _, a in rounds])
    by_count = {int(k): (int((counts == k).sum()), float(accuracy[counts == k].mean()))
                for k in sorted(set(counts))}
    masses = {side: [c[f"label_mass_median_{side}"] for c, _ in rounds
                     if c[f"label_mass_median_{side}"] is not None]
              for side in ("covered", "uncovered")}
    correlation = (float(np.corrcoef(counts, accuracy)[0, 1])
                   if counts.std() > 0 and accuracy.std() > 0 else None)
    return {"rounds": len(rounds), "correlation": correlation, "by_count": by_count,
            "mass_median": {k: statistics.median(v) if v else None for k, v in masses.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path)
    args = parser.parse_args(argv)
    for folder in args.folders:
        result = summary(coverage_rounds(folder))
        corr = "–" if result["correlation"] is None else f"{result['correlation']:.3f}"
        print(f"{folder}: {result['rounds']} rounds, correlation {corr}")
        for count, (n, mean) in result["by_count"].items():
            print(f"  {count} classes without a label: {n} rounds, mean test accuracy {mean:.1f} %")
        mass = result["mass_median"]
        print("  label mass (median of round medians): covered "
              + ", uncovered ".join("–" if mass[k] is None else f"{mass[k]:.3f}"
                                    for k in ("covered", "uncovered")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
