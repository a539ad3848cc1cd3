"""securefl.memory: the process keeps freed memory, so a fresh array reuses resident pages."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

needs_glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")

PROBE = """
import json, resource, sys
import numpy as np
np._core.multiarray._set_madvise_hugepage(False)  # count 4 KiB pages, whatever the THP setting
from securefl import memory
done = memory.retain_freed_memory() if sys.argv[1] == "retain" else False
size = 64 << 20
first = np.ones(size, dtype=np.uint8)
del first
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
second = np.ones(size, dtype=np.uint8)
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
print(json.dumps({"done": done, "retained": memory.retained(), "faults": faults}))
"""


def _probe(mode: str, **environment: str) -> dict:
    env = {**os.environ, **environment}
    done = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True,
                          timeout=120, env=env, check=True)
    return json.loads(done.stdout)


@needs_glibc
def test_a_freed_array_s_pages_serve_the_next_one_once_retained():
    """64 MiB freed then allocated again: glibc's default maps it afresh (16,384 pages fault
    in); retained, the second array lies on the first one's resident pages."""
    default = _probe("default")
    assert not default["retained"] and default["faults"] > 10_000
    kept = _probe("retain")
    assert kept["done"] and kept["retained"] and kept["faults"] < 100


@needs_glibc
def test_securefl_retain_memory_0_leaves_the_allocator_alone():
    probe = _probe("retain", SECUREFL_RETAIN_MEMORY="0")
    assert not probe["done"] and not probe["retained"] and probe["faults"] > 10_000


@needs_glibc
def test_the_securefl_command_retains_and_its_records_say_so(tmp_path):
    out = tmp_path / "bench.json"
    for value, expected in (("1", True), ("0", False)):
        subprocess.run([sys.executable, "-m", "securefl", "bench", "hamming", "--n", "8", "--L", "64",
                        "--parties", "2", "--backend", "plaintext", "--json", str(out)],
                       capture_output=True, text=True, timeout=300, check=True,
                       env={**os.environ, "SECUREFL_RETAIN_MEMORY": value})
        assert json.loads(out.read_text())["machine"]["retains_freed_memory"] is expected
