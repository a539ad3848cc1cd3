"""The README and the docs pages cannot rot: their commands, tables and documented names are
checked against the code (the extraction and the checks are in :mod:`tests.readme_commands`;
that the docs site builds, links and references included, is :mod:`tests.test_docs`)."""

from __future__ import annotations

import importlib
import json

import pytest

from tests.readme_commands import (
    README,
    REPO,
    CheckError,
    check_command,
    check_readme,
    documents,
    dotted_names,
    is_cheap,
    is_pytest,
    is_script,
    is_securefl,
    readme_commands,
    run_cheap,
    source_name,
    stale_tables,
    table_problems,
)

DOCUMENTS = documents()


def _all_checked():
    """``(checked, failures)`` over every document, each run from the repository root."""
    checked, failures = [], []
    for path in DOCUMENTS:
        ok, bad = check_readme(path, REPO)
        checked += ok
        failures += bad
    return checked, failures


def test_the_documents_are_the_readme_and_every_docs_page():
    names = {source_name(path, REPO) for path in DOCUMENTS}
    assert {"README.md", "docs/security.md", "docs/results.md", "docs/measurements.md",
            "docs/deployment.md", "docs/api/index.md"} <= names
    assert all(name == "README.md" or name.startswith("docs/") for name in names)


def test_every_documented_command_parses_and_validates():
    checked, failures = _all_checked()
    assert not failures, "\n".join(f"{command}: {problem}" for command, problem in failures)
    commands = [command for command, _ in checked]
    # the extraction found every kind the documents use, so the check is not vacuous
    assert sum(map(is_securefl, commands)) >= 10
    assert any(is_script(c) for c in commands) and any(is_pytest(c) for c in commands)
    assert any(c.words[:3] == ["securefl", "bench", "ot"] for c in commands)
    # and it reached the docs pages, not only the README
    assert {c.source for c in commands} >= {"README.md", "docs/reproducing.md"}


def test_the_readme_gives_the_quick_start_and_the_docs_build():
    commands = [c.text for c in readme_commands(README.read_text())]
    assert "python -m pytest -n 2" in " ".join(commands)  # the command CI runs
    assert any("pip install -e '.[docs]'" in text and "mkdocs build --strict" in text
               for text in commands)


def test_document_tables_are_well_formed():
    problems = [problem for path in DOCUMENTS
                for problem in table_problems(path.read_text(), source_name(path, REPO))]
    assert problems == []


def test_result_tables_are_the_records():
    """Every results table of the README and the docs pages is ``experiments/tables.py``'s
    output over the records it names: a table typed by hand, or one left behind by new
    records, fails."""
    blocks = 0
    for path in DOCUMENTS:
        count, stale = stale_tables(path.read_text(), root=path.parent)
        assert stale == [], f"{source_name(path, REPO)}: stale tables {stale}"
        blocks += count
    assert blocks >= 5
    assert stale_tables(README.read_text())[0] >= 1  # the README's one results table


def test_a_stale_results_table_is_caught():
    text = README.read_text()
    count, stale = stale_tables(text)
    assert count >= 1 and stale == []
    # one digit of the README's table changed: the check names that block
    start = text.index("<!-- tables.py: ")
    row = text.index("| fedprop |", start)
    digit = next(i for i in range(row, len(text)) if text[i].isdigit())
    altered = text[:digit] + str((int(text[digit]) + 1) % 10) + text[digit + 1:]
    assert len(stale_tables(altered)[1]) == 1


def test_documented_dotted_names_resolve():
    names = sorted({name for path in DOCUMENTS for name in dotted_names(path.read_text())})
    assert "securefl.methods.hyper_parameters" in names
    assert "securefl.methods.fedprop.server.FedProp" in names  # a docs page's reference
    for name in names:
        module, _, attribute = name.rpartition(".")
        try:
            value = getattr(importlib.import_module(module), attribute)
        except (ModuleNotFoundError, AttributeError):  # a module, e.g. ``python -m a.b``
            value = importlib.import_module(name)
        assert value is not None, name


def test_cheap_documented_commands_run_for_real(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    checked, _ = _all_checked()
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
    assert all(str(command).startswith("README.md line ") for command, _ in failures)
    problems = table_problems(BROKEN, "docs/page.md")
    assert len(problems) == 2 and "1 cells" in problems[0] and "stray" in problems[1]
    assert all(problem.startswith("docs/page.md line ") for problem in problems)


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
