"""Every method's outputs equal the frozen record of ``tests/methods/regression/outputs.json``
on any CPU; bit for bit where the machine's float kernels are the record's own.

Why two levels.  torch's CPU kernels, oneDNN, MKL and numpy pick their instruction paths per
CPU (AVX2, AVX-512, ...), so float32 weights differ in their last bits from one CPU model to
the next and a SHA-256 of them differs entirely: a record of digests alone fails on every
machine but the one that wrote it.  Making the training itself CPU-independent would need
integer or software-float arithmetic in every kernel, so instead the record holds the kernel
path it was written on (:func:`securefl.machine.kernel_path`) and two kinds of field
(:mod:`tests.methods.regression.outputs`):

- everywhere, the **portable fields** must agree: bytes and rounds exactly;
  privacy figures to 1e-9; every model tensor's scale and 16 of its entries to 3e-5 of its
  scale; predicted test labels and pseudo-labels with at most one label flipped (an argmax
  whose two best scores lie within rounding of each other);
- where the kernel path is the record's, **every field**, the digests included, must be
  equal bit for bit.

Across kernel paths the readings move by rounding noise only (measured: at most 2.7e-6 of a
tensor's scale under ``ATEN_CPU_CAPABILITY=default`` with ``MKL_ENABLE_INSTRUCTIONS=SSE4_2``
against the AVX2 record), while a change that matters moves them far more: a learning rate
1 % off moves the tiny job's weights by 1.1e-4 to 2.4e-4 of their scale, 40x the rounding
noise.  The last tests here run that learning rate, a client silently dropped from each
round and a changed pseudo-label rule, and show that each fails the portable comparison,
i.e. on any machine.  The record is never rewritten to make a test pass (see
:mod:`tests.methods.regression.outputs`).
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from securefl.machine import kernel_path
from securefl.methods import METHOD_NAMES

from .regression.outputs import (
    LABEL_FLIPS,
    MODES,
    WEIGHT_RTOL,
    differences,
    federations,
    load,
    record,
)


@pytest.fixture(scope="module")
def frozen():
    return load()


@pytest.fixture(scope="module")
def feds():
    return federations()


@pytest.fixture(scope="module")
def recompute(feds):
    """``recompute(name, mode)``: the method's record on this machine (computed once)."""
    cache: dict[tuple[str, str], list[dict]] = {}

    def get(name: str, mode: str) -> list[dict]:
        if (name, mode) not in cache:
            cache[name, mode] = record(name, mode, feds)
        return cache[name, mode]

    return get


def test_the_record_covers_every_method_and_mode(frozen):
    assert sorted(frozen["outputs"]) == sorted(f"{n}/{m}" for n in METHOD_NAMES for m in MODES)
    assert {"cpu", "cpu_flags", "torch", "torch_cpu_capability", "numpy"} <= set(frozen["kernel_path"])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", METHOD_NAMES)
def test_outputs_equal_the_frozen_record(name, mode, frozen, recompute):
    """The portable fields, on any machine."""
    expected = frozen["outputs"][f"{name}/{mode}"]
    assert differences(recompute(name, mode), expected, bit_exact=False) == []


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", METHOD_NAMES)
def test_outputs_equal_the_frozen_record_bit_for_bit(name, mode, frozen, recompute):
    """Every field, the digests included, where the kernel path is the record's."""
    here, there = kernel_path(), frozen["kernel_path"]
    if here != there:
        pytest.skip("another kernel path than the record's: "
                    + ", ".join(f"{k} {here.get(k)} (record: {there.get(k)})"
                                for k in sorted(set(here) | set(there)) if here.get(k) != there.get(k)))
    expected = frozen["outputs"][f"{name}/{mode}"]
    assert differences(recompute(name, mode), expected, bit_exact=True) == []


# --- the portable comparison is not vacuous -------------------------------------------------

def _entry(frozen, key="fedprop/real"):
    return copy.deepcopy(frozen["outputs"][key])


def test_the_portable_comparison_accepts_the_record_itself(frozen):
    for key, rounds in frozen["outputs"].items():
        assert differences(rounds, rounds, bit_exact=False) == [], key
        assert differences(rounds, rounds, bit_exact=True) == [], key


def test_the_portable_comparison_ignores_only_rounding_sized_weight_changes(frozen):
    rounds = _entry(frozen)
    model, tensors = next(iter(rounds[1]["weights"].items()))
    key, readings = next((k, v) for k, v in tensors.items() if len(v) > 1)
    scale = max(readings[0], 1e-3)
    readings[3] += 0.1 * WEIGHT_RTOL * scale
    assert differences(rounds, frozen["outputs"]["fedprop/real"], bit_exact=False) == []
    assert differences(rounds, frozen["outputs"]["fedprop/real"], bit_exact=True) != []
    readings[3] += 2 * WEIGHT_RTOL * scale
    [problem] = differences(rounds, frozen["outputs"]["fedprop/real"], bit_exact=False)
    assert f"{model}.{key}" in problem


@pytest.mark.parametrize("field", ["bytes_protocol_per_client", "bytes_model_per_client", "round"])
def test_the_portable_comparison_wants_exact_bytes_and_rounds(frozen, field):
    rounds = _entry(frozen)
    rounds[2][field] = rounds[2][field] + 1
    assert any(field in p for p in differences(rounds, frozen["outputs"]["fedprop/real"],
                                               bit_exact=False))


def test_the_portable_comparison_allows_one_label_flip_and_no_more(frozen):
    expected = frozen["outputs"]["fedprop/real"]
    rounds = _entry(frozen)
    labels = list(rounds[2]["predicted"])
    for i in range(LABEL_FLIPS + 1):
        labels[i] = str((int(labels[i]) + 1) % 10)
        rounds[2]["predicted"] = "".join(labels)
        problems = differences(rounds, expected, bit_exact=False)
        assert (problems == []) == (i + 1 <= LABEL_FLIPS)
    pseudo = _entry(frozen)
    pseudo[1]["pseudo_labels"] = pseudo[1]["pseudo_labels"][::-1]
    assert any("pseudo-labels" in p for p in differences(pseudo, expected, bit_exact=False))


def test_the_portable_comparison_checks_privacy_figures(frozen):
    expected = copy.deepcopy(frozen["outputs"]["protofssl/real"])
    expected[2]["privacy"]["epsilon_per_client"] = 4.377
    rounds = copy.deepcopy(expected)
    rounds[2]["privacy"]["epsilon_per_client"] *= 1 + 1e-12
    assert differences(rounds, expected, bit_exact=False) == []
    rounds[2]["privacy"]["epsilon_per_client"] *= 1 + 1e-6
    assert any("privacy" in p for p in differences(rounds, expected, bit_exact=False))
    rounds = copy.deepcopy(expected)
    rounds[2]["privacy"]["releases"]["0"] += 1
    assert any("privacy" in p for p in differences(rounds, expected, bit_exact=False))


# --- changes that matter fail on any machine ------------------------------------------------

def test_a_learning_rate_one_percent_off_fails_the_portable_comparison(frozen, feds):
    changed = record("fedavg-labeled", "plaintext", feds, lr=0.05 * 1.01)
    problems = differences(changed, frozen["outputs"]["fedavg-labeled/plaintext"], bit_exact=False)
    assert any("differs by" in p for p in problems), problems


def test_a_dropped_client_fails_the_portable_comparison(frozen, feds, monkeypatch):
    """Each round the last sampled client is silently left out."""
    from securefl.methods.fedavg.server import FedAvgMethod

    sample = FedAvgMethod._sample
    monkeypatch.setattr(FedAvgMethod, "_sample", lambda self: sample(self)[:-1])
    changed = record("fedavg-labeled", "plaintext", feds)
    problems = differences(changed, frozen["outputs"]["fedavg-labeled/plaintext"], bit_exact=False)
    assert any("differs by" in p for p in problems), problems


def test_a_changed_pseudo_label_rule_fails_the_portable_comparison(frozen, feds, monkeypatch):
    """FedAvg+PL's rule 'the top class of the softmax' becomes 'the top class where it leads
    the second by more than 0.01 (else no label)'."""
    from securefl.methods.fedavg.client import NetworkPLClient

    rule = NetworkPLClient.predictions

    def margin_rule(self, model, features, num_classes):
        labels, weights = rule(self, model, features, num_classes)
        import torch
        import torch.nn.functional as F

        with torch.no_grad():
            probs = F.softmax(model.head(torch.from_numpy(features)), dim=1).double().numpy()
        top2 = np.sort(probs, axis=1)[:, -2:]
        return np.where(top2[:, 1] - top2[:, 0] > 0.01, labels, -1), weights

    monkeypatch.setattr(NetworkPLClient, "predictions", margin_rule)
    changed = record("fedavg-pl", "plaintext", feds)
    problems = differences(changed, frozen["outputs"]["fedavg-pl/plaintext"], bit_exact=False)
    assert any("pseudo" in p for p in problems), problems


def test_a_run_on_another_kernel_path_passes_the_portable_comparison(frozen, tmp_path):
    """FedProp (both modes) recomputed in a process whose torch, oneDNN and MKL kernels take
    their plainest paths agrees with the record on every portable field, whatever CPU this is."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    plain = {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41",
             "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"}
    out = tmp_path / "record.json"
    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-m", "tests.methods.regression.outputs", "--method", "fedprop",
                    "--write", str(out)], check=True, cwd=root, timeout=600,
                   env={**os.environ, **plain, "PYTHONPATH": str(root)})
    other = json.loads(out.read_text())
    assert other["kernel_path"] != frozen["kernel_path"]
    assert other["kernel_path"]["torch_cpu_capability"] == "DEFAULT"
    for mode in MODES:
        key = f"fedprop/{mode}"
        assert differences(other["outputs"][key], frozen["outputs"][key], bit_exact=False) == []
