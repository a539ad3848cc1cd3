"""The results of a run: per-job round logs, their summaries, and ``results.json``.

A *job* is one method run with one cryptography mode (``real`` or ``plaintext``); a run
is a list of jobs.  Each job keeps the full log of rounds — the method's
:class:`~securefl.methods.base.RoundResult` plus the runner's ``validation_accuracy`` and
``test_accuracy`` of the model after that round — from which the summary fields of
DESIGN.md are derived (never stored twice, so they cannot disagree):

- ``accuracy_by_round`` = test accuracy after each round, ``validation_accuracy_by_round``
  the same on the validation split (``None`` entries when the run has none, and on the
  rounds an ``eval_every`` > 1 left unevaluated: the last round is always evaluated);
- **model selection uses validation only**: ``selected_round`` (0-based index into the
  ``*_by_round`` lists) is the first round of highest validation accuracy
  (``selected_by = "validation"``); a run without a validation split selects the last
  round (``selected_by = "last round"``), a rule that looks at no accuracy at all.
  ``selected_validation_accuracy`` and ``selected_test_accuracy`` are the two accuracies
  of that round's model; ``best_accuracy`` is ``selected_test_accuracy`` (the test
  accuracy of the best model, *best* judged on validation; before results schema 2 it
  was the maximum test accuracy over rounds, a number chosen on the test set);
- ``final_accuracy`` = test accuracy after the last completed round;
  ``pseudo_label_accuracy`` = the last round's value where the method has pseudo-labels;
- ``seconds`` = setup (warm-up / pre-training) + the sum of round wall-clock seconds,
  ``crypto_seconds`` = the sum of the rounds' cryptography seconds;
- ``bytes_per_client_per_round`` = mean over rounds of model + protocol bytes per
  participating client (split fields give each part);
- ``privacy`` = the last round's privacy accounting (ProtoFSSL: ``epsilon_per_client``,
  ``releases``, ``delta``) or ``None``; :func:`privacy_lines` prints it.
- ``seconds_at_bandwidth_by_round`` = each round projected onto real links where the
  method reports it (FedProp; ``None`` elsewhere).
- ``label_mass_median_by_round`` = the median label mass sum_c Z_ic that reached the
  pseudo-labelled points (FedProp: the server's own figure); ``label_coverage_by_round``
  = the runner's simulation-only coverage diagnostic
  (:meth:`~securefl.methods.base.Method.label_coverage`: ``uncovered_classes``,
  ``uncovered_count``, medians of the mass split by the hidden class being covered);
  ``None`` entries for methods without them.

With ``--secure both`` :func:`compare_jobs` pairs each method's real and plaintext jobs:
the final-accuracy difference, the per-round pseudo-label digest comparison (identical
digests mean identical pseudo-labels, the cryptography changed nothing), and the time
and byte overhead ratios real / plaintext.

Files are written atomically (temporary file in the same folder, then ``os.replace``),
so an interrupted run never leaves a truncated ``results.json`` behind.
"""

from __future__ import annotations

import json
import os
import pickle
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from securefl.errors import ConfigError
from securefl.output import atomic_write, jsonable

RESULTS_FILE = "results.json"
SCHEMA = "securefl.run/2"
"""Schema 2 (issue 13): validation split, selection by validation, provenance."""


@dataclass
class JobLog:
    """Everything measured for one (method, secure) job so far."""

    method: str
    secure: str
    rounds: int
    hyper: dict[str, Any] = field(default_factory=dict)
    setup_seconds: float = 0.0
    round_results: list[dict[str, Any]] = field(default_factory=list)
    status: str = "pending"
    error: str | None = None

    @property
    def rounds_completed(self) -> int:
        return len(self.round_results)

    def summary(self, dataset: str) -> dict[str, Any]:
        """The DESIGN.md per-method record (plus the per-round series it is derived from)."""
        rounds = self.round_results
        accuracy = [r["test_accuracy"] for r in rounds]
        validation = [r["validation_accuracy"] for r in rounds]
        selected, selected_by = select_round(validation)
        plabel = [r.get("pseudo_label_accuracy") for r in rounds]
        plabel_known = [p for p in plabel if p is not None]
        model_bytes = [r["bytes_model_per_client"] for r in rounds]
        protocol_bytes = [r["bytes_protocol_per_client"] for r in rounds]
        round_seconds = [r["seconds"] for r in rounds]
        return {
            "method": self.method,
            "dataset": dataset,
            "secure": self.secure,
            "rounds": self.rounds,
            "rounds_completed": self.rounds_completed,
            "status": self.status,
            "final_accuracy": accuracy[-1] if accuracy else None,
            "selected_round": selected,
            "selected_by": selected_by,
            "selected_validation_accuracy": None if selected is None else validation[selected],
            "selected_test_accuracy": None if selected is None else accuracy[selected],
            "best_accuracy": None if selected is None else accuracy[selected],
            "pseudo_label_accuracy": plabel_known[-1] if plabel_known else None,
            "seconds": self.setup_seconds + sum(round_seconds),
            "setup_seconds": self.setup_seconds,
            "train_seconds": sum(r["train_seconds"] for r in rounds),
            "crypto_seconds": sum(r["crypto_seconds"] for r in rounds),
            "bytes_per_client_per_round": _mean(
                [m + p for m, p in zip(model_bytes, protocol_bytes)]
            ),
            "bytes_model_per_client_per_round": _mean(model_bytes),
            "bytes_protocol_per_client_per_round": _mean(protocol_bytes),
            "accuracy_by_round": accuracy,
            "validation_accuracy_by_round": validation,
            "pseudo_label_accuracy_by_round": plabel,
            "pseudo_label_digest_by_round": [r.get("pseudo_label_digest") for r in rounds],
            "seconds_by_round": round_seconds,
            "crypto_seconds_by_round": [r["crypto_seconds"] for r in rounds],
            "privacy": rounds[-1].get("privacy") if rounds else None,
            "seconds_at_bandwidth_by_round": [r.get("seconds_at_bandwidth") for r in rounds],
            "label_mass_median_by_round": [r.get("label_mass_median") for r in rounds],
            "label_coverage_by_round": [r.get("label_coverage") for r in rounds],
            "hyper": self.hyper,
            "error": self.error,
        }


def privacy_lines(document: dict[str, Any]) -> list[str]:
    """One line per job that reports privacy accounting: the epsilon it can defend."""
    lines = []
    for summary in document.get("methods", []):
        privacy = summary.get("privacy")
        if not privacy:
            continue
        name = f"{summary['method']} ({summary['secure']})"
        if not privacy.get("differentially_private"):
            lines.append(f"{name}: prototypes NOT differentially private ({privacy.get('note', '')})")
            continue
        releases = privacy["releases"]
        epsilon = privacy["epsilon_per_client"]
        worst = max(epsilon, key=lambda c: epsilon[c])
        joined = sum(1 for k in releases.values() if k)
        lines.append(
            f"{name}: prototype DP per labeled sample (add/remove), delta = {privacy['delta']:g}: "
            f"epsilon per client <= {epsilon[worst]:.2f} (client {worst}, {releases[worst]} releases; "
            f"{joined} of {len(releases)} clients released; all in results.json); "
            f"model updates not covered"
        )
    return lines


def select_round(validation: list[float | None]) -> tuple[int | None, str | None]:
    """``(selected_round, selected_by)`` from the validation accuracies by round alone.

    The first round of highest validation accuracy (early stopping's rule: a later round
    must be strictly better to replace it); the last round when no round has a validation
    accuracy; ``(None, None)`` for no rounds.  Test accuracy is not an argument, so it
    cannot take part in the choice.
    """
    if not validation:
        return None, None
    known = [(value, index) for index, value in enumerate(validation) if value is not None]
    if not known:
        return len(validation) - 1, "last round"
    best = max(value for value, _ in known)
    return min(index for value, index in known if value == best), "validation"


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def compare_jobs(real: dict[str, Any], plain: dict[str, Any]) -> dict[str, Any]:
    """Compare the summaries of one method's real and plaintext jobs (same seed); the
    accuracy differences are over the rounds both evaluated.

    ``pseudo_labels_identical`` is ``None`` for methods without pseudo-labels, else True
    iff every round both jobs completed has the same digest; ``digest_mismatch_rounds``
    lists the 0-based rounds that differ.
    """
    shared = min(real["rounds_completed"], plain["rounds_completed"])
    real_digests = real["pseudo_label_digest_by_round"][:shared]
    plain_digests = plain["pseudo_label_digest_by_round"][:shared]
    has_labels = any(d is not None for d in real_digests + plain_digests)
    mismatches = [i for i, (a, b) in enumerate(zip(real_digests, plain_digests)) if a != b]
    scored = [(a, b) for a, b in zip(real["accuracy_by_round"][:shared],
                                      plain["accuracy_by_round"][:shared])
              if a is not None and b is not None]
    accuracy_gaps = [abs(a - b) for a, b in scored]
    return {
        "method": real["method"],
        "rounds_compared": shared,
        "accuracy_real": real["final_accuracy"],
        "accuracy_plaintext": plain["final_accuracy"],
        "accuracy_difference": scored[-1][0] - scored[-1][1] if scored else None,
        "max_abs_accuracy_difference": max(accuracy_gaps) if accuracy_gaps else None,
        "pseudo_labels_identical": (not mismatches) if has_labels else None,
        "digest_mismatch_rounds": mismatches,
        "seconds_real": real["seconds"],
        "seconds_plaintext": plain["seconds"],
        "time_ratio": _ratio(real["seconds"], plain["seconds"]),
        "crypto_seconds_real": real["crypto_seconds"],
        "bytes_per_client_per_round_real": real["bytes_per_client_per_round"],
        "bytes_per_client_per_round_plaintext": plain["bytes_per_client_per_round"],
        "bytes_ratio": _ratio(
            real["bytes_per_client_per_round"], plain["bytes_per_client_per_round"]
        ),
    }


def comparisons(summaries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pair real and plaintext summaries of the same method (in run order)."""
    by_key = {(s["method"], s["secure"]): s for s in summaries}
    pairs = []
    for summary in summaries:
        if summary["secure"] != "real":
            continue
        plain = by_key.get((summary["method"], "plaintext"))
        if plain is not None and summary["rounds_completed"] and plain["rounds_completed"]:
            pairs.append(compare_jobs(summary, plain))
    return pairs


def build_results(
    *,
    jobs: list[JobLog],
    dataset: str,
    status: str,
    header: dict[str, Any],
) -> dict[str, Any]:
    """The whole ``results.json`` document."""
    summaries = [job.summary(dataset) for job in jobs]
    document = {"schema": SCHEMA, "status": status, **header, "methods": summaries}
    pairs = comparisons(summaries)
    if pairs:
        document["comparison"] = pairs
    return document


def _atomic_write_bytes(path: Path, payload: bytes, *, mode: int | None = None) -> None:
    atomic_write(path, lambda handle: handle.write(payload), mode=mode)


def write_results(document: dict[str, Any], folder: Path) -> Path:
    """Write ``folder/results.json`` atomically."""
    path = Path(folder) / RESULTS_FILE
    text = json.dumps(document, indent=2, default=jsonable) + "\n"
    _atomic_write_bytes(path, text.encode())
    return path


def read_results(folder: str | os.PathLike) -> dict[str, Any]:
    """Read ``folder/results.json``; a missing or invalid file is a :class:`ConfigError`."""
    path = Path(folder) / RESULTS_FILE
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"results={str(path)!r}: cannot read ({exc})") from None


def write_pickle(obj: Any, path: Path) -> None:
    """Pickle ``obj`` to ``path`` atomically, readable by its owner only (mode 0600):
    checkpoints hold weights, optimiser and RNG states, a real run's crypto seed and the
    clients' states."""
    _atomic_write_bytes(Path(path), pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), mode=0o600)


def read_pickle(path: Path) -> Any:
    """Load a checkpoint written by :func:`write_pickle`.

    Pickle runs code on load: only resume checkpoints you wrote yourself.  A checkpoint
    naming a class this securefl no longer has (written before a module moved) is a
    :class:`~securefl.errors.ConfigError`, not a traceback.
    """
    with open(path, "rb") as handle:
        try:
            return pickle.load(handle)
        except (ModuleNotFoundError, AttributeError) as exc:
            raise ConfigError(f"checkpoint {path} was written by another securefl version "
                              f"({exc}); start the run again in a new --out") from None


def job_from_dict(data: dict[str, Any]) -> JobLog:
    return JobLog(**data)


def job_to_dict(job: JobLog) -> dict[str, Any]:
    return asdict(job)
