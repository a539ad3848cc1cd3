"""``experiments/sensitivity.py``: the per-method sensitivity table and plot, on tiny sweeps."""

from __future__ import annotations

import json
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from securefl.experiments.results import JobLog, build_results, write_results

SCRIPT = Path(__file__).resolve().parents[2] / "experiments" / "sensitivity.py"


def _sweep(folder: Path, key: str, scores: dict[str, tuple[float, float]], seeds=(2001, 2002),
           grid: list[str] | None = None) -> Path:
    method = key.split(".")[1]
    rows = [{"point": [f"{key}={value}"], "method": method, "seeds": len(seeds),
             "validation_accuracy": mean, "validation_std": std}
            for value, (mean, std) in scores.items()]
    folder.mkdir(parents=True)
    (folder / "sweep.json").write_text(json.dumps({
        "grid": grid or [f"{key}={','.join(scores)}"], "seeds": list(seeds), "rows": rows}))
    return folder


def _run(argv, monkeypatch):
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), *map(str, argv)])
    with pytest.raises(SystemExit) as done:
        runpy.run_path(str(SCRIPT), run_name="__main__")
    return done.value.code


@pytest.fixture
def sweeps(tmp_path):
    reference = _sweep(tmp_path / "labeled", "hyper.fedavg-labeled.lr", {"0.1": (0.90, 0.01)})
    # the digits default config sets FedProp's alpha to 0.7 (its class default is 0.99)
    # listed default first, as the MNIST sweeps are: the table orders numeric values
    fedprop = _sweep(tmp_path / "fedprop", "hyper.fedprop.alpha",
                     {"0.7": (0.95, 0.01), "0.99": (0.88, 0.03), "0.5": (0.93, 0.02)})
    protofssl = _sweep(tmp_path / "protofssl", "hyper.protofssl.lambda_u",
                       {"0.1": (0.91, 0.0), "0.3": (0.85, 0.02), "1.0": (0.91, 0.01)})
    return reference, fedprop, protofssl


def test_table_marks_defaults_gaps_and_best(sweeps, tmp_path, monkeypatch, capsys):
    reference, fedprop, protofssl = sweeps
    png = tmp_path / "out" / "sensitivity.png"
    code = _run([fedprop, protofssl, reference, "--reference", reference, "--plot", png],
                monkeypatch)
    assert code == 0
    out = capsys.readouterr().out
    assert "Reference: fedavg-labeled, validation accuracy 90.00 ± 1.00 %" in out
    rows = {line.split(" | ")[0].strip("| "): line for line in out.splitlines()
            if line.startswith(("| fed", "| proto"))}
    assert set(rows) == {"fedprop", "protofssl"}  # the reference is not a row of its own
    assert "0.5: 93.00 ± 2.00<br>0.7: 95.00 ± 1.00<br>0.99: 88.00 ± 3.00" in rows["fedprop"]
    # default 0.7 from the config (not the class's 0.99): 95.00 - 90.00 = +5.00, and the best
    assert rows["fedprop"].endswith("| 0.7 | 95.00 ± 1.00 | +5.00 | 0.7 |")
    # the class default 0.3 falls below the reference; tied best values are all named
    assert rows["protofssl"].endswith("| 0.3 | 85.00 ± 2.00 | -5.00 | 0.1, 1.0 |")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_default_outside_the_grid_is_said(tmp_path, monkeypatch, capsys):
    reference = _sweep(tmp_path / "labeled", "hyper.fedavg-labeled.lr", {"0.1": (0.9, None)})
    fedprop = _sweep(tmp_path / "fedprop", "hyper.fedprop.alpha", {"0.5": (0.93, None)})
    assert _run([fedprop, "--reference", reference], monkeypatch) == 0
    assert "| 0.7 | not in the grid | – | 0.5 |" in capsys.readouterr().out


@pytest.mark.parametrize("change, message", [
    ({"grid": ["hyper.fedprop.alpha=0.5", "hyper.fedprop.k=5"]}, "has 2 axes"),
    ({"seeds": (1, 2)}, "compare the same seeds"),
    ({"key": "hyper.fedprop"}, "want hyper.<method>.<name>"),
])
def test_bad_sweeps_are_refused(tmp_path, monkeypatch, change, message):
    reference = _sweep(tmp_path / "labeled", "hyper.fedavg-labeled.lr", {"0.1": (0.9, 0.0)})
    fedprop = _sweep(tmp_path / "fedprop", change.get("key", "hyper.fedprop.alpha"),
                     {"0.5": (0.93, 0.0)}, seeds=change.get("seeds", (2001, 2002)),
                     grid=change.get("grid"))
    code = _run([fedprop, "--reference", reference], monkeypatch)
    assert isinstance(code, str) and code.startswith("sensitivity.py: ") and message in code


def _job(method, test, validation, hyper=None):
    job = JobLog(method=method, secure="plaintext", rounds=len(test), hyper=hyper or {})
    for r, (t, v) in enumerate(zip(test, validation)):
        job.round_results.append({
            "round": r, "seconds": 1.0, "train_seconds": 1.0, "crypto_seconds": 0.0,
            "bytes_model_per_client": 1.0, "bytes_protocol_per_client": 0.0,
            "pseudo_label_accuracy": None, "pseudo_label_digest": None,
            "test_accuracy": t, "validation_accuracy": v})
    job.status = "complete"
    return job


def _record(folder, name, seed, jobs):
    config = {"name": name, "description": "", "methods": [j.method for j in jobs],
              "secure": "plaintext", "rounds": 2, "seed": seed, "threads": 1,
              "dataset": {"name": "mnist"}, "partition": {"scheme": "iid"}, "hyper": {}}
    folder.mkdir(parents=True)
    write_results(build_results(jobs=jobs, dataset="mnist", status="complete",
                                header={"config": config, "seed": seed}), folder)


def test_cross_check_pairs_seeds_and_reads_the_value_run(sweeps, tmp_path, monkeypatch, capsys):
    reference, fedprop, protofssl = sweeps
    records = tmp_path / "records"
    # seed 1: FedProp (alpha 0.9 in its hyper) above on both; seed 2: FedProp alone (unpaired)
    _record(records / "a" / "s1", "mnist-a", 1, [
        _job("fedprop", [0.95, 0.97], [0.90, 0.96], {"alpha": 0.9}),
        _job("fedavg-labeled", [0.93, 0.90], [0.94, 0.91]),
        _job("protofssl", [0.80, 0.92], [0.95, 0.90])])
    _record(records / "a" / "s2", "mnist-a", 2, [_job("fedprop", [0.1, 0.1], [0.9, 0.1])])
    _record(records / "b", "mnist-b", 1, [_job("fedavg-labeled", [0.5, 0.5], [0.5, 0.5])])
    code = _run([fedprop, protofssl, "--reference", reference, "--records", records],
                monkeypatch)
    assert code == 0
    out = capsys.readouterr().out
    assert "| method | mnist-a | mnist-b |" in out
    # validation selects round 2 (0.96) against the reference's round 1 (0.94): +4.00 / +2.00
    assert ("| fedprop | above: test +4.00, val +2.00 (1 seed; alpha = 0.9) | not run |"
            in out)
    # ProtoFSSL's round 1 (val 0.95, test 0.80): -13 on test, +1 on validation; the class default
    assert "| protofssl | mixed: test -13.00, val +1.00 (1 seed; lambda_u = 0.3) | not run |" in out


ROOT = SCRIPT.parents[1]
RECORDS = ("digits", "digits-fixmatch", "mnist-fedsemi-iid", "mnist-fedsemi-noniid1",
           "mnist-fedsemi-noniid2", "mnist-fedsemi-noniid3", "fashion-mnist-iid")


def _committed_output(sweeps: list[Path], reference: str, *extra: str) -> str:
    """The script's stdout over committed sweeps (``reference`` a folder under experiments/sweeps)."""
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, sweeps), "--reference",
         str(ROOT / "experiments" / "sweeps" / reference), *extra],
        capture_output=True, text=True, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_results_page_shows_the_committed_sweeps_and_records():
    """docs/results.md's sensitivity and cross-check tables are the script's output over the
    committed digits-sens-* sweeps and the records of other data sets."""
    sweeps = sorted(p.parent for p in (ROOT / "experiments" / "sweeps").glob("digits-sens-*/"
                                                                           "sweep.json"))
    out = _committed_output(sweeps, "digits-sens-fedavg-labeled", "--records",
                            *(str(ROOT / "experiments" / "results" / name) for name in RECORDS))
    assert len(sweeps) >= 13
    assert out in (ROOT / "docs" / "results.md").read_text()


def test_results_page_shows_the_committed_mnist_sweeps():
    """The MNIST IID sensitivity table of docs/results.md is the script's output over the
    committed mnist-iid sweeps, with the MNIST config's defaults marked."""
    sweeps_dir = ROOT / "experiments" / "sweeps"
    sweeps = sorted(p.parent for p in sweeps_dir.glob("mnist-iid-sens-*-20rounds/sweep.json"))
    sweeps.append(sweeps_dir / "mnist-iid-fedmatch-20rounds-lr")
    out = _committed_output(sweeps, "mnist-iid-sens-fedavg-labeled-20rounds",
                            "--config", str(ROOT / "experiments" / "mnist-fedsemi-iid.toml"))
    assert len(sweeps) >= 4
    assert out in (ROOT / "docs" / "results.md").read_text()
