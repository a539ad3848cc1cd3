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

The terminal tables fit the console width without cutting a number: a column with the
same value in every row (the cryptography mode, complete rounds) moves into the title,
headers wrap at spaces, every number column is as wide as its widest number, and when
that is still too wide the least important columns are left out (named in the caption;
results.json and the run's README.md keep them all).  The title and the README state the
cryptography mode of the jobs actually run, never the configuration's prose.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from securefl.output import atomic_write

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
    "method", "final acc real %", "final acc plaintext %", "difference (pts)",
    "pseudo-labels identical",
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


@dataclass(frozen=True)
class Column:
    """A terminal column: its header (wraps at spaces), how long it survives narrow
    consoles (``keep=None``: never left out; else the lowest ``keep`` goes first), whether
    its cells are numbers (never wrapped or cut) and whether a column with one value in
    every row moves into the title (``fold``)."""

    header: str
    keep: int | None
    number: bool = True
    fold: bool = False


RESULT_TERMINAL = (
    Column("method", None, number=False), Column("mode", 90, number=False, fold=True),
    Column("rounds", 30, fold=True), Column("selected round", 40), Column("val acc %", 85),
    Column("test acc %", None), Column("final acc %", 50), Column("PL acc %", 60),
    Column("seconds", 80), Column("crypto s", 70), Column("MB / client / round", 75),
)
"""The terminal headers of :data:`RESULT_COLUMNS`, in the same order."""
COMPARE_TERMINAL = (
    Column("method", None, number=False), Column("final real %", None),
    Column("final plain %", None), Column("diff (pts)", 80), Column("PL equal", 90, number=False),
    Column("time ratio", 30), Column("crypto s", 60), Column("bytes ratio", 50),
)
"""The terminal headers of :data:`COMPARE_COLUMNS`, in the same order."""
LEGEND = {
    "PL acc %": "PL = pseudo-labels",
    "PL equal": "PL equal = pseudo-labels identical in every round",
    "MB / client / round": "MB = 10^6 bytes",
}
MODE_TEXT = {
    "real": "real cryptography",
    "plaintext": "plaintext placeholder (no cryptography)",
}


def mode_text(modes: list[str]) -> str:
    """How the jobs' cryptography is described: from the jobs run, not from a config."""
    distinct = list(dict.fromkeys(modes))
    if len(distinct) == 1:
        return MODE_TEXT.get(distinct[0], distinct[0])
    return "real cryptography and plaintext placeholder, same seed"


def _table(columns: tuple[Column, ...], rows: list[list[str]], keep: list[int],
           title: str, caption: str | None) -> Table:
    table = Table(title=title, caption=caption, header_style="bold", box=box.SIMPLE_HEAD,
                  show_edge=False, pad_edge=False, caption_justify="left")
    for index in keep:
        column = columns[index]
        cells = [row[index] for row in rows]
        widest_word = max((len(word) for text in [column.header, *cells] for word in text.split()),
                          default=1)
        width = max([len(cell) for cell in cells] if column.number else [], default=0)
        fixed = max(width, widest_word)
        table.add_column(column.header, justify="right" if column.number else "left",
                         min_width=fixed,
                         max_width=fixed if column.number else None)
    for row in rows:
        table.add_row(*(row[index] for index in keep))
    return table


def _rendered_width(table: Table) -> int:
    buffer = io.StringIO()
    Console(file=buffer, width=1000, color_system=None).print(table)
    return max((len(line.rstrip()) for line in buffer.getvalue().splitlines()), default=0)


def fit_table(columns: tuple[Column, ...], rows: list[list[str]], *, title: str,
              width: int | None) -> Table:
    """A rich table of ``rows`` that fits ``width`` columns without cutting a cell.

    Columns marked ``fold`` whose cells are all equal go into the title as ``value
    header`` (the mode is in the title already); then the columns with the lowest
    ``keep`` are left out until the table fits, and the caption names them.
    """
    keep = list(range(len(columns)))
    folded = []
    for index, column in enumerate(columns):
        values = {row[index] for row in rows}
        if column.fold and len(values) == 1:
            keep.remove(index)
            if column.header != "mode":  # the title states the mode already
                folded.append(f"{values.pop()} {column.header}")
    full_title = title + "".join(f", {text}" for text in folded)
    dropped: list[int] = []

    def build() -> Table:
        shown = {columns[i].header for i in keep}
        legend = [text for header, text in LEGEND.items() if header in shown]
        left_out = [columns[i].header for i in sorted(dropped)]
        parts = legend
        if left_out:
            parts.append(f"left out at {width} columns: {', '.join(left_out)} "
                         "(all columns are in results.json and README.md)")
        return _table(columns, rows, keep, full_title, "; ".join(parts) or None)

    table = build()
    while width is not None and _rendered_width(table) > width:
        candidates = [i for i in keep if columns[i].keep is not None]
        if not candidates:
            break
        lowest = min(candidates, key=lambda i: columns[i].keep)
        keep.remove(lowest)
        dropped.append(lowest)
        table = build()
    return table


def results_table(document: dict[str, Any], *, width: int | None = None) -> Table:
    """The rich results table, fitted to ``width`` console columns (None: no limit)."""
    name = document.get("config", {}).get("name", "run")
    summaries = document["methods"]
    dataset = summaries[0]["dataset"] if summaries else "?"
    title = (f"securefl run: {name} on {dataset}, "
             f"{mode_text([s['secure'] for s in summaries])}")
    return fit_table(RESULT_TERMINAL, result_rows(document), title=title, width=width)


def comparison_table(document: dict[str, Any], *, width: int | None = None) -> Table:
    """The rich real-vs-plaintext table, fitted to ``width`` console columns."""
    return fit_table(COMPARE_TERMINAL, compare_rows(document),
                     title="real cryptography vs plaintext placeholder (same seed)",
                     width=width)


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


def _warmup(document: dict[str, Any]) -> str:
    """``; process warm-up 2.2 s, charged to no method`` when the run recorded one (a resumed
    run: ``; process warm-ups 1.5 + 0.3 s (2 processes), charged to no method``)."""
    seconds = document.get("process_warmup_seconds")
    if seconds is None:
        return ""
    each = document.get("process_warmup_seconds_by_process") or [seconds]
    if len(each) == 1:
        return f"; process warm-up {seconds:.1f} s, charged to no method"
    terms = " + ".join(f"{s:.1f}" for s in each)
    return f"; process warm-ups {terms} s ({len(each)} processes), charged to no method"


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
        f"(started {document.get('started', '?')}, last update {document.get('updated', '?')})"
        + _warmup(document),
        f"- commit: {document.get('commit', '?')}"
        + ("" if dirty is None else f" (uncommitted changes: {'yes' if dirty else 'no'})"),
        f"- machine: {machine.get('cpu', '?')}, {machine.get('cores', '?')} cores, "
        f"{machine.get('memory_gb', '?')} GB, Python {machine.get('python', '?')}, "
        f"{machine.get('platform', '?')}, torch CPU capability "
        f"{machine.get('torch_cpu_capability', '?')}",
        f"- libraries: {_libraries(document)}",
        f"- config: `{document.get('config_source', '?')}`, seed {document.get('seed', '?')}",
        f"- cryptography: {mode_text([s['secure'] for s in document['methods']])}",
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
        *coverage_lines(document),
    ]
    return "\n".join(lines)


def coverage_lines(document: dict[str, Any]) -> list[str]:
    """Per job with label coverage (FedProp): a per-round table of the classes no label of
    the round's propagation covered, the median label mass sum_c Z_ic of the pseudo-labelled
    points (all, covered, uncovered classes) and test accuracy; the coverage plot.  Empty
    when no job has coverage."""
    lines = []
    for summary in document["methods"]:
        coverage = summary.get("label_coverage_by_round") or []
        if not any(c is not None for c in coverage):
            continue
        rows = []
        for i, (c, mass, acc) in enumerate(zip(coverage, summary["label_mass_median_by_round"],
                                               summary["accuracy_by_round"])):
            if c is None:
                continue
            uncovered = ", ".join(str(k) for k in c["uncovered_classes"]) or "-"
            rows.append([str(i + 1), uncovered, _mass(mass), _mass(c["label_mass_median_covered"]),
                         _mass(c["label_mass_median_uncovered"]), _pct(acc)])
        lines += [f"Label coverage of {summary['method']} ({summary['secure']}), a simulation-only "
                  "diagnostic: classes no label of the round's propagation held, and the median "
                  "label mass sum_c Z_ic of the unlabeled points (split by whether their hidden "
                  "class is covered).", "",
                  markdown_table(("round", "uncovered classes", "mass", "mass covered",
                                  "mass uncovered", "test acc"), rows), ""]
    return [*lines, "![label coverage by round](coverage.png)", ""] if lines else []


def _mass(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def write_readme(document: dict[str, Any], folder: Path) -> Path:
    """Write ``folder/README.md`` atomically (no partial file on any failure)."""
    text = readme_text(document).encode()
    return atomic_write(Path(folder) / README_FILE, lambda handle: handle.write(text))
