"""FedAnchor: label-contrastive loss (eqs. 1-2) against a direct loop, anchor pseudo-labels
(eqs. 3-4), fix/mix sets (Appendix B), and short runs: real vs plaintext, mixup, resume."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from securefl.errors import ConfigError, InputError
from securefl.fl import client_rng
from securefl.methods import build_method, hyper_parameters
from securefl.methods.anchoring import (
    anchor_class_scores,
    anchor_pseudo_labels,
    fix_and_mix,
    label_contrastive_loss,
)

from .conftest import play


def _direct_loss(z: np.ndarray, y: np.ndarray, tau: float) -> float:
    n = len(y)
    cos = lambda a, b: float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))  # noqa: E731
    negatives = sum(math.exp(cos(z[i], z[j]) / tau) for i in range(n) for j in range(n) if y[i] != y[j])
    losses = []
    for c in sorted(set(y.tolist())):
        positives = sum(math.exp(cos(z[i], z[j]) / tau) for i in range(n) for j in range(n) if i != j and y[i] == y[j] == c)
        if positives:
            losses.append(-math.log(positives / negatives))
    return float(np.mean(losses))


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**16), st.floats(0.05, 1.0))
def test_label_contrastive_loss_matches_direct_formula(seed, tau):
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(9, 4))
    y = np.array([0, 0, 1, 1, 1, 2, 2, 3, 0])  # class 3 has no positive pair
    loss = label_contrastive_loss(torch.from_numpy(z), torch.from_numpy(y), temperature=tau)
    assert float(loss) == pytest.approx(_direct_loss(z, y, tau), rel=1e-9)


def test_label_contrastive_loss_prefers_separated_classes():
    y = torch.tensor([0, 0, 1, 1])
    separated = torch.tensor([[1.0, 0], [1.0, 0.1], [0, 1.0], [0.1, 1.0]])
    mixed = torch.tensor([[1.0, 0], [0, 1.0], [1.0, 0.1], [0.1, 1.0]])
    assert label_contrastive_loss(separated, y) < label_contrastive_loss(mixed, y)
    assert torch.allclose(label_contrastive_loss(3 * separated, y), label_contrastive_loss(separated, y))
    with pytest.raises(InputError):
        label_contrastive_loss(separated, torch.zeros(4, dtype=torch.long))
    with pytest.raises(InputError, match="temperature"):
        label_contrastive_loss(separated, y, temperature=0)


def test_anchor_pseudo_labels_mean_cosine():
    rng = np.random.default_rng(3)
    anchors = torch.from_numpy(rng.normal(size=(8, 5)))
    anchor_y = torch.tensor([0, 1, 1, 2, 2, 2, 0, 1])
    z = torch.from_numpy(rng.normal(size=(6, 5)))
    scores = anchor_class_scores(z, anchors, anchor_y, 4)
    unit = lambda a: a / np.linalg.norm(a, axis=1, keepdims=True)  # noqa: E731
    cos = unit(z.numpy()) @ unit(anchors.numpy()).T
    for c in range(3):
        assert np.allclose(scores[:, c].numpy(), cos[:, anchor_y.numpy() == c].mean(1))
    assert torch.isinf(scores[:, 3]).all()  # class without anchors is never chosen
    labels, best = anchor_pseudo_labels(z, anchors, anchor_y, 4)
    assert labels.tolist() == scores.argmax(1).tolist()
    assert np.allclose(best, scores.max(1).values.numpy())


def test_fix_and_mix_sets():
    scores = np.array([0.9, 0.1, 0.7, 0.65, 0.2])
    fix, mix = fix_and_mix(scores, 0.6, np.random.default_rng(0))
    assert fix.tolist() == [0, 2, 3]
    assert len(mix) == 3 and mix.min() >= 0 and mix.max() < 5
    empty, none = fix_and_mix(scores, 0.95, np.random.default_rng(0))
    assert empty.size == none.size == 0


def _run(federation, secure, rounds=2, **hyper):
    method = build_method("fedanchor", secure=secure, seed=7, clients_per_round=3, local_epochs=1, batch_size=8,
                          pretrain_epochs=1, server_batch_size=20, **hyper)
    method.setup(federation.for_training())
    return method, *play(method, federation, rounds)


def test_real_and_plaintext_agree(tiny_digits_server):
    _, real, real_acc = _run(tiny_digits_server, "real")
    _, plain, plain_acc = _run(tiny_digits_server, "plaintext")
    assert [r.pseudo_label_digest for r in real] == [r.pseudo_label_digest for r in plain]
    assert real_acc == plain_acc
    assert all(r.pseudo_label_digest is not None and 0 <= r.pseudo_label_accuracy <= 1 for r in real)
    assert real[0].bytes_protocol_per_client > plain[0].bytes_protocol_per_client > 0  # anchor latents in both


@pytest.mark.parametrize("hyper", [{"client_mixup": True, "threshold": 0.0}, {"server_mixup": True}])
def test_mixup_variants_run(tiny_digits_server, hyper):
    _, _, accuracies = _run(tiny_digits_server, "plaintext", **hyper)
    assert all(0.0 <= a <= 1.0 for a in accuracies)


def test_resume_equals_uninterrupted(tiny_digits_server):
    _, results, accuracies = _run(tiny_digits_server, "plaintext", rounds=3)
    first, _, _ = _run(tiny_digits_server, "plaintext", rounds=2)
    resumed = build_method("fedanchor", seed=7, clients_per_round=3, local_epochs=1, batch_size=8, pretrain_epochs=1, server_batch_size=20)
    resumed.setup(tiny_digits_server.for_training())
    resumed.load_state_dict(first.state_dict())
    (again,), (accuracy,) = play(resumed, tiny_digits_server, 3, start=2)
    assert (accuracy, again.pseudo_label_digest) == (accuracies[2], results[2].pseudo_label_digest)


def test_needs_anchor_set(tiny_digits):
    with pytest.raises(ConfigError, match="anchors"):
        build_method("fedanchor").setup(tiny_digits)


def test_defaults_are_the_papers_method():
    """Appendix C and §5.1; Table 2's FedAnchor trains with client mixup (Appendix B)."""
    hyper = hyper_parameters("fedanchor")
    assert hyper["client_mixup"] is True and hyper["server_mixup"] is False
    assert (hyper["threshold"], hyper["mixup_alpha"], hyper["mix_weight"]) == (0.6, 0.75, 1.0)
    assert (hyper["lr"], hyper["server_lr"], hyper["momentum"], hyper["weight_decay"]) == (0.03, 0.03, 0.9, 5e-4)
    assert (hyper["pretrain_epochs"], hyper["pretrain_lr"]) == (5, 0.05)
    assert (hyper["clients_per_round"], hyper["local_epochs"], hyper["anchor_dim"]) == (10, 5, 128)


def test_default_run_trains_on_the_fix_and_mix_sets(tiny_digits_server, monkeypatch):
    import securefl.methods.fedanchor.client as module

    calls = []

    def spy(scores, threshold, rng):
        calls.append(threshold)
        return fix_and_mix(scores, threshold, rng)

    monkeypatch.setattr(module, "fix_and_mix", spy)
    _run(tiny_digits_server, "plaintext", rounds=1)
    assert calls == [0.6, 0.6, 0.6]  # one fix/mix split per client, t = 0.6


def test_empty_fix_set_means_no_client_training(tiny_digits_server):
    """Appendix B: "local training will be stopped if the client has an empty fix dataset"."""
    import copy

    from securefl.methods.anchoring import anchor_pseudo_labels
    from securefl.methods.fedanchor.client import latents, train_client

    method, _, _ = _run(tiny_digits_server, "plaintext", rounds=0, threshold=1.0)
    before = [p.detach().clone() for p in method.network.parameters()]
    anchor_z = method._latents(method.anchor_x, method.network)
    x = torch.from_numpy(np.ascontiguousarray(tiny_digits_server.clients[0].x, dtype=np.float32))

    def trained():
        network = copy.deepcopy(method.network)
        labels, scores = anchor_pseudo_labels(latents(x, network, method.anchor_head), anchor_z,
                                              method.anchor_y, tiny_digits_server.num_classes)
        train_client(method, network, x, labels, scores, tiny_digits_server.input_shape,
                     client_rng(7, 0, 0))
        return network

    assert all(torch.equal(a, b) for a, b in zip(before, trained().parameters()))
    method.client_mixup = False
    assert not all(torch.equal(a, b) for a, b in zip(before, trained().parameters()))
