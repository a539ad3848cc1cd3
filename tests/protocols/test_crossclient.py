"""CrossClientLP (FedProp Algorithm 3): the simulator (the deployed round on the in-process
transport), real and plaintext, computes the ideal functionality bit for bit at every
dropout stage; views, bytes, errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from securefl.crypto.channel import SERVER, Message, frame_size
from securefl.crypto.fixed_point import FixedPoint
from securefl.crypto.hamming_plain import hamming_matrix, pack_codes
from securefl.errors import DropoutError, InputError
from securefl.protocols import cross_client_lp, label_propagation
from securefl.protocols.crossclient import TAG_COLUMNS, TAG_ROWS, TAG_S_L, ideal_cross_client_lp
from securefl.protocols.lsh import cosine_from_hamming
from securefl.protocols.propagation import one_hot, propagate
from securefl.runtime.transport import take_message


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


def _ideal(features, labels, *, backend=None, **kwargs):
    """The ideal functionality on the same inputs (``backend`` is the protocol's only)."""
    return ideal_cross_client_lp(features, labels, **kwargs)


def _same_as_ideal(result, ideal):
    """Bit-identical pseudo-labels, weights and scores per client, ``None`` where the ideal
    gives no output."""
    assert len(result.outputs) == len(ideal.outputs)
    for j, (got, want) in enumerate(zip(result.outputs, ideal.outputs)):
        if want is None:
            assert got is None, j
            continue
        np.testing.assert_array_equal(got.pseudo_labels, want.pseudo_labels)
        np.testing.assert_array_equal(got.weights, want.weights)
        np.testing.assert_array_equal(got.scores, want.scores)


def _reference(ideal, labels, classes, k, alpha, L, silent=()):
    """Algorithm 1 on the LSH similarity of the graph parties, labels of ``silent`` hidden."""
    similarity = cosine_from_hamming(ideal.hamming, L)
    y = np.concatenate(
        [np.full_like(labels[p], -1) if p in silent else labels[p] for p in ideal.graph_parties]
    )
    return label_propagation(
        similarity, y, num_classes=classes, k=k, alpha=alpha, metric="precomputed"
    )


def _rows(ideal, labels, party):
    sizes = [len(labels[p]) for p in ideal.graph_parties]
    start = int(np.sum(sizes[: ideal.graph_parties.index(party)]))
    return slice(start, start + sizes[ideal.graph_parties.index(party)])


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
def test_real_and_plaintext_compute_the_ideal_functionality_within_the_fixed_point_bound(case):
    features, labels, _ = _federation(case["seed"], case["sizes"], case["labeled"], case["classes"])
    kwargs = {
        "num_classes": case["classes"], "k": case["k"], "alpha": 0.99, "L": case["L"], "seed": case["seed"]
    }
    ideal = _ideal(features, labels, **kwargs)
    _same_as_ideal(cross_client_lp(features, labels, backend="real", **kwargs), ideal)
    _same_as_ideal(cross_client_lp(features, labels, backend="plaintext", **kwargs), ideal)
    z_float = propagate(
        ideal.w_normalized,
        one_hot(np.concatenate(labels), case["classes"]),
        alpha=0.99,
        solver="dense",
    )
    bound = FixedPoint(len(features)).error_bound(len(features), np.abs(z_float).sum()) + 1e-9
    assert np.max(np.abs(ideal.z - z_float)) <= bound


def test_the_clients_codes_give_the_ideal_hamming_matrix():
    """The codes the clients send the plaintext placeholder (under the seed agreed from
    their shares) are the ideal functionality's: the same H over the graph parties."""
    features, labels, _ = _federation(3, [6, 9, 5], [1, 2, 0], 2)
    kwargs = {"num_classes": 2, "k": 3, "L": 128, "seed": 6}
    result = cross_client_lp(features, labels, backend="plaintext",
                             dropouts={"before_hamming": {1}}, **kwargs)
    (codes_step,) = [e for e in result.round.exchanges if e.step == "cclp/shares"]
    codes = [codes_step.replies[j].arrays["cclp/codes"] for j in (0, 2)]
    ideal = _ideal(features, labels, dropouts={"before_hamming": {1}}, **kwargs)
    np.testing.assert_array_equal(hamming_matrix(pack_codes(np.concatenate(codes))), ideal.hamming)
    assert sorted(codes_step.replies) == ideal.graph_parties == [0, 2]


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
    return features, labels, {"num_classes": 3, "k": 4, "alpha": 0.99, "L": 128, "seed": 9}


STAGES = [
    ("real", {"before_hamming": {1}}),
    ("plaintext", {"before_hamming": {1}}),
    ("real", {"before_sum": {0}}),
    ("plaintext", {"before_sum": {0}}),
    ("real", {"during_sum": {0: "advertise"}}),
    ("real", {"during_sum": {0: "share"}}),
    ("real", {"during_sum": {0: "masked_input"}}),
    ("real", {"during_sum": {2: "unmask"}}),
    ("plaintext", {"during_sum": {0: "masked_input"}}),
    ("plaintext", {"during_sum": {2: "unmask"}}),
]


@pytest.mark.parametrize("backend, dropouts", STAGES)
def test_every_dropout_stage_gives_the_ideal_outputs(backend, dropouts):
    features, labels, kwargs = _drop_case()
    result = cross_client_lp(features, labels, backend=backend, dropouts=dropouts, **kwargs)
    ideal = _ideal(features, labels, dropouts=dropouts, **kwargs)
    _same_as_ideal(result, ideal)
    assert result.graph_parties == ideal.graph_parties
    (stage, clients), = dropouts.items()
    for client in clients:
        assert result.outputs[client] is None
    if stage == "during_sum" and backend == "real":
        assert sorted(result.sum_survivors) == ideal.contributors


def test_the_ideal_dropouts_are_algorithm_1_on_the_graph_left():
    """The specification's stages, against Algorithm 1 on the LSH similarity: a client
    gone before SecureHamming is out of the graph; one gone before its masked input shapes
    the graph but its labels do not count; one gone at unmask still contributes."""
    features, labels, kwargs = _drop_case()
    cases = [({"before_hamming": {1}}, set(), (0, 2)), ({"before_sum": {0}}, {0}, (1, 2)),
             ({"during_sum": {0: "masked_input"}}, {0}, (1, 2)),
             ({"during_sum": {2: "unmask"}}, set(), (0, 1))]
    for dropouts, silent, served in cases:
        ideal = _ideal(features, labels, dropouts=dropouts, **kwargs)
        reference = _reference(ideal, labels, 3, 4, 0.99, 128, silent=silent)
        for party in served:
            rows = _rows(ideal, labels, party)
            np.testing.assert_array_equal(
                ideal.outputs[party].pseudo_labels, reference.pseudo_labels[rows]
            )
            assert np.max(np.abs(ideal.outputs[party].scores - reference.scores[rows])) < 1e-6


@pytest.mark.parametrize("backend", ["real", "plaintext"])
def test_too_many_dropouts_in_the_sum_raise(backend):
    features, labels, kwargs = _drop_case()
    for dropouts, threshold in (({"during_sum": {0: "masked_input"}}, 3),
                                ({"during_sum": {1: "unmask"}}, 3),
                                ({"before_hamming": {0, 1, 2}}, None)):
        with pytest.raises(DropoutError):
            _ideal(features, labels, threshold=threshold, dropouts=dropouts, **kwargs)
        with pytest.raises(DropoutError):
            cross_client_lp(features, labels, backend=backend, threshold=threshold,
                            dropouts=dropouts, **kwargs)


def _contains(haystack: np.ndarray, needle: np.ndarray) -> bool:
    """Whether ``needle``'s bytes occur inside ``haystack``'s bytes (any alignment)."""
    return needle.size > 0 and needle.tobytes() in haystack.tobytes()


def test_views_server_sees_no_features_labels_or_scores_and_clients_no_h():
    features, labels, _ = _federation(5, [9, 11, 8], [3, 0, 2], 4)
    labels[0][-3:] = [3, 2, 3]
    labels[2][-2:] = [2, 3]
    received = {p: [] for p in range(3)}

    def observe(client, request):
        received[client].append(request)
        return request

    kwargs = {"num_classes": 4, "k": 3, "L": 128, "seed": 8}
    result = cross_client_lp(features, labels, backend="real", intercept=observe, **kwargs)
    ideal = _ideal(features, labels, **kwargs)
    _same_as_ideal(result, ideal)
    encoding = FixedPoint(3)
    z_encoded = {p: encoding.encode(ideal.z[_rows(ideal, labels, p)].ravel()) for p in range(3)}
    replies = [(c, r) for e in result.round.exchanges for c, r in e.replies.items()]
    asked = []
    for client, reply in replies:
        for name, array in reply.arrays.items():
            assert array.dtype.kind != "f", f"real-valued {name} reached the server"
            for p in range(3):
                assert not _contains(array, features[p]) and not _contains(
                    array, features[p].astype(np.float32)
                )
                assert not _contains(array, z_encoded[p])
        if "cclp/columns/0" in reply.arrays:  # the documented leak: positions, not classes
            (positions,) = take_message(reply, "cclp/columns").arrays
            np.testing.assert_array_equal(positions, np.flatnonzero(labels[client] >= 0))
            asked.append(client)
            assert not _contains(positions, labels[client][labels[client] >= 0])
    assert sorted(asked) == [0, 1, 2]
    # what the secure sum gives the server is pseudo-random: no entry equals enc(Z)
    total = np.concatenate([result.round.rows[p][0] for p in range(3)])
    plain = np.concatenate([z_encoded[p] for p in range(3)])
    assert total.shape == plain.shape and not np.any(total == plain)
    bits = np.unpackbits(total.view(np.uint8))
    assert abs(bits.mean() - 0.5) < 0.03  # ~7000 bits: 5 standard deviations
    assert np.unpackbits(plain.view(np.uint8)).mean() < 0.3  # what it would see without pads
    h = ideal.hamming
    for p in range(3):
        for request in received[p]:
            for array in request.arrays.values():
                assert array.shape != h.shape
                for dtype in (np.int32, np.int64, np.uint16):
                    assert not _contains(array, h.astype(dtype))
                for q in range(3):
                    if q != p:
                        assert not _contains(array, z_encoded[q])
                        assert not _contains(array, features[q])
        assert result.round.rows[p][0].size == features[p].shape[0] * 4


def test_crypto_randomness_changes_the_transcript_not_the_outputs():
    """Keys, pads and masks come from the OS CSPRNG: two real runs with one ``seed`` move
    different bytes and give the same outputs; another ``seed`` other hyperplanes."""
    features, labels, _ = _federation(2, [8, 9, 7], [2, 0, 3], 3)
    kwargs = {"num_classes": 3, "k": 3, "L": 64, "seed": 11}
    first = cross_client_lp(features, labels, backend="real", **kwargs)
    second = cross_client_lp(features, labels, backend="real", **kwargs)
    for (pl_a, w_a), (pl_b, w_b) in zip(first, second):
        np.testing.assert_array_equal(pl_a, pl_b)
        np.testing.assert_array_equal(w_a, w_b)
    assert not np.array_equal(first.round.rows[0][0], second.round.rows[0][0])
    other = _ideal(features, labels, **(kwargs | {"seed": 12}))
    assert not np.array_equal(other.hamming, _ideal(features, labels, **kwargs).hamming)


def test_plaintext_bytes_are_the_frames_of_columns_s_l_rows_and_the_sum_input():
    """The nominal bytes of a plaintext run, rebuilt from the protocol's messages: each
    client sends its column request and its encoded input (8 bytes per entry of the N x C
    rows of the sum) and receives S_L^(j) with the layout and its rows with the survivors."""
    features, labels, _ = _federation(1, [10, 12, 7], [2, 3, 0], 2)
    result = cross_client_lp(features, labels, num_classes=2, k=3, L=64, backend="plaintext",
                             seed=4)
    n, parties = sum(len(y) for y in labels), 3
    layout = (np.zeros(parties, np.int32), np.zeros(parties, np.int64), np.zeros(parties, np.int32))
    for j, y in enumerate(labels):
        positions = np.flatnonzero(y >= 0).astype(np.int64)
        sent = frame_size(Message(j, SERVER, TAG_COLUMNS, (positions,))) + n * 2 * 8
        received = frame_size(Message(SERVER, j, TAG_S_L, (np.zeros((n, positions.size)), *layout)))
        received += frame_size(Message(SERVER, j, TAG_ROWS, (np.zeros(len(y) * 2, np.uint64),
                                                             np.zeros(parties, np.int32))))
        assert (result.bytes_sent[j], result.bytes_received[j]) == (sent, received)
    assert result.bytes_per_client() == {j: result.bytes_sent[j] + result.bytes_received[j]
                                         for j in range(parties)}


def test_result_reports_costs_and_is_iterable():
    features, labels, _ = _federation(1, [10, 12], [2, 3], 2)
    result = cross_client_lp(features, labels, num_classes=2, k=3, L=64, backend="real", seed=4)
    plain = cross_client_lp(features, labels, num_classes=2, k=3, L=64, backend="plaintext",
                            seed=4)
    assert len(result) == 2 and len(list(result)) == 2
    per_client = result.bytes_per_client()
    assert set(per_client) == {0, 1}
    assert all(per_client[j] > plain.bytes_per_client()[j] for j in (0, 1))
    assert result.crypto_seconds > 0 and result.server_seconds > 0 and result.seconds > 0
    assert result.graph_parties == result.sum_survivors == [0, 1]


def test_lwe_hamming_backend_gives_the_same_outputs_and_linear_traffic():
    features, labels, _ = _federation(2, [9, 7, 8], [2, 1, 3], 3)
    kwargs = {"num_classes": 3, "k": 3, "L": 256, "seed": 5}
    ideal = _ideal(features, labels, **kwargs)
    shade = cross_client_lp(features, labels, backend="real", **kwargs)
    lwe = cross_client_lp(features, labels, backend="real", hamming_backend="lwe", **kwargs)
    _same_as_ideal(lwe, ideal)
    _same_as_ideal(shade, ideal)
    # the busiest client's link carries at least its share of the LWE broadcasts
    assert lwe.link_bytes() >= 13 * 4096 * 7
    assert shade.link_bytes() == max(
        max(shade.bytes_sent[c], shade.bytes_received[c]) for c in range(3)
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
        ({"dropouts": {"during_sum": {0: "later"}}}, "dropouts"),
        ({"solver": "magic"}, "solver"),
    ],
)
def test_bad_arguments_raise_input_error(kwargs, parameter):
    features, labels, _ = _federation(1, [5, 6], [1, 1], 2)
    call = {"num_classes": 2, "L": 64, "backend": "plaintext"} | kwargs
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
