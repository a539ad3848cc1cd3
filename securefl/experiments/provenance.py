"""Where a run's numbers came from: the fields every ``results.json`` carries so that its
run can be re-created and its figures judged.

:func:`collect_provenance` returns

- ``command``: the ``securefl run`` command that re-creates the run (every flag given,
  ``--set`` included); ``argv``, ``cwd`` and ``executable``: the process as it was started
  (config paths in ``command`` are relative to ``cwd``);
- ``commit`` (short hash of the checkout securefl was imported from), ``uncommitted_changes``
  (whether ``git status`` listed anything) and ``uncommitted_files`` (its first
  :data:`MAX_LISTED_FILES` lines, so a reader sees whether the changes can matter);
  ``None`` outside a git checkout;
- ``machine``: CPU model, logical cores, cores this process may use, memory, platform, and
  torch's CPU capability (the vector instruction set its kernels dispatch to: AVX2,
  AVX512, ...); ``load_average_at_start`` (1/5/15 min);
- ``libraries``: the installed versions of Python, securefl and every library the
  computation goes through (``None`` for one that is not installed), and ``securefl_path``,
  the folder the package was imported from.

The seed, the configuration and the torch threads are in the configuration itself.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from securefl.machine import machine_info, torch_cpu_capability

LIBRARIES = (
    "securefl", "torch", "numpy", "scipy", "scikit-learn", "cryptography", "pycryptodome",
    "numba", "faiss-cpu", "dp-accounting", "matplotlib", "rich", "tenseal",
)
"""Distributions whose versions a run records."""

MAX_LISTED_FILES = 50
PACKAGE_DIR = Path(__file__).resolve().parents[1]


def library_versions() -> dict[str, str | None]:
    """``{"python": ..., distribution: version or None}`` for :data:`LIBRARIES`."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def git_status() -> list[str] | None:
    """``git status --porcelain`` lines of the checkout holding securefl (None outside one)."""
    try:
        out = subprocess.run(
            ["git", "status", "--porcelain"], capture_output=True, text=True, timeout=10,
            cwd=PACKAGE_DIR,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.splitlines() if out.returncode == 0 else None


def collect_provenance(command: str) -> dict[str, Any]:
    """The provenance fields of ``results.json`` (see the module docstring)."""
    machine = machine_info()
    machine.update(
        cores_available=len(os.sched_getaffinity(0)),
        torch_cpu_capability=torch_cpu_capability(),
    )
    status = git_status()
    return {
        "command": command,
        "argv": list(sys.argv),
        "cwd": os.getcwd(),
        "executable": sys.executable,
        "commit": machine.get("commit"),
        "uncommitted_changes": None if status is None else bool(status),
        "uncommitted_files": None if status is None else status[:MAX_LISTED_FILES],
        "load_average_at_start": os.getloadavg(),
        "machine": machine,
        "libraries": library_versions(),
        "securefl_path": str(PACKAGE_DIR),
    }
