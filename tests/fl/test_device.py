"""securefl.fl.device: names, resolution, determinism settings; CPU random streams unchanged."""

from __future__ import annotations

import pytest
import torch

from securefl.errors import InputError
from securefl.fl import SimulationRNG, client_rng
from securefl.fl.device import (
    check_device_name,
    configure_determinism,
    describe_device,
    model_device,
    resolve_device,
)

NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")


@pytest.mark.parametrize("name", ["auto", "cpu", "cuda", "cuda:0", "cuda:12"])
def test_well_spelt_names_pass_the_spelling_check(name):
    assert check_device_name(name) == name


@pytest.mark.parametrize("name", ["gpu", "CPU", "cuda:", "cuda:a", "cpu:0", "auto:1", " cpu", None, 1])
def test_misspelt_names_are_refused_naming_device(name):
    with pytest.raises(InputError, match=r"^device=.*must be one of auto, cpu, cuda, cuda:<index>"):
        resolve_device(name)


def test_cpu_is_the_cpu():
    assert resolve_device("cpu") == torch.device("cpu")


@NO_CUDA
def test_auto_is_the_cpu_without_cuda():
    assert resolve_device("auto") == torch.device("cpu")


@NO_CUDA
@pytest.mark.parametrize("name", ["cuda", "cuda:0", "cuda:3"])
def test_cuda_is_refused_when_torch_sees_none(name):
    with pytest.raises(InputError, match=r"^device=.*sees no CUDA device.*README"):
        resolve_device(name)


def test_determinism_settings_leave_the_cpu_alone(monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    before = torch.are_deterministic_algorithms_enabled()
    configure_determinism(torch.device("cpu"))
    assert torch.are_deterministic_algorithms_enabled() == before
    assert "CUBLAS_WORKSPACE_CONFIG" not in __import__("os").environ


def test_description_names_the_device_and_the_machine():
    described = describe_device(torch.device("cpu"))
    assert described["device"] == "cpu" and described["device_name"]


def test_model_device_is_where_the_parameters_are():
    assert model_device(torch.nn.Linear(2, 2)) == torch.device("cpu")
    assert model_device(torch.nn.ReLU()) == torch.device("cpu")


@pytest.mark.parametrize("device", [None, torch.device("cpu"), "cpu"])
def test_cpu_generators_draw_exactly_the_old_streams(device):
    old = torch.Generator()
    old.manual_seed(client_rng(3, 2, 1).torch.initial_seed())
    new = client_rng(3, 2, 1, device=device).torch
    assert new.device == torch.device("cpu")
    assert torch.equal(torch.randperm(50, generator=new, device=new.device), torch.randperm(50, generator=old))
    server_old = SimulationRNG.from_seed(7).torch
    server_new = SimulationRNG.from_seed(7, device=device).torch
    assert torch.equal(torch.rand(20, generator=server_new, device=server_new.device),
                       torch.rand(20, generator=server_old))
