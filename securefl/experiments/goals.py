"""The results' stated goals, checked against the records rather than typed beside them.

Issue 21 states three goals for every setting of record; :func:`goal_rows` measures each
from a setting's records (:class:`~securefl.experiments.records.Setting`), always as the mean
paired difference, in points, of the test accuracy of the validation-selected round over the
seeds both methods ran (the last round's beside it; the verdict is the selected round's):

* **FedProp above FedAvg+localLP**, its per-client ablation (FedProp §5): ``fedprop`` minus
  ``fedavg-locallp``, met when the mean is above 0;
* **every semi-supervised method above labeled-only FedAvg** (``fedavg-labeled``, FedSemi's
  augmented "FedAvg+"): each method of the setting but the baseline and ``fedavg-supervised``
  (an upper bound with every label), met when the mean is above 0;
* **FedSemi's gains within ±1 point of its paper's**: ``fedsemi-pi`` / ``-mt`` / ``-d`` minus
  ``fedavg-labeled``, against the paper's gain over its FedAvg+ in the same setting (MNIST
  column of FedSemi's Tables 1–3, :data:`FEDSEMI_PAPER`), met when ``|ours - paper| <= 1``.

A goal whose methods did not both run in the setting has no row.  The paper's accuracies are
typed once, in :data:`FEDSEMI_PAPER`, with their table; every other figure comes from the
records, so ``experiments/tables.py --check`` catches a goal's verdict going stale.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from securefl.experiments.records import Row, Setting, gap_text, method_rows, paired_gaps

BASELINE = "fedavg-labeled"
LAST = "final_accuracy"
NOT_SEMI_SUPERVISED = frozenset({BASELINE, "fedavg-supervised"})
PAPER_TOLERANCE = 1.0
"""Points by which FedSemi's gain over FedAvg+ may differ from its paper's."""

FEDSEMI_PAPER: dict[str, tuple[str, float, dict[str, float]]] = {
    "mnist-fedsemi-iid": ("Table 1", 96.20,
                          {"fedsemi-pi": 97.04, "fedsemi-mt": 97.16, "fedsemi-d": 97.22}),
    "mnist-fedsemi-noniid1": ("Table 2, Non-IID-I", 92.95,
                              {"fedsemi-pi": 95.35, "fedsemi-mt": 94.95, "fedsemi-d": 95.61}),
    "mnist-fedsemi-noniid2": ("Table 2, Non-IID-II", 92.95,
                              {"fedsemi-pi": 94.28, "fedsemi-mt": 94.36, "fedsemi-d": 95.20}),
    "mnist-fedsemi-noniid3": ("Table 3", 96.08,
                              {"fedsemi-pi": 96.79, "fedsemi-mt": 97.00, "fedsemi-d": 97.01}),
}
"""FedSemi (Long et al.), MNIST column, γ = 0.1, by our config name: (table, FedAvg+ %,
{variant: %}).  The paper reports no Fashion-MNIST."""


@dataclass(frozen=True)
class GoalRow:
    """One goal of one setting, measured."""

    setting: str
    goal: str
    seeds: int
    measured: str
    last_round: str
    met: bool


def goal_rows(setting: Setting) -> list[GoalRow]:
    """The goals of ``setting`` that its records can measure (module docstring)."""
    rows = {row.method: row for row in method_rows(setting)}
    base = rows.get(BASELINE)
    goals: list[GoalRow] = []

    def above(method: str, other: Row | None) -> None:
        gaps = paired_gaps(rows[method], other) if method in rows and other else []
        if gaps:
            last = paired_gaps(rows[method], other, LAST)
            goals.append(GoalRow(setting.name, f"{method} above {other.method}", len(gaps),
                                 gap_text(gaps), gap_text(last), statistics.mean(gaps) > 0))

    above("fedprop", rows.get("fedavg-locallp"))
    for method in sorted(rows.keys() - NOT_SEMI_SUPERVISED):
        above(method, base)
    table, paper_base, paper = FEDSEMI_PAPER.get(setting.name, ("", 0.0, {}))
    for method, accuracy in paper.items():
        gaps = paired_gaps(rows[method], base) if method in rows and base else []
        if not gaps:
            continue
        ours, theirs = statistics.mean(gaps), accuracy - paper_base
        last = statistics.mean(paired_gaps(rows[method], base, LAST))
        goals.append(GoalRow(
            setting.name,
            f"{method}'s gain within ±{PAPER_TOLERANCE:g} of FedSemi's {theirs:+.2f} ({table})",
            len(gaps), f"{ours:+.2f} ({ours - theirs:+.2f} off)",
            f"{last:+.2f} ({last - theirs:+.2f} off)", abs(ours - theirs) <= PAPER_TOLERANCE,
        ))
    return goals


def goals_table(settings: list[Setting]) -> str:
    """The goals of every setting as one Markdown table (``met``: yes, or **no**; ``off``:
    our gain minus the paper's)."""
    lines = ["| setting | goal | seeds | measured (points) | at the last round | met |",
             "|---|---|---|---|---|---|"]
    for setting in settings:
        for row in goal_rows(setting):
            lines.append(f"| {row.setting} | {row.goal} | {row.seeds} | {row.measured} | "
                         f"{row.last_round} | {'yes' if row.met else '**no**'} |")
    return "\n".join(lines) + "\n"
