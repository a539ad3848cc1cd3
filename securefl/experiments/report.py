"""Tables of a run for the terminal (rich) and for READMEs (Markdown), from ``results.json``.

Every run folder also gets a ``README.md`` (:func:`write_readme`): the exact command, the
commit and whether the tree had uncommitted changes, the machine, the total seconds, both
tables and the two plots — so a results folder documents itself.

The results table has one row per job: the round selected by validation accuracy (1-based;
``last`` when the run has no validation split), its validation and test accuracy, the final
round's test accuracy, the last round's pseudo-label accuracy (where the method has
pseudo-labels), wall-clock and cryptography seconds, and megabytes per client per round.
With ``--secure both`` the comparison table shows, per method, the accuracy difference
real - plaintext, whether the pseudo-labels were identical in every round (by SHA-256
digest), and the time and byte overhead ratios.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rich.table import Table

README_FILE = "README.md"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _mb(value: float | None) -> str:
    return "-" if value is None else f"{value / 1e6:.3f}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _selected(summary: dict[str, Any]) -> str:
    """The selected round, 1-based, and ``(last)`` when no validation split chose it."""
    if summary["selected_round"] is None:
        return "-"
    suffix = "" if summary["selected_by"] == "validation" else " (last)"
    return f"{summary['selected_round'] + 1}{suffix}"


def _identical(value: bool | None, mismatches: list[int]) -> str:
    if value is None:
        return "n/a"
    return "yes" if value else f"NO (rounds {', '.join(str(r + 1) for r in mismatches)})"


RESULT_COLUMNS = (
    "method", "secure", "rounds", "selected", "val acc %", "test acc %", "final acc %",
    "pseudo-label acc %", "seconds", "crypto s", "MB/client/round",
)
COMPARE_COLUMNS = (
    "method", "acc real %", "acc plaintext %", "difference (pts)", "pseudo-labels identical",
    "time ratio", "crypto s", "bytes ratio",
)


def result_rows(document: dict[str, Any]) -> list[list[str]]:
    """One row of :data:`RESULT_COLUMNS` per job."""
    return [
        [
            s["method"],
            s["secure"],
            f"{s['rounds_completed']}/{s['rounds']}",
            _selected(s),
            _pct(s["selected_validation_accuracy"]),
            _pct(s["selected_test_accuracy"]),
            _pct(s["final_accuracy"]),
            _pct(s["pseudo_label_accuracy"]),
            _seconds(s["seconds"]),
            _seconds(s["crypto_seconds"]),
            _mb(s["bytes_per_client_per_round"]),
        ]
        for s in document["methods"]
    ]


def compare_rows(document: dict[str, Any]) -> list[list[str]]:
    """One row of :data:`COMPARE_COLUMNS` per method run both ways."""
    return [
        [
            c["method"],
            _pct(c["accuracy_real"]),
            _pct(c["accuracy_plaintext"]),
            "-" if c["accuracy_difference"] is None else f"{100 * c['accuracy_difference']:+.2f}",
            _identical(c["pseudo_labels_identical"], c["digest_mismatch_rounds"]),
            _ratio(c["time_ratio"]),
            _seconds(c["crypto_seconds_real"]),
            _ratio(c["bytes_ratio"]),
        ]
        for c in document.get("comparison", [])
    ]


def _rich(title: str, columns: tuple[str, ...], rows: list[list[str]]) -> Table:
    table = Table(title=title, header_style="bold")
    for index, column in enumerate(columns):
        table.add_column(column, justify="left" if index < 2 else "right", no_wrap=index < 2)
    for row in rows:
        table.add_row(*row)
    return table


def results_table(document: dict[str, Any]) -> Table:
    """The rich results table."""
    name = document.get("config", {}).get("name", "run")
    dataset = document["methods"][0]["dataset"] if document["methods"] else "?"
    return _rich(f"securefl run: {name} on {dataset}", RESULT_COLUMNS, result_rows(document))


def comparison_table(document: dict[str, Any]) -> Table:
    """The rich real-vs-plaintext table."""
    return _rich("real vs plaintext (same seed)", COMPARE_COLUMNS, compare_rows(document))


def markdown_table(columns: tuple[str, ...], rows: list[list[str]]) -> str:
    """A GitHub Markdown table."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def markdown_report(document: dict[str, Any]) -> str:
    """Both tables as Markdown (the comparison only when the run has one)."""
    parts = [markdown_table(RESULT_COLUMNS, result_rows(document))]
    if document.get("comparison"):
        parts.append(markdown_table(COMPARE_COLUMNS, compare_rows(document)))
    return "\n\n".join(parts) + "\n"


def _loads(values: list[float] | None) -> str:
    return "?" if not values else "/".join(f"{v:.1f}" for v in values)


def _held_out(document: dict[str, Any]) -> str:
    sizes = next(iter(document.get("held_out", {}).values()), None)
    if sizes is None:
        return "held-out sizes not recorded"
    if not sizes["validation"]:
        return f"no validation split: the last round is selected; {sizes['test']} test images"
    return f"{sizes['validation']} validation images held out of the training data, " \
        f"{sizes['test']} test images"


def _libraries(document: dict[str, Any]) -> str:
    versions = document.get("libraries") or {}
    return ", ".join(f"{name} {version}" for name, version in versions.items() if version) or "?"


def readme_text(document: dict[str, Any]) -> str:
    """The Markdown ``README.md`` of a run folder."""
    config = document.get("config", {})
    machine = document.get("machine", {})
    total = sum(s["seconds"] for s in document["methods"])
    dirty = document.get("uncommitted_changes")
    lines = [
        f"# {config.get('name', 'run')}: securefl run results",
        "",
        *([config["description"], ""] if config.get("description") else []),
        f"- command: `{document.get('command', '?')}`"
        + "".join(f"; resumed with `{c}`" for c in document.get("resumed", [])),
        f"- status: {document['status']}; {total:.0f} s of method time in total "
        f"(started {document.get('started', '?')}, last update {document.get('updated', '?')})",
        f"- commit: {document.get('commit', '?')}"
        + ("" if dirty is None else f" (uncommitted changes: {'yes' if dirty else 'no'})"),
        f"- machine: {machine.get('cpu', '?')}, {machine.get('cores', '?')} cores, "
        f"{machine.get('memory_gb', '?')} GB, Python {machine.get('python', '?')}, "
        f"{machine.get('platform', '?')}, torch CPU capability "
        f"{machine.get('torch_cpu_capability', '?')}",
        f"- libraries: {_libraries(document)}",
        f"- config: `{document.get('config_source', '?')}`, seed {document.get('seed', '?')}",
        "- load average (1/5/15 min) at start "
        f"{_loads(document.get('load_average_at_start'))}, at the last update "
        f"{_loads(document.get('load_average'))}: the machine is shared, so seconds are "
        "noisy; compare them as ratios within one run",
        "",
        "Accuracies in %. `selected` is the round (1-based) of highest validation accuracy "
        f"({_held_out(document)}); `val acc` and `test acc` are that round's model's "
        "accuracies, `final acc` the last round's test accuracy: the test set chose nothing. "
        "Seconds wall-clock (setup + rounds), MB = 10^6 bytes per participating "
        "client per round (model + protocol traffic).",
        "",
        markdown_report(document),
        "![accuracy by round](accuracy.png)",
        "",
        "![time and bytes per job](cost.png)",
        "",
    ]
    return "\n".join(lines)


def write_readme(document: dict[str, Any], folder: Path) -> Path:
    """Write ``folder/README.md`` atomically."""
    path = Path(folder) / README_FILE
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(readme_text(document))
    os.replace(tmp, path)
    return path
