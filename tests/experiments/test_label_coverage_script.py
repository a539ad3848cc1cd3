"""``experiments/label_coverage.py``: accuracy against label coverage, on a small fixture."""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "experiments" / "label_coverage.py"


def _coverage(count, covered, uncovered):
    return {"uncovered_classes": list(range(count)), "uncovered_count": count,
            "label_mass_median_covered": covered, "label_mass_median_uncovered": uncovered,
            "clients": [0, 1]}


@pytest.fixture
def records(tmp_path):
    fedprop = {"method": "fedprop", "accuracy_by_round": [0.9, 0.8, 0.7, None],
               "label_coverage_by_round": [_coverage(0, 0.9, None), _coverage(1, 0.8, 0.2),
                                           _coverage(2, 0.7, 0.1), _coverage(2, 0.7, 0.1)]}
    labeled = {"method": "fedavg-labeled", "accuracy_by_round": [0.5, 0.5, 0.5, 0.5],
               "label_coverage_by_round": [None] * 4}
    (tmp_path / "seed1").mkdir()
    (tmp_path / "seed1" / "results.json").write_text(json.dumps({"methods": [fedprop, labeled]}))
    return tmp_path


def test_coverage_pools_fedprop_rounds_and_correlates(records, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), str(records)])
    with pytest.raises(SystemExit) as done:
        runpy.run_path(str(SCRIPT), run_name="__main__")
    assert done.value.code == 0
    out = capsys.readouterr().out
    # three evaluated FedProp rounds (the unevaluated fourth and the baseline are left out),
    # accuracy falling linearly with the uncovered count
    assert "3 rounds, correlation -1.000" in out
    assert "1 classes without a label: 1 rounds, mean test accuracy 80.0 %" in out
    assert "2 classes without a label: 1 rounds, mean test accuracy 70.0 %" in out
    assert "covered 0.800, uncovered 0.150" in out


def test_coverage_needs_rounds_with_coverage(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), str(tmp_path)])
    with pytest.raises(SystemExit, match="0 rounds with label coverage"):
        runpy.run_path(str(SCRIPT), run_name="__main__")
