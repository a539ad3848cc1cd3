"""ProtoFSSL: episode splitting, prototypes and distances (eqs. 2, 6), the loss (eq. 8),
sharpened helper pseudo-labels (eqs. 5-7), and short runs: real vs plaintext, FedProx,
resume."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from securefl.errors import ConfigError, InputError
from securefl.methods import build_method
from securefl.methods.prototypical import class_prototypes, prototype_logits, protofssl_loss, soft_cross_entropy, split_episode
from securefl.protocols.prototype_sharing import Prototypes, pseudo_labels


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=40), st.integers(1, 3), st.integers(0, 3), st.integers(0, 50), st.integers(0, 2**16))
def test_split_episode_is_disjoint_and_per_class(labels, n_support, n_query, n_unlabeled, seed):
    labels = np.asarray(labels)
    support, classes, query, unlabeled = split_episode(
        labels, 30, num_classes=5, n_support=n_support, n_query=n_query, n_unlabeled=n_unlabeled, rng=np.random.default_rng(seed))
    assert not set(support) & set(query)
    assert classes.tolist() == sorted(set(labels.tolist()))
    for k in classes:
        count = int((labels == k).sum())
        assert int((labels[support] == k).sum()) == min(n_support, count)
        assert int((labels[query] == k).sum()) == min(n_query, count - min(n_support, count))
    assert len(unlabeled) == min(n_unlabeled, 30) == len(set(unlabeled))


def test_split_episode_rejects_bad_sizes():
    with pytest.raises(InputError):
        split_episode(np.zeros(3, int), 0, num_classes=2, n_support=0, n_query=1, n_unlabeled=0, rng=np.random.default_rng())


def test_prototypes_and_logits_direct_formula():
    torch.manual_seed(0)
    z = torch.randn(7, 3)
    y = torch.tensor([0, 0, 2, 2, 2, 0, 2])
    protos, present = class_prototypes(z, y, 4)
    assert present.tolist() == [True, False, True, False]
    assert torch.allclose(protos[2], z[y == 2].mean(0))
    q = torch.randn(5, 3)
    logits = prototype_logits(q, protos, present)
    assert torch.allclose(logits[:, 0], -(q - protos[0]).norm(dim=1), atol=1e-6)
    assert torch.isinf(logits[:, 1]).all()
    squared = prototype_logits(q, protos, present, distance="squared")
    assert torch.allclose(squared[:, 2], -((q - protos[2]) ** 2).sum(1), atol=1e-5)
    with pytest.raises(InputError, match="distance"):
        prototype_logits(q, protos, distance="cosine")


def test_loss_eq8_and_masked_soft_targets():
    torch.manual_seed(1)
    logits_q = torch.randn(4, 3)
    labels_q = torch.tensor([0, 1, 2, 1])
    logits_u = torch.randn(5, 3)
    target = torch.softmax(torch.randn(5, 3), 1)
    expected = F.cross_entropy(logits_q, labels_q) - 0.3 * (target * F.log_softmax(logits_u, 1)).sum(1).mean()
    assert torch.allclose(protofssl_loss(logits_q, labels_q, logits_u, target, lambda_u=0.3), expected)
    masked = logits_u.clone()
    masked[:, 1] = float("-inf")  # no local prototype of class 1: its target mass is dropped
    renormalised = target[:, [0, 2]] / target[:, [0, 2]].sum(1, keepdim=True)
    direct = -(renormalised * F.log_softmax(logits_u[:, [0, 2]], 1)).sum(1).mean()
    assert torch.allclose(soft_cross_entropy(target, masked), direct, atol=1e-6)


def test_sharpened_helper_pseudo_labels():
    """Eqs. (5)-(7): one helper gives softmax(-d) sharpened with T; two helpers average."""
    rng = np.random.default_rng(2)
    u = rng.normal(size=(6, 3))
    vectors = rng.normal(size=(3, 3))
    helper = Prototypes(vectors, np.ones(3, bool), np.full(3, 5), np.zeros(3))
    p = torch.softmax(-torch.cdist(torch.from_numpy(u), torch.from_numpy(vectors)), 1).numpy()
    sharp = p**2 / (p**2).sum(1, keepdims=True)
    assert np.allclose(pseudo_labels(u, [helper], temperature=0.5), sharp)
    assert np.allclose(pseudo_labels(u, [helper, helper], temperature=1.0), p)


def _run(federation, secure, rounds=2, **hyper):
    method = build_method("protofssl", secure=secure, seed=5, clients_per_round=3, helpers=2, local_epochs=3, n_unlabeled=10, **hyper)
    method.setup(federation)
    return method, [method.run_round(r) for r in range(rounds)]


def test_real_and_plaintext_agree(tiny_digits):
    real, real_results = _run(tiny_digits, "real")
    plain, plain_results = _run(tiny_digits, "plaintext")
    assert real_results[0].pseudo_label_digest is None  # no helpers in the first round
    assert real_results[1].pseudo_label_digest is not None
    assert [r.pseudo_label_digest for r in real_results] == [r.pseudo_label_digest for r in plain_results]
    assert [r.accuracy for r in real_results] == [r.accuracy for r in plain_results]
    assert 0.0 <= real_results[1].pseudo_label_accuracy <= 1.0
    assert real_results[1].bytes_protocol_per_client > plain_results[1].bytes_protocol_per_client > 0
    assert np.array_equal(real.global_prototypes, plain.global_prototypes)


def test_fedprox_noise_and_withholding(tiny_digits):
    method, results = _run(tiny_digits, "plaintext", aggregation="fedprox", noise_std=0.5, min_class_count=2)
    stored = method.store.previous
    assert len(stored) == 3
    assert all(p.sigma[p.mask].tolist() == [0.5] * int(p.mask.sum()) for p in stored.values())
    assert all((p.counts[p.mask] >= 2).all() for p in stored.values())
    assert np.isfinite(results[-1].accuracy)


def test_dp_noise_and_accounting(tiny_digits):
    method, _ = _run(tiny_digits, "plaintext", rounds=1, noise_multiplier=1.0, clip=1.0)
    assert all((p.sigma[p.mask] > 0).all() for p in method.store.previous.values())
    assert 0 < method.privacy_spent(3) < np.inf  # one accountant call: PLD accounting takes seconds
    with pytest.raises(InputError, match="noise_multiplier"):
        build_method("protofssl", noise_multiplier=1.0).setup(tiny_digits)


def test_resume_equals_uninterrupted(tiny_digits):
    full, results = _run(tiny_digits, "plaintext", rounds=3)
    first, _ = _run(tiny_digits, "plaintext", rounds=2)
    resumed = build_method("protofssl", seed=5, clients_per_round=3, helpers=2, local_epochs=3, n_unlabeled=10)
    resumed.setup(tiny_digits)
    resumed.load_state_dict(first.state_dict())
    again = resumed.run_round(2)
    assert (again.accuracy, again.pseudo_label_digest) == (results[2].accuracy, results[2].pseudo_label_digest)


def test_bad_configuration(tiny_digits, tiny_digits_server):
    with pytest.raises(InputError, match="aggregation"):
        build_method("protofssl", aggregation="scaffold").setup(tiny_digits)
    with pytest.raises(ConfigError):
        build_method("protofssl").setup(tiny_digits_server)
