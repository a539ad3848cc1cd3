"""``FeatureClient``: the protocol's client steps on features a node holds (what ``securefl
bench crossclient`` times and ``cross_client_lp`` runs) give the ideal functionality's outputs,
and refuse a tampered relay exactly as a method's client does."""

from __future__ import annotations

import numpy as np
import pytest

from securefl.protocols.crossclient import ideal_cross_client_lp
from securefl.protocols.crossclient.client_steps import (
    FeatureClient,
    FeatureData,
    FeatureProtocol,
    load_party,
)
from securefl.protocols.crossclient.server_round import cross_client_round
from securefl.runtime.transport import InProcessTransport, NodeContext

SIZES, CLASSES, DIM, L, K, SEED = (9, 11, 10), 3, 6, 64, 3, 7


def _federation():
    rng = np.random.default_rng(SEED)
    centres = rng.normal(size=(CLASSES, DIM)) * 3
    features, labels, truth = [], [], []
    for n in SIZES:
        t = rng.integers(0, CLASSES, size=n)
        features.append(centres[t] + rng.normal(size=(n, DIM)))
        labels.append(np.where(np.arange(n) < 3, t, -1))
        truth.append(t)
    return features, labels, truth


def _round(secure, *, backend="shade", intercept=None, length=L, chunk_bytes=None, dropouts=None):
    features, labels, _ = _federation()
    half = FeatureClient(FeatureProtocol(secure, length, backend, SEED))
    transport = InProcessTransport(half, [NodeContext(j, {"partition-id": j}, {},
                                                      FeatureData(x, y, CLASSES))
                                          for j, (x, y) in enumerate(zip(features, labels))],
                                   intercept=intercept, dropouts=dropouts)
    bound = {} if chunk_bytes is None else {"chunk_bytes": chunk_bytes}
    done = cross_client_round(transport, range(len(SIZES)), round_index=0, secure=secure, k=K,
                              alpha=0.99, L=length, num_classes=CLASSES, hamming_backend=backend, **bound)
    outputs = {j: half.finish_rows(done.rows[j], transport.states[j], transport.nodes[j])
               for j in done.rows}
    return done, outputs, {"features": features, "labels": labels, "num_classes": CLASSES, "k": K,
                           "alpha": 0.99, "L": length, "seed": SEED}, transport


@pytest.mark.parametrize("secure, backend", [("real", "shade"), ("real", "rlwe"),
                                             ("plaintext", "shade")])
def test_the_deployed_steps_on_given_features_give_the_ideal_outputs(secure, backend):
    done, outputs, reference, _ = _round(secure, backend=backend)
    expected = ideal_cross_client_lp(**reference)
    assert done.failed == {} and sorted(outputs) == [0, 1, 2]
    for j, output in outputs.items():
        np.testing.assert_array_equal(output.pseudo_labels, expected.outputs[j].pseudo_labels)
        np.testing.assert_array_equal(output.weights, expected.outputs[j].weights)


def test_a_tampered_relayed_frame_is_refused_on_the_benchmarks_path():
    """The relay flips a bit of client 0's IKNP batch to client 1 at SHADE's third hop:
    client 1 raises ProtocolError and leaves the graph; the others finish without it."""

    def tamper(client, request):
        if client == 1 and request.config["_step"] == "cclp/shade/3":
            arrays = dict(request.arrays)
            blob = np.array(arrays["relay/from/0"], copy=True)
            blob[len(blob) // 2] ^= 1
            arrays["relay/from/0"] = blob
            request.arrays = arrays
        return request

    done, outputs, reference, _ = _round("real", intercept=tamper)
    assert done.failed[1].startswith("ProtocolError")
    assert done.graph == [0, 2] and sorted(outputs) == [0, 2]
    expected = ideal_cross_client_lp(**reference, dropouts={"before_hamming": {1}})
    for j in (0, 2):
        np.testing.assert_array_equal(outputs[j].pseudo_labels, expected.outputs[j].pseudo_labels)


def test_steps_the_table_lacks_are_refused():
    from securefl.errors import ProtocolError
    from securefl.runtime.transport import Record

    half = FeatureClient(FeatureProtocol("real", L))
    with pytest.raises(ProtocolError, match="no step 'train'"):
        half.handle("train", Record(), Record(), NodeContext(0, {}, {}))


def test_the_client_state_is_the_typed_party_and_the_hamming_hops_states():
    """What a client keeps of CrossClientLP is its typed party (state codec, ``cclp/party/``)
    and the SHADE pairs' hop states: no other ``cclp/`` entry; V_j is gone once hashed."""
    _done, _, _, transport = _round("real")
    for j, state in transport.states.items():
        names = [k for table in (state.arrays, state.config) for k in table if k.startswith("cclp/")]
        assert names and all(k.startswith(("cclp/party/", "cclp/shade/")) for k in names), names
        party = load_party(state)
        assert party.party == j and list(party.members) == [0, 1, 2] and party.features is None
        assert party.codes.shape == (SIZES[j], L) and party.hamming_backend == "shade"
        assert party.s_l.shape == (sum(SIZES), 3) and party.sum_members == 3
        assert party.private is not None and sorted(party.peer_keys) == [0, 1, 2]


STREAM_L = 8192
"""Code length at which a client's 9 to 11 points are two IKNP chunks (8 points each)."""


def _stream_steps(done):
    return [e.step for e in done.exchanges if e.step.startswith("cclp/shade/")]


def test_a_pair_streamed_in_bounded_exchanges_gives_the_outputs_of_one_exchange():
    """chunk_bytes=1: every correction frame its own exchange (two per pair); the round runs
    one more ``cclp/shade/3`` and gives the ideal outputs, as the default's one exchange does."""
    expected = None
    for chunk_bytes, stream in ((None, 1), (1, 2)):
        done, outputs, reference, _ = _round("real", length=STREAM_L, chunk_bytes=chunk_bytes)
        assert _stream_steps(done) == ["cclp/shade/1", "cclp/shade/2", *["cclp/shade/3"] * stream,
                                       "cclp/shade/4"]
        expected = expected or ideal_cross_client_lp(**reference)
        assert done.failed == {} and sorted(outputs) == [0, 1, 2]
        for j, output in outputs.items():
            np.testing.assert_array_equal(output.pseudo_labels, expected.outputs[j].pseudo_labels)
            np.testing.assert_array_equal(output.weights, expected.outputs[j].weights)


@pytest.mark.parametrize("attack", ["replay", "late"])
def test_a_replayed_or_reordered_stream_batch_is_refused(attack):
    """The relay hands client 1, at the second ``cclp/shade/3``, the batches its peers sent
    it one exchange earlier (replay: sealed for the earlier batch number, the MAC fails), or
    holds the first exchange's batches back to deliver them late (the first exchange already
    misses them): client 1 raises ProtocolError and leaves the graph; the others finish."""
    seen = {}

    def tamper(client, request):
        if client != 1 or request.config["_step"] != "cclp/shade/3":
            return request
        batches = {k: v for k, v in request.arrays.items() if k.startswith("relay/from/")}
        arrays = {k: v for k, v in request.arrays.items() if k not in batches}
        if not seen:
            seen.update(batches)
            arrays.update(batches if attack == "replay" else {})
        else:
            assert set(seen) & set(batches)
            arrays.update({**batches, **seen})
        request.arrays = arrays
        return request

    done, outputs, reference, _ = _round("real", length=STREAM_L, chunk_bytes=1, intercept=tamper)
    assert done.failed[1].startswith("ProtocolError")
    assert done.graph == [0, 2] and sorted(outputs) == [0, 2]
    expected = ideal_cross_client_lp(**reference, dropouts={"before_hamming": {1}})
    for j in (0, 2):
        np.testing.assert_array_equal(outputs[j].pseudo_labels, expected.outputs[j].pseudo_labels)


def test_a_drop_mid_stream_abandons_the_clients_pairs():
    done, outputs, reference, _ = _round("real", length=STREAM_L, chunk_bytes=1,
                                         dropouts={2: ("cclp/shade/3", 1)})
    assert done.dropped["cclp/shade/3"] == [2] and done.graph == [0, 1] and sorted(outputs) == [0, 1]
    expected = ideal_cross_client_lp(**reference, dropouts={"before_hamming": {2}})
    for j in (0, 1):
        np.testing.assert_array_equal(outputs[j].pseudo_labels, expected.outputs[j].pseudo_labels)


def test_chunk_bytes_is_checked_when_the_round_is_built():
    from securefl.errors import InputError

    with pytest.raises(InputError, match="chunk_bytes"):
        _round("real", chunk_bytes=0)


@pytest.mark.parametrize("value", ["64", 0, -1, 2.5])
def test_a_malformed_chunk_bytes_from_the_server_is_refused_by_the_client(value):
    """``cclp/chunk-bytes`` is the server's word: a client refuses anything but a positive
    integer with ProtocolError and leaves the graph; the others finish."""

    def tamper(client, request):
        if client == 1 and request.config["_step"].startswith("cclp/shade/"):
            request.config = {**request.config, "cclp/chunk-bytes": value}
        return request

    done, outputs, _, _ = _round("real", intercept=tamper)
    assert done.failed[1].startswith("ProtocolError") and "chunk-bytes" in done.failed[1]
    assert done.graph == [0, 2] and sorted(outputs) == [0, 2]
