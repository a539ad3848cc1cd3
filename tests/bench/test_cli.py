"""``securefl bench ...`` and ``securefl`` itself as a user meets them: one-line errors before
any work, output paths checked first and never left half-written, human units, --help and
--version."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

import pytest

from securefl import __version__
from securefl.bench import BENCHMARKS, lp, ot
from securefl.cli import main
from securefl.errors import InputError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_work(monkeypatch):
    """Make every benchmark's run() fail loudly: an error must come before any work."""
    def refuse(args, progress):
        raise AssertionError("the benchmark ran although the request was invalid")

    for name in ("ot", "lp"):
        monkeypatch.setattr(sys.modules[BENCHMARKS[name]], "run", refuse)


def one_line_error(capsys, argv) -> str:
    with pytest.raises(SystemExit) as raised:
        raise SystemExit(main(argv))
    assert raised.value.code == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("securefl: ")
    return lines[0]


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["bench", "ot", "--m", "-1"], "InputError: --m=-1: must be an integer >= 1"),
        (["bench", "ot", "--m", "0"], "--m=0"),
        (["bench", "ot", "--chunk", "100"], "--chunk=100: must be a multiple of 64"),
        (["bench", "ot", "--chunk", "0"], "--chunk=0"),
        (["bench", "ot", "--seed", "-2"], "--seed=-2"),
        (["bench", "ot", "--m", str(10**15)], "--m=1000000000000000: needs"),
        (["bench", "lp", "--n", "5", "--classes", "10"], "--n=5: must be at least --classes=10"),
        (["bench", "lp", "--classes", "1"], "--classes=1"),
        (["bench", "lp", "--n", "20", "--k", "20"], "--k=20: must be below --n=20"),
        (["bench", "lp", "--alpha", "1"], "--alpha=1.0: must be in (0.0, 1.0)"),
        (["bench", "lp", "--alpha", "nan"], "--alpha=nan"),
        (["bench", "lp", "--labels-per-class", "0"], "--labels-per-class=0"),
        (["bench", "lp", "--dim", "-3"], "--dim=-3"),
        (["bench", "lp", "--separation", "-1"], "--separation=-1.0"),
        (["bench", "hamming", "--workers", "0"], "--workers=0"),
        (["bench", "hamming", "--workers", "2"], "--workers=2: SHADE runs each client's hops on one thread"),
        (["bench", "crossclient", "--k", "0"], "--k=0"),
        (["bench", "flower-methods", "--methods", "fedavg-labeled,nosuch"],
         "--methods='fedavg-labeled,nosuch': ['nosuch'] are not deployable"),
        (["bench", "flower-methods", "--rounds", "0"], "--rounds=0"),
        (["bench", "ot", "--m", "many"], "ArgumentError: argument --m: invalid int value: 'many'"),
        (["bench", "ot", "--mm", "5"], "unrecognized arguments: --mm"),
        (["bench", "hamming", "--backend", "lwe2"], "invalid choice: 'lwe2'"),
        (["bench", "nope"], "invalid choice: 'nope'"),
        (["bench"], "the following arguments are required"),
        ([], "the following arguments are required"),
    ],
)
def test_bad_arguments_fail_in_one_line_before_any_work(capsys, no_work, argv, expected):
    assert expected in one_line_error(capsys, argv)


def test_json_path_is_checked_before_the_run(capsys, no_work, tmp_path):
    line = one_line_error(capsys, ["bench", "ot", "--m", "64", "--json", str(tmp_path)])
    assert f"--json={str(tmp_path)!r}: names a folder" in line
    line = one_line_error(capsys, ["bench", "lp", "--json", f"{tmp_path}/new/"])
    assert "names a folder" in line
    missing = tmp_path / "missing" / "dir" / "x.json"
    line = one_line_error(capsys, ["bench", "lp", "--json", str(missing)])
    assert "does not exist" in line and not (tmp_path / "missing").exists()
    a_file = tmp_path / "file"
    a_file.write_text("x")
    line = one_line_error(capsys, ["bench", "lp", "--json", str(a_file / "x.json")])
    assert "is not a folder" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_unwritable_json_folder_is_refused_up_front(tmp_path):
    from securefl.bench.common import check_output_file

    if not Path("/proc/self").is_dir():
        pytest.skip("needs a read-only /proc")
    with pytest.raises(InputError, match="--json='/proc/x.json': cannot write in '/proc'"):
        check_output_file("/proc/x.json")


def test_a_failing_benchmark_leaves_no_file(capsys, monkeypatch, tmp_path):
    def crash(args, progress):
        raise RuntimeError("the benchmark broke half way")

    monkeypatch.setattr(ot, "run", crash)
    target = tmp_path / "out.json"
    with pytest.raises(RuntimeError):
        main(["bench", "ot", "--m", "64", "--json", str(target)])
    assert list(tmp_path.iterdir()) == []


def test_atomic_write_leaves_nothing_on_failure_and_keeps_the_old_file(tmp_path):
    from securefl.bench.common import atomic_write, write_json

    target = tmp_path / "r.json"
    write_json({"a": 1}, target)

    def half(handle):
        handle.write(b'{"a": ')
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, half)
    assert json.loads(target.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]
    with pytest.raises(TypeError):
        write_json({"a": object()}, target)
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]
    umask = os.umask(0o022)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask  # as open() would, not mkstemp's 0600


def test_bench_summary_in_human_units_json_raw(capsys, tmp_path):
    target = tmp_path / "ot.json"
    assert main(["bench", "ot", "--m", "131072", "--chunk", "4096", "--json", str(target)]) == 0
    out = capsys.readouterr().out
    record = json.loads(target.read_text())
    assert isinstance(record["bytes_total"], int) and record["m"] == 131072
    assert "131,072" in out and "M OT/s" in out and " MB" in out
    assert "ots per second" in out and "ots_per_second" not in out
    assert str(record["bytes_total"]) not in out  # never an unseparated byte count
    # no run of 5+ digits in a number's integer part (a small ratio's fraction, 0.00936x
    # when the machine is loaded, is three significant digits, not an unseparated count)
    assert not re.search(r"(?<![\d.])\d{5,}", out.split("machine")[0]), out


@pytest.mark.parametrize(
    "name, value, text",
    [
        ("bytes_total", 51496719175, "51.50 GB"),
        ("bytes_per_client", 8_390_000, "8.39 MB"),
        ("bytes_per_ot", 16.0, "16 B"),
        ("bytes_per_ot", 16.004, "16.00 B"),
        ("bytes_brand_new_field", 2048, "2.05 kB"),  # fields added later are formatted too
        ("ots_per_second", 16.6e6, "16.60 M OT/s"),
        ("ots", 10240000, "10,240,000"),
        ("seconds", 31.6, "31.6 s"),
        ("plaintext_seconds", 0.000285, "285 µs"),
        ("dense_seconds", 0.0452, "45.2 ms"),
        ("seconds_real", 143.0, "143 s (2 min 23 s)"),
        ("prg_gbps", 5.58, "5.58 GB/s"),
        ("gemm_gflops", 44.93, "44.9 GFLOP/s"),
        ("fft_seconds", 9.51e-6, "9.51 µs"),
        ("peak_memory_mb", 646.2, "646 MiB"),
        ("ratio", 127.4, "127x"),
        ("seconds_over_lower_bound", 1.14, "1.14x"),
        ("pseudo_label_agreement", 1.0, "100.00 %"),
        ("max_abs_score_diff", 1.7e-13, "1.7e-13"),
        ("verified", True, "yes"),
        ("backend", "shade", "shade"),
        ("alpha", 0.99, "0.99"),
    ],
)
def test_format_field_picks_units_by_name(name, value, text):
    from securefl.bench.common import format_field

    assert format_field(name, value) == text


def test_record_rows_flatten_nested_tables_and_skip_the_machine():
    from securefl.bench.common import record_rows

    record = {"bytes_sent": {"0": 4_200_000_000}, "machine": {"cpu": "x"}, "n": 5000}
    rows = dict(record_rows(record))
    assert rows == {"bytes sent: 0": "4.20 GB", "n": "5,000"}


def _options(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _options(sub)
        elif action.option_strings and action.default not in (None, argparse.SUPPRESS, False):
            yield parser, action


def test_help_shows_every_default_and_choices(capsys):
    from securefl.cli import build_parser

    parser = build_parser()
    options = list(_options(parser))
    assert len(options) > 20
    for owner, action in options:
        text = owner.format_help()
        line = " ".join(text.split())
        assert f"{action.option_strings[0]}" in line
        assert "default" in line, owner.prog
    helps = {}
    for name in BENCHMARKS:
        with pytest.raises(SystemExit):
            main(["bench", name, "--help"])
        helps[name] = " ".join(capsys.readouterr().out.split())
    assert "--m M number of random OTs (default: 4194304)" in helps["ot"]
    assert "--alpha ALPHA propagation parameter alpha (default: 0.99)" in helps["lp"]
    assert "{shade,lwe,rlwe,plaintext}" in helps["hamming"] and "(default: shade)" in helps["hamming"]


def test_run_help_lists_methods_datasets_and_defaults(capsys):
    from securefl.data import DATASET_NAMES
    from securefl.methods import METHOD_NAMES

    with pytest.raises(SystemExit) as raised:
        main(["run", "--help"])
    assert raised.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for name in (*METHOD_NAMES, *DATASET_NAMES):
        assert f" {name}," in text or f" {name} " in text, name
    assert "--secure {real,plaintext,both}" in text
    assert "digits default: 30" in text and "digits default: real" in text


def test_version_matches_the_package_metadata(capsys):
    with pytest.raises(SystemExit) as raised:
        main(["--version"])
    assert raised.value.code == 0
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    version = f"securefl {project['version']}"
    assert capsys.readouterr().out.strip() == version == f"securefl {__version__}"


def test_validate_hooks_name_flags_for_programmatic_calls():
    parser = argparse.ArgumentParser()
    lp.add_arguments(parser)
    args = parser.parse_args(["--n", "3", "--classes", "4"])
    with pytest.raises(InputError) as raised:
        lp.validate(args)
    assert raised.value.parameter == "--n" and raised.value.value == 3


@pytest.mark.parametrize("seconds", [0.0009996, 0.9996, 0.99949, 99.96, 4.2e-7, 0.05, 3600.4])
def test_format_seconds_never_writes_a_rounded_up_mantissa(seconds):
    from securefl.bench.common import format_seconds

    text = format_seconds(seconds)
    number, unit = text.split()[:2]
    assert "e" not in number, text
    assert float(number.replace(",", "")) < (1000 if unit in ("µs", "ms") else float("inf")), text
    scale = {"µs": 1e-6, "ms": 1e-3, "s": 1.0}[unit]
    assert float(number.replace(",", "")) * scale == pytest.approx(seconds, rel=6e-3), text
