"""securefl.fl.flower.app.warm_up: each program warms itself up, from its own room.

The app (room ``fl``) knows programs only by name; what a program needs before a warm
executor forks is the program's :meth:`ClientHalf.warm_up`.  These tests run no federation.
"""

from __future__ import annotations

import pytest

pytest.importorskip("flwr")

from securefl.fl.flower import app
from securefl.runtime.transport import ClientHalf, Record, ServerHalf

CALLS: list[str] = []


class ToyServer(ServerHalf):
    program = "toy"

    def run(self, transport, run_config):
        return {}


class ToyClient(ClientHalf):
    program = "toy"

    @classmethod
    def warm_up(cls) -> None:
        CALLS.append(cls.program)

    def handle(self, step, request, state, node):
        return Record()


def test_the_app_warms_up_every_programs_client_half_and_nothing_else(monkeypatch):
    CALLS.clear()
    monkeypatch.setattr(app, "PROGRAMS", {"toy": (f"{__name__}:ToyServer", f"{__name__}:ToyClient"),
                                          "link-check": app.PROGRAMS["link-check"]})
    app.warm_up()
    assert CALLS == ["toy"]


def test_the_method_program_builds_every_method_class_and_loads_the_default_dataset(monkeypatch):
    import torch

    import securefl.fl
    import securefl.methods
    from securefl.experiments import config, deployment

    # import the method modules before patching: each binds ``train_supervised`` at import
    # time, and a module first imported under the patch would keep the stub for good
    for name in securefl.methods.METHOD_NAMES:
        securefl.methods.method_class(name)
    built, loaded, trained = [], [], []
    real = securefl.methods.method_class
    monkeypatch.setattr(securefl.methods, "method_class", lambda name: built.append(name) or real(name))
    monkeypatch.setattr(deployment, "dataset", lambda name, data_dir=None: loaded.append(name))
    monkeypatch.setattr(config, "load_config", lambda path: loaded.append(path))
    monkeypatch.setattr(securefl.fl, "train_supervised", lambda *a, **k: trained.append(k["epochs"]))
    # warm_up makes torch single-threaded for the process: give the worker its count back
    threads = torch.get_num_threads()
    try:
        deployment.ExperimentClient.warm_up()
    finally:
        torch.set_num_threads(threads)
    assert built == list(securefl.methods.METHOD_NAMES) and len(built) >= 14
    assert loaded == [None, "digits"] and trained == [1]
