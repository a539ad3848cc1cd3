"""Each method's sensitivity to its key hyper-parameter, from one-axis validation sweeps.

    python experiments/sensitivity.py experiments/sweeps/digits-sens-* \\
        --reference experiments/sweeps/digits-sens-fedavg-labeled \\
        --plot experiments/sweeps/sensitivity-digits.png

Each SWEEP folder is one ``experiments/sweep.py`` run over a single ``--grid`` axis
``hyper.<method>.<name>=v1,v2,...`` for a single method; its ``sweep.json`` holds, per grid
value v, the mean and sample standard deviation over the sweep's seeds of the validation
accuracy of the round each run selected on validation (test accuracy is not read).  The
``--reference`` sweep is labeled-only FedAvg on the same seeds (a one-point grid).

The method's *default* value d is what ``securefl run`` uses with ``--config`` (default: the
digits default): ``[hyper.<method>]`` of the config, else the hyper-parameter dataclass's
default.  Grid values are listed in increasing order where they are all numeric (a sweep
may list its default first), else in the grid's order.  Printed, one Markdown row per
method: every grid value's validation accuracy (mean ± std, %), d and its accuracy, the gap
acc(d) - acc(reference) in points, and the grid values of highest mean (all of them on
ties).  ``--plot`` draws one panel per method: accuracy against the grid values (evenly
spaced, in that order), error bars ± std, the reference as a horizontal line with a ± std
band, d as a star.

``--records FOLDER ...`` adds the cross-check on other data sets: the records under the
FOLDERs, grouped into settings as ``experiments/tables.py`` groups them (one config up to
seed and methods; each setting's config name must be distinct); per method and setting,
the value of the key hyper-parameter the records ran with (their ``hyper`` keys over the
dataclass defaults) and the mean over the seeds both ran of the paired differences to the
reference method, in points, of the test accuracy and of the validation accuracy of the
round each run selected on validation.  These records say whether a method fell below the
reference there; nothing here chooses a value from them.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from securefl.experiments.config import load_config, method_hyper
from securefl.experiments.records import group_settings, load_records

SWEEP_FILE = "sweep.json"


@dataclass(frozen=True)
class Axis:
    """One method's one-axis sweep: grid values with mean and std validation accuracy."""

    method: str
    name: str
    values: tuple[str, ...]
    means: tuple[float, ...]
    stds: tuple[float | None, ...]
    seeds: tuple[int, ...]

    def index_of(self, value: Any) -> int | None:
        """The grid position of ``value`` (compared as numbers where both are), or None."""
        for index, text in enumerate(self.values):
            try:
                if math.isclose(float(text), float(value)):
                    return index
            except (TypeError, ValueError):
                if text == str(value):
                    return index
        return None

    @property
    def best(self) -> tuple[str, ...]:
        """The grid values of the highest mean (all of them on ties)."""
        top = max(self.means)
        return tuple(v for v, m in zip(self.values, self.means)
                     if math.isclose(m, top, abs_tol=1e-9))


def read_axis(folder: Path) -> Axis:
    """The one-axis, one-method sweep of ``folder`` (its ``sweep.json``)."""
    path = folder / SWEEP_FILE
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"sensitivity.py: {path}: cannot read a sweep record ({exc})") from exc
    if len(record["grid"]) != 1:
        raise SystemExit(f"sensitivity.py: {path}: grid={record['grid']!r} has "
                         f"{len(record['grid'])} axes; a sensitivity sweep has one")
    key, _, listed = record["grid"][0].partition("=")
    parts = key.split(".")
    methods = {row["method"] for row in record["rows"]}
    if len(parts) != 3 or parts[0] != "hyper" or methods != {parts[1]}:
        raise SystemExit(f"sensitivity.py: {path}: grid key {key!r} with methods "
                         f"{sorted(methods)}; want hyper.<method>.<name> swept for that method")
    by_value = {row["point"][0].partition("=")[2]: row for row in record["rows"]}
    values = tuple(v.strip() for v in listed.split(","))
    try:  # numeric grids in increasing order (module docstring)
        values = tuple(sorted(values, key=float))
    except ValueError:
        pass
    missing = [v for v in values if v not in by_value]
    if missing:
        raise SystemExit(f"sensitivity.py: {path}: no result for {key}={missing[0]}")
    return Axis(method=parts[1], name=parts[2], values=values,
                means=tuple(by_value[v]["validation_accuracy"] for v in values),
                stds=tuple(by_value[v]["validation_std"] for v in values),
                seeds=tuple(record["seeds"]))


def default_value(config: Path | None, method: str, name: str) -> Any:
    """What ``securefl run --config config --method method`` uses for ``name``."""
    return getattr(method_hyper(method, load_config(config).hyper_for(method)), name)


def _pct(mean: float, std: float | None) -> str:
    return f"{100 * mean:.2f}" + ("" if std is None else f" ± {100 * std:.2f}")


def table(axes: list[Axis], defaults: list[Any], reference: Axis) -> str:
    """The Markdown table: per method, the grid, the default and its gap to the reference."""
    ref = reference.means[0]
    lines = [(f"Reference: {reference.method}, validation accuracy "
             f"{_pct(ref, reference.stds[0])} % (seeds "
             f"{', '.join(map(str, reference.seeds))})."), "",
             "| method | hyper-parameter | validation acc % per value (mean ± std) | default "
             "| default's acc % | default vs " + reference.method + " | best on validation |",
             "|---|---|---|---|---|---|---|"]
    for axis, default in zip(axes, defaults):
        cells = "<br>".join(f"{v}: {_pct(m, s)}"
                            for v, m, s in zip(axis.values, axis.means, axis.stds))
        at = axis.index_of(default)
        if at is None:
            acc, gap = "not in the grid", "–"
        else:
            acc, gap = _pct(axis.means[at], axis.stds[at]), f"{100 * (axis.means[at] - ref):+.2f}"
        lines.append(f"| {axis.method} | `{axis.name}` | {cells} | {default} | {acc} | {gap} | "
                     f"{', '.join(axis.best)} |")
    return "\n".join(lines) + "\n"


def _settings(folders: list[Path]) -> list[tuple[str, dict[tuple[str, Any], dict[str, Any]]]]:
    """Per setting of record under ``folders`` (runs of one config up to seed and methods,
    :func:`securefl.experiments.records.group_settings`): its name and the first complete
    summary of each (method, seed)."""
    records, _ = load_records(folders)
    settings = []
    for setting in group_settings(records):
        found: dict[tuple[str, Any], dict[str, Any]] = {}
        for record in setting.records:
            for summary in record.document["methods"]:
                if summary["status"] == "complete":
                    found.setdefault((summary["method"], record.seed), summary)
        settings.append((setting.name, found))
    names = [name for name, _ in settings]
    if len(set(names)) != len(names):
        raise SystemExit(f"sensitivity.py: --records hold settings {names}; name folders of "
                         "one setting per config name")
    return settings


def cross_check(axes: list[Axis], reference: str, folders: list[Path]) -> str:
    """Per method and setting of record: the key value run and the paired gaps to ``reference``
    (test and validation accuracy of the validation-selected round, points)."""
    settings = _settings(folders)
    lines = ["| method | " + " | ".join(name for name, _ in settings) + " |",
             "|---|" + "---|" * len(settings)]
    for axis in axes:
        cells = []
        for _, found in settings:
            seeds = sorted((s for m, s in found if m == axis.method and (reference, s) in found),
                           key=str)
            if not seeds:
                cells.append("not run")
                continue
            ran = {getattr(method_hyper(axis.method, found[axis.method, s]["hyper"]), axis.name)
                   for s in seeds}
            gaps = {key: statistics.mean(100 * (found[axis.method, s][key]
                                                - found[reference, s][key]) for s in seeds)
                    for key in ("selected_test_accuracy", "selected_validation_accuracy")}
            test, val = gaps["selected_test_accuracy"], gaps["selected_validation_accuracy"]
            verdict = ("above" if min(test, val) >= 0 else "**below**" if max(test, val) < 0
                       else "mixed")
            cells.append(f"{verdict}: test {test:+.2f}, val {val:+.2f} ({len(seeds)} "
                         f"seed{'s' if len(seeds) > 1 else ''}; {axis.name} = "
                         f"{', '.join(map(str, sorted(ran)))})")
        lines.append(f"| {axis.method} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(axes: list[Axis], defaults: list[Any], reference: Axis, path: Path) -> None:
    """One panel per method: validation accuracy against the grid values."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = min(4, len(axes))
    rows = math.ceil(len(axes) / columns)
    figure, panels = plt.subplots(rows, columns, figsize=(3.4 * columns, 2.8 * rows),
                                  squeeze=False)
    ref, ref_std = 100 * reference.means[0], 100 * (reference.stds[0] or 0.0)
    for panel, axis, default in zip(panels.flat, axes, defaults):
        x = range(len(axis.values))
        means = [100 * m for m in axis.means]
        panel.errorbar(x, means, yerr=[100 * (s or 0.0) for s in axis.stds], marker="o",
                       capsize=3, color="tab:blue")
        panel.axhline(ref, color="tab:red", linestyle="--", linewidth=1)
        panel.axhspan(ref - ref_std, ref + ref_std, color="tab:red", alpha=0.12)
        at = axis.index_of(default)
        if at is not None:
            panel.plot([at], [means[at]], marker="*", markersize=14, color="tab:orange",
                       linestyle="none")
        panel.set_xticks(list(x), axis.values)
        panel.set_title(f"{axis.method}: {axis.name}", fontsize=9)
        panel.set_xlabel(axis.name, fontsize=8)
        panel.set_ylabel("validation acc %", fontsize=8)
        panel.tick_params(labelsize=7)
    for panel in list(panels.flat)[len(axes):]:
        panel.set_visible(False)
    figure.suptitle(f"validation accuracy, mean ± std over seeds "
                    f"{', '.join(map(str, reference.seeds))}; star = default; dashed = "
                    f"{reference.method}", fontsize=9)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png", dpi=110)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweeps", nargs="+", type=Path, help="one-axis sweep folders")
    parser.add_argument("--reference", type=Path, required=True,
                        help="the sweep folder of the reference method (labeled-only FedAvg)")
    parser.add_argument("--config", type=Path,
                        help="config whose defaults are marked (default: the digits default)")
    parser.add_argument("--plot", type=Path, help="write the panels to this PNG")
    parser.add_argument("--records", type=Path, nargs="+", default=[],
                        help="folders of records of settings of record, for the cross-check")
    args = parser.parse_args(argv)
    reference = read_axis(args.reference)
    axes = [read_axis(folder) for folder in args.sweeps if folder.resolve()
            != args.reference.resolve()]
    for axis in axes:
        if axis.seeds != reference.seeds:
            raise SystemExit(f"sensitivity.py: {axis.method} ran seeds {list(axis.seeds)}, "
                             f"the reference {list(reference.seeds)}; compare the same seeds")
    defaults = [default_value(args.config, axis.method, axis.name) for axis in axes]
    print(table(axes, defaults, reference), end="")
    if args.records:
        print("\n" + cross_check(axes, reference.method, args.records), end="")
    if args.plot is not None:
        plot(axes, defaults, reference, args.plot)
        print(f"wrote {args.plot}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
