"""docs/security.md cannot rot: every test it names as enforcing a claim exists, and every
row of its two-column table names at least one test in each column."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "security.md"
NODE = re.compile(r"(tests/[\w/]+\.py)::(\w+)")


def defined_tests(path: Path) -> set[str]:
    """Names of the test functions ``path`` defines (module level or in a class)."""
    return set(re.findall(r"^\s*def (test_\w+)\(", path.read_text(), flags=re.MULTILINE))


def test_every_test_named_in_the_security_model_exists():
    text = PAGE.read_text()
    named = NODE.findall(text)
    assert len(named) >= 30, "the security model names the tests that enforce it"
    missing = [f"{f}::{t}" for f, t in named
               if not (ROOT / f).is_file() or t not in defined_tests(ROOT / f)]
    assert not missing, f"docs/security.md names tests that do not exist: {missing}"


def test_every_row_of_the_two_column_table_names_a_test_in_each_column():
    rows = [line for line in PAGE.read_text().splitlines()
            if line.startswith("| ") and not line.startswith("| protocol")]
    assert len(rows) >= 10
    for row in rows:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", row)[1:-1]]
        assert len(cells) == 3, row[:60]
        for cell in cells[1:]:
            assert NODE.search(cell), f"row {cells[0]!r}: a cell names no test"


def test_the_check_catches_a_missing_test(tmp_path):
    """The checker itself can fail: a page naming a test that is not there is caught."""
    fake = tmp_path / "t.py"
    fake.write_text("def test_here():\n    pass\n")
    assert defined_tests(fake) == {"test_here"}
    assert "test_gone" not in defined_tests(fake)
