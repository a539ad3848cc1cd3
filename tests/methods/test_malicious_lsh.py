"""Key substitution on FedProp's LSH seed agreement over the transport: a FedProp
CrossClientLP round in real mode with tests/adversary.py's harness rewriting what the
server relays (the sans-I/O attacks are tests/protocols/test_malicious_lsh.py).  Every
attacked client raises ProtocolError at ``cclp/codes``: the shares relayed to it do not
open (that the server opens none of them either is tests/protocols/test_malicious_lsh.py's).
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


KEYS = "cclp/lsh/1"


@pytest.mark.parametrize("attack", ["substitute", "relabel"])
def test_a_server_rewriting_the_lsh_key_table_is_refused_by_every_client(attack, tiny_digits):
    """At ``cclp/shares`` the server's table carries its own keys, or the peers' keys swapped
    between parties: every share is sealed under a key bound to the roster's pair keys, so
    each client's ``cclp/codes`` finds shares that do not open, raises ProtocolError, and
    nobody reaches SecureHamming."""
    adversary = Adversary()

    def rewrite(client, request):
        arrays = dict(request.arrays)
        keys = np.array(arrays[KEYS], copy=True)
        ids = arrays["cclp/lsh/0"]
        others = [row for row, party in enumerate(ids) if int(party) != MEMBERS.index(client)]
        if attack == "substitute":
            for row in others:
                keys[row] = adversary.public(int(ids[row]))
        else:
            keys[others] = keys[others[::-1]]
        arrays[KEYS] = keys
        request.arrays = arrays
        return request

    adversary.on("cclp/shares", rewrite)
    outcome, failures = _round(tiny_digits, adversary)
    assert isinstance(outcome, DropoutError)
    assert sorted(failures) == MEMBERS
    assert all(failures[c].startswith("ProtocolError") and "does not open" in failures[c]
               for c in MEMBERS)
    assert {step for _, step, _ in adversary.seen} <= {"cclp/advertise", "cclp/shares", "cclp/codes"}


def test_a_server_showing_one_client_another_member_list_is_refused(tiny_digits):
    """Client 2 is shown members [3, 1, 2] (the others [0, 1, 2]): its seal keys are bound to
    another cohort (and to client 3's pair key for party 0), so clients 0 and 1 cannot open
    its share, and client 2 cannot open theirs: all three refuse the round."""
    adversary = Adversary()

    def other_members(client, request):
        if client == 2:
            request.arrays = {**request.arrays, "cclp/members": np.array([3, 1, 2], np.int64)}
        return request

    adversary.on("cclp/advertise", other_members)
    outcome, failures = _round(tiny_digits, adversary)
    assert isinstance(outcome, DropoutError) and sorted(failures) == MEMBERS
    assert all("does not open" in failures[c] for c in MEMBERS)
