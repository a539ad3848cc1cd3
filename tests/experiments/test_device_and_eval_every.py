"""``--device`` and ``--eval-every`` through the CLI, the configuration and the runner."""

from __future__ import annotations

import json

import pytest
import torch

from securefl.cli import main
from securefl.errors import ConfigError
from securefl.experiments.config import load_config
from securefl.experiments.results import compare_jobs, select_round
from securefl.experiments.runner import Runner, evaluates, new_state

from .conftest import fake_factory

NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")


def _one_line_error(capsys, argv, out):
    code = main(argv)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("securefl: ")
    assert not out.exists()
    return lines[0]


def test_results_record_the_device_and_its_name(tmp_path, fake_config, capsys):
    out = tmp_path / "run"
    assert main(["run", "--config", str(fake_config), "--out", str(out), "--rounds", "1",
                 "--device", "cpu"]) == 0
    document = json.loads((out / "results.json").read_text())
    assert document["device"] == "cpu" and document["device_name"]
    assert document["config"]["device"] == "cpu"
    assert "--device cpu" in document["command"]


@NO_CUDA
def test_auto_resolves_to_the_cpu_here(tmp_path, fake_config, capsys):
    out = tmp_path / "run"
    assert main(["run", "--config", str(fake_config), "--out", str(out), "--rounds", "1"]) == 0
    document = json.loads((out / "results.json").read_text())
    assert document["config"]["device"] == "auto" and document["device"] == "cpu"


@NO_CUDA
@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_cuda_without_a_gpu_is_refused_before_any_work(tmp_path, fake_config, capsys, device):
    out = tmp_path / "run"
    line = _one_line_error(capsys, ["run", "--config", str(fake_config), "--out", str(out),
                                    "--device", device], out)
    assert f"device='{device}'" in line and "sees no CUDA device" in line


@pytest.mark.parametrize("device", ["gpu", "cuda:x", "cpu:0", "CUDA", ""])
def test_misspelt_devices_are_refused_naming_the_flag(tmp_path, fake_config, capsys, device):
    out = tmp_path / "run"
    line = _one_line_error(capsys, ["run", "--config", str(fake_config), "--out", str(out),
                                    "--device", device], out)
    assert f"device={device!r}" in line and "auto, cpu, cuda, cuda:<index>" in line


@pytest.mark.parametrize("value", [0, -1, 1.5, "2", True])
def test_eval_every_must_be_a_positive_integer(fake_config, value):
    with pytest.raises(ConfigError, match=r"eval_every="):
        load_config(fake_config, settings=[f"eval_every={json.dumps(value)}"])


def test_eval_every_flag_must_be_an_integer(tmp_path, fake_config, capsys):
    out = tmp_path / "run"
    line = _one_line_error(capsys, ["run", "--config", str(fake_config), "--out", str(out),
                                    "--eval-every", "two"], out)
    assert "eval_every='two'" in line


@pytest.mark.parametrize("rounds, every, expected", [
    (5, 1, [0, 1, 2, 3, 4]), (5, 2, [1, 3, 4]), (6, 3, [2, 5]), (3, 10, [2]),
])
def test_every_nth_round_and_the_last_are_evaluated(rounds, every, expected):
    assert [r for r in range(rounds) if evaluates(r, rounds, every)] == expected


def _run(config, federation, out):
    return Runner(state=new_state(config, {"command": "test"}),
                  federations={name: federation for name in config.methods},
                  out=out, factory=fake_factory).run()


def test_eval_every_scores_only_those_rounds_and_selects_among_them(tmp_path, fake_config,
                                                                    digits_federation):
    every = _run(load_config(fake_config, rounds=5, secure="plaintext"), digits_federation,
                 tmp_path / "all")
    sparse = _run(load_config(fake_config, rounds=5, eval_every=2, secure="plaintext"),
                  digits_federation,
                  tmp_path / "sparse")
    for full, thin in zip(every["methods"], sparse["methods"]):
        assert thin["accuracy_by_round"] == [
            a if r in (1, 3, 4) else None for r, a in enumerate(full["accuracy_by_round"])]
        assert thin["validation_accuracy_by_round"] == [
            a if r in (1, 3, 4) else None
            for r, a in enumerate(full["validation_accuracy_by_round"])]
        assert thin["final_accuracy"] == full["final_accuracy"]
        assert thin["selected_round"] in (1, 3, 4)
        assert thin["selected_round"] == select_round(thin["validation_accuracy_by_round"])[0]
        # the training itself is the same: evaluation draws nothing
        assert thin["pseudo_label_digest_by_round"] == full["pseudo_label_digest_by_round"]
    assert load_config(fake_config, eval_every=2).to_dict()["eval_every"] == 2


def test_selection_ignores_unevaluated_rounds():
    assert select_round([None, 0.5, None, 0.7, 0.6]) == (3, "validation")


def test_real_plaintext_comparison_skips_unevaluated_rounds():
    def summary(secure, accuracies):
        return {"method": "m", "secure": secure, "rounds_completed": len(accuracies),
                "final_accuracy": accuracies[-1], "accuracy_by_round": accuracies,
                "pseudo_label_digest_by_round": [None] * len(accuracies), "seconds": 1.0,
                "crypto_seconds": 0.0, "bytes_per_client_per_round": 1.0}

    pair = compare_jobs(summary("real", [None, 0.5, 0.75]), summary("plaintext", [None, 0.25, 0.5]))
    assert pair["accuracy_difference"] == 0.25 and pair["max_abs_accuracy_difference"] == 0.25


def test_records_of_one_setting_on_two_devices_share_a_table():
    from securefl.experiments.records import setting_config

    old = {"config": {"name": "c", "rounds": 3, "secure": "plaintext"}, "crypto_seed": 1}
    gpu = {"config": {"name": "c", "rounds": 3, "secure": "plaintext", "device": "cuda:0",
                      "eval_every": 1}, "crypto_seed": 1}
    sparse = {"config": {**gpu["config"], "eval_every": 5}, "crypto_seed": 1}
    assert setting_config(old) == setting_config(gpu) != setting_config(sparse)
