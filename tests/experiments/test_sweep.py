"""Hyper-parameter choice on validation: ``--set`` overrides and ``experiments/sweep.py``."""

from __future__ import annotations

import json
import re
import runpy
import sys
from pathlib import Path

import pytest

import securefl.cli
from securefl.errors import ConfigError
from securefl.experiments.config import apply_settings, load_config
from securefl.experiments.grid import grid_points, point_folder

SCRIPT = Path(__file__).resolve().parents[2] / "experiments" / "sweep.py"


def test_set_overrides_any_key_by_its_path():
    raw = {"rounds": 3, "hyper": {"fedprop": {"L": 64}}}
    out = apply_settings(raw, ["hyper.fedprop.alpha=0.9", "rounds=5", "hyper.fedprop.model=cnn",
                               "partition.validation_fraction=0.2", "methods=[\"fedprop\"]",
                               "hyper.fedanchor.client_mixup=true"])
    assert out == {"rounds": 5, "methods": ["fedprop"],
                   "hyper": {"fedprop": {"L": 64, "alpha": 0.9, "model": "cnn"},
                             "fedanchor": {"client_mixup": True}},
                   "partition": {"validation_fraction": 0.2}}
    assert raw == {"rounds": 3, "hyper": {"fedprop": {"L": 64}}}
    for bad in ("rounds", "=3", "rounds.x=3", "hyper..alpha=1"):
        with pytest.raises(ConfigError, match="set="):
            apply_settings(raw, [bad])


def test_set_goes_through_validation_and_loses_to_flags():
    config = load_config(None, settings=["hyper.fedprop.alpha=0.5", "rounds=6",
                                         "partition.validation_fraction=0.2"], rounds=5)
    assert config.hyper_for("fedprop")["alpha"] == 0.5
    assert config.rounds == 5 and config.partition["validation_fraction"] == 0.2
    with pytest.raises(ConfigError, match="rounds"):
        load_config(None, settings=["rounds=many"])
    with pytest.raises(ConfigError, match="validation_fraction"):
        load_config(None, settings=["partition.validation_fraction=1.0"])
    with pytest.raises(ConfigError, match="partition.fedanchor.validation_fraction"):
        load_config(None, settings=["partition.fedanchor.validation_fraction=0.3"])


def test_default_config_holds_out_ten_percent():
    assert load_config(None).partition["validation_fraction"] == 0.1


def test_grid_points_are_the_product():
    points = grid_points(["hyper.fedprop.alpha=0.9,0.99", "hyper.fedprop.warmup_rounds=5,10"])
    assert points == [
        ["hyper.fedprop.alpha=0.9", "hyper.fedprop.warmup_rounds=5"],
        ["hyper.fedprop.alpha=0.9", "hyper.fedprop.warmup_rounds=10"],
        ["hyper.fedprop.alpha=0.99", "hyper.fedprop.warmup_rounds=5"],
        ["hyper.fedprop.alpha=0.99", "hyper.fedprop.warmup_rounds=10"],
    ]
    assert point_folder(points[1]) == "alpha=0.9__warmup_rounds=10"
    assert point_folder(["hyper.a.lr=1", "hyper.b.lr=2"]) == "hyper.a.lr=1__hyper.b.lr=2"
    for bad in (["alpha"], ["a=1,"], ["a=1", "a=2"]):
        with pytest.raises(ConfigError, match="grid"):
            grid_points(bad)


def run_sweep(argv, monkeypatch):
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), *argv])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(SCRIPT), run_name="__main__")
    return exit_info.value.code


def test_sweep_chooses_on_validation_and_continues(tmp_path, fake_config, monkeypatch, capsys):
    out = tmp_path / "sweep"
    argv = ["--config", str(fake_config), "--method", "softmax-sup", "--secure", "plaintext",
            "--grid", "hyper.softmax-sup.lr=0.001,0.5", "--seed", "0", "1", "--out", str(out)]
    assert run_sweep(argv, monkeypatch) == 0
    captured = capsys.readouterr()
    printed = captured.out
    assert "test" not in printed.lower()
    assert "validation" in captured.err  # the runs' progress, validation accuracy alone
    assert not re.search(r"test (accuracy )?\d", captured.err)
    record = json.loads((out / "sweep.json").read_text())
    scores = {}
    for lr in ("0.001", "0.5"):
        values = []
        for seed in (0, 1):
            document = json.loads((out / f"lr={lr}" / f"seed{seed}" / "results.json").read_text())
            assert f"--set hyper.softmax-sup.lr={lr}" in document["command"]
            assert document["seed"] == seed
            assert document["held_out"]["softmax-sup"]["validation"] > 0
            values.append(document["methods"][0]["selected_validation_accuracy"])
        scores[lr] = sum(values) / 2
    assert scores["0.001"] != scores["0.5"]
    best = max(scores, key=scores.get)
    assert record["chosen"] == {"softmax-sup": [f"hyper.softmax-sup.lr={best}"]}
    assert f"softmax-sup: chosen on validation: hyper.softmax-sup.lr={best}" in printed

    calls = []
    monkeypatch.setattr(securefl.cli, "main", lambda argv: calls.append(argv) or 0)
    assert run_sweep(argv, monkeypatch) == 0
    assert calls == []  # every point complete: nothing re-run


def test_sweep_reports_a_bad_grid_in_one_line(tmp_path, fake_config, monkeypatch, capsys):
    code = run_sweep(["--config", str(fake_config), "--grid", "lr", "--out", str(tmp_path)],
                     monkeypatch)
    assert code == 2 and capsys.readouterr().err.startswith("sweep: ConfigError")


def test_set_cannot_change_a_stored_run(tmp_path, capsys):
    assert securefl.cli.main(["run", "--resume", str(tmp_path), "--set", "rounds=2"]) == 2
    assert "--set cannot change a stored run" in capsys.readouterr().err
