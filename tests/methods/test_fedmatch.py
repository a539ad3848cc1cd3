"""FedMatch: agreement-based pseudo-labels, helper choice, disjoint learning of sigma and
psi, the helper pool's reveals, real vs plaintext, resume and bad configurations."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.spatial import KDTree

from securefl.errors import ConfigError, InputError, ProtocolError
from securefl.methods import build_method
from securefl.methods.fedmatch.client import (
    REVEAL_EMBEDDING,
    REVEAL_PSI,
    agreement_labels,
    local_update,
    parameter_tensors,
    regularisation,
    unlabeled_loss,
)
from securefl.methods.fedmatch.server import nearest_helpers
from securefl.methods.halves import MethodProgramClient, local_data, run_config
from securefl.models import build_model
from securefl.runtime.policy import POLICY, PrivacyPolicy
from securefl.runtime.transport import NodeContext, Record

from .conftest import play

TINY = {"clients_per_round": 3, "local_epochs": 1, "batch_size": 8, "lr": 0.05,
        "helper_interval": 2, "confidence": 0.3}


def _run(federation, secure, rounds=3, **hyper):
    method = build_method("fedmatch", secure=secure, seed=3, crypto_seed=11, **{**TINY, **hyper})
    method.setup(federation.for_training())
    return method, *play(method, federation, rounds)


def test_agreement_labels_count_votes_ties_to_the_lower_class():
    local = torch.tensor([[0.9, 0.1, 0.0], [0.2, 0.7, 0.1], [0.1, 0.2, 0.7]])
    helper_a = torch.tensor([[0.1, 0.8, 0.1], [0.1, 0.1, 0.8], [0.6, 0.3, 0.1]])
    helper_b = torch.tensor([[0.2, 0.7, 0.1], [0.2, 0.1, 0.7], [0.1, 0.8, 0.1]])
    # point 0: helpers outvote the local argmax; 1: same; 2: three classes, one vote each
    assert agreement_labels(local, [helper_a, helper_b]).tolist() == [1, 2, 0]
    assert agreement_labels(local, []).tolist() == [0, 1, 2]


def test_nearest_helpers_match_a_kd_tree_and_exclude_the_client():
    rng = np.random.default_rng(0)
    embeddings = {int(k): rng.random(10) for k in rng.choice(40, size=12, replace=False)}
    chosen = nearest_helpers(embeddings, 2)
    clients = sorted(embeddings)
    tree = KDTree(np.stack([embeddings[k] for k in clients]))
    for k in clients:
        _, index = tree.query(embeddings[k], 3)
        assert chosen[k] == [clients[i] for i in index if clients[i] != k][:2]
    assert nearest_helpers({4: np.zeros(3)}, 2) == {4: []}


def _linear_parts():
    model = build_model("mlp", input_shape=(1, 2, 2), num_classes=3, hidden=(), seed=0)
    torch.manual_seed(1)
    sigma = {n: torch.randn_like(p) for n, p in model.named_parameters()}
    psi = {n: (0.3 * torch.randn_like(p)).requires_grad_() for n, p in model.named_parameters()}
    return model, sigma, psi


def test_unlabeled_loss_is_the_formula_and_moves_psi_only():
    model, sigma, psi = _linear_parts()
    torch.manual_seed(2)
    weak, strong = torch.rand(6, 1, 2, 2), torch.rand(6, 1, 2, 2)
    helper = {n: s + 0.5 * torch.randn_like(s) for n, s in sigma.items()}

    with torch.no_grad():
        tops = torch.softmax(torch.func.functional_call(model, {n: sigma[n] + psi[n] for n in sigma},
                                                        (weak,)), dim=1).max(dim=1).values

    class Hyper:  # the threshold splits the batch: some points confident, some not
        confidence, lambda_iccs, lambda_a, lambda_l1, lambda_l2 = float(tops.median()), 0.3, 0.7, 1e-2, 0.5

    for s in sigma.values():
        s.requires_grad_(True)
    loss = unlabeled_loss(Hyper, model, sigma, psi, [helper], weak, strong)
    loss.backward()
    assert all(s.grad is None for s in sigma.values())
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in psi.values())

    def logits(params, x):
        return torch.func.functional_call(model, params, (x,))

    with torch.no_grad():
        theta = {n: sigma[n] + psi[n] for n in sigma}
        p = torch.softmax(logits(theta, weak), dim=1)
        keep = p.max(dim=1).values >= Hyper.confidence
        assert 0 < int(keep.sum()) < len(keep)
        q = torch.softmax(logits(helper, weak), dim=1)[keep]
        kl = (q * (q.log() - p[keep].log())).sum(dim=1).mean()
        votes = torch.nn.functional.one_hot(p[keep].argmax(1), 3) + torch.nn.functional.one_hot(q.argmax(1), 3)
        ce = torch.nn.functional.cross_entropy(logits(theta, strong)[keep], votes.argmax(1))
        reg = sum(1e-2 * psi[n].abs().sum() + 0.5 * (sigma[n] - psi[n]).pow(2).sum() for n in psi)
        expected = Hyper.lambda_iccs * kl + Hyper.lambda_a * ce + reg
    assert float(loss.detach()) == pytest.approx(float(expected), rel=1e-5)

    class Nobody(Hyper):
        confidence = 1.01  # no point is confident: only the regularisation is left

    rest = unlabeled_loss(Nobody, model, sigma, psi, [helper], weak, strong)
    frozen = {n: s.detach() for n, s in sigma.items()}
    assert float(rest.detach()) == pytest.approx(float(regularisation(frozen, psi, lambda_l1=1e-2, lambda_l2=0.5).detach()))


@pytest.mark.parametrize("frozen", ["sigma", "psi"])
def test_disjoint_learning(frozen, tiny_digits):
    """sigma learns from labels only, psi from unlabeled data only: with lambda_s = 0 (and
    no weight decay) sigma never moves; with every unlabeled weight 0 psi never moves."""
    weights = {"lambda_s": 0.0} if frozen == "sigma" else \
        {"lambda_iccs": 0.0, "lambda_a": 0.0, "lambda_l1": 0.0, "lambda_l2": 0.0}
    method = build_method("fedmatch", seed=3, momentum=0.9, confidence=0.0, **weights)
    data = local_data(tiny_digits, 0)
    assert 0 < data.client.labeled.sum() < len(data.client)
    model = build_model("auto", input_shape=data.input_shape, num_classes=data.num_classes, seed=3)
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    sigma = {n: t.clone() for n, t in start.items()}
    psi = {n: 0.2 * t.clone() for n, t in start.items()}
    before = {"sigma": {n: t.clone() for n, t in sigma.items()}, "psi": {n: t.clone() for n, t in psi.items()}}
    local_update(method, model, sigma, psi, [], data, 0.05, torch.Generator().manual_seed(0))
    moved = {"sigma": sigma, "psi": psi}
    other = "psi" if frozen == "sigma" else "sigma"
    assert all(torch.equal(moved[frozen][n], before[frozen][n]) for n in start)
    assert any(not torch.equal(moved[other][n], before[other][n]) for n in start)


def test_real_and_plaintext_agree(tiny_digits):
    real, real_results, real_acc = _run(tiny_digits, "real")
    plain, plain_results, plain_acc = _run(tiny_digits, "plaintext")
    assert real_acc == plain_acc
    assert np.array_equal(real.sigma, plain.sigma) and np.array_equal(real.psi, plain.psi)
    assert real.helpers == plain.helpers and any(real.helpers.values())
    assert [r.bytes_model_per_client for r in real_results] == [p.bytes_model_per_client for p in plain_results]
    assert all(r.bytes_protocol_per_client > 0 == p.bytes_protocol_per_client
               for r, p in zip(real_results, plain_results))


def test_the_pool_is_refreshed_every_helper_interval_rounds(tiny_digits):
    method = build_method("fedmatch", seed=3, **TINY)
    method.setup(tiny_digits.for_training())
    method.run_round(0)
    after_first = {k: (e.copy(), p.copy()) for k, (e, p) in method.pool.items()}
    assert len(after_first) == TINY["clients_per_round"]
    assert method.helpers == nearest_helpers({k: e for k, (e, _) in after_first.items()}, 2)
    method.run_round(1)  # not a refresh round: the pool and the helpers stay
    assert method.pool.keys() == after_first.keys()
    assert all(np.array_equal(method.pool[k][1], after_first[k][1]) for k in after_first)
    method.run_round(2)
    assert any(k not in after_first or not np.array_equal(method.pool[k][1], after_first[k][1])
               for k in method.pool)


@pytest.mark.parametrize("secure", ["plaintext", "real"])
def test_a_client_reveals_psi_only_when_asked_and_its_helpers_come_from_the_request(secure, tiny_digits):
    from securefl.crypto.identity import CREDENTIALS, new_federation
    from securefl.fl.uploads import UploadPlan
    from securefl.methods.fedmatch.client import parameter_vector

    method = build_method("fedmatch", secure=secure, seed=3, **{**TINY, "confidence": 0.0})
    method.setup(tiny_digits.for_training())
    node = NodeContext(0, {"partition-id": 0, POLICY: PrivacyPolicy.for_method(method),
                           CREDENTIALS: new_federation("fedmatch", 2)[1][0]},
                       run_config(method), local_data(tiny_digits, 0))
    dim = method.sigma.size
    plan = UploadPlan.new(secure=secure, sum_backend="secagg", members=[0, 1], dims={"sigma": dim, "psi": dim})

    def train(reveal, helpers=0):
        arrays = {"sigma": method.sigma, "psi": method.psi,
                  **{f"helper/{h}": method.psi * (h + 2) for h in range(helpers)}}
        request = plan.request(0, arrays, {"round": 0, "lr": 0.05, "reveal": reveal})
        return MethodProgramClient().handle("train", request, Record(), node)

    quiet, loud = train(False), train(True)
    assert not any(k.startswith("reveal/") for k in quiet.arrays)
    assert loud.arrays[REVEAL_EMBEDDING].shape == (tiny_digits.num_classes,)
    assert loud.arrays[REVEAL_EMBEDDING].sum() == pytest.approx(1.0)
    plain_uploads = {k for k in loud.arrays if k.startswith("upload/") and k != "upload/weight"}
    assert plain_uploads == (set() if secure == "real" else {"upload/sigma", "upload/psi"})
    if secure == "plaintext":  # the revealed psi is the trained psi that is summed
        assert np.array_equal(loud.arrays[REVEAL_PSI], loud.arrays["upload/psi"])
    if secure == "plaintext":  # a helper changes the pseudo-labels and the KL term, hence psi
        assert not np.array_equal(train(False, helpers=1).arrays["upload/psi"], quiet.arrays["upload/psi"])
    with pytest.raises(ProtocolError, match="num_helpers"):
        train(False, helpers=3)
    model = build_model("auto", input_shape=tiny_digits.input_shape, num_classes=10, seed=3)
    with pytest.raises(ProtocolError, match="shape"):
        parameter_tensors(model, np.zeros(dim + 1))
    assert parameter_vector(parameter_tensors(model, method.sigma)).shape == (dim,)


def test_resume_equals_uninterrupted(tiny_digits):
    full, _, accuracies = _run(tiny_digits, "plaintext", rounds=4)
    first, _, _ = _run(tiny_digits, "plaintext", rounds=2)
    resumed = build_method("fedmatch", secure="plaintext", seed=3, crypto_seed=11, **TINY)
    resumed.setup(tiny_digits.for_training())
    resumed.load_state_dict(first.state_dict())
    assert play(resumed, tiny_digits, 4, start=2)[1] == accuracies[2:]
    assert np.array_equal(resumed.psi, full.psi) and resumed.helpers == full.helpers


def test_the_deployed_model_drops_psi_below_the_l1_threshold(tiny_digits):
    method = build_method("fedmatch", seed=3, l1_threshold=0.01)
    method.setup(tiny_digits.for_training())
    weights = np.concatenate([p.detach().double().reshape(-1).numpy() for p in method.network.parameters()])
    kept = np.abs(method.psi) > 0.01
    assert 0 < kept.sum() < kept.size
    assert np.allclose(weights, method.sigma + np.where(kept, method.psi, 0.0), atol=1e-6)


def test_bad_configuration(tiny_digits, tiny_digits_server):
    with pytest.raises(ConfigError, match="labels-at-client"):
        build_method("fedmatch").setup(tiny_digits_server)
    with pytest.raises(InputError, match="buffers"):
        from securefl.methods.fedmatch.client import check_decomposable

        check_decomposable(torch.nn.BatchNorm1d(3))


@pytest.mark.parametrize("allow", [False, True])
def test_a_strict_node_refuses_to_reveal_its_model_in_real_mode(allow, tiny_digits):
    """FedMatch's helper refresh asks for psi_k in the clear; a real-mode node whose own
    policy does not allow model reveals (the strict default) refuses before training, so
    the server's request alone cannot make it send its model."""
    from securefl.crypto.identity import CREDENTIALS, new_federation
    from securefl.fl.uploads import UploadPlan

    method = build_method("fedmatch", secure="real", seed=3, **TINY)
    method.setup(tiny_digits.for_training())
    policy = PrivacyPolicy(secure="real", min_cohort=1, dp_min_noise=0.0, allow_model_reveal=allow)
    node = NodeContext(0, {"partition-id": 0, POLICY: policy,
                           CREDENTIALS: new_federation("fedmatch", 2)[1][0]},
                       run_config(method), local_data(tiny_digits, 0))
    dim = method.sigma.size
    plan = UploadPlan.new(secure="real", sum_backend="secagg", members=[0, 1],
                          dims={"sigma": dim, "psi": dim})
    request = plan.request(0, {"sigma": method.sigma, "psi": method.psi},
                           {"round": 0, "lr": 0.05, "reveal": True})
    if allow:
        reply = MethodProgramClient().handle("train", request, Record(), node)
        assert REVEAL_PSI in reply.arrays
    else:
        with pytest.raises(ProtocolError, match="policy-allow-model-reveal"):
            MethodProgramClient().handle("train", request, Record(), node)
