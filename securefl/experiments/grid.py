"""Hyper-parameter choices on validation: a grid of ``--set`` overrides, one ``securefl run``
per grid point and seed, and the choice made by validation accuracy alone.

A grid is a list of axes ``"dotted.key=v1,v2,..."`` (values as in ``--set``, without
commas inside one value); :func:`grid_points` expands them into the Cartesian product, one
list of ``KEY=VALUE`` settings per point.  ``experiments/sweep.py`` runs every point as a
complete ``securefl run`` into ``OUT/<point>/seed<S>/`` — each folder a record with its own
command, so any point can be re-created on its own — and then calls :func:`summarize`:

    score(point, method) = mean over seeds of selected_validation_accuracy

(the validation accuracy of the round the runner selected on validation), and the chosen
point of each method is the one of highest score (the first listed on ties).  Test
accuracy is neither shown nor used: the sweep chooses, and the chosen point's
``results.json`` reports its test accuracy as every run does.
"""

from __future__ import annotations

import itertools
import re
import statistics
from pathlib import Path
from typing import Any

from securefl.errors import ConfigError
from securefl.experiments.results import read_results


def grid_points(axes: list[str]) -> list[list[str]]:
    """The Cartesian product of ``"key=v1,v2"`` axes as lists of ``"key=value"``."""
    expanded = []
    for axis in axes:
        key, sep, values = axis.partition("=")
        choices = [v.strip() for v in values.split(",")]
        if not sep or not key.strip() or not all(choices):
            raise ConfigError(f"grid={axis!r}: must be KEY=VALUE1,VALUE2,...")
        expanded.append([f"{key.strip()}={value}" for value in choices])
    keys = [a.partition("=")[0].strip() for a in axes]
    if len(set(keys)) != len(keys):
        raise ConfigError(f"grid={axes!r}: a key is listed twice")
    return [list(point) for point in itertools.product(*expanded)]


def point_folder(point: list[str]) -> str:
    """A folder name for a grid point (``hyper.fedprop.alpha=0.9`` -> ``alpha=0.9``; the
    whole key where the last parts of two keys coincide)."""
    keys = [s.partition("=")[0] for s in point]
    short = [k.rsplit(".", 1)[-1] for k in keys]
    names = short if len(set(short)) == len(short) else keys
    parts = [f"{n}={s.partition('=')[2]}" for n, s in zip(names, point)]
    return re.sub(r"[^A-Za-z0-9_.=,+-]+", "-", "__".join(parts)) or "default"


def summarize(points: list[list[str]], folders: dict[int, list[Path]]) -> dict[str, Any]:
    """Validation scores of every point and method, and the chosen point per method.

    ``folders[i]`` are the run folders (one per seed) of ``points[i]``.
    """
    rows: list[dict[str, Any]] = []
    for index, point in enumerate(points):
        by_method: dict[str, list[dict[str, Any]]] = {}
        for folder in folders[index]:
            first: dict[str, dict[str, Any]] = {}  # --secure both: real and plaintext agree
            for summary in read_results(folder)["methods"]:
                if summary["status"] == "complete":
                    first.setdefault(summary["method"], summary)
            for method, summary in first.items():
                by_method.setdefault(method, []).append(summary)
        for method, runs in by_method.items():
            values = [r["selected_validation_accuracy"] for r in runs]
            if any(v is None for v in values):
                raise ConfigError(f"sweep point {point}: {method} has no validation split "
                                  "(set partition.validation_fraction > 0)")
            rows.append({
                "point": point, "method": method, "seeds": len(values),
                "validation_accuracy": statistics.mean(values),
                "validation_std": statistics.stdev(values) if len(values) > 1 else None,
                "selected_rounds": [r["selected_round"] + 1 for r in runs],
                "folders": [str(f) for f in folders[index]],
            })
    chosen: dict[str, dict[str, Any]] = {}
    for row in rows:
        best = chosen.get(row["method"])
        if best is None or row["validation_accuracy"] > best["validation_accuracy"]:
            chosen[row["method"]] = row
    return {"rows": rows, "chosen": {m: r["point"] for m, r in chosen.items()}}


def summary_markdown(summary: dict[str, Any]) -> str:
    """The sweep's table (validation only) with the chosen point of each method marked."""
    lines = ["| setting | method | seeds | val acc % | selected rounds | chosen |",
             "|---|---|---|---|---|---|"]
    for row in summary["rows"]:
        value = f"{100 * row['validation_accuracy']:.2f}"
        if row["validation_std"] is not None:
            value += f" ± {100 * row['validation_std']:.2f}"
        chosen = "**yes**" if summary["chosen"][row["method"]] == row["point"] else ""
        lines.append(f"| {' '.join(row['point']) or '(config)'} | {row['method']} | "
                     f"{row['seeds']} | {value} | "
                     f"{', '.join(map(str, row['selected_rounds']))} | {chosen} |")
    return "\n".join(lines) + "\n"
