"""Equal-treatment options (issue 21): ProtoFSSL's translations, FedProp's warm-up in the budget."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from securefl.errors import ConfigError, InputError
from securefl.fl import SimulationRNG
from securefl.methods import build_method, hyper_parameters
from securefl.methods.fedavg.server import FedAvgMethod
from securefl.methods.protofssl.client import local_update
from securefl.protocols.prototype_sharing import Prototypes

from .conftest import play

# ---------------------------------------------------------------- ProtoFSSL's translations


class Recorder(nn.Module):
    """A linear embedding that keeps every batch of images it is given."""

    def __init__(self, side: int) -> None:
        super().__init__()
        self.seen: list[torch.Tensor] = []
        self.linear = nn.Linear(side * side, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(x.detach().clone())
        return self.linear(x.flatten(1))


def _episode_images(max_shift, side=28, episodes=3):
    """The images of each episode that ProtoFSSL's local update embeds, and the raw images
    of the same episode (the episode draws come from numpy, the translations from torch)."""
    method = build_method("protofssl", local_epochs=episodes, n_unlabeled=6, helpers=1,
                          **({} if max_shift == "default" else {"max_shift": max_shift}))
    gen = torch.Generator().manual_seed(0)
    y_l = torch.arange(10).repeat(3)
    x_l = torch.rand((len(y_l), 1, side, side), generator=gen)
    x_u = torch.rand((12, 1, side, side), generator=gen)
    network = Recorder(side)
    helpers = [Prototypes(np.zeros((10, 4)), np.ones(10, dtype=bool), None)]
    optimizer = torch.optim.SGD(network.parameters(), lr=0.0)
    local_update(method, network, optimizer, x_l, y_l, x_u, helpers, 10, SimulationRNG.from_seed(3))
    raw = Recorder(side)
    local_update(build_method("protofssl", local_epochs=episodes, n_unlabeled=6, helpers=1),
                 raw, torch.optim.SGD(raw.parameters(), lr=0.0), x_l, y_l, x_u, helpers, 10,
                 SimulationRNG.from_seed(3))
    return network.seen, raw.seen


def _is_translation(image: torch.Tensor, raw: torch.Tensor, max_shift: int) -> bool:
    """``image`` is ``raw`` moved by at most ``max_shift`` pixels each way, zero-padded."""
    side = raw.shape[-1]
    for dy in range(-max_shift, max_shift + 1):
        for dx in range(-max_shift, max_shift + 1):
            moved = torch.zeros_like(raw)
            ys, yd = slice(max(0, -dy), side - max(0, dy)), slice(max(0, dy), side - max(0, -dy))
            xs, xd = slice(max(0, -dx), side - max(0, dx)), slice(max(0, dx), side - max(0, -dx))
            moved[..., yd, xd] = raw[..., ys, xs]
            if torch.equal(moved, image):
                return True
    return False


def test_protofssl_default_is_the_papers_no_augmentation():
    assert hyper_parameters("protofssl")["max_shift"] == 0
    augmented, raw = _episode_images("default")
    assert all(torch.equal(a, r) for a, r in zip(augmented, raw))


@pytest.mark.parametrize("max_shift, shift", [(2, 2), (None, 2), (1, 1)])
def test_protofssl_translations_change_every_episode_batch(max_shift, shift):
    """With ``max_shift`` every episode's images (support, query, unlabeled) are translated
    copies of the same draws; ``None`` is the FedAvg family's 2 pixels on 28x28 images."""
    augmented, raw = _episode_images(max_shift)
    assert len(augmented) == len(raw) == 3
    moved = 0
    for batch, original in zip(augmented, raw):
        assert batch.shape == original.shape
        for image, source in zip(batch, original):
            assert _is_translation(image, source, shift)
            moved += not torch.equal(image, source)
    assert moved > 0.5 * sum(len(b) for b in raw)


def test_protofssl_translation_default_is_none_on_digits():
    """``max_shift=None`` on the 8x8 digits is the FedAvg family's no-translation."""
    augmented, raw = _episode_images(None, side=8)
    assert all(torch.equal(a, r) for a, r in zip(augmented, raw))


# ---------------------------------------------------------------- FedProp's warm-up in the budget

FAST = {"L": 128, "warmup_rounds": 2}


def _count_rounds(monkeypatch, federation, hyper, rounds, **options):
    """Every FedAvg training exchange of setup and ``rounds`` rounds: warm-up or not."""
    calls: list[bool] = []
    original = FedAvgMethod._fedavg_round

    def spy(self, selected, lr, context, round_index):
        calls.append(bool(context.get("warmup", False)))
        return original(self, selected, lr, context, round_index)

    monkeypatch.setattr(FedAvgMethod, "_fedavg_round", spy)
    method = build_method("fedprop", secure="plaintext", seed=0, **hyper, **FAST, **options)
    method.setup(federation.for_training())
    in_setup = len(calls)
    results, accuracies = play(method, federation, rounds)
    return method, calls, in_setup, results, accuracies


def test_fedprop_warmup_is_outside_the_budget_by_default(monkeypatch, tiny_digits, tiny_hyper):
    assert hyper_parameters("fedprop")["warmup_in_budget"] is False
    _, calls, in_setup, results, _ = _count_rounds(monkeypatch, tiny_digits, tiny_hyper, 3)
    assert in_setup == 2 and calls == [True, True, False, False, False]  # 2 + 3 rounds
    assert all(r.label_mass_median is not None for r in results)


def test_fedprop_warmup_in_budget_counts_inside_the_rounds(monkeypatch, tiny_digits, tiny_hyper):
    method, calls, in_setup, results, accuracies = _count_rounds(
        monkeypatch, tiny_digits, tiny_hyper, 3, warmup_in_budget=True)
    assert in_setup == 0 and calls == [True, True, False]  # 3 rounds in all, 2 of them warm-up
    assert [r.label_mass_median is None for r in results] == [True, True, False]
    assert [r.pseudo_label_digest is None for r in results] == [True, True, False]
    # no CrossClientLP in a warm-up round: only the model's secure sum
    assert results[0].bytes_protocol_per_client < results[2].bytes_protocol_per_client
    assert "crossclient" not in results[0].participation
    assert "crossclient" in results[2].participation
    assert len(accuracies) == 3 and method.rounds_done == 3
    labeled = set(tiny_digits.for_training().labeled_clients)
    assert set(results[0].participation["members"]) <= labeled


def test_fedprop_warmup_in_budget_changes_the_trajectory(monkeypatch, tiny_digits, tiny_hyper):
    """The option is not ignored: after three rounds the models differ from the default's."""
    outside, *_ = _count_rounds(monkeypatch, tiny_digits, tiny_hyper, 3)
    inside, *_ = _count_rounds(monkeypatch, tiny_digits, tiny_hyper, 3, warmup_in_budget=True)
    a = torch.cat([p.flatten() for p in outside.network.parameters()])
    b = torch.cat([p.flatten() for p in inside.network.parameters()])
    assert not torch.equal(a, b)


def test_fedprop_warmup_in_budget_is_fedprops_only():
    """FedProp+MT keeps the paper's warm-up before its rounds: the key is refused there."""
    assert "warmup_in_budget" not in hyper_parameters("fedprop-mt")
    with pytest.raises(InputError, match="warmup_in_budget"):
        build_method("fedprop-mt", warmup_in_budget=True)
