"""docs/results.md, the results of record, cannot rot: every table between its
``<!-- tables.py: ... -->`` markers is ``experiments/tables.py``'s output over the records the
marker names (a table typed by hand, or one left behind by new records, fails)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results.md"
MARKER = re.compile(r"^<!-- tables\.py: ", re.MULTILINE)


def test_results_tables_are_the_records():
    done = subprocess.run([sys.executable, str(ROOT / "experiments" / "tables.py"), "--readme",
                           str(RESULTS), "--check"], capture_output=True, text=True, cwd=ROOT,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert len(MARKER.findall(RESULTS.read_text())) >= 10


def test_results_tables_show_the_last_round_and_the_gap_to_fedavg_plus():
    text = RESULTS.read_text()
    header = ("| method | test acc % | last-round acc % | vs fedavg-labeled | "
              "last round vs fedavg-labeled |")
    assert text.count(header) == len(MARKER.findall(text))
