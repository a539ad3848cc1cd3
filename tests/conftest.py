"""Suite-wide fixtures."""

from __future__ import annotations

import sys

import pytest

ONE_WORKER = ("tests/deploy/test_flower.py",)
"""Modules whose tests share a module-scoped resource too costly to create twice (a Flower
federation): under xdist one worker runs all of a module's tests, so the resource is
created once (:func:`pytest_xdist_make_scheduler`)."""


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """xdist's scheduling, one test per work unit as ``--dist load`` balances, except that
    each module of :data:`ONE_WORKER` is a single unit; larger units go out first (xdist's
    scope reordering), so those modules start at once instead of trailing the run.

    (``--dist loadgroup`` with ``xdist_group`` marks would say the same, but xdist 3.8
    groups by rewriting ``item._nodeid``, which pytest 9 no longer reads.)  Any other
    ``--dist`` given on the command line is left to xdist."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    if not callable(getattr(LoadScopeScheduling, "_split_scope", None)):
        return None  # another xdist: its own load scheduling (correct, only slower)

    class OneWorkerModules(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if module in ONE_WORKER else nodeid

    return OneWorkerModules(config, log)


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Tests that use torch run it single-threaded (deterministic, fair on shared cores).

    torch is touched only if a test module already imported it, so the crypto and protocol
    tests never load it."""
    torch = sys.modules.get("torch")
    if torch is None:
        yield
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
