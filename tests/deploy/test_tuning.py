"""securefl.fl.flower.tuning: the exact flwr version, and only the idle polls shortened."""

from __future__ import annotations

import ast
import inspect
import re
import tomllib
from pathlib import Path

import pytest

pytest.importorskip("flwr")

from securefl.errors import ConfigError  # noqa: E402
from securefl.fl.flower import tuning  # noqa: E402


def test_the_pinned_flwr_is_the_version_the_tuning_was_read_against_and_is_installed():
    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    extras = project["project"]["optional-dependencies"]
    pins = {re.sub(r"\s", "", spec) for extra in ("test", "flower") for spec in extras[extra]
            if spec.startswith("flwr")}
    assert pins == {f"flwr=={tuning.FLWR_VERSION}"}
    assert tuning.check_flwr_version() == tuning.FLWR_VERSION


def test_any_other_flwr_version_is_refused_before_anything_is_patched(monkeypatch):
    import flwr.supernode.start_client_internal as loop

    original = loop.time
    monkeypatch.setattr(tuning.metadata, "version", lambda name: "1.41.0")
    with pytest.raises(ConfigError, match=r"flwr 1\.41\.0 is installed.*flwr 1\.42\.0"):
        tuning.tune_supernode_polling(0.1)
    with pytest.raises(ConfigError, match="1.41.0"):
        tuning.tune_object_pulls()
    assert loop.time is original


def test_idle_polls_are_the_loops_only_sleeps_in_the_pinned_version():
    """The durations :data:`IDLE_POLLS` matches are exactly the ``time.sleep`` calls of
    the SuperNode loop's source (so no other sleep of that module is shortened)."""
    import flwr.supernode.start_client_internal as loop

    tree = ast.parse(inspect.getsource(loop))
    sleeps = {float(node.args[0].value) for node in ast.walk(tree)
              if isinstance(node, ast.Call) and ast.unparse(node.func) == "time.sleep"}
    assert sleeps == set(tuning.IDLE_POLLS)


def test_only_the_idle_polls_are_shortened(monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr(tuning.time, "sleep", slept.append)
    patched = tuning._IdlePollTime(0.1)
    for seconds in (3, 0.5, 1.0, 7.0, 0.05):
        patched.sleep(seconds)
    assert slept == [0.1, 0.1, 1.0, 7.0, 0.05]
    assert patched.monotonic is tuning.time.monotonic  # the rest of ``time`` is untouched


def test_tuning_patches_the_loop_and_the_pull_backoff():
    import flwr.supercore.inflatable.inflatable_utils as pulls
    import flwr.supernode.start_client_internal as loop

    original = loop.time
    defaults = {f: dict(f.__kwdefaults__) for f in (pulls.pull_objects,
                                                    pulls.pull_and_inflate_object_from_tree)}
    try:
        tuning.tune_supernode_polling(0.2)
        tuning.tune_object_pulls(0.03, 0.3)
        assert isinstance(loop.time, tuning._IdlePollTime) and loop.time.interval == 0.2
        for function in defaults:
            assert function.__kwdefaults__["initial_backoff"] == 0.03
            assert function.__kwdefaults__["backoff_cap"] == 0.3
        with pytest.raises(ConfigError, match="poll interval"):
            tuning.tune_supernode_polling(5.0)
    finally:
        loop.time = original
        for function, kwdefaults in defaults.items():
            function.__kwdefaults__.update(kwdefaults)
