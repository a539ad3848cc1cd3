"""Secure aggregation: exact sums under dropouts, DropoutError, ProtocolError, uniform views."""

import argparse

import numpy as np
import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from securefl.crypto import prg
from securefl.crypto.channel import SERVER, Message, Network
from securefl.crypto.secagg import (
    TAGS,
    MaskExpander,
    SecAggClient,
    SecAggConfig,
    SecAggServer,
    _kdf,
    party_rng,
    plan_survivors,
)
from securefl.errors import DropoutError, InputError, ProtocolError
from securefl.runtime.summation import secure_sum


@st.composite
def scenarios(draw, *, feasible: bool):
    n = draw(st.integers(1, 7))
    t = draw(st.integers(n // 2 + 1, n))
    budget = n - t if feasible else draw(st.integers(n - t + 1, n))
    clients = draw(st.permutations(range(n)))[:budget]
    rounds = draw(st.lists(st.integers(0, 3), min_size=len(clients), max_size=len(clients)))
    return n, t, dict(zip(clients, rounds))


@settings(max_examples=25, deadline=None)
@given(scenarios(feasible=True), st.integers(1, 12), st.integers(0, 2**32))
def test_integer_sum_is_exact_under_any_tolerated_dropouts(scenario, dim, data_seed):
    n, t, dropouts = scenario
    rng = np.random.default_rng(data_seed)
    inputs = [rng.integers(-(2**40), 2**40, size=dim) for _ in range(n)]
    secure = secure_sum(inputs, threshold=t, dropouts=dropouts, seed=data_seed)
    plain = secure_sum(inputs, threshold=t, dropouts=dropouts, backend="plaintext")
    survivors = [u for u in range(n) if dropouts.get(u, 4) >= 3]
    assert secure.survivors == plain.survivors == tuple(survivors)
    assert np.array_equal(secure.total, sum(inputs[u] for u in survivors))
    assert np.array_equal(secure.total, plain.total)


@settings(max_examples=15, deadline=None)
@given(scenarios(feasible=False))
def test_too_many_dropouts_raise_in_both_backends(scenario):
    n, t, dropouts = scenario
    inputs = [np.arange(4, dtype=np.int64) for _ in range(n)]
    for backend in ("secagg", "plaintext"):
        with pytest.raises(DropoutError):
            secure_sum(inputs, threshold=t, dropouts=dropouts, backend=backend)


@settings(max_examples=15, deadline=None)
@given(scenarios(feasible=True), st.integers(0, 2**32))
def test_float_sum_within_bound_and_bit_identical_to_plaintext(scenario, data_seed):
    n, t, dropouts = scenario
    rng = np.random.default_rng(data_seed)
    inputs = [rng.normal(scale=100.0, size=6) for _ in range(n)]
    secure = secure_sum(inputs, threshold=t, dropouts=dropouts)
    plain = secure_sum(inputs, threshold=t, dropouts=dropouts, backend="plaintext")
    assert secure.total.dtype == np.float64
    assert secure.total.tobytes() == plain.total.tobytes()
    exact = sum(inputs[u] for u in secure.survivors)
    assert np.max(np.abs(secure.total - exact)) <= secure.report.error_bound


def test_sparse_neighbour_graph_sums_and_fails_like_plaintext():
    inputs = [np.full(5, u, dtype=np.int64) for u in range(10)]
    dropouts = {1: "masked_input", 6: "share", 8: "unmask"}
    secure = secure_sum(inputs, threshold=6, neighbours=4, dropouts=dropouts)
    plain = secure_sum(inputs, threshold=6, neighbours=4, dropouts=dropouts, backend="plaintext")
    assert np.array_equal(secure.total, plain.total)
    assert secure.total[0] == sum(u for u in range(10) if u not in (1, 6))
    # Client 2's neighbourhood {0, 1, 3, 4} loses 3 holders: 2 < ceil(6 * 5 / 10) = 3.
    starved = {0: "unmask", 1: "masked_input", 3: "unmask"}
    for backend in ("secagg", "plaintext"):
        with pytest.raises(DropoutError):
            secure_sum(inputs, threshold=6, neighbours=4, dropouts=starved, backend=backend)


def test_bad_inputs_name_the_parameter():
    with pytest.raises(InputError, match=r"inputs\[1\]"):
        secure_sum([np.zeros(3), np.zeros(4)], threshold=1)
    with pytest.raises(InputError, match="all float or all integer"):
        secure_sum([np.zeros(3), np.zeros(3, dtype=np.int64)], threshold=1)
    with pytest.raises(InputError, match="threshold"):
        secure_sum([np.zeros(3)] * 3, threshold=4)
    with pytest.raises(InputError, match="backend"):
        secure_sum([np.zeros(3)] * 3, threshold=2, backend="magic")
    with pytest.raises(InputError, match="dropouts"):
        secure_sum([np.zeros(3)] * 3, threshold=2, dropouts={0: "lunch"})


def test_seed_makes_the_protocol_reproducible():
    inputs = [np.arange(8, dtype=np.int64) * u for u in range(4)]
    a = secure_sum(inputs, threshold=3, seed=7, dropouts={2: 2})
    b = secure_sum(inputs, threshold=3, seed=7, dropouts={2: 2})
    assert np.array_equal(a.total, b.total) and a.bytes_sent == b.bytes_sent


def test_masks_are_aes_ctr_expansions_of_hkdf_keys():
    seed = prg.random_seed()
    for dtype in (np.uint8, np.uint16, np.uint32, np.uint64):
        assert np.array_equal(MaskExpander(1001, dtype).expand(seed), prg.expand(seed, 1001, dtype))
    shared, session = prg.random_seed() * 2, prg.random_seed()
    reference = HKDF(hashes.SHA256(), 16, session, b"info").derive(shared)
    assert _kdf(shared, session, b"info") == reference


def test_server_view_of_a_masked_input_is_uniform():
    # A constant input, masked: the server's view y_0 must be uniform on Z_(2^8).
    n, dim = 3, 60_000
    config = SecAggConfig(party_rng(None, -2)(16), n, 2, dim, 8)
    clients, server, inbox = _start(config, [np.full(dim, 7, dtype=np.uint8)] * n)
    masked = [c.handle(inbox[c.index]) for c in clients]
    counts = np.bincount(masked[0].arrays[0], minlength=256)
    assert stats.chisquare(counts).pvalue > 1e-5


# ------------------------------------------------------------------ protocol errors


def _start(config, values):
    """Run rounds 0 and 1; return clients, server and each client's round-2 message."""
    clients = [SecAggClient(u, config, values[u]) for u in range(config.clients)]
    server = SecAggServer(config)
    for c in clients:
        server.handle(c.advertise())
    keys = {m.receiver: m for m in server.close_round()}
    for c in clients:
        server.handle(c.handle(keys[c.index]))
    return clients, server, {m.receiver: m for m in server.close_round()}


@pytest.fixture
def started():
    config = SecAggConfig(party_rng(None, -2)(16), 4, 3, 6, 16)
    return _start(config, [np.arange(6, dtype=np.uint16)] * 4)


def test_tampered_share_ciphertext_is_rejected(started):
    clients, _, inbox = started
    senders, blob = inbox[0].arrays
    blob = blob.copy()
    blob[1, 20] ^= 1
    with pytest.raises(ProtocolError, match="AES-GCM"):
        clients[0].handle(Message(SERVER, 0, TAGS["ciphertexts"], (senders, blob)))


def test_misrouted_share_ciphertext_is_rejected(started):
    clients, _, inbox = started
    # Client 1's ciphertext from sender 2, presented to client 0 as if from sender 2.
    senders1, blob1 = inbox[1].arrays
    senders0, blob0 = inbox[0].arrays
    blob0 = blob0.copy()
    blob0[list(senders0).index(2)] = blob1[list(senders1).index(2)]
    with pytest.raises(ProtocolError, match="AES-GCM"):
        clients[0].handle(Message(SERVER, 0, TAGS["ciphertexts"], (senders0, blob0)))


def test_replayed_entry_and_wrong_round_are_rejected(started):
    clients, server, inbox = started
    senders, blob = inbox[0].arrays
    doubled = (np.concatenate([senders, senders[:1]]), np.concatenate([blob, blob[:1]]))
    with pytest.raises(ProtocolError, match="duplicate"):
        clients[0].handle(Message(SERVER, 0, TAGS["ciphertexts"], doubled))
    with pytest.raises(ProtocolError, match="expected round"):
        clients[1].handle(Message(SERVER, 1, TAGS["survivors"], (np.arange(4, dtype=np.int32),)))
    reply = clients[2].handle(inbox[2])
    server.handle(reply)
    with pytest.raises(ProtocolError, match="replay"):
        server.handle(reply)
    with pytest.raises(ProtocolError, match="after the protocol ended|out of order|expected round"):
        clients[2].handle(inbox[2])


def test_ciphertexts_from_another_session_are_rejected(started):
    clients, _, inbox = started
    other = SecAggConfig(party_rng(None, -2)(16), 4, 3, 6, 16)
    _, _, foreign = _start(other, [np.arange(6, dtype=np.uint16)] * 4)
    with pytest.raises(ProtocolError, match="AES-GCM"):
        clients[0].handle(Message(SERVER, 0, TAGS["ciphertexts"], foreign[0].arrays))


def test_replayed_frame_on_the_channel_is_rejected():
    network = Network()
    message = Message(0, SERVER, TAGS["masked"], (np.zeros(3, dtype=np.uint16),))
    network.send(message)
    frame = network.queue(0, SERVER)[0]
    network.receive(SERVER, 0, message.tag)
    network.queue(0, SERVER).append(frame)
    with pytest.raises(ProtocolError, match="replayed"):
        network.receive(SERVER, 0, message.tag)


def test_bench_refuses_untolerated_dropout():
    from securefl.bench import secagg as bench

    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(["--clients", "10", "--dim", "4", "--dropout", "0.5", "--threshold", "6"])
    with pytest.raises(InputError, match="--dropout=0.5: drops 5 of 10 clients; threshold 6"):
        bench.run(args, progress=None)
    assert plan_survivors(10, 6, {u: 2 for u in range(4)}).summed == tuple(range(4, 10))


def test_threaded_mask_removal_equals_sequential():
    from securefl.crypto.prg import random_seeds
    from securefl.crypto.secagg import add_masks

    masks = [(seed.tobytes(), sign) for seed, sign in zip(random_seeds(9), [1, -1] * 4 + [1])]
    start = np.arange(1000, dtype=np.uint32)
    sequential, threaded = start.copy(), start.copy()
    add_masks(sequential, masks, workers=1)
    add_masks(threaded, masks, workers=3)
    assert np.array_equal(sequential, threaded)
    assert not np.array_equal(sequential, start)
