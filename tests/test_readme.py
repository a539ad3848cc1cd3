"""The README cannot rot: its commands, tables and documented names are checked against
the code (the extraction and the checks are in :mod:`tests.readme_commands`)."""

from __future__ import annotations

import importlib
import json

import pytest

from tests.readme_commands import (
    README,
    CheckError,
    check_command,
    check_readme,
    dotted_names,
    is_cheap,
    is_pytest,
    is_script,
    is_securefl,
    readme_commands,
    run_cheap,
    table_problems,
)


def test_every_readme_command_parses_and_validates():
    checked, failures = check_readme(README)
    assert not failures, "\n".join(f"{command}: {problem}" for command, problem in failures)
    commands = [command for command, _ in checked]
    # the extraction found every kind the README uses, so the check is not vacuous
    assert sum(map(is_securefl, commands)) >= 10
    assert any(is_script(c) for c in commands) and any(is_pytest(c) for c in commands)
    assert any(c.words[:3] == ["securefl", "bench", "ot"] for c in commands)


def test_readme_tables_are_well_formed():
    assert table_problems(README.read_text()) == []


def test_readme_result_tables_are_the_records():
    """Every results table of the README is ``experiments/tables.py``'s output over the
    records it names: a table typed by hand, or one left behind by new records, fails."""
    import subprocess
    import sys

    root = README.parent
    done = subprocess.run([sys.executable, str(root / "experiments" / "tables.py"), "--readme",
                           str(README), "--check"], capture_output=True, text=True, cwd=root)
    assert done.returncode == 0, done.stderr
    assert README.read_text().count("<!-- tables.py: ") >= 5


def test_readme_dotted_names_resolve():
    names = dotted_names(README.read_text())
    assert "securefl.methods.hyper_parameters" in names
    for name in names:
        module, _, attribute = name.rpartition(".")
        try:
            value = getattr(importlib.import_module(module), attribute)
        except (ModuleNotFoundError, AttributeError):  # a module, e.g. ``python -m a.b``
            value = importlib.import_module(name)
        assert value is not None, name


def test_cheap_readme_commands_run_for_real(tmp_path, monkeypatch):
    monkeypatch.chdir(README.parent)
    checked, _ = check_readme(README)
    cheap = [c for c, _ in checked if is_cheap(c)]
    assert any("--version" in c.words for c in cheap)
    assert any(c.words[:3] == ["securefl", "bench", "ot"] for c in cheap)
    seen = set()
    for command in cheap:
        if tuple(command.words) in seen:
            continue
        seen.add(tuple(command.words))
        output = run_cheap(command, tmp_path)
        assert output.strip(), command


BROKEN = """
# A README with rotten commands

```bash
securefl bench ot --mm 4096            # a flag that does not exist
securefl bench lp --n 1                # a value the benchmark rejects
securefl run --method fedprop-xl       # a method that does not exist
securefl run --config experiments/gone.toml
python experiments/tables.py runs/a/ --plot-dri x   # a misspelt flag
python -m pytest tests/no-such-room -q
for S in 3 4; do securefl run --seed $S --out runs/seed$S; done
```

Inline: `securefl bench ot --m -1` and `bench lp --alpha 2`; a synopsis is left alone:
`securefl bench hamming --n N [--json PATH]`.

| a | b |
|---|---|
| 1 | 2 |
| 3 |
stray
"""


def test_the_doc_check_catches_rotten_commands(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(BROKEN)
    (tmp_path / "experiments").symlink_to(README.parent / "experiments")
    checked, failures = check_readme(readme)
    failed = {" ".join(command.words): problem for command, problem in failures}
    assert "unrecognized arguments: --mm" in failed["securefl bench ot --mm 4096"]
    assert "--n=1" in failed["securefl bench lp --n 1"]
    assert "fedprop-xl" in failed["securefl run --method fedprop-xl"]
    assert "gone.toml" in failed["securefl run --config experiments/gone.toml"]
    assert "--plot-dri" in failed["python experiments/tables.py runs/a/ --plot-dri x"]
    assert "tests/no-such-room" in failed["python -m pytest tests/no-such-room -q"]
    # the loop variable is bound to its first value
    assert [c.words for c, _ in checked if "--seed" in c.words] == [
        ["securefl", "run", "--seed", "3", "--out", "runs/seed3"]
    ]
    assert "--m=-1" in failed["securefl bench ot --m -1"]
    assert "--alpha=2.0" in failed["securefl bench lp --alpha 2"]
    assert not any("hamming" in key for key in failed)
    assert len(failures) == 8
    problems = table_problems(BROKEN)
    assert len(problems) == 2 and "1 cells" in problems[0] and "stray" in problems[1]


def test_cheap_runs_cap_the_sizes_and_write_the_json(tmp_path):
    [command] = readme_commands("```bash\nsecurefl bench ot --m 4194304 --json out.json\n```")
    assert check_command(command) == "parsed and validated" and is_cheap(command)
    output = run_cheap(command, tmp_path)
    record = json.loads((tmp_path / "out.json").read_text())
    assert record["m"] == 65536 and record["verified"] is True
    assert "M OT/s" in output


def test_a_failing_cheap_run_is_reported(tmp_path, monkeypatch):
    from securefl.bench import ot

    def broken(args, progress):
        return {"m": args.m, "verified": False}

    monkeypatch.setattr(ot, "run", broken)
    [command] = readme_commands("`securefl bench ot --m 100`")
    with pytest.raises(CheckError, match="exit status 1"):
        run_cheap(command, tmp_path)
