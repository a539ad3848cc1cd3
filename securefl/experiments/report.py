"""Tables of a run for the terminal (rich) and for READMEs (Markdown), from ``results.json``.

The results table has one row per job: final and best accuracy, the last round's
pseudo-label accuracy (where the method has pseudo-labels), wall-clock and cryptography
seconds, and megabytes per client per round.  With ``--secure both`` the comparison table
shows, per method, the accuracy difference real - plaintext, whether the pseudo-labels
were identical in every round (by SHA-256 digest), and the time and byte overhead ratios.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _mb(value: float | None) -> str:
    return "-" if value is None else f"{value / 1e6:.3f}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _identical(value: bool | None, mismatches: list[int]) -> str:
    if value is None:
        return "n/a"
    return "yes" if value else f"NO (rounds {', '.join(str(r + 1) for r in mismatches)})"


RESULT_COLUMNS = (
    "method", "secure", "rounds", "final acc %", "best acc %", "pseudo-label acc %",
    "seconds", "crypto s", "MB/client/round",
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
            _pct(s["final_accuracy"]),
            _pct(s["best_accuracy"]),
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
