"""A server (or the run config its operator writes) asking a method's client for less
privacy than the node's own policy allows (securefl.fl.policy): each attack of the review,
run against a node that would allow it (it works) and against the policy that forbids it
(the client refuses with ProtocolError and sends nothing).
"""

from __future__ import annotations

import numpy as np
import pytest

from securefl.errors import ProtocolError
from securefl.fl import model_vector
from securefl.fl.policy import LEDGER, POLICY, PrivacyLedger, PrivacyPolicy
from securefl.fl.transport import NodeContext, Record
from securefl.methods import build_method
from securefl.methods.halves import MethodProgramClient, local_data, run_config

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
