"""Plots of a run, drawn from ``results.json`` with matplotlib's Agg backend (no display).

- ``accuracy.png``: test accuracy by round, one line per job (colour = method,
  solid = real cryptography, dashed = plaintext placeholder), a star at the round the
  runner selected on validation.
- ``cost.png``: per job, wall-clock seconds split into setup, training, cryptography (its
  plaintext placeholder in plaintext jobs) and the rest; and megabytes per client per
  round as two bars, model traffic and protocol traffic, on a logarithmic axis — FedProp's
  SHADE traffic is ~1000x the other methods', and on a linear axis every other bar would
  be invisible.  The title states the cryptography mode of the jobs actually run.
- ``coverage.png`` (only when a job has label coverage, FedProp): per such job, test
  accuracy by round beside the number of classes no label of the round's propagation
  covered (bars, right axis) -- a simulation-only diagnostic
  (:meth:`securefl.methods.base.Method.label_coverage`).
- :func:`plot_seeds`: test accuracy of each method's validation-selected model over
  several runs of one config with different seeds (one dot per seed, a bar for the mean),
  for claims that should not rest on one seed.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from securefl.experiments.report import mode_text
from securefl.output import atomic_write, format_bytes

ACCURACY_PLOT = "accuracy.png"
COST_PLOT = "cost.png"
COVERAGE_PLOT = "coverage.png"


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt: Any, figure: Any, path: Path) -> None:
    """Save as PNG atomically (no partial file on any failure), then free the figure."""
    try:
        atomic_write(path, lambda handle: figure.savefig(handle, format="png"))
    finally:
        plt.close(figure)


def _label(summary: dict[str, Any]) -> str:
    return f"{summary['method']} ({summary['secure']})"


def plot_accuracy(document: dict[str, Any], path: Path) -> Path:
    """Accuracy-by-round line plot of every job with at least one round."""
    plt = _pyplot()
    jobs = [s for s in document["methods"] if s["rounds_completed"]]
    methods = list(dict.fromkeys(s["method"] for s in jobs))
    colours = plt.get_cmap("tab10")
    figure, axis = plt.subplots(figsize=(7.5, 4.5), dpi=120)
    for summary in jobs:
        scored = [(i + 1, 100 * a) for i, a in enumerate(summary["accuracy_by_round"])
                  if a is not None]
        axis.plot(
            [r for r, _ in scored],
            [a for _, a in scored],
            label=_label(summary),
            color=colours(methods.index(summary["method"]) % 10),
            linestyle="-" if summary["secure"] == "real" else "--",
            marker="o" if summary["rounds_completed"] <= 30 else None,
            markersize=3,
        )
        if summary.get("selected_test_accuracy") is not None:
            axis.plot(
                summary["selected_round"] + 1, 100 * summary["selected_test_accuracy"], "*",
                color=colours(methods.index(summary["method"]) % 10), markersize=11,
            )
    axis.set_xlabel("communication round")
    axis.set_ylabel("test accuracy [%] (* = round selected on validation)")
    axis.set_title(f"{document.get('config', {}).get('name', 'run')}: accuracy by round")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8, loc="lower right")
    figure.tight_layout()
    _save(plt, figure, path)
    return path


def plot_cost(document: dict[str, Any], path: Path) -> Path:
    """Stacked bars of seconds (setup/train/crypto/other); model and protocol MB per client
    per round as separate bars on a log axis."""
    plt = _pyplot()
    jobs = [s for s in document["methods"] if s["rounds_completed"]]
    labels = [_label(s) for s in jobs]
    positions = list(range(len(jobs)))
    plaintext = any(s["secure"] == "plaintext" for s in jobs)
    figure, (time_axis, bytes_axis) = plt.subplots(
        1, 2, figsize=(11, 0.55 * len(jobs) + 1.8), dpi=120, sharey=True
    )
    left = [0.0] * len(jobs)
    parts = {
        "setup": [s["setup_seconds"] for s in jobs],
        "training": [s["train_seconds"] for s in jobs],
        "cryptography" + (" (or its placeholder)" if plaintext else ""): [
            s["crypto_seconds"] for s in jobs
        ],
    }
    parts["other"] = [
        max(0.0, s["seconds"] - sum(p[i] for p in parts.values())) for i, s in enumerate(jobs)
    ]
    for name, values in parts.items():
        time_axis.barh(positions, values, left=left, label=name)
        left = [a + b for a, b in zip(left, values)]
    for position, total in zip(positions, left):
        time_axis.annotate(f" {total:.1f} s", (total, position), va="center", fontsize=7)
    time_axis.set_xlabel("seconds (whole run)")
    time_axis.set_yticks(positions, labels)
    time_axis.invert_yaxis()
    time_axis.legend(fontsize=8)
    time_axis.grid(axis="x", alpha=0.3)
    time_axis.margins(x=0.12)
    _bytes_panel(bytes_axis, jobs, positions, plaintext)
    figure.suptitle(f"cost of each job: {mode_text([s['secure'] for s in jobs])}")
    figure.tight_layout()
    _save(plt, figure, path)
    return path


def _bytes_panel(
    axis: Any, jobs: list[dict[str, Any]], positions: list[int], plaintext: bool
) -> None:
    """Model and protocol MB per client per round, side by side, log x axis from a floor
    one decade below the smallest positive value (zeros are written, not drawn)."""
    model = [(s["bytes_model_per_client_per_round"] or 0.0) / 1e6 for s in jobs]
    protocol = [(s["bytes_protocol_per_client_per_round"] or 0.0) / 1e6 for s in jobs]
    positive = [v for v in model + protocol if v > 0] or [1.0]
    floor = 10 ** math.floor(math.log10(min(positive)) - 1)
    top = max(positive)
    axis.set_xscale("log")
    protocol_label = "privacy protocols" + (" (placeholder in plaintext jobs)" if plaintext else "")
    bars = ((-0.2, model, "model up/download"), (0.2, protocol, protocol_label))
    for offset, values, label in bars:
        shown = [(p + offset, v) for p, v in zip(positions, values) if v > 0]
        axis.barh([y for y, _ in shown], [v - floor for _, v in shown], left=floor, height=0.38,
                  label=label)
        for position, value in zip(positions, values):
            axis.annotate(f" {format_bytes(value * 1e6)}", (max(value, floor), position + offset),
                          va="center", fontsize=6)
    axis.set_xlim(floor, top * 30)
    axis.set_xlabel("MB per client per round (log scale)")
    axis.legend(fontsize=8, loc="lower right")
    axis.grid(axis="x", alpha=0.3)


def _covered_jobs(document: dict[str, Any]) -> list[dict[str, Any]]:
    """The jobs with at least one round carrying a label coverage."""
    return [s for s in document["methods"]
            if any(c is not None for c in s.get("label_coverage_by_round") or [])]


def plot_coverage(document: dict[str, Any], path: Path) -> Path:
    """Per job with label coverage: test accuracy by round (line, left axis) and the
    number of classes no label of the round's propagation covered (bars, right axis)."""
    plt = _pyplot()
    jobs = _covered_jobs(document)
    figure, axes = plt.subplots(len(jobs), 1, figsize=(7.5, 3.2 * len(jobs)), dpi=120,
                                squeeze=False)
    for axis, summary in zip(axes[:, 0], jobs):
        coverage = summary["label_coverage_by_round"]
        rounds = [i + 1 for i, c in enumerate(coverage) if c is not None]
        counts = [c["uncovered_count"] for c in coverage if c is not None]
        bars = axis.twinx()
        bars.bar(rounds, counts, color="tab:red", alpha=0.3, width=0.8, label="uncovered classes")
        bars.set_ylabel("classes without a label", color="tab:red")
        bars.set_ylim(0, max(counts + [1]) * 1.6)
        scored = [(i + 1, 100 * a) for i, a in enumerate(summary["accuracy_by_round"]) if a is not None]
        axis.plot([r for r, _ in scored], [a for _, a in scored], color="tab:blue",
                  marker="o" if len(scored) <= 30 else None, markersize=3)
        axis.set_ylabel("test accuracy [%]", color="tab:blue")
        axis.set_zorder(bars.get_zorder() + 1)
        axis.patch.set_visible(False)
        axis.set_title(f"{_label(summary)}: label coverage of the sampled clients", fontsize=9)
        axis.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("communication round")
    figure.tight_layout()
    _save(plt, figure, path)
    return path


def write_plots(document: dict[str, Any], folder: Path) -> list[Path]:
    """Write the plots into ``folder`` (nothing when no round has completed; the
    coverage plot only when a job has label coverage)."""
    if not any(s["rounds_completed"] for s in document["methods"]):
        return []
    folder = Path(folder)
    written = [
        plot_accuracy(document, folder / ACCURACY_PLOT),
        plot_cost(document, folder / COST_PLOT),
    ]
    if _covered_jobs(document):
        written.append(plot_coverage(document, folder / COVERAGE_PLOT))
    return written


def selected_accuracies(documents: list[dict[str, Any]]) -> dict[str, dict[Any, float]]:
    """``{method: {seed: test accuracy in % of the validation-selected round}}`` over one
    ``results.json`` per seed."""
    selected: dict[str, dict[Any, float]] = {}
    for document in documents:
        for summary in document["methods"]:
            if summary["rounds_completed"]:
                selected.setdefault(summary["method"], {})[document.get("seed")] = (
                    100 * summary["selected_test_accuracy"]
                )
    return selected


def plot_seeds(documents: list[dict[str, Any]], path: Path, *, baseline: str = "fedavg-labeled") -> Path:
    """Validation-selected test accuracy per method over ``documents`` (one
    ``results.json`` per seed).

    One dot per seed, a bar at the mean, and the ``baseline``'s mean as a dashed line.
    """
    plt = _pyplot()
    finals = {
        method: list(by_seed.values()) for method, by_seed in selected_accuracies(documents).items()
    }
    methods = list(finals)
    figure, axis = plt.subplots(figsize=(7.5, 4.0), dpi=120)
    for position, method in enumerate(methods):
        values = finals[method]
        axis.bar(position, sum(values) / len(values), color="tab:blue", alpha=0.35, width=0.6)
        axis.plot([position] * len(values), values, "o", color="tab:blue", markersize=4)
    if baseline in finals:
        mean = sum(finals[baseline]) / len(finals[baseline])
        axis.axhline(mean, color="grey", linestyle="--", linewidth=1, label=f"{baseline} mean")
        axis.legend(fontsize=8, loc="lower right")
    low = min(min(v) for v in finals.values())
    axis.set_ylim(max(0.0, low - 5.0), 100.0)
    axis.set_xticks(range(len(methods)), methods, rotation=20, fontsize=8)
    axis.set_ylabel("test accuracy, validation-selected [%]")
    seeds = sorted({d.get("seed") for d in documents}, key=str)
    axis.set_title(f"validation-selected test accuracy over seeds {', '.join(map(str, seeds))}")
    axis.grid(alpha=0.3, axis="y")
    figure.tight_layout()
    _save(plt, figure, path)
    return path
