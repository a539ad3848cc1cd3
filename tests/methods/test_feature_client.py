"""``FeatureClient``: FedProp's client steps on features a node holds (what ``securefl bench
crossclient`` times) give the in-process protocol's outputs, and refuse a tampered relay
exactly as a method's client does."""

from __future__ import annotations

import numpy as np
import pytest

from securefl.data.federation import ClientData
from securefl.methods.fedprop.client import FeatureClient, FeatureProtocol
from securefl.methods.fedprop.round import cross_client_round
from securefl.methods.halves import LocalData
from securefl.protocols.crossclient import cross_client_lp
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


def _round(secure, *, backend="shade", intercept=None):
    features, labels, truth = _federation()
    half = FeatureClient(FeatureProtocol(secure, L, backend, SEED))
    data = [LocalData(ClientData(x, t, y >= 0), CLASSES, (DIM,))
            for x, y, t in zip(features, labels, truth)]
    transport = InProcessTransport(half, [NodeContext(j, {"partition-id": j}, {}, data[j])
                                          for j in range(len(SIZES))], intercept=intercept)
    done = cross_client_round(transport, range(len(SIZES)), feature_model=np.zeros(0),
                              round_index=0, secure=secure, k=K, alpha=0.99, L=L,
                              num_classes=CLASSES, hamming_backend=backend)
    outputs = {j: half.finish_rows(done.rows[j], transport.states[j], data[j]) for j in done.rows}
    return done, outputs, {"features": features, "labels": labels, "num_classes": CLASSES, "k": K,
                           "alpha": 0.99, "L": L, "seed": SEED, "backend": secure,
                           "hamming_backend": backend}


@pytest.mark.parametrize("secure, backend", [("real", "shade"), ("real", "rlwe"),
                                             ("plaintext", "shade")])
def test_the_deployed_steps_on_given_features_give_the_protocols_outputs(secure, backend):
    done, outputs, reference = _round(secure, backend=backend)
    expected = cross_client_lp(**reference)
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

    done, outputs, reference = _round("real", intercept=tamper)
    assert done.failed[1].startswith("ProtocolError")
    assert done.graph == [0, 2] and sorted(outputs) == [0, 2]
    expected = cross_client_lp(**reference, dropouts={"before_hamming": {1}})
    for j in (0, 2):
        np.testing.assert_array_equal(outputs[j].pseudo_labels, expected.outputs[j].pseudo_labels)


def test_steps_the_table_lacks_are_refused():
    from securefl.errors import ProtocolError
    from securefl.runtime.transport import Record

    half = FeatureClient(FeatureProtocol("real", L))
    with pytest.raises(ProtocolError, match="no step 'train'"):
        half.handle("train", Record(), Record(), NodeContext(0, {}, {}))
