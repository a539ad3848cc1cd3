"""ProtoFSSL: episode splitting, prototypes and distances (eqs. 2, 6), the loss (eq. 8),
sharpened helper pseudo-labels (eqs. 5-7) and their gradient, the client's persistent
RMSprop state, and short runs: real vs plaintext, FedProx, resume."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from securefl.crypto import dp
from securefl.errors import ConfigError, InputError
from securefl.fl import model_vector
from securefl.methods import build_method
from securefl.methods.protofssl.client import ProtoFSSLClient
from securefl.methods.prototypical import (
    class_prototypes,
    helper_pseudo_labels,
    protofssl_loss,
    prototype_logits,
    soft_cross_entropy,
    split_episode,
)
from securefl.protocols.prototype_sharing import Prototypes, aggregate_prototypes, pseudo_labels

from .conftest import play


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
    logits = prototype_logits(q, protos, present)  # squared Euclidean by default (Snell et al.)
    assert torch.allclose(logits[:, 2], -((q - protos[2]) ** 2).sum(1), atol=1e-5)
    assert torch.isinf(logits[:, 1]).all()
    plain = prototype_logits(q, protos, present, distance="euclidean")
    assert torch.allclose(plain[:, 0], -(q - protos[0]).norm(dim=1), atol=1e-6)
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
    # with the gradient flowing through the target (eq. 8 under Algorithm 1), masked classes
    # and a sample whose target lies wholly on masked classes give finite gradients
    source = torch.randn(5, 3, requires_grad=True)
    soft = torch.softmax(source, 1)
    soft = torch.cat([soft[:4], torch.tensor([[0.0, 1.0, 0.0]]) * soft[4:].sum()])
    masked.requires_grad_(True)
    loss = soft_cross_entropy(soft, masked)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(source.grad).all() and torch.isfinite(masked.grad).all()


def test_sharpened_helper_pseudo_labels():
    """Eqs. (5)-(7): one helper gives softmax(-d) sharpened with T; two helpers average."""
    rng = np.random.default_rng(2)
    u = rng.normal(size=(6, 3))
    vectors = rng.normal(size=(3, 3))
    helper = Prototypes(vectors, np.ones(3, bool), np.full(3, 5), np.zeros(3))
    p = torch.softmax(-torch.cdist(torch.from_numpy(u), torch.from_numpy(vectors)) ** 2, 1).numpy()
    sharp = p**2 / (p**2).sum(1, keepdims=True)
    assert np.allclose(pseudo_labels(u, [helper], temperature=0.5, distance="squared"), sharp)
    assert np.allclose(pseudo_labels(u, [helper, helper], temperature=1.0, distance="squared"), p)
    torch_sharp = helper_pseudo_labels(torch.from_numpy(u), [helper], temperature=0.5)
    assert np.allclose(torch_sharp.numpy(), sharp)


@pytest.mark.parametrize("distance", ["squared", "euclidean"])
@pytest.mark.parametrize("temperature", [0.5, 2.0])
def test_torch_pseudo_labels_match_numpy_oracle_and_carry_gradient(distance, temperature):
    """helper_pseudo_labels equals the protocol's numpy eqs. (5)-(7) (withheld classes
    included) and, unlike it, is differentiable: Algorithm 1's gradient of eq. (8) flows
    through pbar(u), whose d/dz is the direct formula's."""
    rng = np.random.default_rng(3)
    u = torch.tensor(rng.normal(size=(6, 4)), requires_grad=True)
    a = Prototypes(rng.normal(size=(3, 4)), np.array([True, False, True]), None)
    b = Prototypes(rng.normal(size=(3, 4)), np.ones(3, bool), None)
    silent = Prototypes(np.zeros((3, 4)), np.zeros(3, bool), None)
    targets = helper_pseudo_labels(u, [a, b, silent], temperature=temperature, distance=distance)
    oracle = pseudo_labels(u.detach().numpy(), [a, b], temperature=temperature, distance=distance)
    assert np.allclose(targets.detach().numpy(), oracle, atol=1e-12)
    weights = torch.tensor(rng.normal(size=(6, 3)))
    (grad,) = torch.autograd.grad((targets * weights).sum(), u)
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0

    def direct(z: torch.Tensor) -> torch.Tensor:
        probs = []
        for h in (a, b):
            d = ((z[:, None, :] - torch.from_numpy(h.vectors)[None]) ** 2).sum(-1)
            d = d if distance == "squared" else d.sqrt()
            probs.append(torch.softmax((-d).masked_fill(~torch.from_numpy(h.mask), float("-inf")), 1))
        sharp = ((probs[0] + probs[1]) / 2) ** (1 / temperature)
        return sharp / sharp.sum(1, keepdim=True)

    (expected,) = torch.autograd.grad((direct(u) * weights).sum(), u)
    assert torch.allclose(grad, expected, atol=1e-10)
    with pytest.raises(InputError, match="helpers"):
        helper_pseudo_labels(u, [silent], temperature=0.5)


def _run(federation, secure, rounds=2, **hyper):
    method = build_method("protofssl", secure=secure, seed=5, crypto_seed=7, clients_per_round=3, helpers=2,
                          local_epochs=3, n_unlabeled=10, **hyper)
    method.setup(federation.for_training())
    return method, *play(method, federation, rounds)


def test_real_and_plaintext_agree(tiny_digits):
    real, real_results, real_acc = _run(tiny_digits, "real")
    plain, plain_results, plain_acc = _run(tiny_digits, "plaintext")
    assert real_results[0].pseudo_label_digest is None  # no helpers in the first round
    assert real_results[1].pseudo_label_digest is not None
    assert [r.pseudo_label_digest for r in real_results] == [r.pseudo_label_digest for r in plain_results]
    assert real_acc == plain_acc
    assert 0.0 <= real_results[1].pseudo_label_accuracy <= 1.0
    assert real_results[1].bytes_protocol_per_client > plain_results[1].bytes_protocol_per_client > 0
    assert np.array_equal(real.global_prototypes, plain.global_prototypes)


def test_fedprox_noise_and_withholding(tiny_digits):
    method, results, accuracies = _run(tiny_digits, "plaintext", aggregation="fedprox", noise_std=0.5, min_class_count=2)
    stored = method.store.previous
    assert len(stored) == 3
    assert all(p.noise_std == 0.5 and p.counts is None for p in stored.values())  # no counts sent
    labels = {c: tiny_digits.clients[c].y[tiny_digits.clients[c].labeled] for c in stored}
    assert all(np.array_equal(p.mask, np.bincount(labels[c], minlength=10) >= 2) for c, p in stored.items())
    assert 0.0 <= accuracies[-1] <= 1.0
    assert results[-1].privacy["differentially_private"] is False  # fixed sigma: no epsilon claimed
    assert results[-1].privacy["epsilon_per_client"] is None
    assert sum(results[-1].privacy["releases"].values()) == 2 * 3  # 2 rounds x 3 clients


def test_dp_releases_use_the_global_model_and_are_accounted_per_client(tiny_digits, monkeypatch):
    """Issue 11, findings 1-2: with noise_multiplier each round's client releases once, under
    the global model theta^r (never its local model), with a noise scale that depends on no
    count; the stored helper prototypes and the global prototypes come from that release;
    epsilon composes over the rounds each client joined (no amplification by sampling)."""
    method = build_method("protofssl", secure="plaintext", seed=5, clients_per_round=3, helpers=2, local_epochs=3,
                          n_unlabeled=10, noise_multiplier=1.0, clip=1.0)
    method.setup(tiny_digits.for_training())
    calls = []
    original = ProtoFSSLClient.prototypes

    def spy(self, network, data, round_index, client, *, noised):
        calls.append((model_vector(network), noised))
        return original(self, network, data, round_index, client, noised=noised)

    monkeypatch.setattr(ProtoFSSLClient, "prototypes", spy)
    joined = np.zeros(tiny_digits.num_clients, dtype=int)
    for r in range(3):
        calls.clear()
        result = method.run_round(r)
        stored = method.store.previous
        joined[list(stored)] += 1
        theta = model_vector(method.network)
        # one release per client, all under theta^r (the clients' networks equal the global model)
        assert [(np.array_equal(v, theta), noised) for v, noised in calls] == [(True, True)] * 3
        assert all(p.noise_std == pytest.approx(np.sqrt(2.0)) for p in stored.values())  # z sqrt(2) C
        assert all(not np.allclose(p.counts, np.rint(p.counts)) for p in stored.values())  # noised counts
        rebuilt = aggregate_prototypes(list(stored.values()), threshold=2, backend="plaintext")
        np.testing.assert_allclose(method.global_prototypes, rebuilt.vectors, atol=1e-6)
    privacy = result.privacy
    assert privacy["differentially_private"] and privacy["delta"] == 1e-5
    assert privacy["releases"] == {str(c): int(k) for c, k in enumerate(joined)}
    for client, k in enumerate(joined):
        exact = dp.analytic_gaussian_epsilon(1.0 / np.sqrt(k), 1e-5) if k else 0.0
        assert privacy["epsilon_per_client"][str(client)] == pytest.approx(exact, abs=1e-3)
    assert privacy["epsilon_max"] == max(privacy["epsilon_per_client"].values())


def test_dp_real_and_plaintext_agree_and_resume(tiny_digits):
    real, real_results, _ = _run(tiny_digits, "real", noise_multiplier=1.0, clip=1.0)
    plain, plain_results, _ = _run(tiny_digits, "plaintext", noise_multiplier=1.0, clip=1.0)
    assert [r.pseudo_label_digest for r in real_results] == [r.pseudo_label_digest for r in plain_results]
    assert np.array_equal(real.global_prototypes, plain.global_prototypes)
    assert real_results[-1].privacy == plain_results[-1].privacy
    resumed = build_method("protofssl", seed=5, clients_per_round=3, helpers=2, local_epochs=3, n_unlabeled=10,
                           noise_multiplier=1.0, clip=1.0)
    resumed.setup(tiny_digits)
    resumed.load_state_dict(plain.state_dict())
    assert resumed.privacy_report() == plain_results[-1].privacy


def test_defaults_are_the_papers(tiny_digits):
    """Table 5 and the authors' code: RMSprop(lr 1e-3, rho 0.9, eps 1e-7), L2 1e-4, E = 10,
    S = 1, Q = 2, 100 unlabeled, 5 helpers, lambda_U 0.3, T 0.5, squared distance, no noise."""
    method = build_method("protofssl")
    assert (method.lr, method.rmsprop_alpha, method.rmsprop_eps, method.weight_decay, method.local_epochs) == (1e-3, 0.9, 1e-7, 1e-4, 10)
    assert (method.n_support, method.n_query, method.n_unlabeled, method.helpers) == (1, 2, 100, 5)
    assert (method.lambda_u, method.temperature, method.distance) == (0.3, 0.5, "squared")
    assert (method.noise_std, method.noise_multiplier, method.min_class_count) == (0.0, None, 1)


def test_client_rmsprop_state_persists_across_rounds(tiny_digits, monkeypatch):
    """A client continues its RMSprop accumulator when it joins again: a fresh one every
    round makes the first steps lr / sqrt(1 - alpha^t) too large (sign-like steps)."""
    method = build_method("protofssl", seed=5, clients_per_round=5, helpers=2, local_epochs=3, n_unlabeled=10)
    method.setup(tiny_digits)
    method.run_round(0)
    states = method.state_dict()["clients"]  # each client's own RMSprop state, checkpointed
    assert sorted(states) == list(range(5))
    before = {c: np.array(s.arrays["protofssl/rmsprop/0/square_avg"]) for c, s in states.items()}
    assert all(s.config["protofssl/rmsprop/0/step"] == 3 for s in states.values())
    loaded = []
    original = torch.optim.RMSprop.load_state_dict

    def spy(self, state):
        loaded.append(state["state"][0]["square_avg"].clone())
        original(self, state)

    monkeypatch.setattr(torch.optim.RMSprop, "load_state_dict", spy)
    method.run_round(1)
    assert len(loaded) == 5 and all(any(np.array_equal(v.numpy(), b) for b in before.values()) for v in loaded)
    assert all(s.config["protofssl/rmsprop/0/step"] == 6 for s in method.state_dict()["clients"].values())


def test_resume_equals_uninterrupted(tiny_digits):
    full, results, accuracies = _run(tiny_digits, "plaintext", rounds=3)
    first, _, _ = _run(tiny_digits, "plaintext", rounds=2)
    resumed = build_method("protofssl", seed=5, clients_per_round=3, helpers=2, local_epochs=3, n_unlabeled=10)
    resumed.setup(tiny_digits.for_training())
    resumed.load_state_dict(first.state_dict())
    (again,), (accuracy,) = play(resumed, tiny_digits, 3, start=2)
    assert (accuracy, again.pseudo_label_digest) == (accuracies[2], results[2].pseudo_label_digest)


def test_bad_configuration(tiny_digits, tiny_digits_server):
    with pytest.raises(ConfigError):
        build_method("protofssl").setup(tiny_digits_server)


def _cifar_shaped_federation():
    from securefl.data import Dataset, partition

    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(10), 4)
    x = rng.random((len(y), 3, 32, 32), dtype=np.float32)
    return partition(Dataset("rgb32", x, y, x[:10], y[:10], 10), scheme="iid", num_clients=2,
                     seed=0, labeled_fraction=0.5)


def test_normalisation_is_none_by_default_and_bn_is_the_ablation():
    """Table 3's ProtoFSSL has no normalisation; "with BN" (and Table 4's GN) is the ablation."""
    federation = _cifar_shaped_federation()
    layers = {}
    for norm in ("none", "bn", "gn"):
        method = build_method("protofssl", **({} if norm == "none" else {"norm": norm}))
        method.setup(federation)
        layers[norm] = {type(m) for m in method.network.modules()}
    assert not layers["none"] & {torch.nn.BatchNorm2d, torch.nn.GroupNorm}
    assert torch.nn.BatchNorm2d in layers["bn"] and torch.nn.GroupNorm not in layers["bn"]
    assert torch.nn.GroupNorm in layers["gn"]


def test_normalisation_option_is_checked(tiny_digits):
    with pytest.raises(InputError, match="norm"):
        build_method("protofssl", norm="bn").setup(tiny_digits)  # the digits MLP has none
    build_method("protofssl", norm="none").setup(tiny_digits)
