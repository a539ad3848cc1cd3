"""Weighted sums over groups of clients as exchanges (securefl.fl.group_sums): each sum with
its own members, all in the same exchanges, bit-identical to the in-process sums, with the
bytes the in-process protocol meters; a client contributes exactly the sums it is asked for.
"""

from __future__ import annotations

import numpy as np
import pytest

from securefl.crypto.identity import new_federation
from securefl.errors import DropoutError, ProtocolError
from securefl.fl import group_sums, secure_weighted_sum
from securefl.fl.group_sums import GroupSumPlan
from securefl.runtime import secure_sum_steps
from securefl.runtime.policy import PrivacyPolicy
from securefl.runtime.summation import secure_sum
from securefl.runtime.transport import ClientHalf, InProcessTransport, NodeContext, Record

VALUES = [np.linspace(-1.0, 1.0, 6) * (c + 1) + 0.1 * c for c in range(5)]
WEIGHTS = [3.0, 5.0, 2.0, 7.0, 4.0]
GROUPS = {"all": [0, 1, 2, 3, 4], "odd": [1, 3], "some": [0, 2, 3]}


class Contributor(ClientHalf):
    """Contributes ``values[k] * factor(name)`` to every sum its request names."""

    program = "contributor"

    def handle(self, step, request, state, node):
        reply = Record()
        if step in secure_sum_steps.STEPS:
            secure_sum_steps.answer(request, state, reply, credentials=node.credentials())
            return reply
        run = node.run_config
        vectors = {name: VALUES[node.partition] * (1 + len(name))
                   for name in group_sums.requested(request)}
        group_sums.contribute(reply, state, request, secure=run["secure"], sum_backend="secagg",
                              vectors=vectors, weight=WEIGHTS[node.partition] if run["weighted"] else None,
                              credentials=node.credentials(), policy=node.policy())
        return reply


def run_sums(secure, weighted=True, dropouts=None):
    nodes = [NodeContext(k, {"partition-id": k}, {"secure": secure, "weighted": weighted}) for k in range(5)]
    transport = InProcessTransport(Contributor(), nodes, dropouts=dropouts)
    plan = GroupSumPlan.new(secure=secure, sum_backend="secagg", groups=GROUPS,
                            dims={name: 6 for name in GROUPS}, weighted=weighted)
    first = transport.exchange("input", {k: plan.request(k) for k in range(5)})
    return plan.collect(transport, first), transport


@pytest.mark.parametrize("weighted", [True, False])
def test_sums_with_their_own_members_equal_the_in_process_sums_bit_for_bit(weighted):
    real, transport = run_sums("real", weighted)
    plain, _ = run_sums("plaintext", weighted)
    assert transport.stats.exchanges == 5  # one input step, four secure-sum steps for all sums
    for name, members in GROUPS.items():
        vectors = [VALUES[c] * (1 + len(name)) for c in members]
        if weighted:
            total, weight, report = secure_weighted_sum(vectors, [WEIGHTS[c] for c in members],
                                                        secure="plaintext")
            assert real.weights[name] == plain.weights[name] == weight
            reference = secure_sum([np.append(v * WEIGHTS[c], WEIGHTS[c]) for v, c in zip(vectors, members)],
                                   threshold=len(members) // 2 + 1, backend="secagg")
        else:
            total = secure_sum(vectors, threshold=len(members) // 2 + 1, backend="plaintext").total
            reference = secure_sum(vectors, threshold=len(members) // 2 + 1, backend="secagg")
        assert np.array_equal(real.totals[name], total) and np.array_equal(plain.totals[name], total)
        assert real.survivors[name] == plain.survivors[name] == tuple(members)
        # frames a member sent: what secure_sum's own network meters for the same protocol
        assert real.bytes_per_member[name] == np.mean([reference.bytes_sent[i] for i in range(len(members))])


def test_a_dropout_leaves_only_the_sums_it_belongs_to_and_a_small_sum_fails_alone():
    early, _ = run_sums("real", dropouts={2: "secagg/ciphertexts"})
    assert early.survivors == {"all": (0, 1, 3, 4), "odd": (1, 3), "some": (0, 3)}
    assert early.dropped["masked_input"] == (2,)
    late, _ = run_sums("real", dropouts={2: "secagg/survivors"})
    assert late.survivors == {name: tuple(members) for name, members in GROUPS.items()}
    with pytest.raises(DropoutError):
        run_sums("real", dropouts={3: "secagg/keys"})  # "odd" (members 1, 3; threshold 2) cannot finish
    with pytest.raises(DropoutError):
        run_sums("plaintext", dropouts={3: "input"})


def test_a_client_contributes_exactly_the_sums_it_is_asked_for():
    plan = GroupSumPlan.new(secure="real", sum_backend="secagg", groups=GROUPS, dims={n: 6 for n in GROUPS})
    request = plan.request(1)
    assert group_sums.requested(request) == {"all": 5, "odd": 2}
    credentials = new_federation("t", 5)[1][1]
    with pytest.raises(ProtocolError, match="asks for sums"):
        group_sums.contribute(Record(), Record(), request, secure="real", sum_backend="secagg",
                              vectors={"all": VALUES[1]}, weight=1.0, credentials=credentials,
                              policy=PrivacyPolicy.simulator())
    reply = Record()
    group_sums.contribute(reply, Record(), request, secure="real", sum_backend="secagg",
                          vectors={"all": VALUES[1], "odd": VALUES[1]}, weight=1.0,
                          credentials=credentials, policy=PrivacyPolicy.simulator())
    assert not any(k.startswith("sums/") for k in (*reply.arrays, *reply.config))  # never in the clear
