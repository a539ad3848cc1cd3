"""``securefl run`` end to end on the fake methods: outputs, compare mode, bad requests."""

from __future__ import annotations

import json
import re

import pytest

from securefl.cli import main
from securefl.experiments.runner import CHECKPOINT_FILE

from .conftest import SoftmaxSelfTraining


def _one_line_error(capsys, argv, out):
    code = main(argv)
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert code == 2
    assert len(lines) == 1 and lines[0].startswith("securefl: ")
    assert not out.exists()
    return lines[0]


def test_run_writes_results_plots_and_table(tmp_path, fake_config, capsys):
    out = tmp_path / "run"
    assert main(["run", "--config", str(fake_config), "--out", str(out), "--rounds", "2"]) == 0
    stdout = capsys.readouterr().out
    assert "softmax-st" in stdout and "final" in stdout and "acc %" in stdout
    document = json.loads((out / "results.json").read_text())
    assert document["status"] == "complete"
    assert document["command"].startswith("securefl run --config")
    assert document["seed"] == 1 and document["config"]["rounds"] == 2
    assert document["commit"] == document["machine"]["commit"]
    for name in ("accuracy.png", "cost.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    readme = (out / "README.md").read_text()
    assert document["command"] in readme and "| softmax-sup | real | 2/2 |" in readme
    assert (out / CHECKPOINT_FILE).is_file()
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


def test_secure_both_reports_identical_pseudo_labels(tmp_path, fake_config, capsys):
    out = tmp_path / "both"
    code = main(["run", "--config", str(fake_config), "--out", str(out), "--secure", "both"])
    assert code == 0
    stdout = capsys.readouterr().out
    assert "real cryptography vs plaintext placeholder" in stdout
    document = json.loads((out / "results.json").read_text())
    assert [(s["method"], s["secure"]) for s in document["methods"]] == [
        ("softmax-st", "real"), ("softmax-st", "plaintext"),
        ("softmax-sup", "real"), ("softmax-sup", "plaintext"),
    ]
    by_method = {c["method"]: c for c in document["comparison"]}
    assert by_method["softmax-st"]["pseudo_labels_identical"] is True
    assert by_method["softmax-sup"]["pseudo_labels_identical"] is None
    for row in by_method.values():
        assert row["rounds_compared"] == 3
        assert row["accuracy_difference"] == 0.0
        assert row["time_ratio"] > 0
        assert row["bytes_ratio"] > 1


def test_validation_only_keeps_test_accuracy_off_the_terminal(tmp_path, fake_config, capsys):
    out = tmp_path / "blind"
    argv = ["run", "--config", str(fake_config), "--out", str(out), "--secure", "both",
            "--validation-only"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    document = json.loads((out / "results.json").read_text())
    assert "validation" in captured.err and "withheld" in captured.out
    assert not re.search(r"test (accuracy |acc )?\d", captured.err + captured.out)
    assert all(s["selected_test_accuracy"] is not None for s in document["methods"])
    assert "--validation-only" not in document["command"]  # what is printed, not the run


def test_secure_both_exits_1_when_pseudo_labels_differ(tmp_path, fake_config, monkeypatch):
    original = SoftmaxSelfTraining.run_round

    def skewed(self, round_index):
        result = original(self, round_index)
        if self.secure == "real" and round_index == 1 and result.pseudo_label_digest:
            result.pseudo_label_digest = "0" * 64
        return result

    monkeypatch.setattr(SoftmaxSelfTraining, "run_round", skewed)
    out = tmp_path / "skew"
    argv = ["run", "--config", str(fake_config), "--out", str(out), "--secure", "both",
            "--method", "softmax-st"]
    assert main(argv) == 1
    comparison = json.loads((out / "results.json").read_text())["comparison"][0]
    assert comparison["pseudo_labels_identical"] is False
    assert comparison["digest_mismatch_rounds"] == [1]


def test_resume_through_the_cli(tmp_path, fake_config, monkeypatch, os_draws):
    reference = tmp_path / "ref"
    assert main(["run", "--config", str(fake_config), "--out", str(reference)]) == 0
    original = SoftmaxSelfTraining.run_round

    def crash(self, round_index):
        if round_index == 2:
            raise KeyboardInterrupt
        return original(self, round_index)

    monkeypatch.setattr(SoftmaxSelfTraining, "run_round", crash)
    out = tmp_path / "cut"
    assert main(["run", "--config", str(fake_config), "--out", str(out)]) == 130
    assert json.loads((out / "results.json").read_text())["status"] == "interrupted"
    monkeypatch.setattr(SoftmaxSelfTraining, "run_round", original)
    os_draws.value += 1  # the resumed part must keep the run's secrets, not draw new ones
    assert main(["run", "--resume", str(out)]) == 0
    resumed = json.loads((out / "results.json").read_text())
    expected = json.loads((reference / "results.json").read_text())
    assert [s["accuracy_by_round"] for s in resumed["methods"]] == [
        s["accuracy_by_round"] for s in expected["methods"]
    ]
    assert [s["pseudo_label_digest_by_round"] for s in resumed["methods"]] == [
        s["pseudo_label_digest_by_round"] for s in expected["methods"]
    ]
    assert resumed["resumed"] == [f"securefl run --resume {out}"]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--method", "nope"], "method='nope': unknown method"),
        (["--dataset", "imagenet-22k"], "dataset='imagenet-22k': unknown dataset"),
        (["--rounds", "-3"], "rounds=-3: must be >= 1"),
        (["--rounds", "many"], "rounds='many': must be an integer"),
        (["--secure", "maybe"], "secure='maybe': must be one of real, plaintext, both"),
        (["--seed", "-1"], "seed=-1: must be >= 0"),
    ],
)
def test_bad_flags_fail_in_one_line_before_writing(tmp_path, fake_config, capsys, extra, message):
    out = tmp_path / "never"
    line = _one_line_error(capsys, ["run", "--config", str(fake_config), "--out", str(out)]
                           + extra, out)
    assert message in line


def test_missing_data_folder_names_where_files_go(tmp_path, fake_config, capsys, monkeypatch):
    monkeypatch.delenv("SECUREFL_DATA", raising=False)
    out = tmp_path / "never"
    missing = tmp_path / "no-such-folder"
    line = _one_line_error(capsys, ["run", "--config", str(fake_config), "--out", str(out),
                                    "--dataset", "mnist", "--data-dir", str(missing)], out)
    assert str(missing) in line and f"{missing}/mnist/" in line and "ConfigError" in line


@pytest.mark.parametrize(
    "text, message",
    [
        ("rounds = [", "invalid TOML"),
        ('methods = ["softmax-st"]\nround = 3\n', "round: unknown config key"),
        ('methods = ["softmax-st"]\nrounds = -1\n', "rounds=-1: must be >= 1"),
        ('methods = ["softmax-st"]\n[hyper.nope]\nlr = 1\n', "hyper.nope: unknown method"),
        ('methods = ["softmax-st"]\n[hyper]\nlearning_rate = 1\n', "learning_rate"),
        ('methods = ["softmax-st"]\n[partition]\nscheme = "zigzag"\n', "scheme='zigzag'"),
        ('methods = []\n', "must be a non-empty list"),
    ],
)
def test_bad_config_files_fail_in_one_line_before_writing(
    tmp_path, fake_registry, capsys, text, message
):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    out = tmp_path / "never"
    assert message in _one_line_error(capsys, ["run", "--config", str(path), "--out", str(out)],
                                      out)


def test_unreadable_config_and_occupied_out(tmp_path, fake_config, capsys):
    out = tmp_path / "never"
    assert "cannot read" in _one_line_error(
        capsys, ["run", "--config", str(tmp_path / "absent.toml"), "--out", str(out)], out
    )
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "notes.txt").write_text("mine")
    assert main(["run", "--config", str(fake_config), "--out", str(occupied)]) == 2
    assert "exists and is not an empty folder" in capsys.readouterr().err
    assert sorted(p.name for p in occupied.iterdir()) == ["notes.txt"]


def test_resume_rejects_other_flags_and_non_run_folders(tmp_path, fake_config, capsys):
    line = _one_line_error(capsys, ["run", "--resume", str(tmp_path)], tmp_path / "never")
    assert "no checkpoint.pkl" in line
    line = _one_line_error(
        capsys, ["run", "--resume", str(tmp_path), "--rounds", "5"], tmp_path / "never"
    )
    assert "--rounds cannot change a stored run" in line


def test_sigterm_stops_like_ctrl_c(tmp_path, fake_config, monkeypatch):
    import os
    import signal

    original = SoftmaxSelfTraining.run_round

    def terminated(self, round_index):
        if round_index == 1:
            os.kill(os.getpid(), signal.SIGTERM)
        return original(self, round_index)

    monkeypatch.setattr(SoftmaxSelfTraining, "run_round", terminated)
    before = signal.getsignal(signal.SIGTERM)
    out = tmp_path / "term"
    assert main(["run", "--config", str(fake_config), "--out", str(out)]) == 130
    document = json.loads((out / "results.json").read_text())
    assert document["status"] == "interrupted"
    assert document["methods"][0]["rounds_completed"] == 1
    assert signal.getsignal(signal.SIGTERM) is before
