"""The README's reproducibility statement, checked: two runs of the same command on the same
machine with the same threads give identical numbers in ``results.json``.

One run goes through ``securefl.cli.main`` in this process, the other through a fresh
interpreter (``python -m securefl.cli``), so neither state left in a process nor hash
randomisation can make them agree by accident.  Real cryptography draws its keys and
masks from the OS CSPRNG, and yet every accuracy, pseudo-label digest and byte count must
match: the cryptography changes no output (DESIGN.md, principle 1).  Timings are not
compared.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from securefl.cli import main

from .test_integration import TINY

COMPARED = (
    "method", "secure", "rounds_completed", "status", "final_accuracy", "selected_round",
    "selected_by", "selected_validation_accuracy", "selected_test_accuracy", "best_accuracy",
    "pseudo_label_accuracy", "accuracy_by_round", "validation_accuracy_by_round",
    "pseudo_label_accuracy_by_round", "pseudo_label_digest_by_round",
    "bytes_per_client_per_round", "bytes_model_per_client_per_round",
    "bytes_protocol_per_client_per_round", "hyper",
)
"""Every per-method field except the timings."""


def numbers(folder: Path) -> list[dict]:
    document = json.loads((folder / "results.json").read_text())
    assert document["status"] == "complete"
    return [{key: summary[key] for key in COMPARED} for summary in document["methods"]]


def test_same_command_same_machine_same_numbers(tmp_path):
    config = tmp_path / "tiny.toml"
    config.write_text(TINY)
    # real cryptography with one explicit crypto seed: without it each real run draws fresh
    # secrets (LSH hyperplanes) from the OS, by design (tests/experiments/test_randomness.py)
    argv = ["run", "--config", str(config), "--rounds", "2", "--set", "crypto_seed=11"]
    assert main([*argv, "--out", str(tmp_path / "here")]) == 0
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(root), *filter(None, [os.environ.get("PYTHONPATH")])])}
    done = subprocess.run(
        [sys.executable, "-m", "securefl.cli", *argv, "--out", str(tmp_path / "fresh")],
        env=env, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    here, fresh = numbers(tmp_path / "here"), numbers(tmp_path / "fresh")
    assert here == fresh
    assert all(s["validation_accuracy_by_round"][0] is not None for s in here)
    assert any(s["pseudo_label_digest_by_round"][0] is not None for s in here)
