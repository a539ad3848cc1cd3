"""Device plumbing of every method: each model a method or its client half builds, and each
generator a client draws from, is placed on the method's ``device``; the run config carries
it to the clients.  Here ``device`` is the CPU (spelled ``cpu`` or ``auto``), the only
device this machine has; what ``cuda`` adds is checked by benchmarks/device_check.py on a
GPU machine."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from securefl.errors import InputError
from securefl.methods import METHOD_NAMES, build_method, hyper_parameters, method_run_config

FAST = {"clients_per_round": 3, "local_epochs": 1, "batch_size": 8, "warmup_rounds": 1,
        "L": 64, "pretrain_epochs": 1, "rounds": 5}

SPIED = {
    "securefl.methods.fedavg.client": ("build_model", "client_rng"),
    "securefl.methods.fedsemi.client": ("build_model", "client_rng"),
    "securefl.methods.protofssl.client": ("build_model", "client_rng"),
    "securefl.methods.fedanchor.client": ("build_model", "client_rng"),
    "securefl.methods.fedmatch.client": ("build_model", "client_rng"),
    "securefl.methods.fedavg.server": ("build_model",),
    "securefl.methods.common": ("build_model",),
}


@pytest.fixture
def placed(monkeypatch):
    """Record the ``device`` keyword of every model build and client generator of the
    method modules (``None`` where a call left it out)."""
    import importlib

    calls: list[tuple[str, object]] = []
    for module_name, names in SPIED.items():
        module = importlib.import_module(module_name)
        for name in names:
            original = getattr(module, name)

            def spy(*args, _original=original, _name=f"{module_name}.{name}", **kwargs):
                calls.append((_name, kwargs.get("device")))
                return _original(*args, **kwargs)

            monkeypatch.setattr(module, name, spy)
    return calls


@pytest.mark.parametrize("spelling", ["cpu", "auto"])
@pytest.mark.parametrize("name", METHOD_NAMES)
def test_every_model_and_generator_is_placed_on_the_method_device(
        name, spelling, placed, tiny_digits, tiny_digits_server):
    if spelling == "auto" and torch.cuda.is_available():
        pytest.skip("auto means CUDA on this machine")
    accepted = hyper_parameters(name)
    method = build_method(name, secure="plaintext", seed=3, device=spelling,
                          **{k: v for k, v in FAST.items() if k in accepted})
    assert method.device == spelling and method.torch_device == torch.device("cpu")
    assert json.loads(method_run_config(method)["method-keywords"])["device"] == spelling
    federation = tiny_digits_server if name == "fedanchor" else tiny_digits
    method.setup(federation.for_training())
    method.run_round(0)
    method.predict(federation.test.x[:5])
    builds = [call for call in placed if call[0].endswith("build_model")]
    generators = [call for call in placed if call[0].endswith("client_rng")]
    assert builds and generators, "the method built no model or drew no client generator"
    assert all(device == torch.device("cpu") for _, device in placed), placed
    for value in vars(method).values():
        if isinstance(value, nn.Module):
            assert {p.device for p in value.parameters()} <= {torch.device("cpu")}


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
@pytest.mark.parametrize("device", ["cuda", "cuda:0"])
def test_cuda_is_refused_when_torch_sees_none(device):
    with pytest.raises(InputError, match=r"device=.*sees no CUDA device"):
        build_method("fedavg-labeled", device=device)


@pytest.mark.parametrize("device", ["gpu", "cuda:-1", "cpu:1", None, 0])
def test_misspelt_devices_are_refused(device):
    with pytest.raises(InputError, match=r"device=.*must be one of auto, cpu, cuda"):
        build_method("fedprop", device=device)


def test_device_is_a_run_parameter_not_a_hyper_parameter():
    assert all("device" not in hyper_parameters(name) for name in METHOD_NAMES)
