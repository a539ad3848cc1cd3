"""securefl.experiments: configurations, the round-by-round runner, results, tables, plots.

Public API::

    load_config(path=None, **overrides) -> ExperimentConfig     TOML (+ flag overrides), validated
    DEFAULT_CONFIG                                               the digits default (package data)
    load_federations(config) -> {method: Federation}             dataset + seeded partitions
    plan_jobs(config) -> [JobLog]                                one job per method and crypto mode
    new_state(config, header) / load_state(folder) -> RunState   fresh / checkpointed run
    Runner(state=, federations=, out=, ...).run() -> dict        commits every round; resumable
    read_results(folder) -> dict                                 results.json of a run folder
    compare_jobs(real_summary, plaintext_summary) -> dict        real-vs-plaintext comparison
    write_plots(document, folder)                                accuracy.png and cost.png
    results_table / comparison_table / markdown_report           rich and Markdown tables

``securefl run`` (:mod:`securefl.experiments.cli`) wires these together.
"""

from securefl.experiments.config import DEFAULT_CONFIG, ExperimentConfig, load_config
from securefl.experiments.plots import write_plots
from securefl.experiments.report import comparison_table, markdown_report, results_table
from securefl.experiments.results import JobLog, compare_jobs, read_results
from securefl.experiments.runner import (
    Runner,
    RunState,
    load_federations,
    load_state,
    new_state,
    plan_jobs,
)

__all__ = [
    "DEFAULT_CONFIG", "ExperimentConfig", "JobLog", "RunState", "Runner", "compare_jobs",
    "comparison_table", "load_config", "load_federations", "load_state", "markdown_report",
    "new_state", "plan_jobs", "read_results", "results_table", "write_plots",
]
