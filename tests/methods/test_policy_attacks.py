"""A server (or the run config its operator writes) asking a method's client for less
privacy than the node's own policy allows (securefl.runtime.policy): each attack of the review,
run against a node that would allow it (it works) and against the policy that forbids it
(the client refuses with ProtocolError and sends nothing).
"""

from __future__ import annotations

import numpy as np
import pytest

from securefl.errors import ProtocolError
from securefl.fl import model_vector
from securefl.methods import build_method
from securefl.methods.halves import MethodProgramClient, local_data, run_config
from securefl.runtime.policy import LEDGER, POLICY, PrivacyLedger, PrivacyPolicy
from securefl.runtime.transport import NodeContext, Record

TINY = {"clients_per_round": 3, "local_epochs": 1, "batch_size": 8, "lr": 0.05}


def train_request(method):
    return Record({"model": model_vector(method.network)}, {"round": 0, "lr": 0.05, "warmup": False})


def node(method, federation, node_config):
    return NodeContext(0, {"partition-id": 0, **node_config}, run_config(method),
                       local_data(federation, 0))


def test_a_plaintext_run_config_cannot_make_a_real_mode_node_upload_in_the_clear(tiny_digits):
    method = build_method("fedavg-labeled", secure="plaintext", seed=0, **TINY)
    method.setup(tiny_digits.for_training())
    lax = node(method, tiny_digits, {POLICY: PrivacyPolicy.simulator()})
    reply = MethodProgramClient().handle("train", train_request(method), Record(), lax)
    assert "upload/model" in reply.arrays  # the downgrade works where the node allows it
    strict = node(method, tiny_digits, {})  # a deployment node: policy-* keys absent
    with pytest.raises(ProtocolError, match="requires 'real'"):
        MethodProgramClient().handle("train", train_request(method), Record(), strict)


def test_a_planted_crypto_seed_is_refused_unless_the_node_allows_it(tiny_digits):
    method = build_method("fedavg-labeled", secure="real", seed=0, crypto_seed=123, **TINY)
    strict = node(method, tiny_digits, {})
    with pytest.raises(ProtocolError, match="crypto_seed"):
        MethodProgramClient().handle("train", Record(), Record(), strict)
    allowed = node(method, tiny_digits, {"policy-allow-crypto-seed": True})
    with pytest.raises(ProtocolError, match="without a model"):  # past the policy check
        MethodProgramClient().handle("train", Record(config={"round": 0}), Record(), allowed)


def test_a_run_config_with_less_noise_than_the_node_requires_is_refused(tiny_digits):
    method = build_method("protofssl", secure="real", seed=5, noise_multiplier=0.5, clip=1.0,
                          clients_per_round=3, helpers=2, n_unlabeled=10)
    with pytest.raises(ProtocolError, match="noise_multiplier=0.5 is below"):
        MethodProgramClient().handle("prototypes", Record(), Record(), node(method, tiny_digits, {}))
    with pytest.raises(ProtocolError, match="clip=1.0 exceeds"):
        MethodProgramClient().handle("prototypes", Record(), Record(), node(
            method, tiny_digits, {"policy-dp-min-noise": 0.5, "policy-dp-max-clip": 0.5}))


def test_64_release_requests_in_one_round_get_one_release(tiny_digits):
    """The server re-sends round 0's ``prototypes`` request 64 times to client k after the
    round: every repeat is refused by k's own ledger, so no second noised copy of its
    per-class sums ever leaves it (the review averaged 64 to recover the exact counts)."""
    method = build_method("protofssl", secure="plaintext", seed=5, clients_per_round=3, helpers=2,
                          local_epochs=1, n_unlabeled=10, noise_multiplier=1.0, clip=1.0)
    method.setup(tiny_digits.for_training())
    method.run_round(0)
    released = [k for k in range(tiny_digits.num_clients) if method.releases[k] == 1]
    k = released[0]
    ledger = method.transport.nodes[k].node_config[LEDGER]
    assert isinstance(ledger, PrivacyLedger) and len(ledger.releases) == 1
    theta = model_vector(method.network)
    for _ in range(64):
        repeat = method.transport.exchange("prototypes", {k: Record({"model": theta}, {
            "round": 0, "sums/prototypes/members": 1, "sums/prototypes/index": 0,
            "sums/prototypes/threshold": 1})})
        assert repeat.replies == {} and "second DP release" in repeat.failed[k]
    assert len(ledger.releases) == 1
    assert np.sum(method.releases) == len(released)


@pytest.mark.parametrize("backend", ["lwe", "rlwe"])
def test_a_run_config_asking_for_an_lwe_backend_is_refused_under_the_strict_policy(backend, tiny_digits):
    """LWE and ring-LWE are semi-honest only (securefl.runtime.policy): a FedProp run config
    naming them is refused by a deployment node at its first step, before it embeds or
    sends anything; a node whose policy allows them accepts the same run config."""
    method = build_method("fedprop", secure="real", seed=4, clients_per_round=3, L=64,
                          hamming_backend=backend)
    strict = node(method, tiny_digits, {})
    with pytest.raises(ProtocolError, match=f"hamming_backend='{backend}'"):
        MethodProgramClient().handle("cclp/advertise", Record(), Record(), strict)
    trusting = node(method, tiny_digits, {"policy-hamming-backends": "shade,lwe,rlwe"})
    trusting.policy().check_method(method)


def test_lwe_requested_over_the_transport_fails_the_round_before_anything_is_sent(tiny_digits):
    """The server runs FedProp with hamming_backend="lwe" against strict nodes: every
    client refuses at ``cclp/advertise`` (ProtocolError) and no reply reaches the server."""
    from securefl.errors import DropoutError
    from securefl.methods.halves import local_data
    from securefl.models import build_model
    from securefl.protocols.crossclient.server_round import cross_client_round
    from securefl.runtime.transport import InProcessTransport
    from tests.adversary import Adversary

    method = build_method("fedprop", secure="real", seed=4, clients_per_round=3, L=64, k=5,
                          hamming_backend="lwe")
    nodes = [NodeContext(k, {"partition-id": k, "policy-min-cohort": 2}, run_config(method),
                         local_data(tiny_digits, k)) for k in range(3)]
    transport = InProcessTransport(MethodProgramClient(), nodes, intercept=Adversary())
    model = build_model(method.model, input_shape=tuple(tiny_digits.input_shape),
                        num_classes=tiny_digits.num_classes, seed=4)
    replies = []
    deliver = transport._exchange

    def watched(step, requests, timeout):
        result = deliver(step, requests, timeout)
        replies.append(result)
        return result

    transport._exchange = watched
    with pytest.raises(DropoutError):
        cross_client_round(transport, [0, 1, 2], feature_model=model_vector(model), round_index=0,
                           secure="real", k=5, alpha=0.99, L=64,
                           num_classes=tiny_digits.num_classes, hamming_backend="lwe")
    first = replies[0]  # cclp/advertise; later exchanges have nobody left to ask
    assert first.replies == {} and sorted(first.failed) == [0, 1, 2]
    assert all(result.replies == {} for result in replies)
    assert all("hamming_backend='lwe'" in first.failed[c] for c in range(3))


def test_the_lwe_flooding_cap_refuses_the_evaluation_hop(tiny_digits):
    """A node whose cap the session's statistical distance would pass refuses the
    evaluation hop (ProtocolError, no answer D leaves it); the round goes on without it.
    Its ledger recorded nothing; the others' recorded the session once."""
    from securefl.crypto.lwe import statistical_distance
    from securefl.methods.halves import local_data
    from securefl.models import build_model
    from securefl.protocols.crossclient.server_round import cross_client_round
    from securefl.runtime.transport import InProcessTransport

    method = build_method("fedprop", secure="real", seed=4, clients_per_round=3, L=64, k=5,
                          hamming_backend="lwe")
    sizes = [len(tiny_digits.clients[k]) for k in range(3)]
    session = statistical_distance(sizes, 64)
    policies = [PrivacyPolicy.for_method(method)] * 2 + [
        PrivacyPolicy(secure="real", hamming_backends=("lwe",), min_cohort=1, dp_min_noise=0.0,
                      lwe_max_distance=session / 2)]
    nodes = [NodeContext(k, {"partition-id": k, POLICY: policies[k]}, run_config(method),
                         local_data(tiny_digits, k)) for k in range(3)]
    transport = InProcessTransport(MethodProgramClient(), nodes)
    model = build_model(method.model, input_shape=tuple(tiny_digits.input_shape),
                        num_classes=tiny_digits.num_classes, seed=4)
    done = cross_client_round(transport, [0, 1, 2], feature_model=model_vector(model), round_index=0,
                              secure="real", k=5, alpha=0.99, L=64,
                              num_classes=tiny_digits.num_classes, hamming_backend="lwe")
    assert "flooding distance" in done.failed[2] and done.graph == [0, 1]
    ledgers = [transport.nodes[k].node_config[LEDGER] for k in range(3)]
    assert ledgers[2].lwe == [] and [len(ledger.lwe) for ledger in ledgers[:2]] == [1, 1]
    assert ledgers[0].lwe_distance == pytest.approx(session)


def test_prototypes_without_the_gaussian_mechanism_are_refused_unless_the_node_waives_dp(tiny_digits):
    """ProtoFSSL run without noise_multiplier shares each client's exact class means (or a
    fixed noise_std, not DP) with the server: a node whose policy has a noise floor refuses
    the run config at its first step; where the node waives DP (policy-dp-min-noise 0) the
    attack works: its train reply carries its prototypes with no noise."""
    for noise_std in (0.0, 0.01):
        method = build_method("protofssl", secure="real", seed=5, noise_std=noise_std,
                              clients_per_round=3, helpers=2, n_unlabeled=10, local_epochs=1)
        with pytest.raises(ProtocolError, match="without the Gaussian mechanism"):
            MethodProgramClient().handle("train", Record(), Record(), node(method, tiny_digits, {}))
    method = build_method("protofssl", secure="plaintext", seed=5, clients_per_round=3, helpers=2,
                          n_unlabeled=10, local_epochs=1)
    method.setup(tiny_digits.for_training())
    waived = node(method, tiny_digits, {"policy-secure": "plaintext", "policy-dp-min-noise": 0,
                                        "policy-allow-crypto-seed": True})
    reply = MethodProgramClient().handle("train", train_request(method), Record(), waived)
    sent = reply.arrays["prototypes/vectors"][reply.arrays["prototypes/mask"].astype(bool)]
    assert reply.config["prototypes/noise_std"] == 0.0 and np.all(np.isfinite(sent)) and sent.size


def _auto_round(tiny_digits, monkeypatch, node_configs):
    """One CrossClientLP round with ``hamming_backend="auto"`` where the cost model picks
    ring-LWE (patched: the tiny shape would pick SHADE), among nodes with these configs."""
    import securefl.protocols.crossclient.server_round as server
    from securefl.crypto import hamming
    from securefl.models import build_model
    from securefl.protocols.crossclient.server_round import cross_client_round
    from securefl.runtime.transport import InProcessTransport

    monkeypatch.setattr(hamming, "choose_backend", lambda sizes, length: "rlwe")
    monkeypatch.setattr(server, "choose_backend", lambda sizes, length: "rlwe")
    method = build_method("fedprop", secure="real", seed=4, clients_per_round=3, L=64, k=5,
                          hamming_backend="auto")
    nodes = [NodeContext(k, {"partition-id": k, **node_configs[k]}, run_config(method),
                         local_data(tiny_digits, k)) for k in range(3)]
    transport = InProcessTransport(MethodProgramClient(), nodes)
    model = build_model(method.model, input_shape=tuple(tiny_digits.input_shape),
                        num_classes=tiny_digits.num_classes, seed=4)
    return cross_client_round(transport, [0, 1, 2], feature_model=model_vector(model),
                              round_index=0, secure="real", k=5, alpha=0.99, L=64,
                              num_classes=tiny_digits.num_classes, hamming_backend="auto")


def test_auto_follows_what_strict_nodes_resolved_not_the_servers_cost_model(tiny_digits, monkeypatch):
    """Strict nodes resolve ``auto`` to SHADE whatever the cost model says; the server runs
    what they resolved (it never imposes ring-LWE on them), so the round completes."""
    strict = {"policy-min-cohort": 2}
    done = _auto_round(tiny_digits, monkeypatch, [strict] * 3)
    assert done.graph == [0, 1, 2] and not done.failed


def test_nodes_that_resolve_auto_differently_fail_the_round(tiny_digits, monkeypatch):
    strict = {"policy-min-cohort": 2}
    trusting = {**strict, "policy-hamming-backends": "shade,lwe,rlwe"}
    with pytest.raises(ProtocolError, match="resolved hamming_backend='auto'"):
        _auto_round(tiny_digits, monkeypatch, [strict, strict, trusting])
