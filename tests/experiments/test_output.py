"""``securefl run`` as a user sees it: output paths checked before the data is loaded, no
partial files, plain progress lines when piped, tables that fit 80 columns, a readable
cost plot, and descriptions that match the cryptography mode actually run."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console

import securefl.experiments.cli as run_cli
from securefl.cli import main
from securefl.experiments import plots
from securefl.experiments.config import DEFAULT_CONFIG, read_toml
from securefl.experiments.report import (
    COMPARE_TERMINAL,
    RESULT_TERMINAL,
    compare_rows,
    comparison_table,
    result_rows,
    results_table,
)

from .conftest import FAKE_CONFIG, SoftmaxSelfTraining

# A real ``--secure both`` document (the digits record of commit a60bea7, kept as test data
# so that re-running the experiments cannot break the table tests).
RECORD = Path(__file__).resolve().parent / "data" / "digits-secure-both.json"


def record_document() -> dict:
    """The ``--secure both`` digits record with the validation fields of schema 2 filled in
    (selected = last round; the record predates the validation split), so the tables see
    every column they print today."""
    document = json.loads(RECORD.read_text())
    for summary in document["methods"]:
        summary.setdefault("selected_round", summary["rounds_completed"] - 1)
        summary.setdefault("selected_by", "validation")
        summary.setdefault("selected_validation_accuracy", summary["best_accuracy"])
        summary.setdefault("selected_test_accuracy", summary["final_accuracy"])
    return document


def leftovers(folder: Path) -> list[str]:
    """Temporary or partial files anywhere under ``folder``."""
    return sorted(str(p) for p in folder.rglob("*") if ".tmp" in p.name or ".probe" in p.name)


@pytest.fixture
def no_data_loading(monkeypatch):
    def refuse(config):
        raise AssertionError("data was loaded although the request was invalid")

    monkeypatch.setattr(run_cli, "load_federations", refuse)


def _error(capsys, argv) -> str:
    assert main(argv) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("securefl: ConfigError: --out=")
    return lines[0]


def test_impossible_out_paths_fail_before_loading_data(tmp_path, fake_config, capsys,
                                                       no_data_loading):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    base = ["run", "--config", str(fake_config)]
    assert "exists and is not a folder" in _error(capsys, base + ["--out", str(a_file / "run")])
    assert "exists and is not a folder" in _error(
        capsys, base + ["--out", str(a_file / "deeper" / "run")]
    )
    assert "exists and is not an empty folder" in _error(capsys, base + ["--out", str(a_file)])
    if Path("/proc/self").is_dir():
        line = _error(capsys, base + ["--out", "/proc/securefl-run"])
        assert "cannot create folders in '/proc'" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "tiny.toml"]


def test_out_creates_missing_parents(tmp_path, fake_config, capsys):
    out = tmp_path / "a" / "b" / "run"
    assert main(["run", "--config", str(fake_config), "--out", str(out), "--rounds", "1"]) == 0
    assert json.loads((out / "results.json").read_text())["status"] == "complete"
    assert leftovers(tmp_path) == []


def test_resume_folder_must_be_writable(tmp_path, capsys, no_data_loading, monkeypatch):
    monkeypatch.setattr(run_cli, "load_state", lambda folder: None)
    if not Path("/proc/self").is_dir():
        pytest.skip("needs a read-only /proc")
    assert main(["run", "--resume", "/proc/self"]) == 2
    assert "--resume='/proc/self': cannot create folders" in capsys.readouterr().err


def test_a_run_failing_mid_way_leaves_no_partial_files(tmp_path, fake_config, monkeypatch):
    original = SoftmaxSelfTraining.run_round

    def crash(self, round_index):
        if round_index == 1:
            raise RuntimeError("a method bug")
        return original(self, round_index)

    monkeypatch.setattr(SoftmaxSelfTraining, "run_round", crash)
    out = tmp_path / "run"
    with pytest.raises(RuntimeError):
        main(["run", "--config", str(fake_config), "--out", str(out)])
    document = json.loads((out / "results.json").read_text())
    assert document["status"] == "failed" and "a method bug" in document["methods"][0]["error"]
    assert leftovers(tmp_path) == []


def test_a_failing_plot_leaves_no_partial_file(tmp_path, fake_config, monkeypatch):
    from matplotlib.figure import Figure

    def broken_savefig(self, handle, **options):
        handle.write(b"\x89PNG half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", broken_savefig)
    out = tmp_path / "run"
    with pytest.raises(OSError):
        main(["run", "--config", str(fake_config), "--out", str(out), "--rounds", "1"])
    assert not (out / "accuracy.png").exists() and leftovers(tmp_path) == []


# ----------------------------------------------------------------------------- progress

ROUND_LINE = re.compile(
    r"^(softmax-st|softmax-sup) \((real|plaintext)\) round (\d+)/3: "
    r"(validation \d+\.\d\d %, )?test \d+\.\d\d %(, pseudo-labels \d+\.\d\d %)?, "
    r"[\d.,]+ (µs|ms|s)( \(\d+ (h|min) \d+ (min|s)\))?"
    r"(, (crypto|placeholder) [\d.,]+ (µs|ms|s)( \(\d+ (h|min) \d+ (min|s)\))?)?$"
)


def test_piped_run_prints_one_plain_line_per_round(tmp_path, fake_config, capsys):
    out = tmp_path / "run"
    assert main(["run", "--config", str(fake_config), "--out", str(out), "--secure", "both"]) == 0
    err = capsys.readouterr().err.splitlines()
    rounds = [ROUND_LINE.match(line) for line in err]
    seen = [(m.group(1), m.group(2), int(m.group(3))) for m in rounds if m]
    assert seen == [(method, mode, r) for method in ("softmax-st", "softmax-sup")
                    for mode in ("real", "plaintext") for r in (1, 2, 3)], "\n".join(err)
    assert not any("\x1b[" in line for line in err)  # no terminal control codes in a log
    assert len(err) == len(set(err))  # nothing printed twice


def test_piped_run_prints_the_phases_a_method_announces(tmp_path, fake_config, capsys,
                                                         monkeypatch):
    original = SoftmaxSelfTraining.setup

    def setup_with_phases(self, federation):
        self._phase("warm-up round 1/1 (labeled only)")
        original(self, federation)

    monkeypatch.setattr(SoftmaxSelfTraining, "setup", setup_with_phases)
    assert main(["run", "--config", str(fake_config), "--out", str(tmp_path / "run")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[:2] == ["softmax-st (real): setup",
                       "softmax-st (real): setup: warm-up round 1/1 (labeled only)"]


def test_fedprop_announces_its_warm_up_and_crossclient_lp(digits_federation):
    from securefl.methods import build_method

    method = build_method("fedprop", secure="plaintext", warmup_rounds=2, clients_per_round=2,
                          local_epochs=1, L=64)
    phases: list[str] = []
    method.on_phase = phases.append
    method.setup(digits_federation)
    method.run_round(0)
    assert phases == ["warm-up round 1/2 (labeled only)", "warm-up round 2/2 (labeled only)",
                      "CrossClientLP (plaintext)"]


# ----------------------------------------------------------------------------- tables

def _render(table, width: int) -> list[str]:
    buffer = io.StringIO()
    Console(file=buffer, width=width, color_system=None).print(table)
    return buffer.getvalue().splitlines()


@pytest.mark.parametrize("width", [80, 100])
def test_results_tables_fit_without_cutting_numbers(width):
    document = record_document()
    # (table, its rows, its terminal columns, the cells that must appear whole unless the
    # caption names their column as left out: every accuracy, seconds and size)
    for table, rows, columns, numbers in (
        (results_table(document, width=width), result_rows(document), RESULT_TERMINAL,
         range(3, 11)),
        (comparison_table(document, width=width), compare_rows(document), COMPARE_TERMINAL,
         (1, 2, 3, 6, 7)),
    ):
        lines = _render(table, width)
        text = " ".join("\n".join(lines).split())
        assert max(map(len, lines)) <= width
        assert "…" not in text
        left_out = text.split("left out at", 1)[1] if "left out at" in text else ""
        for row in rows:
            line = next(l for l in lines if l.split()[:1] == [row[0]] and row[1] in l.split())
            for index in numbers:
                if columns[index].keep is not None and columns[index].header in left_out:
                    continue
                assert row[index] in line.split(), (index, row[index], line)
        assert all(columns[i].header not in left_out for i in numbers if columns[i].keep is None)


@pytest.mark.parametrize("terminal", [True, False], ids=["terminal", "pipe"])
def test_run_on_80_columns_prints_every_accuracy_whole(tmp_path, fake_config, monkeypatch,
                                                      terminal):
    """On an 80-column terminal, and piped (where the table is laid out for 80 columns too)."""
    import securefl.cli as top_cli

    screen = io.StringIO()
    real_console = top_cli.Console

    def screen_console(*args, **options):
        if args or options:  # progress displays etc.
            return real_console(*args, **options)
        if not terminal:
            return real_console(file=screen, force_terminal=False, color_system=None)
        return real_console(file=screen, width=80, force_terminal=True, color_system=None)

    monkeypatch.setattr(top_cli, "Console", screen_console)
    out = tmp_path / "run"
    assert main(["run", "--config", str(fake_config), "--out", str(out), "--secure", "both"]) == 0
    lines = screen.getvalue().splitlines()
    assert max(map(len, lines)) <= 80 and "…" not in screen.getvalue()
    document = json.loads((out / "results.json").read_text())
    for summary in document["methods"]:
        row = next(l for l in lines if l.split()[:2] == [summary["method"], summary["secure"]])
        for key in ("selected_test_accuracy", "selected_validation_accuracy"):
            assert f"{100 * summary[key]:.2f}" in row.split(), (key, row)


def test_narrow_console_leaves_columns_out_and_says_so():
    document = record_document()
    for summary in document["methods"]:
        summary["method"] = summary["method"].replace("fedavg-labeled", "fedavg-supervised")
    lines = _render(results_table(document, width=60), 60)
    text = "\n".join(lines)
    assert max(map(len, lines)) <= 60 and "…" not in text
    assert "left out at 60 columns:" in " ".join(text.split())
    for row in result_rows(document):
        line = next(l for l in lines if l.startswith(row[0] + " ") and row[1] in l.split())
        assert row[5] in line.split()  # the selected model's test accuracy is always there


def test_cost_plot_shows_every_bytes_bar(monkeypatch, tmp_path):
    captured = []
    monkeypatch.setattr(plots, "_save", lambda plt, figure, path: captured.append(figure))
    document = json.loads(RECORD.read_text())
    plots.plot_cost(document, tmp_path / "cost.png")
    [figure] = captured
    axis = next(a for a in figure.axes if "MB" in a.get_xlabel())
    figure.canvas.draw()
    panel = axis.get_window_extent().width
    widths = {}
    for patch in axis.patches:
        y = round(patch.get_y() + patch.get_height() / 2)
        widths[y] = max(widths.get(y, 0.0), patch.get_window_extent().width)
    jobs = [s for s in document["methods"] if s["rounds_completed"]]
    assert len(widths) == len(jobs)
    assert min(widths.values()) > 0.05 * panel, sorted(widths.values())


def test_plaintext_run_never_claims_real_cryptography(tmp_path, fake_registry, capsys):
    description = read_toml(DEFAULT_CONFIG)["description"]
    config = tmp_path / "tiny.toml"
    config.write_text(FAKE_CONFIG.replace('name = "tiny"',
                                          f'name = "tiny"\ndescription = "{description}"'))
    out = tmp_path / "run"
    assert main(["run", "--config", str(config), "--out", str(out), "--secure", "plaintext",
                 "--rounds", "1"]) == 0
    captured = capsys.readouterr()
    readme = (out / "README.md").read_text()
    for text in (captured.out, captured.err, readme):
        assert "real cryptography" not in text
    assert "- cryptography: plaintext placeholder (no cryptography)" in readme
    assert "plaintext placeholder" in " ".join(captured.out.split())
