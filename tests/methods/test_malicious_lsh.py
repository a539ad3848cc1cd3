"""Key substitution on FedProp's LSH seed agreement over the transport: a FedProp
CrossClientLP round in real mode with tests/adversary.py's harness rewriting what the
server relays (the sans-I/O attacks are tests/protocols/test_malicious_lsh.py).  Every
attacked client raises ProtocolError at ``cclp/shares`` and seals no share.
"""

from __future__ import annotations

import numpy as np
import pytest

from securefl.errors import DropoutError
from securefl.fl import model_vector
from securefl.methods import build_method
from securefl.methods.halves import MethodProgramClient, local_data, run_config
from securefl.models import build_model
from securefl.protocols.crossclient.server_round import cross_client_round
from securefl.runtime.transport import InProcessTransport, NodeContext
from tests.adversary import Adversary

MEMBERS = [0, 1, 2]


def _round(federation, adversary):
    """One real FedProp CrossClientLP round among MEMBERS with ``adversary`` rewriting every
    request; returns ``(outcome or the DropoutError, failures by client)``."""
    method = build_method("fedprop", secure="real", seed=4, clients_per_round=3, L=64, k=5,
                          hamming_backend="shade")
    nodes = [NodeContext(k, {"partition-id": k}, run_config(method), local_data(federation, k))
             for k in range(federation.num_clients)]
    transport = InProcessTransport(MethodProgramClient(), nodes, intercept=adversary)
    failures = {}
    deliver = transport._exchange

    def watched(step, requests, timeout):
        result = deliver(step, requests, timeout)
        failures.update(result.failed)
        return result

    transport._exchange = watched
    model = build_model(method.model, input_shape=tuple(federation.input_shape),
                        num_classes=federation.num_classes, seed=4)
    try:
        outcome = cross_client_round(transport, MEMBERS, feature_model=model_vector(model),
                                     round_index=0, secure="real", k=method.k, alpha=method.alpha,
                                     L=method.L, num_classes=federation.num_classes)
    except DropoutError as error:
        outcome = error
    return outcome, failures


KEYS, TAGS = "cclp/lsh/1", "cclp/lsh/2"


@pytest.mark.parametrize("attack", ["substitute", "untag", "relabel"])
def test_a_server_rewriting_the_lsh_key_table_is_refused_by_every_client(attack, tiny_digits):
    """At ``cclp/shares`` the server's table carries its own keys (the genuine aggregate tag
    kept), no tag, or the peers' keys swapped between parties: every client
    raises ProtocolError and sends no sealed share, so nobody reaches SecureHamming."""
    adversary = Adversary()

    def rewrite(client, request):
        arrays, config = dict(request.arrays), dict(request.config)
        keys = np.array(arrays[KEYS], copy=True)
        ids = arrays["cclp/lsh/0"]
        others = [row for row, party in enumerate(ids) if int(party) != MEMBERS.index(client)]
        if attack == "substitute":
            for row in others:
                keys[row] = adversary.public(int(ids[row]))
        elif attack == "relabel":  # two peers' keys swapped (the aggregate tag is order-free)
            keys[others] = keys[others[::-1]]
        else:
            del arrays[TAGS]
            config["cclp/lsh/count"] = 2
        arrays[KEYS] = keys
        request.arrays, request.config = arrays, config
        return request

    adversary.on("cclp/shares", rewrite)
    outcome, failures = _round(tiny_digits, adversary)
    assert isinstance(outcome, DropoutError)
    expected = "aggregate tag (unauthenticated)" if attack == "untag" else "does not verify"
    assert sorted(failures) == MEMBERS
    assert all(failures[c].startswith("ProtocolError") and expected in failures[c] for c in MEMBERS)
    assert not any(step == "cclp/codes" for _, step, _ in adversary.seen)  # no share relayed


def test_a_server_showing_one_client_another_member_list_is_refused(tiny_digits):
    """Client 2 is shown members [3, 1, 2] (the others [0, 1, 2]): its key is tagged for
    another cohort, so clients 0 and 1 refuse it, and client 2 refuses theirs (tagged for
    the cohort it was not shown)."""
    adversary = Adversary()

    def other_members(client, request):
        if client == 2:
            request.arrays = {**request.arrays, "cclp/members": np.array([3, 1, 2], np.int64)}
        return request

    adversary.on("cclp/advertise", other_members)
    outcome, failures = _round(tiny_digits, adversary)
    assert isinstance(outcome, DropoutError) and sorted(failures) == MEMBERS
    assert all("does not verify" in failures[c] for c in MEMBERS)
