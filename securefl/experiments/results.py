"""The results of a run: per-job round logs, their summaries, and ``results.json``.

A *job* is one method run with one cryptography mode (``real`` or ``plaintext``); a run
is a list of jobs.  Each job keeps the full :class:`~securefl.methods.base.RoundResult`
log, from which the summary fields of DESIGN.md are derived (never stored twice, so they
cannot disagree):

- ``final_accuracy`` = accuracy after the last completed round, ``best_accuracy`` = max
  over rounds; ``pseudo_label_accuracy`` = the last round's value where the method has
  pseudo-labels;
- ``seconds`` = setup (warm-up / pre-training) + the sum of round wall-clock seconds,
  ``crypto_seconds`` = the sum of the rounds' cryptography seconds;
- ``bytes_per_client_per_round`` = mean over rounds of model + protocol bytes per
  participating client (split fields give each part);
- ``seconds_at_bandwidth_by_round`` = each round projected onto real links where the
  method reports it (FedProp; ``None`` elsewhere).

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

from securefl.bench.common import jsonable
from securefl.errors import ConfigError

RESULTS_FILE = "results.json"
SCHEMA = "securefl.run/1"


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
        accuracy = [r["accuracy"] for r in rounds]
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
            "best_accuracy": max(accuracy) if accuracy else None,
            "best_round": int(np.argmax(accuracy)) if accuracy else None,
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
            "pseudo_label_accuracy_by_round": plabel,
            "pseudo_label_digest_by_round": [r.get("pseudo_label_digest") for r in rounds],
            "seconds_by_round": round_seconds,
            "crypto_seconds_by_round": [r["crypto_seconds"] for r in rounds],
            "seconds_at_bandwidth_by_round": [r.get("seconds_at_bandwidth") for r in rounds],
            "hyper": self.hyper,
            "error": self.error,
        }


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def compare_jobs(real: dict[str, Any], plain: dict[str, Any]) -> dict[str, Any]:
    """Compare the summaries of one method's real and plaintext jobs (same seed).

    ``pseudo_labels_identical`` is ``None`` for methods without pseudo-labels, else True
    iff every round both jobs completed has the same digest; ``digest_mismatch_rounds``
    lists the 0-based rounds that differ.
    """
    shared = min(real["rounds_completed"], plain["rounds_completed"])
    real_digests = real["pseudo_label_digest_by_round"][:shared]
    plain_digests = plain["pseudo_label_digest_by_round"][:shared]
    has_labels = any(d is not None for d in real_digests + plain_digests)
    mismatches = [i for i, (a, b) in enumerate(zip(real_digests, plain_digests)) if a != b]
    accuracy_gaps = [
        abs(a - b)
        for a, b in zip(real["accuracy_by_round"][:shared], plain["accuracy_by_round"][:shared])
    ]
    return {
        "method": real["method"],
        "rounds_compared": shared,
        "accuracy_real": real["final_accuracy"],
        "accuracy_plaintext": plain["final_accuracy"],
        "accuracy_difference": (
            real["accuracy_by_round"][shared - 1] - plain["accuracy_by_round"][shared - 1]
            if shared
            else None
        ),
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


def _atomic_write_bytes(path: Path, payload: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as handle:
        handle.write(payload)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


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
    """Pickle ``obj`` to ``path`` atomically (checkpoints: weights, optimiser and RNG states)."""
    _atomic_write_bytes(Path(path), pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


def read_pickle(path: Path) -> Any:
    """Load a checkpoint written by :func:`write_pickle`.

    Pickle runs code on load: only resume checkpoints you wrote yourself.
    """
    with open(path, "rb") as handle:
        return pickle.load(handle)


def job_from_dict(data: dict[str, Any]) -> JobLog:
    return JobLog(**data)


def job_to_dict(job: JobLog) -> dict[str, Any]:
    return asdict(job)
