"""results.json: the DESIGN.md fields, derived summaries and the real-vs-plaintext comparison."""

from __future__ import annotations

import json

import pytest

from securefl.experiments.report import markdown_report
from securefl.experiments.results import (
    SCHEMA,
    JobLog,
    build_results,
    compare_jobs,
    privacy_lines,
    read_results,
    select_round,
    write_results,
)
from securefl.methods.base import RoundResult

DESIGN_FIELDS = {
    "method", "dataset", "secure", "rounds", "final_accuracy", "best_accuracy",
    "pseudo_label_accuracy", "validation_accuracy_by_round", "selected_round", "seconds",
    "crypto_seconds", "bytes_per_client_per_round", "accuracy_by_round",
}


def _job(secure, accuracies, digests, *, protocol_bytes=500.0, seconds=2.0, validation=None):
    job = JobLog(method="fedprop", secure=secure, rounds=len(accuracies), setup_seconds=1.5)
    validation = validation or [0.5] * len(accuracies)
    for r, (acc, val, digest) in enumerate(zip(accuracies, validation, digests)):
        job.round_results.append({**RoundResult(
            round=r, seconds=seconds, train_seconds=1.0,
            crypto_seconds=0.5 if secure == "real" else 0.0,
            bytes_model_per_client=1000.0, bytes_protocol_per_client=protocol_bytes,
            pseudo_label_accuracy=0.8 + 0.01 * r, pseudo_label_digest=digest,
        ).to_dict(), "test_accuracy": acc, "validation_accuracy": val})
    job.status = "complete"
    return job


def test_summary_derives_the_design_fields():
    summary = _job("real", [0.5, 0.7, 0.6], ["a", "b", "c"]).summary("digits")
    assert DESIGN_FIELDS <= set(summary)
    assert summary["final_accuracy"] == 0.6
    assert summary["pseudo_label_accuracy"] == pytest.approx(0.82)
    assert summary["seconds"] == pytest.approx(1.5 + 3 * 2.0)
    assert summary["crypto_seconds"] == pytest.approx(1.5)
    assert summary["bytes_per_client_per_round"] == pytest.approx(1500.0)
    assert summary["pseudo_label_digest_by_round"] == ["a", "b", "c"]


def test_selection_follows_validation_not_test():
    """Test accuracy peaks in round 1, validation in round 3: round 3 is selected, and the
    reported 'best' accuracy is its test accuracy, not the test maximum."""
    test = [0.60, 0.90, 0.70, 0.80, 0.75]
    validation = [0.50, 0.60, 0.55, 0.70, 0.70]
    summary = _job("plaintext", test, list("abcde"), validation=validation).summary("digits")
    assert summary["selected_round"] == 3 and summary["selected_by"] == "validation"
    assert summary["selected_validation_accuracy"] == 0.70
    assert summary["selected_test_accuracy"] == summary["best_accuracy"] == 0.80
    assert summary["final_accuracy"] == 0.75
    assert summary["validation_accuracy_by_round"] == validation
    assert summary["accuracy_by_round"] == test


def test_selection_ignores_test_accuracy():
    validation = [0.5, 0.8, 0.6]
    assert select_round(validation) == (1, "validation")
    for test in ([0.1, 0.2, 0.9], [0.9, 0.2, 0.1], [0.5, 0.5, 0.5]):
        summary = _job("plaintext", test, "abc", validation=validation).summary("digits")
        assert summary["selected_round"] == 1 and summary["best_accuracy"] == test[1]


def test_selection_without_a_validation_split_takes_the_last_round():
    assert select_round([None, None, None]) == (2, "last round")
    assert select_round([]) == (None, None)
    assert select_round([0.7, 0.7, 0.6]) == (0, "validation")


def test_summary_of_a_job_without_rounds_is_empty_not_wrong():
    summary = JobLog(method="fedprop", secure="real", rounds=3).summary("digits")
    assert summary["rounds_completed"] == 0
    assert summary["final_accuracy"] is None and summary["bytes_per_client_per_round"] is None


def test_compare_reports_difference_identity_and_ratios():
    real = _job("real", [0.5, 0.7], ["a", "b"], protocol_bytes=3000.0, seconds=4.0)
    plain = _job("plaintext", [0.5, 0.69], ["a", "b"], protocol_bytes=0.0, seconds=2.0)
    row = compare_jobs(real.summary("digits"), plain.summary("digits"))
    assert row["pseudo_labels_identical"] is True and row["digest_mismatch_rounds"] == []
    assert row["accuracy_difference"] == pytest.approx(0.01)
    assert row["time_ratio"] == pytest.approx((1.5 + 8.0) / (1.5 + 4.0))
    assert row["bytes_ratio"] == pytest.approx(4000.0 / 1000.0)
    other = _job("plaintext", [0.5, 0.7], ["a", "X"]).summary("digits")
    row = compare_jobs(real.summary("digits"), other)
    assert row["pseudo_labels_identical"] is False and row["digest_mismatch_rounds"] == [1]


def test_compare_without_pseudo_labels_or_plaintext_bytes():
    real = _job("real", [0.5], [None]).summary("digits")
    plain = _job("plaintext", [0.5], [None]).summary("digits")
    plain["bytes_per_client_per_round"] = 0.0
    row = compare_jobs(real, plain)
    assert row["pseudo_labels_identical"] is None and row["bytes_ratio"] is None


def test_document_round_trips_through_the_file(tmp_path):
    jobs = [_job("real", [0.5, 0.7], ["a", "b"]), _job("plaintext", [0.5, 0.7], ["a", "b"])]
    document = build_results(jobs=jobs, dataset="digits", status="complete",
                             header={"command": "securefl run", "seed": 0})
    assert document["schema"] == SCHEMA and len(document["comparison"]) == 1
    path = write_results(document, tmp_path)
    assert json.loads(path.read_text()) == read_results(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]
    report = markdown_report(document)
    assert report.count("| fedprop |") == 3 and "| yes |" in report


def test_plot_seeds_writes_a_png(tmp_path):
    from securefl.experiments.plots import plot_seeds, selected_accuracies

    documents = [
        {"seed": seed, "methods": [_job("plaintext", [0.5, 0.6 + 0.01 * seed], ["a", "b"],
                                        validation=[0.6, 0.5]).summary("digits")]}
        for seed in range(3)
    ]
    assert selected_accuracies(documents) == {"fedprop": {0: 50.0, 1: 50.0, 2: 50.0}}
    path = plot_seeds(documents, tmp_path / "seeds.png", baseline="fedprop")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 1000


def test_privacy_of_the_last_round_is_summarised_and_printed():
    job = _job("real", [0.5, 0.6], ["a", "b"])
    dp_report = {"differentially_private": True, "delta": 1e-5, "releases": {"0": 2, "1": 0, "2": 1},
                 "epsilon_per_client": {"0": 6.57, "1": 0.0, "2": 4.38}}
    job.round_results[-1]["privacy"] = dp_report
    other = _job("plaintext", [0.5, 0.6], ["a", "b"])
    other.round_results[-1]["privacy"] = {"differentially_private": False, "note": "exact sums"}
    document = build_results(jobs=[job, other, _job("real", [0.4], ["c"])], dataset="digits", status="complete", header={})
    assert document["methods"][0]["privacy"] == dp_report and document["methods"][2]["privacy"] is None
    lines = privacy_lines(document)
    assert len(lines) == 2
    assert "epsilon per client <= 6.57 (client 0, 2 releases; 2 of 3 clients released" in lines[0]
    assert "NOT differentially private (exact sums)" in lines[1]


def test_a_checkpoint_holding_client_states_from_before_the_runtime_room_is_a_clear_error(tmp_path):
    """Client state Records were pickled from the transport's module in ``securefl/fl/``
    before it moved to ``securefl.runtime`` (issue 24): ConfigError, no traceback."""
    import pickle

    from securefl.errors import ConfigError
    from securefl.experiments.results import read_pickle
    from securefl.runtime.transport import Record

    saved = pickle.dumps({"client_states": {0: Record(config={"round": 3})}}, protocol=2)
    assert b"csecurefl.runtime.records\nRecord\n" in saved  # protocol 2: the name as text
    path = tmp_path / "checkpoint.pkl"
    old = b"securefl.fl.transport"  # runtime-rename: keep (where Records used to live)
    path.write_bytes(saved.replace(b"securefl.runtime.records", old))
    with pytest.raises(ConfigError, match="checkpoint .* another securefl version"):
        read_pickle(path)


def test_a_checkpoint_naming_a_moved_class_is_a_clear_error(tmp_path):
    """A checkpoint from before a module moved (``securefl.methods.fedprop`` became a
    package) names a class this version lacks: ConfigError naming the file, no traceback."""
    import pickle

    from securefl.errors import ConfigError
    from securefl.experiments.results import read_pickle

    path = tmp_path / "checkpoint.pkl"
    path.write_bytes(pickle.dumps(ConfigError("x")).replace(b"securefl.errors", b"securefl.errorz"))
    with pytest.raises(ConfigError, match="checkpoint .* another securefl version"):
        read_pickle(path)
