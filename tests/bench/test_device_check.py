"""benchmarks/device_check.py runs on the CPU at tiny sizes and writes its record (so the
script the GPU machines run cannot rot)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "device_check.py"


def _module():
    spec = importlib.util.spec_from_file_location("device_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_device_check_on_the_cpu_writes_every_field(tmp_path, capsys):
    out = tmp_path / "device_check_cpu.json"
    status = _module().main([
        "--device", "cpu", "--out", str(out), "--methods", "fedavg-labeled",
        "--model", "cnn", "--clients", "2", "--rounds", "1", "--reference-seeds", "2", "--train-images", "80",
        "--test-images", "40", "--threads", "1", "--throughput-batch", "2",
        "--throughput-steps", "1", "--throughput-warmup", "0", "--hamming-shapes", "9x3",
        "--hamming-L", "16", "--round-train-images", "60", "--round-test-images", "20",
        "--round-clients", "6", "--round-rounds", "2", "--round-set", "hyper.model=cnn",
        "--round-set", "hyper.local_epochs=1", "--round-set", "hyper.fedprop.L=64",
    ])
    record = json.loads(out.read_text())
    assert status == 0 and record["passed"] is True
    assert record["environment"]["device"] == "cpu" and record["environment"]["torch"]
    job = record["job"]
    assert job["protocol_outputs_equal"] and job["device_runs_identical"]
    assert job["accuracies_within_noise"]
    assert [m["method"] for m in job["methods"]] == ["fedavg-labeled"]
    assert job["hyper"] == {"fedavg-labeled": {"lr": 0.03}}  # the job's settings, recorded
    assert len(job["methods"][0]["accuracy_cpu_seeds"]) == 2 and job["reference_seeds"] == 2
    assert job["devices"]["device"]["device"] == "cpu" and job["devices"]["reference"]["device_name"]
    assert record["failed_parts"] == [] and record["schema"] == "securefl.device_check/2"
    rates = [(t["model"], t["device"], t["threads"]) for t in record["throughput"]]
    assert rates == [("cnn13", "cpu", 1), ("cnn13", "cpu", 1), ("wrn28_2", "cpu", 1),
                     ("wrn28_2", "cpu", 1)]
    assert min(t["images_per_second"] for t in record["throughput"]) > 0
    assert all(t["speedup_over_one_core"] > 0 for t in record["throughput"])
    one_round = record["round"]
    assert one_round["config"] == "cifar10-fedprop.toml" and one_round["device"] == "cpu"
    assert one_round["hyper"]["model"] == "cnn" and one_round["hyper"]["local_epochs"] == 1
    assert one_round["hyper"]["L"] == 64 and one_round["hyper"]["k"] == 10
    assert one_round["hyper"]["warmup_rounds"] == 1 and one_round["hyper"]["hflip"] is True
    assert one_round["hyper"]["alpha"] == 0.99 and one_round["hyper"]["clients_per_round"] == 5
    assert len(one_round["round_seconds"]) == 2 and min(one_round["round_seconds"]) > 0
    assert len(one_round["wall_seconds_between_rounds"]) == 1
    assert all(a is not None for a in one_round["test_accuracy_by_round"])
    hamming = record["hamming"]["cpu"]
    assert list(hamming) == ["9x3"] and record["hamming_exact"]
    assert set(hamming["9x3"]) == {"lwe", "rlwe"} and hamming["9x3"]["lwe"]["parties"] == 3
    assert all(t["device"] == "cpu" and t["verified"] and t["per_pair_seconds"] > 0
               for shape in hamming.values() for t in shape.values())


def test_a_device_torch_lacks_is_refused_in_one_line(tmp_path, capsys):
    import pytest
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(SystemExit) as stop:
        _module().main(["--device", "cuda", "--out", str(tmp_path / "x.json")])
    assert stop.value.code == 2 and "sees no CUDA device" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


def test_a_failing_part_is_recorded_and_the_check_fails(tmp_path, monkeypatch):
    module = _module()

    def broken(*args, **kwargs):
        raise RuntimeError("no such kernel")

    monkeypatch.setattr(module, "images_per_second", broken)
    out = tmp_path / "x.json"
    status = module.main(["--device", "cpu", "--out", str(out), "--parts", "throughput"])
    record = json.loads(out.read_text())
    assert status == 1 and record["passed"] is False
    assert record["failed_parts"] == ["throughput"]
    assert record["throughput"] == {"failed": "RuntimeError: no such kernel"}
    assert "job" not in record and "round" not in record


def test_hamming_shapes_default_to_two_parties():
    module = _module()
    assert module.hamming_shape("5000") == (5000, 2) and module.hamming_shape("2500x5") == (2500, 5)


def test_a_malformed_hamming_shape_is_refused_in_one_line(tmp_path, capsys):
    import pytest

    for shape in ("5000x1", "x3", "0"):
        with pytest.raises(SystemExit) as stop:
            _module().main(["--device", "cpu", "--out", str(tmp_path / "x.json"),
                            "--hamming-shapes", shape])
        assert stop.value.code == 2 and f"--hamming-shapes={shape}" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


def test_an_accuracy_outside_the_cpu_seeds_range_is_not_within_noise():
    module = _module()

    def run(accuracy, digest="a"):
        return {"device": "cpu", "device_name": "x", "methods": [{
            "method": "m", "rounds_completed": 1, "selected_by": "validation",
            "bytes_per_client_per_round": 10, "accuracy_by_round": [accuracy],
            "validation_accuracy_by_round": [accuracy], "pseudo_label_digest_by_round": [digest],
            "pseudo_label_accuracy_by_round": [None], "final_accuracy": accuracy, "seconds": 1.0}]}

    cpu = [run(0.90), run(0.11), run(0.95)]
    inside = module.compare_jobs(cpu, run(0.50), run(0.50), test_size=1000)
    assert inside["accuracies_within_noise"] and inside["device_runs_identical"]
    outside = module.compare_jobs(cpu, run(0.99), run(0.99, digest="b"), test_size=1000)
    assert not outside["accuracies_within_noise"] and not outside["device_runs_identical"]
    assert outside["methods"][0]["accuracy_cpu_seeds"] == [0.90, 0.11, 0.95]


def test_the_synthetic_images_are_sparse_mosaics(tmp_path):
    """Per class a mosaic of 8 x 8 blocks, lit or dark per channel, under 0.2 of noise: every
    image lies within the noise of its class template, and the mean is far below 0.5."""
    module = _module()
    path = module.synthetic_cifar(tmp_path / "d.npz", n_train=200, n_test=50, classes=10, seed=0)
    with np.load(path) as data:
        x, y = data["x_train"] / 255.0, data["y_train"]
    assert x.shape == (200, 3, 32, 32) and set(np.unique(y)) <= set(range(10))
    blocks = x.reshape(200, 3, 4, 8, 4, 8)
    lit = blocks.min(axis=(3, 5)) >= 0.8 - 1e-9
    dark = blocks.max(axis=(3, 5)) <= 0.2 + 1e-9
    assert np.all(lit | dark)
    for label in np.unique(y):
        patterns = lit[y == label]
        assert np.all(patterns == patterns[0])  # one template per class
    assert 0.2 < x.mean() < 0.45
