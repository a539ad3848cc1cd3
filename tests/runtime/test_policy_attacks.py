"""A server choosing the privacy settings (securefl.runtime.policy): the cohort and threshold of
a secure sum come from the request, but the client checks them against its own policy.

The attack of the review: a request with ``members=1, threshold=1`` makes the "sum" the
client's own vector.  With a node policy that allows it (the attack as it worked before),
the server reads the client's update exactly; with the deployment default (or any
``min_cohort`` above 1) the client refuses and sends nothing.
"""

from __future__ import annotations

import numpy as np
import pytest

from securefl.errors import ProtocolError
from securefl.fl import uploads
from securefl.fl.uploads import UploadPlan
from securefl.runtime.policy import LEDGER, POLICY, PrivacyLedger, PrivacyPolicy, node_policy
from securefl.runtime.transport import ClientHalf, InProcessTransport, NodeContext, Record

VECTORS = [np.linspace(-1, 1, 7) * (c + 1) for c in range(4)]


class Uploader(ClientHalf):
    program = "uploader"

    def handle(self, step, request, state, node):
        reply = Record()
        if step != "upload":
            from securefl.runtime import secure_sum_steps

            secure_sum_steps.answer(request, state, reply, credentials=node.credentials())
            return reply
        uploads.upload(reply, state, request, secure="real", sum_backend="secagg",
                       vectors={"model": VECTORS[node.partition]}, weight=1.0,
                       credentials=node.credentials(), policy=node.policy())
        return reply


def run(members, threshold, policy):
    """The server's upload request for ``members``, with the threshold it writes forged to
    ``threshold`` (an honest :class:`UploadPlan` refuses a minority itself)."""
    nodes = [NodeContext(k, {"partition-id": k, POLICY: policy}, {}) for k in range(4)]
    transport = InProcessTransport(Uploader(), nodes)
    plan = UploadPlan.new(secure="real", sum_backend="secagg", members=members, dims={"model": 7})
    requests = {}
    for c in members:
        requests[c] = plan.request(c)
        requests[c].config[uploads.THRESHOLD] = threshold
    first = transport.exchange("upload", requests)
    return plan, transport, first


def test_a_cohort_of_one_reveals_the_update_unless_the_client_refuses_it():
    lax = PrivacyPolicy(min_cohort=1)
    plan, transport, first = run([2], 1, lax)
    outcome = plan.collect(transport, first)
    assert np.allclose(outcome.averages["model"], VECTORS[2], atol=1e-9)  # the attack works
    _, _, first = run([2], 1, PrivacyPolicy())  # the deployment default: min_cohort 2
    assert first.replies == {} and "below this node's minimum cohort" in first.failed[2]


def test_a_minority_threshold_is_refused_before_anything_is_sent():
    _, _, first = run([0, 1, 2, 3], 2, PrivacyPolicy(min_cohort=1))
    assert first.replies == {}
    assert all("is not a majority" in first.failed[c] for c in range(4))


def test_a_deployment_policy_is_read_from_node_config_keys():
    config = {"policy-secure": "plaintext", "policy-sum-backends": "secagg,he", "policy-min-cohort": 5,
              "policy-dp-min-noise": 2, "policy-epsilon": 3.5, "policy-allow-crypto-seed": True}
    policy = node_policy(config)
    assert policy == PrivacyPolicy(secure="plaintext", sum_backends=("secagg", "he"), min_cohort=5,
                                   dp_min_noise=2.0, epsilon=3.5, allow_crypto_seed=True)
    assert node_policy({}) == PrivacyPolicy()
    with pytest.raises(Exception, match="policy-min-cohort"):
        node_policy({"policy-min-cohort": 0})
    with pytest.raises(Exception, match="policy-allow-crypto-seed"):
        node_policy({"policy-allow-crypto-seed": "yes"})


def test_the_ledger_refuses_a_second_release_per_round_and_past_the_budget(tmp_path):
    from securefl.crypto.dp import epsilon_for

    path = tmp_path / "ledger.json"
    ledger = PrivacyLedger.open(path)
    ledger.release(session=b"s", round_index=0, noise_multiplier=2.0, delta=1e-5, budget=None)
    with pytest.raises(ProtocolError, match="second DP release"):
        PrivacyLedger.open(path).release(session=b"s", round_index=0, noise_multiplier=2.0,
                                         delta=1e-5, budget=None)  # a fresh process reads the file
    budget = epsilon_for(2.0, 3, 1e-5)  # room for exactly three releases
    reopened = PrivacyLedger.open(path)
    reopened.release(session=b"t", round_index=0, noise_multiplier=2.0, delta=1e-5, budget=budget)
    reopened.release(session=b"t", round_index=1, noise_multiplier=2.0, delta=1e-5, budget=budget)
    with pytest.raises(ProtocolError, match="budget"):
        reopened.release(session=b"t", round_index=2, noise_multiplier=2.0, delta=1e-5, budget=budget)
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert isinstance(InProcessTransport(Uploader(), [NodeContext(0, {}, {})]).nodes[0].node_config[LEDGER],
                      PrivacyLedger)


def test_the_strict_policy_allows_shade_only_and_auto_resolves_to_it():
    """A deployment node without ``policy-hamming-backends`` runs SHADE only: ``auto``
    falls back to SHADE where the cost model would pick ring-LWE (FedProp's digits round,
    5 x 121 points at L = 1024), and an explicit ``lwe``/``rlwe`` is refused."""
    from securefl.crypto.hamming import choose_backend

    digits_round = [121] * 5
    assert choose_backend(digits_round, 1024) == "rlwe"
    strict = node_policy({})
    assert strict.hamming_backends == ("shade",)
    assert strict.hamming_backend("auto", digits_round, 1024) == "shade"
    for backend in ("lwe", "rlwe"):
        with pytest.raises(ProtocolError, match="not allowed"):
            strict.hamming_backend(backend, digits_round, 1024)
    trusting = node_policy({"policy-hamming-backends": "shade,lwe,rlwe"})
    assert trusting.hamming_backend("auto", digits_round, 1024) == "rlwe"
    assert trusting.hamming_backend("lwe", digits_round, 1024) == "lwe"
    with pytest.raises(Exception, match="policy-hamming-backends"):
        node_policy({"policy-hamming-backends": "shade,paillier"})


def test_the_ledger_caps_the_summed_lwe_flooding_distance(tmp_path):
    """Every answered LWE session adds its statistical distance; one that would pass the
    cap is refused, so is a second answer in one session, and the count survives a new
    process (the file)."""
    from securefl.crypto.lwe import STATISTICAL_BOUND, statistical_distance

    assert PrivacyPolicy().lwe_max_distance == 2.0**-30
    cap = 4 * STATISTICAL_BOUND
    path = tmp_path / "ledger.json"
    for s in range(4):
        PrivacyLedger.open(path).serve_lwe(session=bytes([s]), distance=STATISTICAL_BOUND, cap=cap)
    with pytest.raises(ProtocolError, match="second LWE evaluation"):
        PrivacyLedger.open(path).serve_lwe(session=bytes([3]), distance=0.0, cap=None)
    with pytest.raises(ProtocolError, match="flooding distance"):
        PrivacyLedger.open(path).serve_lwe(session=b"next", distance=STATISTICAL_BOUND / 8, cap=cap)
    ledger = PrivacyLedger.open(path)
    assert len(ledger.lwe) == 4 and ledger.lwe_distance == cap
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    mnist_round = statistical_distance([600] * 10, 4096)  # 2^-45.1 per session
    assert 2**15 < 2.0**-30 / mnist_round < 2**15.2


def test_he_runs_in_process_only_and_a_deployment_refuses_it():
    """HE aggregation has no exchanges: it is simulated by the in-process transport.  On any
    other transport the server's plan refuses it (it would upload in the clear), and a
    deployment node's strict policy refuses a run config asking for it."""
    from types import SimpleNamespace

    from securefl.errors import InputError
    from securefl.runtime.transport import Transport

    class Elsewhere(Transport):
        clients = (0, 1, 2)

        def _exchange(self, step, requests, timeout):
            raise AssertionError("an HE sum reached a client")

    with pytest.raises(InputError, match="simulated in process only"):
        uploads.refuse_simulated_backend("real", "he", Elsewhere(program="method"))
    uploads.refuse_simulated_backend("real", "he", InProcessTransport(Uploader(), [NodeContext(0, {}, {})]))
    method = SimpleNamespace(name="fedavg-labeled", secure="real", sum_backend="he")
    with pytest.raises(ProtocolError, match="sum_backend='he'"):
        node_policy({}).check_method(method)
