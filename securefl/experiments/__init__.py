"""securefl.experiments: configurations, the round-by-round runner, results, tables, plots.

Public API::

    load_config(path=None, **overrides) -> ExperimentConfig     TOML (+ flag and --set overrides)
    apply_settings(raw, ["a.b=v", ...]) -> dict                  the --set overrides of a TOML dict
    DEFAULT_CONFIG                                               the digits default (package data)
    load_federations(config) -> {method: Federation}             dataset + seeded partitions
                                                                 (validation split carved first)
    plan_jobs(config) -> [JobLog]                                one job per method and crypto mode
    new_state(config, header) / load_state(folder) -> RunState   fresh / checkpointed run
    Runner(state=, federations=, out=, ...).run() -> dict        commits every round; resumable;
                                                                 scores validation + test itself
    evaluate_round(method, federation) -> dict                   the runner's per-round evaluation
    select_round(validation_by_round) -> (round, rule)           selection on validation only
    read_results(folder) -> dict                                 results.json of a run folder
    compare_jobs(real_summary, plaintext_summary) -> dict        real-vs-plaintext comparison
    collect_provenance(command) -> dict                          command, commit, machine, libraries
    load_records(paths) / group_settings / settings_markdown     tables of record (seed mean ± std)
    goal_rows(setting) / goals_table(settings)                   the stated goals, measured
    grid_points / summarize                                      sweeps chosen on validation
    write_plots(document, folder)                                accuracy.png and cost.png
    results_table / comparison_table / markdown_report           rich and Markdown tables

    program_config(config, method, ...) -> dict                 one job as program ``method``'s
                                                                 run config (Flower or in process;
                                                                 :mod:`securefl.experiments.deployment`)

``securefl run`` (:mod:`securefl.experiments.cli`) wires these together;
``experiments/tables.py`` and ``experiments/sweep.py`` are the scripts around the records.
"""

from securefl.experiments.config import (
    DEFAULT_CONFIG,
    ExperimentConfig,
    apply_settings,
    load_config,
)
from securefl.experiments.deployment import program_config
from securefl.experiments.goals import goal_rows, goals_table
from securefl.experiments.grid import grid_points, summarize
from securefl.experiments.plots import write_plots
from securefl.experiments.provenance import collect_provenance
from securefl.experiments.records import group_settings, load_records, settings_markdown
from securefl.experiments.report import comparison_table, markdown_report, results_table
from securefl.experiments.results import JobLog, compare_jobs, read_results, select_round
from securefl.experiments.runner import (
    Runner,
    RunState,
    evaluate_round,
    load_federations,
    load_state,
    new_state,
    plan_jobs,
)

__all__ = [
    "DEFAULT_CONFIG", "ExperimentConfig", "JobLog", "RunState", "Runner", "apply_settings",
    "collect_provenance", "compare_jobs", "comparison_table", "evaluate_round", "goal_rows",
    "goals_table", "grid_points",
    "group_settings", "load_config", "load_federations", "load_records", "load_state",
    "markdown_report", "new_state", "plan_jobs", "program_config", "read_results", "results_table",
    "select_round", "settings_markdown", "summarize", "write_plots",
]
