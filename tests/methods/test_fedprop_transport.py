"""FedProp's CrossClientLP over a transport: a client that stops answering at any step gets
the outcome :class:`securefl.protocols.crossclient.Dropouts` defines for that stage (the
ideal functionality :func:`securefl.protocols.crossclient.ideal_cross_client_lp` is the
reference), and a relay that
alters, replays or misroutes a client-to-client frame makes the receiving client raise
ProtocolError.
"""

from __future__ import annotations

import numpy as np
import pytest

from securefl.errors import DropoutError
from securefl.fl import extract_features, model_vector
from securefl.methods import build_method
from securefl.methods.fedprop.client import FedPropClient
from securefl.methods.halves import MethodProgramClient, local_data, run_config
from securefl.models import build_model
from securefl.protocols.crossclient import cross_client_lp, ideal_cross_client_lp
from securefl.protocols.crossclient.server_round import cross_client_round
from securefl.runtime.transport import InProcessTransport, NodeContext, Record
from tests.adversary import Adversary

MEMBERS = [0, 1, 2]
KEYWORDS = {"clients_per_round": 3, "L": 64, "k": 5, "crypto_seed": 99}


def _transport(method, federation, *, dropouts=None, intercept=None, replies=None):
    """An in-process transport to every client of ``federation`` running ``method``'s
    client half; ``replies``, when a list, collects every reply it delivers."""
    nodes = [NodeContext(k, {"partition-id": k}, run_config(method), local_data(federation, k))
             for k in range(federation.num_clients)]
    transport = InProcessTransport(MethodProgramClient(), nodes, dropouts=dropouts,
                                   intercept=intercept)
    if replies is not None:
        deliver = transport._exchange

        def watched(step, requests, timeout):
            result = deliver(step, requests, timeout)
            # as delivered: the round lets go of forwarded batches later
            replies.extend(Record(dict(r.arrays), dict(r.config)) for r in result.replies.values())
            return result

        transport._exchange = watched
    return transport


def _run(federation, *, secure="real", dropouts=None, intercept=None, replies=None, backend="shade",
         server=None):
    """CrossClientLP among MEMBERS over an in-process transport, and each member's output
    (``replies``: a list that collects every reply; ``backend``: the Hamming backend;
    ``server(transport)``: modifies the server's side of the transport before the round)."""
    method = build_method("fedprop", secure=secure, seed=4, hamming_backend=backend, **KEYWORDS)
    transport = _transport(method, federation, dropouts=dropouts, intercept=intercept,
                           replies=replies)
    if server is not None:
        server(transport)
    model = build_model(method.model, input_shape=tuple(federation.input_shape),
                        num_classes=federation.num_classes, seed=4)
    done = cross_client_round(transport, MEMBERS, feature_model=model_vector(model), round_index=0,
                              secure=secure, k=method.k, alpha=method.alpha, L=method.L,
                              num_classes=federation.num_classes, hamming_backend=backend)
    outputs = {}
    for client in MEMBERS:
        if client not in done.rows:
            outputs[client] = None
            continue
        result = FedPropClient(method).finish_rows(done.rows[client], transport.states[client],
                                                   transport.nodes[client])
        outputs[client] = (result.pseudo_labels, result.weights)
    features = [extract_features(model, federation.clients[k].x) for k in MEMBERS]
    labels = [federation.clients[k].observed_labels() for k in MEMBERS]
    reference = dict(features=features, labels=labels, num_classes=federation.num_classes,
                     k=method.k, alpha=method.alpha, L=method.L, backend=secure,
                     seed=method.crypto_seed_for("lsh", 0), hamming_backend=backend)
    return done, outputs, reference


def _ideal(reference, dropouts=None):
    """The ideal functionality's ``(pseudo_labels, weights)`` per member on ``reference``."""
    keywords = {k: v for k, v in reference.items() if k not in ("backend", "hamming_backend")}
    return list(cross_client_result(ideal_cross_client_lp(**keywords, dropouts=dropouts)))


def cross_client_result(ideal):
    for output in ideal.outputs:
        yield (None, None) if output is None else (output.pseudo_labels, output.weights)


def _same(outputs, expected):
    for client, (labels, weights) in zip(MEMBERS, expected):
        if labels is None:
            assert outputs[client] is None, client
        else:
            assert outputs[client] is not None, client
            np.testing.assert_array_equal(outputs[client][0], labels)
            np.testing.assert_array_equal(outputs[client][1], weights)


@pytest.mark.parametrize("secure", ["plaintext", "real"])
def test_without_dropouts_the_clients_get_the_ideal_outputs_and_the_simulators_bytes(secure,
                                                                                    tiny_digits):
    """FedProp's client (embedding by the round's model) gives the ideal functionality's
    outputs and exactly the nominal bytes of the simulator's clients holding those features."""
    done, outputs, reference = _run(tiny_digits, secure=secure)
    _same(outputs, _ideal(reference))
    simulated = cross_client_lp(**reference)
    assert done.protocol_bytes_per_client == pytest.approx(
        np.mean(list(simulated.bytes_per_client().values())))
    assert done.failed == {} and done.graph == done.in_sum == done.survivors == MEMBERS


def test_a_real_client_sends_no_codes_shares_or_scores_in_the_clear(tiny_digits):
    """What leaves a client in real mode: public keys, AES-GCM-sealed seed shares, sealed
    SHADE batches for its peers, its shares of H and own block, labeled positions and
    secure-sum messages -- never its LSH codes, seed share or score matrix in the clear
    (the plaintext placeholder's ``cclp/codes``, ``cclp/share``, ``cclp/input``)."""
    real, plain = [], []
    _run(tiny_digits, replies=real)
    _run(tiny_digits, secure="plaintext", replies=plain)
    clear = ("cclp/codes", "cclp/share", "cclp/input")
    assert any(name in r.arrays for r in plain for name in clear)
    names = {name for r in real for name in r.arrays}
    assert not names & set(clear) and not any("features" in n for n in names)
    assert any(n.startswith("relay/to/") for n in names)
    assert all(r.arrays[n].dtype == np.uint8 for r in real for n in r.arrays if n.startswith("relay/to/"))


@pytest.mark.parametrize("dropouts, stages", [
    ({1: ("cclp/codes", 0)}, {"before_hamming": {1}}),            # no codes
    ({2: ("cclp/shade/2", 0)}, {"before_hamming": {2}}),          # gone during SHADE
    ({0: ("cclp/columns", 0)}, {"before_sum": {0}}),              # in the graph, no columns
    ({2: ("secagg/ciphertexts", 0)}, {"during_sum": {2: "masked_input"}}),
    ({1: ("secagg/survivors", 0)}, {"during_sum": {1: "unmask"}}),  # contributes, no output
])
def test_a_client_lost_at_each_step_gets_the_protocols_dropout_outcome(dropouts, stages, tiny_digits):
    done, outputs, reference = _run(tiny_digits, dropouts=dropouts)
    _same(outputs, _ideal(reference, stages))
    (client,) = dropouts
    assert client not in done.rows
    assert any(client in lost for lost in done.dropped.values())


def test_a_client_lost_during_seed_agreement_stops_the_round(tiny_digits):
    with pytest.raises(DropoutError, match="SecureHamming"):
        _run(tiny_digits, dropouts={1: ("cclp/shares", 0)})


def _flip(blob):
    altered = np.array(blob, copy=True)
    altered[len(altered) // 2] ^= 1
    return altered


@pytest.mark.parametrize("attack", ["alter", "replay", "misroute"])
def test_a_relay_that_tampers_with_shade_frames_is_caught_by_the_receiving_client(attack, tiny_digits):
    """A modified server changes what it relays to client 1 at SHADE's third hop (client 0's
    IKNP matrix): a flipped bit, client 0's batch of the first hop replayed, or the batch
    client 2 sent client 0 delivered as if from 0.  Client 1 raises ProtocolError and leaves
    the graph; the others finish among themselves (as if client 1 had dropped before
    SecureHamming)."""
    kept = {}

    def tamper(client, request):
        step = request.config["_step"]
        if step == "cclp/shade/1" and client == 1:
            kept["replay"] = np.array(request.arrays["relay/from/0"])
        if step == "cclp/shade/3" and client == 0:
            kept["misroute"] = np.array(request.arrays["relay/from/2"])
        if client != 1 or step != "cclp/shade/3":
            return request
        arrays = dict(request.arrays)
        arrays["relay/from/0"] = _flip(arrays["relay/from/0"]) if attack == "alter" else kept[attack]
        request.arrays = arrays
        return request

    done, outputs, reference = _run(tiny_digits, intercept=tamper)
    assert done.failed[1].startswith("ProtocolError")
    assert 1 not in done.graph and outputs[1] is None
    _same(outputs, _ideal(reference, {"before_hamming": {1}}))


def test_a_relay_that_alters_a_sealed_seed_share_is_caught(tiny_digits):
    def tamper(client, request):
        if client == 2 and request.config["_step"] == "cclp/codes":
            request.arrays = {k: (_flip(v) if k == "cclp/lsh/1" else v) for k, v in request.arrays.items()}
        return request

    done, outputs, _ = _run(tiny_digits, intercept=tamper)
    assert done.failed[2].startswith("ProtocolError")
    assert 2 not in done.graph and outputs[2] is None


@pytest.mark.parametrize("dropouts, stages", [
    ({}, {}),
    ({2: ("cclp/lwe/1", 0)}, {"before_hamming": {2}}),            # no broadcasts
    ({0: ("cclp/lwe/2", 0)}, {"before_hamming": {0}}),            # no answer D
    ({1: ("cclp/lwe/3", 0)}, {"before_hamming": {1}}),            # no decryption
])
def test_lwe_hops_give_the_ideal_outputs_and_the_simulators_bytes(dropouts, stages, tiny_digits):
    """hamming_backend="lwe" over the transport (securefl.crypto.lwe_hops): the outputs of
    the ideal functionality, the simulator's nominal
    bytes without dropouts, and a client lost at an LWE hop left out of the graph."""
    done, outputs, reference = _run(tiny_digits, dropouts=dropouts or None, backend="lwe")
    _same(outputs, _ideal(reference, stages or None))
    if not dropouts:
        assert done.protocol_bytes_per_client == pytest.approx(
            np.mean(list(cross_client_lp(**reference).bytes_per_client().values())))
        assert done.failed == {} and done.graph == MEMBERS
    else:
        (client,) = dropouts
        assert client not in done.graph and client not in done.rows


@pytest.mark.parametrize("attack", ["alter", "replay", "misroute", "answer", "hint"])
def test_a_relay_that_tampers_with_lwe_frames_is_caught_by_the_receiving_client(attack, tiny_digits):
    """A modified server changes what it relays for the LWE backend: at the evaluation hop
    client 1 gets client 2's ciphertext block with a flipped bit, its first block again in
    place of the second, or client 1's own blocks (relayed to client 0) as if for it; at the
    decryption hop client 0 gets client 2's sealed answer D or client 2's hint with a flipped
    bit.  The receiving client raises ProtocolError and leaves the graph; the others finish
    (as if it had dropped before SecureHamming)."""
    kept = {}
    victim = 0 if attack in ("answer", "hint") else 1

    def tamper(client, request):
        step = request.config["_step"]
        if step == "cclp/lwe/2" and client == 0:
            kept["misroute"] = request
        if client != victim or step != ("cclp/lwe/3" if victim == 0 else "cclp/lwe/2"):
            return request
        arrays, config = dict(request.arrays), dict(request.config)
        if attack == "alter":
            arrays["cclp/lwe/in/0/0"] = _flip(arrays["cclp/lwe/in/0/0"].reshape(-1)).reshape(
                arrays["cclp/lwe/in/0/0"].shape)
        elif attack == "hint":
            arrays["cclp/lwe/in/0/1"] = _flip(arrays["cclp/lwe/in/0/1"].reshape(-1)).reshape(
                arrays["cclp/lwe/in/0/1"].shape)
        elif attack == "answer":
            arrays["relay/from/2"] = _flip(arrays["relay/from/2"])
        elif attack == "replay":
            for key in [k for k in arrays if k.startswith("cclp/lwe/in/0/")]:
                arrays["cclp/lwe/in/1/" + key.rsplit("/", 1)[1]] = arrays[key]
            config["cclp/lwe/in/1/tag"] = config["cclp/lwe/in/0/tag"]
        else:
            other = kept["misroute"]
            for table, source in ((arrays, other.arrays), (config, other.config)):
                for key in [k for k in table if k.startswith("cclp/lwe/in/")]:
                    del table[key]
                table.update({k: v for k, v in source.items() if k.startswith("cclp/lwe/in/")})
        request.arrays, request.config = arrays, config
        return request

    done, outputs, reference = _run(tiny_digits, intercept=tamper, backend="lwe")
    assert done.failed[victim].startswith("ProtocolError"), done.failed
    assert victim not in done.graph and outputs[victim] is None
    _same(outputs, _ideal(reference, {"before_hamming": {victim}}))


@pytest.mark.parametrize("attack", ["substitute", "unsigned"])
def test_a_server_substituting_an_lwe_key_is_refused(attack, tiny_digits):
    """Issue 20, key substitution on the LWE backend: the server relays to client 1 its own
    X25519 key in place of client 0's (under client 0's signature, or unsigned).  Client 1
    refuses it before deriving any pair key and leaves the graph; the others finish."""
    adversary = Adversary()

    def substitute(client, request):
        if client != 1:
            return request
        slot = next(k[:-len("/tag")] for k, v in request.config.items()
                    if k.startswith("cclp/lwe/in/") and k.endswith("/tag") and v == "lwe/key/0")
        request.arrays[f"{slot}/0"] = adversary.public(("lwe", 0))
        if attack == "unsigned":
            del request.arrays[f"{slot}/1"]
            request.config[f"{slot}/count"] = 1
        return request

    adversary.on("cclp/lwe/1", substitute)
    done, outputs, reference = _run(tiny_digits, intercept=adversary, backend="lwe")
    assert done.failed[1].startswith("ProtocolError"), done.failed
    assert ("unsigned" if attack == "unsigned" else "does not verify") in done.failed[1]
    assert 1 not in done.graph and outputs[1] is None
    _same(outputs, _ideal(reference, {"before_hamming": {1}}))


def test_a_server_resending_the_lwe_evaluation_request_gets_no_second_answer(tiny_digits):
    """Issue 20, item 5: a server that sends the evaluation hop (``cclp/lwe/2``) again gets
    ProtocolError from every client and no reply (no second answer D under the same masks,
    key and nonce); the round finishes on the first answers."""
    second = {}

    def resend(transport):
        exchange = transport.exchange

        def twice(step, requests, *, timeout=None):
            result = exchange(step, requests, timeout=timeout)
            if step == "cclp/lwe/2":
                second["result"] = exchange(step, requests, timeout=timeout)
            return result

        transport.exchange = twice

    _, outputs, reference = _run(tiny_digits, backend="lwe", server=resend)
    again = second["result"]
    assert again.replies == {} and sorted(again.failed) == MEMBERS
    assert all(text.startswith("ProtocolError") and "hop 2 after hop 2" in text
               for text in again.failed.values())
    _same(outputs, _ideal(reference))


def test_rounds_reuse_each_pairs_ot_setup_and_stay_exact(tiny_digits):
    """Three rounds on one transport with shifting members (a client's position, and with it
    its role in a pair, changes): every round's outputs equal the plaintext protocol's; a
    pair that met before in the same roles resumes its IKNP setup (no base-OT points, fewer
    bytes); the setups stay in the clients' states -- no reply carries a base-OT key and
    no checkpoint keeps them."""
    method = build_method("fedprop", secure="real", seed=4, **KEYWORDS)
    replies = []
    transport = _transport(method, tiny_digits, replies=replies)
    model = build_model(method.model, input_shape=tuple(tiny_digits.input_shape),
                        num_classes=tiny_digits.num_classes, seed=4)
    rounds = [[0, 1, 2], [0, 1, 2], [2, 1, 0]]  # the reversed order flips every pair's roles
    costs = []
    for round_index, members in enumerate(rounds):
        done = cross_client_round(transport, members, feature_model=model_vector(model),
                                  round_index=round_index, secure="real", k=method.k, alpha=method.alpha,
                                  L=method.L, num_classes=tiny_digits.num_classes)
        assert done.failed == {} and sorted(done.rows) == sorted(members)
        features = [extract_features(model, tiny_digits.clients[k].x) for k in members]
        labels = [tiny_digits.clients[k].observed_labels() for k in members]
        expected = list(cross_client_result(ideal_cross_client_lp(
            features, labels, num_classes=tiny_digits.num_classes, k=method.k, alpha=method.alpha,
            L=method.L, seed=method.crypto_seed_for("lsh", round_index))))
        for party, client in enumerate(members):
            result = FedPropClient(method).finish_rows(done.rows[client], transport.states[client],
                                                       transport.nodes[client])
            np.testing.assert_array_equal(result.pseudo_labels, expected[party][0])
            np.testing.assert_array_equal(result.weights, expected[party][1])
        costs.append(done.protocol_bytes_per_client)
    # round 2 repeats round 1's positions: every pair resumes, so no base-OT points travel
    # (each client is in two pairs; a pair's 128 x 2 points of 32 bytes count at both ends)
    assert costs[0] - costs[1] > 1.9 * 128 * 2 * 32
    sessions = {(c, k): int(v[0]) for c in MEMBERS for k, v in transport.states[c].arrays.items()
                if k.startswith("ot/") and k.endswith("/next")}
    # per client and peer: one setup per direction, used in rounds 1-2 (next session 2) or 3 (1)
    assert len(sessions) == 12 and sorted(sessions.values()) == [1] * 6 + [2] * 6
    keys = {bytes(row) for c in MEMBERS for k, v in transport.states[c].arrays.items()
            if k.startswith("ot/") and "/seeds" in k for row in np.asarray(v).reshape(-1, 16)}
    assert len(keys) > 128
    sent = b"".join(np.ascontiguousarray(a).tobytes() for r in replies for a in r.arrays.values())
    assert not any(key in sent for key in keys)
    assert all(not k.startswith("ot/") for state in transport.client_states().values() for k in state.arrays)


@pytest.mark.parametrize("secure, backend", [("plaintext", "shade"), ("real", "shade"),
                                             ("real", "rlwe")])
def test_the_server_drives_exactly_the_steps_the_clients_table_declares(secure, backend, tiny_digits):
    """The server's round is one generator of engine Steps: in order, the steps its mode and
    the clients' Hamming backend define, each one the client step table (or the secure sum's)
    declares, and the outputs those of the ideal functionality."""
    from securefl.protocols.crossclient.client_steps import (
        ADVERTISE,
        CLIENT_STEPS,
        CODES,
        COLUMNS,
        LWE,
        SHADE,
        SHARES,
        SUM,
    )
    from securefl.runtime import secure_sum_steps

    driven = []

    def watch(transport):
        deliver = transport._exchange

        def watched(step, requests, timeout):
            driven.append(step)
            return deliver(step, requests, timeout)

        transport._exchange = watched

    done, outputs, reference = _run(tiny_digits, secure=secure, backend=backend, server=watch)
    hops = {"shade": SHADE, "rlwe": LWE}[backend]
    expected = [ADVERTISE, SHARES, COLUMNS, SUM] if secure == "plaintext" else \
        [ADVERTISE, SHARES, CODES, *hops, COLUMNS, SUM, *secure_sum_steps.STEPS]
    assert driven == expected
    assert all(step in CLIENT_STEPS or step in secure_sum_steps.STEPS for step in driven)
    _same(outputs, _ideal(reference))
    assert done.failed == {} and done.survivors == MEMBERS


def test_every_hamming_backend_a_client_may_resolve_has_a_relay():
    """The server's pluggable SecureHamming pieces cover every backend a client's policy can
    resolve ``auto`` or a configured name to (a missing one would fail the round)."""
    from securefl.protocols.crossclient import HAMMING_BACKENDS
    from securefl.protocols.crossclient.server_round import HAMMING, ROW_SUMS, SETUPS

    assert set(HAMMING) == set(HAMMING_BACKENDS) - {"auto"}
    assert HAMMING["rlwe"].ring and not HAMMING["lwe"].ring
    assert set(SETUPS) == set(ROW_SUMS) == {True, False}
