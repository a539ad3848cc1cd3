"""CrossClientLP (FedProp Algorithm 3): real == plaintext, dropouts, views, errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from securefl.crypto.channel import SERVER, Network
from securefl.crypto.fixed_point import FixedPoint
from securefl.crypto.hamming_plain import hamming_matrix, pack_codes
from securefl.errors import DropoutError, InputError
from securefl.protocols import Dropouts, cross_client_lp, label_propagation
from securefl.protocols.propagation import one_hot, propagate
from securefl.protocols.lsh import cosine_from_hamming


def _federation(seed: int, sizes: list[int], labeled: list[int], classes: int, dim: int = 8):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, dim)) * 2.5
    features, labels, truth = [], [], []
    for n, count in zip(sizes, labeled):
        t = rng.integers(0, classes, size=n)
        features.append(centres[t] + rng.normal(size=(n, dim)))
        y = np.full(n, -1)
        y[n - count :] = t[n - count :]  # labeled points at the end of each block
        labels.append(y)
        truth.append(t)
    return features, labels, truth


def _reference(result, labels, classes, k, alpha, L, silent=()):
    """Algorithm 1 on the LSH similarity of the graph parties, labels of ``silent`` hidden."""
    codes = np.concatenate([result.clients[p].codes for p in result.graph_parties])
    similarity = cosine_from_hamming(hamming_matrix(pack_codes(codes)), L)
    y = np.concatenate(
        [np.full_like(labels[p], -1) if p in silent else labels[p] for p in result.graph_parties]
    )
    return label_propagation(
        similarity, y, num_classes=classes, k=k, alpha=alpha, metric="precomputed"
    )


def _rows(result, party):
    sizes = [result.clients[p].features.shape[0] for p in result.graph_parties]
    start = int(np.sum(sizes[: result.graph_parties.index(party)]))
    return slice(start, start + sizes[result.graph_parties.index(party)])


@st.composite
def federations(draw):
    parties = draw(st.integers(1, 4))
    sizes = draw(st.lists(st.integers(2, 15), min_size=parties, max_size=parties))
    labeled = [draw(st.integers(0, n)) for n in sizes]
    return {
        "seed": draw(st.integers(0, 2**16)),
        "sizes": sizes,
        "labeled": labeled,
        "classes": draw(st.integers(2, 5)),
        "k": draw(st.integers(1, 6)),
        "L": draw(st.sampled_from([64, 128, 256])),
    }


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=federations())
def test_real_equals_plaintext_and_is_algorithm_1_within_fixed_point_bound(case):
    features, labels, _ = _federation(case["seed"], case["sizes"], case["labeled"], case["classes"])
    kwargs = dict(
        num_classes=case["classes"], k=case["k"], alpha=0.99, L=case["L"], seed=case["seed"]
    )
    real = cross_client_lp(features, labels, backend="real", **kwargs)
    plain = cross_client_lp(features, labels, backend="plaintext", **kwargs)
    # the server's view of the codes (through H) is the same in both backends
    np.testing.assert_array_equal(real.server.hamming, plain.server.hamming)
    z_float = propagate(
        real.server.w_normalized,
        one_hot(np.concatenate(labels), case["classes"]),
        alpha=0.99,
        solver="dense",
    )
    bound = FixedPoint(len(features)).error_bound(len(features), np.abs(z_float).sum()) + 1e-9
    for j, ((pl_r, w_r), (pl_p, w_p)) in enumerate(zip(real, plain)):
        np.testing.assert_array_equal(pl_r, pl_p)
        np.testing.assert_array_equal(w_r, w_p)
        assert np.max(np.abs(real.clients[j].z_rows - z_float[_rows(real, j)])) <= bound


def test_outputs_follow_the_data_and_approximate_exact_cosine_lp():
    features, labels, truth = _federation(7, [40, 40, 40], [4, 4, 0], 3)
    result = cross_client_lp(
        features, labels, num_classes=3, k=6, L=2048, backend="plaintext", seed=3
    )
    exact = label_propagation(np.vstack(features), np.concatenate(labels), num_classes=3, k=6)
    ours = np.concatenate([pl for pl, _ in result])
    assert (ours == np.concatenate(truth)).mean() > 0.9
    assert (ours == exact.pseudo_labels).mean() > 0.9
    weights = np.concatenate([w for _, w in result])
    assert weights.min() >= 0 and weights.max() <= 1


def _drop_case():
    features, labels, _ = _federation(21, [12, 10, 14], [3, 2, 0], 3)
    return features, labels, dict(num_classes=3, k=4, alpha=0.99, L=128, seed=9)


@pytest.mark.parametrize("backend", ["real", "plaintext"])
def test_dropout_before_hamming_excludes_the_client(backend):
    features, labels, kwargs = _drop_case()
    result = cross_client_lp(
        features, labels, backend=backend, dropouts={"before_hamming": {1}}, **kwargs
    )
    assert result.graph_parties == [0, 2]
    assert result[1] == (None, None)
    reference = _reference(result, labels, 3, 4, 0.99, 128)
    for party in (0, 2):
        np.testing.assert_array_equal(
            result.outputs[party].pseudo_labels, reference.pseudo_labels[_rows(result, party)]
        )
        assert (
            np.max(np.abs(result.outputs[party].scores - reference.scores[_rows(result, party)]))
            < 1e-6
        )


@pytest.mark.parametrize("stage", ["before_sum", "masked_input"])
def test_dropout_after_hamming_shapes_graph_but_labels_do_not_contribute(stage):
    features, labels, kwargs = _drop_case()
    dropouts = (
        Dropouts(before_sum=frozenset({0}))
        if stage == "before_sum"
        else Dropouts(during_sum={0: stage})
    )
    result = cross_client_lp(features, labels, backend="real", dropouts=dropouts, **kwargs)
    assert result.graph_parties == [0, 1, 2]
    assert 0 not in result.sum_survivors and result.outputs[0] is None
    reference = _reference(result, labels, 3, 4, 0.99, 128, silent={0})
    for party in (1, 2):
        np.testing.assert_array_equal(
            result.outputs[party].pseudo_labels, reference.pseudo_labels[_rows(result, party)]
        )
        assert (
            np.max(np.abs(result.outputs[party].scores - reference.scores[_rows(result, party)]))
            < 1e-6
        )


def test_dropout_at_unmask_still_contributes_labels_but_gets_no_output():
    features, labels, kwargs = _drop_case()
    result = cross_client_lp(
        features, labels, backend="real", dropouts={"during_sum": {2: "unmask"}}, **kwargs
    )
    assert 2 in result.sum_survivors and result.outputs[2] is None
    reference = _reference(result, labels, 3, 4, 0.99, 128)
    for party in (0, 1):
        np.testing.assert_array_equal(
            result.outputs[party].pseudo_labels, reference.pseudo_labels[_rows(result, party)]
        )


@pytest.mark.parametrize("backend", ["real", "plaintext"])
def test_too_many_dropouts_in_the_sum_raise(backend):
    features, labels, kwargs = _drop_case()
    with pytest.raises(DropoutError):
        cross_client_lp(
            features,
            labels,
            backend=backend,
            threshold=3,
            dropouts={"during_sum": {0: "masked_input"}},
            **kwargs,
        )
    with pytest.raises(DropoutError):
        cross_client_lp(
            features, labels, backend=backend, dropouts={"before_hamming": {0, 1, 2}}, **kwargs
        )


class _Recorder(Network):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.log = []

    def receive(self, receiver, sender, tag):
        message = super().receive(receiver, sender, tag)
        self.log.append(message)
        return message


def _contains(haystack: np.ndarray, needle: np.ndarray) -> bool:
    """Whether ``needle``'s bytes occur inside ``haystack``'s bytes (any alignment)."""
    return needle.size > 0 and needle.tobytes() in haystack.tobytes()


def test_views_server_sees_no_features_labels_or_scores_and_clients_no_h():
    features, labels, _ = _federation(5, [9, 11, 8], [3, 0, 2], 4)
    labels[0][-3:] = [3, 2, 3]
    labels[2][-2:] = [2, 3]
    network = _Recorder()
    result = cross_client_lp(
        features, labels, num_classes=4, k=3, L=128, backend="real", network=network
    )
    encoding = FixedPoint(3)
    z_encoded = {p: encoding.encode(result.clients[p].z_rows.ravel()) for p in range(3)}
    to_server = [m for m in network.log if m.receiver == SERVER]
    assert {m.tag for m in to_server} == {"lsh/public-key", "lsh/seed-shares", "cclp/columns"}
    for message in to_server:
        for array in message.arrays:
            assert array.dtype.kind != "f", "no real-valued data reaches the server"
            for p in range(3):
                assert not _contains(array, features[p]) and not _contains(
                    array, features[p].astype(np.float32)
                )
                assert not _contains(array, labels[p][labels[p] >= 0])
                assert not _contains(array, z_encoded[p])
        if message.tag == "cclp/columns":  # the documented leak: positions, not classes
            np.testing.assert_array_equal(
                message.arrays[0], np.flatnonzero(labels[message.sender] >= 0)
            )
    # what the secure sum gives the server is pseudo-random: no entry equals enc(Z)
    total = result.server.total_received
    assert not np.any(total == np.concatenate([z_encoded[p] for p in range(3)]))
    bits = np.unpackbits(total.view(np.uint8))
    plain_bits = np.unpackbits(np.concatenate([z_encoded[p] for p in range(3)]).view(np.uint8))
    assert abs(bits.mean() - 0.5) < 0.03  # ~7000 bits: 5 standard deviations
    assert plain_bits.mean() < 0.3  # what the server would see without the pads
    h = result.server.hamming
    for p in range(3):
        received = [m for m in network.log if m.receiver == p]
        for message in received:
            for array in message.arrays:
                assert array.shape != h.shape and not _contains(array, h)
                for q in range(3):
                    if q != p:
                        assert not _contains(array, z_encoded[q])
                        assert not _contains(array, features[q])
        rows = [m for m in received if m.tag == "cclp/rows"]
        assert len(rows) == 1 and rows[0].arrays[0].size == features[p].shape[0] * 4


def test_crypto_randomness_changes_the_transcript_not_the_outputs():
    features, labels, _ = _federation(2, [8, 9, 7], [2, 0, 3], 3)
    kwargs = dict(num_classes=3, k=3, L=64, backend="real", seed=11)
    first = cross_client_lp(features, labels, **kwargs)
    second = cross_client_lp(features, labels, crypto_seed=5, **kwargs)
    for (pl_a, w_a), (pl_b, w_b) in zip(first, second):
        np.testing.assert_array_equal(pl_a, pl_b)
        np.testing.assert_array_equal(w_a, w_b)
    assert not np.array_equal(first.server.total_received, second.server.total_received)
    other = cross_client_lp(
        features, labels, num_classes=3, k=3, L=64, backend="plaintext", seed=12
    )
    assert not np.array_equal(other.clients[0].codes, first.clients[0].codes)


def test_result_reports_costs_and_is_iterable():
    features, labels, _ = _federation(1, [10, 12], [2, 3], 2)
    result = cross_client_lp(features, labels, num_classes=2, k=3, L=64, backend="real", seed=4)
    assert len(result) == 2 and len(list(result)) == 2
    per_client = result.bytes_per_client()
    assert set(per_client) == {0, 1} and min(per_client.values()) > 0
    assert set(result.bytes_sent) == {"setup", "hamming", "columns", "sum", "rows"}
    assert result.bytes_sent["hamming"][0] > 0 and result.bytes_sent["sum"][0] > 0
    assert result.crypto_seconds > 0 and result.server_seconds > 0


def test_lwe_hamming_backend_gives_the_same_outputs_and_linear_traffic():
    features, labels, _ = _federation(2, [9, 7, 8], [2, 1, 3], 3)
    kwargs = dict(num_classes=3, k=3, L=256, seed=5)
    plain = cross_client_lp(features, labels, backend="plaintext", **kwargs)
    shade = cross_client_lp(features, labels, backend="real", **kwargs)
    lwe = cross_client_lp(features, labels, backend="real", hamming_backend="lwe", **kwargs)
    np.testing.assert_array_equal(lwe.server.hamming, plain.server.hamming)
    for (pl_l, w_l), (pl_p, w_p) in zip(lwe, plain):
        np.testing.assert_array_equal(pl_l, pl_p)
        np.testing.assert_array_equal(w_l, w_p)
    # the busiest client's link carries at least its share of the LWE broadcasts
    assert lwe.link_bytes() >= 13 * 4096 * 7
    assert shade.link_bytes() == max(
        max(sum(t.get(c, 0) for t in shade.bytes_sent.values()),
            sum(t.get(c, 0) for t in shade.bytes_received.values()))
        for c in range(3)
    )


@pytest.mark.parametrize(
    "kwargs, parameter",
    [
        ({"backend": "quantum"}, "backend"),
        ({"hamming_backend": "ot"}, "hamming_backend"),
        ({"L": 0}, "L"),
        ({"k": 0}, "k"),
        ({"alpha": 0.0}, "alpha"),
        ({"num_classes": 1}, "num_classes"),
        ({"dropouts": {"before_hamming": {7}}}, "dropouts"),
        ({"dropouts": {"before_sum": {0}, "during_sum": {0: "share"}}}, "dropouts"),
        ({"dropouts": {"later": {0}}}, "dropouts"),
    ],
)
def test_bad_arguments_raise_input_error(kwargs, parameter):
    features, labels, _ = _federation(1, [5, 6], [1, 1], 2)
    call = dict(num_classes=2, L=64, backend="plaintext") | kwargs
    with pytest.raises(InputError, match=parameter):
        cross_client_lp(features, labels, **call)


def test_mismatched_inputs_raise_input_error():
    features, labels, _ = _federation(1, [5, 6], [1, 1], 2)
    with pytest.raises(InputError, match="labels"):
        cross_client_lp(features, labels[:1], num_classes=2, L=64)
    with pytest.raises(InputError, match=r"features\[1\]"):
        cross_client_lp([features[0], features[1][:, :3]], labels, num_classes=2, L=64)
    with pytest.raises(InputError, match=r"labels\[0\]"):
        cross_client_lp(features, [labels[0] + 5, labels[1]], num_classes=2, L=64)


def _graph_server():
    from securefl.protocols.crossclient import CrossClientLPServer

    rng = np.random.default_rng(3)
    codes = pack_codes(rng.integers(0, 2, (12, 64)))
    server = CrossClientLPServer(k=3, alpha=0.9, L=64, num_classes=2)
    server.receive_hamming(hamming_matrix(codes).astype(np.int64), [0, 1], [5, 7])
    return server


@pytest.mark.parametrize(
    "positions, match",
    [
        (np.zeros(3, dtype=np.int64), "twice"),  # duplicates would size the solve (N x count)
        (np.zeros(8, dtype=np.int64), "columns, its block has 5"),
        (np.array([0, 5]), "outside"),
        (np.array([-1]), "outside"),
        (np.array([2**63 + 1], dtype=np.uint64), "outside"),
        (np.array([0.0, 1.0]), "integer"),
        (np.zeros((2, 1), dtype=np.int64), "1-D"),
    ],
)
def test_server_refuses_column_requests_it_would_allocate_for(positions, match):
    from securefl.crypto.channel import Message
    from securefl.errors import ProtocolError
    from securefl.protocols.crossclient import TAG_COLUMNS

    server = _graph_server()
    with pytest.raises(ProtocolError, match=match):
        server.serve_columns([Message(0, SERVER, TAG_COLUMNS, (positions,))])


def test_server_refuses_repeated_or_foreign_requesters():
    from securefl.crypto.channel import Message
    from securefl.errors import ProtocolError
    from securefl.protocols.crossclient import TAG_COLUMNS

    request = Message(1, SERVER, TAG_COLUMNS, (np.array([0, 3]),))
    with pytest.raises(ProtocolError, match="second"):
        _graph_server().serve_columns([request, request])
    with pytest.raises(ProtocolError, match="not in the graph"):
        _graph_server().serve_columns([Message(4, SERVER, TAG_COLUMNS, (np.array([0]),))])
    replies = _graph_server().serve_columns([request, Message(0, SERVER, TAG_COLUMNS, (np.array([4]),))])
    assert [r.arrays[0].shape for r in replies] == [(12, 2), (12, 1)]
