"""benchmarks/device_check.py runs on the CPU at tiny sizes and writes its record (so the
script the GPU machines run cannot rot)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

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
        "--model", "cnn", "--clients", "2", "--rounds", "1", "--train-images", "80",
        "--test-images", "40", "--threads", "1", "--throughput-batch", "2",
        "--throughput-steps", "1", "--throughput-warmup", "0", "--hamming-n", "8",
        "--hamming-L", "16",
    ])
    record = json.loads(out.read_text())
    assert status == 0 and record["passed"] is True
    assert record["environment"]["device"] == "cpu" and record["environment"]["torch"]
    job = record["job"]
    assert job["protocol_outputs_equal"] and job["device_runs_identical"]
    assert job["accuracies_within_noise"]
    assert [m["method"] for m in job["methods"]] == ["fedavg-labeled"]
    assert job["devices"]["device"]["device"] == "cpu" and job["devices"]["reference"]["device_name"]
    rates = {(t["model"], t["device"]): t["images_per_second"] for t in record["throughput"]}
    assert set(rates) == {("cnn13", "cpu"), ("wrn28_2", "cpu")} and min(rates.values()) > 0
    hamming = record["hamming"]["cpu"]
    assert set(hamming) == {"lwe", "rlwe"} and record["hamming_exact"]
    assert all(t["device"] == "cpu" and t["verified"] and t["per_pair_seconds"] > 0
               for t in hamming.values())


def test_a_device_torch_lacks_is_refused_in_one_line(tmp_path, capsys):
    import pytest
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(SystemExit) as stop:
        _module().main(["--device", "cuda", "--out", str(tmp_path / "x.json")])
    assert stop.value.code == 2 and "sees no CUDA device" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()
