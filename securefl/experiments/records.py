"""Tables of record: the README's result tables, computed from ``results.json`` files.

:func:`load_records` reads every ``results.json`` under the given folders;
:func:`group_settings` puts runs of the same *setting* together — the same configuration
up to ``seed``, ``methods``, ``secure``, ``threads``, ``device``, ``description`` and
``data_dir`` (a record older than ``eval_every`` counts as ``eval_every = 1``), and
the same source of the secrets that shape outputs (:func:`secrets_of`: FedProp's LSH
hyperplanes, DP noise), so the runs of one config with different seeds, or with its methods
split over several ``securefl run`` calls, form one table, while a ``--secure real`` run
(secrets from the OS) or a ``--secure both`` run (its own published crypto seed) is not
mistaken for a copy of a plaintext run of the same seed.  A method's own section of the
configuration (``[hyper.<method>]``) belongs to the runs of that method only: runs whose
shared configuration agrees join one setting as long as every method keeps one section
within it, so a section added to a config file for a new method, or a ``--set
hyper.<method>.KEY=VALUE`` of that method's own run, does not split it from the other
methods' runs, while the same method run with two different sections makes two settings.
:func:`settings_markdown` prints one Markdown table per setting, one row per method:

- ``test acc %``: the test accuracy of the round selected on validation
  (``selected_test_accuracy``), as mean ± sample standard deviation over the seeds
  (``ddof = 1``; the value alone for one seed), and beside it ``last-round acc %``
  (``final_accuracy``: what a fixed-length run without selection would report);
- ``vs <baseline>`` and ``last round vs <baseline>``: mean over the seeds both ran of the
  paired difference in test accuracy (points) at the selected rounds / at the last
  rounds, and on how many of them the method was higher;
- ``val acc %`` of the selected round, the selected rounds (1-based, per seed), the last
  round's pseudo-label accuracy;
- mean seconds and megabytes per client per round.

A method run more than once with the same seed in one setting (real and plaintext, or a
repeated record) counts once; if the copies disagree the row is flagged with ``!`` and
the disagreement listed below the table.  Records of an older schema (no validation
split) and incomplete jobs are left out and listed on stderr by the script, never mixed
into the tables.  ``experiments/tables.py`` is the command.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from securefl.experiments.results import RESULTS_FILE, SCHEMA

IGNORED_CONFIG_KEYS = ("seed", "methods", "secure", "threads", "description", "device")
"""Configuration keys that do not change the setting a run measures (the device changes
the random streams and the last bits, like the thread count; each record names its own)."""

CONFIG_DEFAULTS = {"eval_every": 1}
"""Keys newer than some records, with the value a record without them ran with."""


@dataclass
class Record:
    """One ``results.json`` and the folder it came from."""

    folder: Path
    document: dict[str, Any]

    @property
    def seed(self) -> Any:
        return self.document.get("seed")


@dataclass
class Setting:
    """The runs of one configuration (up to :data:`IGNORED_CONFIG_KEYS`): ``shared`` is the
    configuration without ``[hyper.<method>]`` sections, ``sections`` the section of each
    method run (``{}`` where it had none)."""

    shared: dict[str, Any]
    records: list[Record] = field(default_factory=list)
    sections: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def config(self) -> dict[str, Any]:
        """The shared configuration with the sections of the methods run."""
        hyper = {**self.shared.get("hyper", {}), **{m: s for m, s in self.sections.items() if s}}
        return {**self.shared, "hyper": hyper}

    @property
    def name(self) -> str:
        return str(self.config.get("name", "run"))

    @property
    def seeds(self) -> list[Any]:
        return sorted({r.seed for r in self.records}, key=str)


def load_records(paths: list[Path]) -> tuple[list[Record], list[str]]:
    """Every ``results.json`` under ``paths`` (folders, searched recursively, or files).

    Returns the records of the current schema and a list of notes on what was skipped.
    """
    files: list[Path] = []
    for path in paths:
        path = Path(path)
        if path.is_file():
            files.append(path)
        else:
            files.extend(sorted(path.rglob(RESULTS_FILE)))
    records, skipped = [], []
    for file in sorted(dict.fromkeys(files)):
        try:
            document = json.loads(file.read_text())
        except (OSError, ValueError) as exc:
            skipped.append(f"{file}: unreadable ({exc})")
            continue
        if not isinstance(document, dict) or document.get("schema") != SCHEMA:
            schema = document.get("schema") if isinstance(document, dict) else None
            skipped.append(f"{file}: schema {schema!r}, not {SCHEMA!r} (no validation split; "
                           "re-run it with securefl run)")
            continue
        records.append(Record(file.parent, document))
    return records, skipped


def secrets_of(document: dict[str, Any]) -> str:
    """Where a run's output-shaping secrets came from: the simulation seed (plaintext runs),
    the OS CSPRNG (real runs; different in every run), or a published crypto seed."""
    jobs = document.get("methods", [])
    if all(job.get("secure") == "plaintext" for job in jobs):
        return "from the simulation seed"
    if document.get("crypto_seed") is None:
        return "from the OS, per run"
    return f"crypto seed {document['crypto_seed']}"


def setting_config(document: dict[str, Any]) -> dict[str, Any]:
    """The configuration of a run without the keys that do not change its setting and
    without the ``[hyper.<method>]`` sections of methods it did not run, plus where its
    secrets came from (:func:`secrets_of`)."""
    stored = {**CONFIG_DEFAULTS, **document.get("config", {})}
    config = {k: v for k, v in stored.items() if k not in IGNORED_CONFIG_KEYS}
    config["secrets"] = secrets_of(document)
    dataset = dict(config.get("dataset", {}))
    dataset.pop("data_dir", None)
    config["dataset"] = dataset
    ran = _methods_run(document)
    config["hyper"] = {k: v for k, v in config.get("hyper", {}).items()
                       if not isinstance(v, dict) or k in ran}
    return config


def _methods_run(document: dict[str, Any]) -> list[str]:
    return list(dict.fromkeys(job.get("method") for job in document.get("methods", [])))


def _shared(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` without its ``[hyper.<method>]`` sections."""
    return {**config, "hyper": {k: v for k, v in config.get("hyper", {}).items()
                                if not isinstance(v, dict)}}


def group_settings(records: list[Record]) -> list[Setting]:
    """Records grouped by setting (module docstring), in the order settings first appear."""
    settings: list[Setting] = []
    for record in records:
        config = setting_config(record.document)
        shared = _shared(config)
        sections = {m: dict(config["hyper"].get(m, {})) for m in _methods_run(record.document)}
        setting = next((s for s in settings if s.shared == shared and all(
            s.sections.get(m, section) == section for m, section in sections.items())), None)
        if setting is None:
            setting = Setting(shared)
            settings.append(setting)
        setting.records.append(record)
        setting.sections.update(sections)
    return settings


def shown_path(path: Path) -> str:
    """``path`` relative to the working folder where it lies below it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _flat(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _title(setting: Setting, others: list[Setting]) -> str:
    config = setting.config
    seeds = setting.seeds
    rounds = config.get("rounds", "?")
    title = (f"{setting.name}: {config.get('dataset', {}).get('name', '?')}, "
             f"{rounds} round{'s' if rounds != 1 else ''}, "
             f"{len(seeds)} seed{'s' if len(seeds) != 1 else ''} ({', '.join(map(str, seeds))})")
    namesakes = [o for o in others if o is not setting and o.name == setting.name]
    mine, differing = _flat(config), set()
    for other in namesakes:
        # a method's own section counts only where both settings ran that method
        alone = {f"hyper.{m}." for m in setting.sections.keys() ^ other.sections.keys()}
        theirs = _flat(other.config)
        differing |= {k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k)
                      and not k.startswith(tuple(alone))}
    shown = [f"{key} = {mine[key]!r}" for key in sorted(differing) if key in mine]
    if shown:
        title += "; " + ", ".join(shown)
    return title


@dataclass
class Row:
    """One method's figures over the seeds of a setting (accuracies in %)."""

    method: str
    by_seed: dict[Any, dict[str, Any]]
    conflicts: list[str]


def method_rows(setting: Setting) -> list[Row]:
    """One :class:`Row` per method of ``setting`` (complete jobs only), in the order methods
    first appear."""
    rows: dict[str, Row] = {}
    for record in setting.records:
        for summary in record.document.get("methods", []):
            if summary.get("status") != "complete":
                continue
            row = rows.setdefault(summary["method"], Row(summary["method"], {}, []))
            seen = row.by_seed.get(record.seed)
            if seen is None:
                row.by_seed[record.seed] = {**summary, "folder": record.folder}
            elif seen["selected_test_accuracy"] != summary["selected_test_accuracy"]:
                row.conflicts.append(
                    f"{summary['method']} seed {record.seed}: {shown_path(seen['folder'])} "
                    f"({100 * seen['selected_test_accuracy']:.2f}) vs {shown_path(record.folder)} "
                    f"({100 * summary['selected_test_accuracy']:.2f})"
                )
    return list(rows.values())


def _stat(values: list[float | None]) -> str:
    known = [100 * v for v in values if v is not None]
    if not known:
        return "–"
    if len(known) == 1:
        return f"{known[0]:.2f}"
    return f"{statistics.mean(known):.2f} ± {statistics.stdev(known):.2f}"


def _mean(values: list[float | None], scale: float = 1.0, digits: int = 1) -> str:
    known = [v * scale for v in values if v is not None]
    return "–" if not known else f"{statistics.mean(known):.{digits}f}"


def paired_gaps(row: Row, base: Row, key: str = "selected_test_accuracy") -> list[float]:
    """``row`` minus ``base`` in ``key`` (points), one per seed both rows ran."""
    return [100 * (row.by_seed[s][key] - base.by_seed[s][key])
            for s in row.by_seed if s in base.by_seed]


def gap_text(gaps: list[float]) -> str:
    """``+1.23 (2 of 3 higher)``: the mean paired difference and the seeds above."""
    wins = sum(g > 0 for g in gaps)
    return f"{statistics.mean(gaps):+.2f} ({wins} of {len(gaps)} higher)"


def _versus(row: Row, base: Row | None, key: str = "selected_test_accuracy") -> str:
    """Mean paired difference of ``key`` (points) over the seeds both rows ran."""
    if base is None or base is row:
        return "–"
    gaps = paired_gaps(row, base, key)
    return gap_text(gaps) if gaps else "–"


COLUMNS = ("method", "test acc %", "last-round acc %", "vs {baseline}",
           "last round vs {baseline}", "val acc %", "selected round", "pseudo-label acc %",
           "seconds", "MB/client/round")


def setting_markdown(setting: Setting, *, baseline: str = "fedavg-labeled",
                     others: list[Setting] | None = None) -> str:
    """The Markdown section of one setting: title, records, table, conflicts."""
    return "\n".join([f"#### {setting_title(setting, others)}", "",
                      "Records: " + ", ".join(f"`{shown_path(r.folder)}`" for r in setting.records),
                      "", setting_table(setting, baseline=baseline)])


def setting_title(setting: Setting, others: list[Setting] | None = None) -> str:
    """``name: dataset, R rounds, N seeds (...)`` and the keys that set it apart from
    namesakes among ``others``."""
    return _title(setting, others or [setting])


def setting_table(setting: Setting, *, baseline: str = "fedavg-labeled") -> str:
    """One setting's Markdown table (a row per method) and any conflicting copies."""
    rows = method_rows(setting)
    base = next((r for r in rows if r.method == baseline), None)
    columns = [c.format(baseline=baseline) for c in COLUMNS]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        runs = [row.by_seed[s] for s in sorted(row.by_seed, key=str)]
        rounds = ", ".join(
            "–" if r["selected_round"] is None else
            f"{r['selected_round'] + 1}{'' if r['selected_by'] == 'validation' else ' (last)'}"
            for r in runs
        )
        cells = [
            row.method + (" !" if row.conflicts else ""),
            _stat([r["selected_test_accuracy"] for r in runs]),
            _stat([r["final_accuracy"] for r in runs]),
            _versus(row, base),
            _versus(row, base, "final_accuracy"),
            _stat([r["selected_validation_accuracy"] for r in runs]),
            rounds,
            _stat([r["pseudo_label_accuracy"] for r in runs]),
            _mean([r["seconds"] for r in runs]),
            _mean([r["bytes_per_client_per_round"] for r in runs], 1e-6, 3),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    conflicts = [c for row in rows for c in row.conflicts]
    if conflicts:
        lines += ["", "! copies of one seed disagree: " + "; ".join(conflicts)]
    return "\n".join(lines) + "\n"


def settings_markdown(settings: list[Setting], *, baseline: str = "fedavg-labeled") -> str:
    """All settings' sections, separated by blank lines."""
    return "\n".join(setting_markdown(s, baseline=baseline, others=settings) for s in settings)
