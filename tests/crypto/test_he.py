"""HE aggregation (TenSEAL BFV): exact sums, dropouts, parameters, and who learns what."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy
import tenseal as ts
from hypothesis import given, settings
from hypothesis import strategies as st

from securefl.crypto import he
from securefl.crypto.channel import SERVER, Network
from securefl.crypto.fixed_point import ring_sum
from securefl.crypto.he import (
    COEFF_MODULUS_BITS,
    MAX_CLIENTS,
    PLAIN_MODULUS,
    POLY_MODULUS_DEGREE,
    HEClient,
    HEConfig,
    HEServer,
    join_limbs,
    limb_bits,
    split_limbs,
)
from securefl.crypto.secagg import party_rng, plan_survivors
from securefl.errors import DropoutError, InputError, ProtocolError
from securefl.runtime.summation import make_encoding, secure_sum


@st.composite
def dropout_patterns(draw):
    n = draw(st.integers(1, 7))
    t = draw(st.integers(n // 2 + 1, n))  # secure_sum's majority rule
    rounds = draw(st.lists(st.sampled_from([0, 1, 2, 3, 4]), min_size=n, max_size=n))
    return n, t, {u: r for u, r in enumerate(rounds) if r < 4}


@settings(max_examples=25, deadline=None)
@given(dropout_patterns(), st.integers(1, 9), st.integers(0, 2**32))
def test_he_sum_equals_the_ring_sum_under_any_dropout_pattern(pattern, dim, data_seed):
    n, t, dropouts = pattern
    rng = np.random.default_rng(data_seed)
    inputs = [rng.integers(-(2**62), 2**62, size=dim) for _ in range(n)]
    summed = [u for u in range(n) if dropouts.get(u, 4) >= 3]
    answer = [u for u in summed if dropouts.get(u, 4) == 4]
    if len(summed) < t or not answer:
        with pytest.raises(DropoutError):
            secure_sum(inputs, threshold=t, backend="he", dropouts=dropouts)
        return
    result = secure_sum(inputs, threshold=t, backend="he", dropouts=dropouts)
    encoding = make_encoding(inputs)
    expected = encoding.decode(ring_sum([encoding.encode(inputs[u]) for u in summed], 64))
    assert result.survivors == tuple(summed)
    assert np.array_equal(result.total, expected)
    try:
        plain = secure_sum(inputs, threshold=t, backend="plaintext", dropouts=dropouts)
    except DropoutError:
        return  # he finishes where pairwise masking cannot (few clients left to unmask)
    assert np.array_equal(result.total, plain.total)


def test_float_sum_is_bit_identical_to_plaintext_and_secagg():
    rng = np.random.default_rng(3)
    inputs = [rng.normal(size=5000) * 10.0 ** rng.integers(-3, 3) for _ in range(6)]
    dropouts = {1: "masked_input", 4: "unmask"}
    totals = [
        secure_sum(inputs, threshold=4, backend=b, dropouts=dropouts).total
        for b in ("he", "secagg", "plaintext")
    ]
    assert totals[0].dtype == np.float64
    assert np.array_equal(totals[0], totals[1]) and np.array_equal(totals[0], totals[2])


def test_any_dropouts_after_the_inputs_arrived_are_tolerated():
    inputs = [np.arange(5, dtype=np.int64) * (u + 1) for u in range(5)]
    late = {0: "unmask", 1: "unmask", 2: "unmask", 3: "unmask"}  # only client 4 answers
    result = secure_sum(inputs, threshold=3, backend="he", dropouts=late)
    assert result.survivors == (0, 1, 2, 3, 4)
    assert np.array_equal(result.total, np.arange(5) * 15)
    with pytest.raises(DropoutError):
        secure_sum(inputs, threshold=3, backend="secagg", dropouts=late)
    everyone = {u: "unmask" for u in range(5)}
    with pytest.raises(DropoutError, match="no summed client answered"):
        secure_sum(inputs, threshold=3, backend="he", dropouts=everyone)
    with pytest.raises(DropoutError, match="threshold is 3"):
        secure_sum(inputs, threshold=3, backend="he", dropouts={0: 2, 1: 0, 2: 1})


def test_a_silent_dealer_or_decryptor_is_replaced_by_the_next_client():
    inputs = [np.full(3, u, dtype=np.int64) for u in range(4)]
    plan = plan_survivors(4, 3, {0: "share", 1: "unmask"}, check=False)
    encoding = make_encoding(inputs)
    outcome = he.run_he([encoding.encode(x) for x in inputs], plan=plan, modulus_bits=64, seed=1)
    assert outcome.dealer == 1 and outcome.decryptor == 2
    assert outcome.survivors == (1, 2, 3)
    assert np.array_equal(encoding.decode(outcome.total), np.full(3, 6))


def test_bytes_are_counted_per_party():
    inputs = [np.arange(6000, dtype=np.int64) for _ in range(4)]
    encoding = make_encoding(inputs)
    outcome = he.run_he(
        [encoding.encode(x) for x in inputs], plan=plan_survivors(4, 3, None), modulus_bits=64
    )
    config = HEConfig(bytes(16), 4, 3, 6000, 64)
    assert config.limbs == 2 and config.ciphertexts == math.ceil(2 * 6000 / POLY_MODULUS_DEGREE)
    sent = outcome.bytes_sent
    key = len(he.secret_context_bytes(he.new_context()))
    assert sent[outcome.dealer] > 3 * key  # the sealed key for each of the three others
    clients = [u for u in range(4) if u not in (outcome.dealer, outcome.decryptor)]
    for u in clients:  # one public key and its ciphertexts (~21 bytes per slot)
        assert 15 * 2 * 6000 < sent[u] < 30 * 2 * 6000 + 4096
    assert outcome.key_bytes >= 6 * key  # sealed by the dealer, relayed by the server
    assert sent[SERVER] > 3 * key + config.ciphertexts * 80_000  # relayed keys, the sums


def test_empty_vectors_sum_to_an_empty_vector():
    result = secure_sum([np.zeros(0, np.int64)] * 3, threshold=2, backend="he")
    assert result.total.shape == (0,) and result.total.dtype == np.int64


def test_neighbours_and_too_many_clients_are_refused():
    inputs = [np.arange(3, dtype=np.int64)] * 4
    with pytest.raises(InputError, match="neighbours"):
        secure_sum(inputs, threshold=3, backend="he", neighbours=2)
    with pytest.raises(InputError, match="clients"):
        limb_bits(MAX_CLIENTS + 1, 64)


# ------------------------------------------------------------------- parameters


def test_parameters_are_those_of_the_he_standard_and_batching():
    assert POLY_MODULUS_DEGREE == 4096 and sum(COEFF_MODULUS_BITS) == 109
    with pytest.raises(ValueError):  # SEAL refuses more than 109 bits at N = 4096 (128-bit)
        ts.context(
            ts.SCHEME_TYPE.BFV,
            poly_modulus_degree=4096,
            plain_modulus=PLAIN_MODULUS,
            coeff_mod_bit_sizes=[37, 36, 37],
        )
    assert sympy.isprime(PLAIN_MODULUS) and PLAIN_MODULUS % (2 * POLY_MODULUS_DEGREE) == 1
    below = PLAIN_MODULUS - 2 * POLY_MODULUS_DEGREE
    assert 2**42 < PLAIN_MODULUS < 2**43 and not any(
        sympy.isprime(c) for c in range(below, 2**42, -2 * POLY_MODULUS_DEGREE)
    )
    assert limb_bits(1024, 32) == 32 and limb_bits(1024, 64) == 32 and limb_bits(1025, 64) == 31
    assert limb_bits(MAX_CLIENTS, 64) == 30
    for n in (1, 7, 500, 1024, MAX_CLIENTS):
        b = limb_bits(n, 64)
        assert n * (2**b - 1) < PLAIN_MODULUS <= n * (2 ** (b + 1) - 1)


def _doublings_left(vector, expected, context) -> int:
    """How often the ciphertext can be doubled and still decrypt right: its noise budget
    in bits (each doubling doubles the noise)."""
    bits = 0
    while True:
        vector, expected = vector + vector, (expected * 2) % PLAIN_MODULUS
        if not np.array_equal(
            np.asarray(vector.decrypt(), dtype=np.int64) % PLAIN_MODULUS, expected
        ):
            return bits
        bits += 1


def test_largest_supported_sum_is_exact_with_noise_to_spare():
    """MAX_CLIENTS copies of one ciphertext of all-maximal limbs: the worst case, since
    identical noises add up linearly (independent ones only as sqrt(n))."""
    context = he.new_context()
    b = limb_bits(MAX_CLIENTS, 64)
    top = np.full(POLY_MODULUS_DEGREE, 2**b - 1, dtype=np.int64)
    one = ts.bfv_vector(context, top)
    total = one.copy()
    for _ in range(MAX_CLIENTS - 1):
        total.add_(one)
    expected = np.full(POLY_MODULUS_DEGREE, MAX_CLIENTS * (2**b - 1), dtype=np.int64)
    assert expected[0] < PLAIN_MODULUS
    assert np.array_equal(np.asarray(total.decrypt(), dtype=np.int64) % PLAIN_MODULUS, expected)
    assert _doublings_left(total, expected, context) >= 10


def test_limbs_round_trip_in_the_ring():
    rng = np.random.default_rng(0)
    for k in (1, 16, 32, 33, 64):
        values = rng.integers(0, 2**k, size=50, dtype=np.uint64)
        encoded = values.astype(make_encoding([np.zeros(1, np.int64)], modulus_bits=k).dtype)
        for bits in (1, 7, min(k, 32)):
            limbs = split_limbs(encoded, k, bits)
            assert limbs.shape[0] == math.ceil(k / bits) and limbs.max() < 2**bits
            assert np.array_equal(join_limbs(limbs, k, bits), encoded)


# ------------------------------------------------------------------- who learns what


class _Session:
    """The parties of one sum, driven by hand so that tests can look at their views."""

    def __init__(self, inputs, *, threshold=2, seed=0):
        self.encoding = make_encoding(inputs)
        encoded = [self.encoding.encode(x) for x in inputs]
        self.config = HEConfig(party_rng(seed, -2)(16), len(inputs), threshold, len(inputs[0]), 64)
        self.clients = [
            HEClient(u, self.config, encoded[u], party_rng(seed, u)) for u in range(len(inputs))
        ]
        self.server = HEServer(self.config)
        self.network = Network()
        self.to_server: list[bytes] = []

    def deliver(self, message):
        self.network.send(message)
        if message.receiver == SERVER:
            self.to_server.append(bytes(self.network.queue(message.sender, SERVER)[-1]))
        return self.network.receive(message.receiver, message.sender, message.tag)

    def keys(self):
        for client in self.clients:
            self.server.take_key(self.deliver(client.advertise()))
        self.server.start_key_distribution()
        deal = self.deliver(self.server.next_deal())
        relayed = self.server.relay_keys(self.deliver(self.clients[deal.receiver].deal(deal)))
        return relayed

    def run(self):
        for message in self.keys():
            self.clients[message.receiver].receive_key(self.deliver(message))
        uploads = {}
        for client in self.clients:
            uploads[client.index] = self.deliver(client.encrypt())
            self.server.add(uploads[client.index])
        self.server.start_decryption()
        request = self.deliver(self.server.next_decrypt())
        self.server.take_total(self.deliver(self.clients[request.receiver].decrypt(request)))
        return uploads, request


def test_the_server_never_holds_the_key_and_sees_only_the_sum():
    inputs = [
        np.array([5, -7, 11], dtype=np.int64),
        np.array([1, 2, 3], dtype=np.int64),
        np.array([-4, 0, 9], dtype=np.int64),
    ]
    session = _Session(inputs)
    uploads, _ = session.run()
    assert not session.server._context.has_secret_key()
    secret = he.secret_context_bytes(session.clients[session.server.dealer]._context)
    key_material = secret[len(secret) // 2 : len(secret) // 2 + 64]
    assert not any(key_material in frame for frame in session.to_server)
    upload = he._unpack(*uploads[1].arrays, session.config.ciphertexts, "client 1")[0]
    with pytest.raises(ValueError, match="secret"):
        ts.bfv_vector_from(session.server._context, upload).decrypt()
    assert np.array_equal(session.encoding.decode(session.server.total), sum(inputs))


def test_a_client_colluding_with_the_server_reads_every_input():
    inputs = [
        np.array([5, -7, 11], dtype=np.int64),
        np.array([1, 2, 3], dtype=np.int64),
        np.array([-4, 0, 9], dtype=np.int64),
    ]
    session = _Session(inputs)
    uploads, _ = session.run()
    colluder = session.clients[2]._context  # the key any client holds
    blob = he._unpack(*uploads[1].arrays, 1, "client 1")[0]  # what the server received from 1
    limbs = np.asarray(ts.bfv_vector_from(colluder, blob).decrypt(), dtype=np.int64) % PLAIN_MODULUS
    bits = session.config.bits
    recovered = join_limbs(limbs.reshape(session.config.limbs, 3), 64, bits)
    assert np.array_equal(session.encoding.decode(recovered), inputs[1])


def test_the_decrypting_client_sees_the_limb_sums_and_so_the_count_of_negative_inputs():
    """The documented extra view of the decryptor: limb sums, not just the ring sum."""
    rng = np.random.default_rng(5)
    inputs = [rng.integers(-1000, 1000, size=40) for _ in range(4)]
    session = _Session(inputs, threshold=3)
    _, request = session.run()
    decryptor = session.clients[request.receiver]._context
    blob = he._unpack(*request.arrays[1:], session.config.ciphertexts, "sum")[0]
    sums = np.asarray(ts.bfv_vector_from(decryptor, blob).decrypt(), dtype=np.int64) % PLAIN_MODULUS
    config = session.config
    top = sums.reshape(config.limbs, 40)[-1]  # sum of the top limbs: all ones iff x < 0
    width = 64 - config.bits * (config.limbs - 1)
    negatives = sum((x < 0).astype(int) for x in inputs)
    assert np.array_equal(top // (2**width - 1), negatives) and negatives.min() < negatives.max()


def test_tampered_or_misrouted_messages_are_rejected():
    inputs = [np.arange(4, dtype=np.int64)] * 3
    session = _Session(inputs)
    relayed = session.keys()
    sealed = relayed[0].arrays[2].copy()
    sealed[-1] ^= 1
    forged = type(relayed[0])(
        SERVER,
        relayed[0].receiver,
        relayed[0].tag,
        (relayed[0].arrays[0], relayed[0].arrays[1], sealed),
    )
    with pytest.raises(ProtocolError, match="AES-GCM"):
        session.clients[forged.receiver].receive_key(forged)
    rerouted = type(relayed[0])(SERVER, relayed[1].receiver, relayed[0].tag, relayed[0].arrays)
    with pytest.raises(ProtocolError, match="AES-GCM"):
        session.clients[rerouted.receiver].receive_key(rerouted)
    for message in relayed:
        session.clients[message.receiver].receive_key(message)
    upload = session.clients[1].encrypt()
    lengths, blob = upload.arrays
    garbage = type(upload)(1, SERVER, upload.tag, (lengths, np.zeros_like(blob)))
    with pytest.raises(ProtocolError, match="not a BFV ciphertext"):
        session.server.add(garbage)
    short = type(upload)(1, SERVER, upload.tag, (lengths, blob[:-1]))
    with pytest.raises(ProtocolError, match="lengths"):
        session.server.add(short)
    session.server.add(upload)
    with pytest.raises(ProtocolError, match="repeated"):
        session.server.add(upload)


def test_the_decryptor_refuses_a_sum_of_too_few_inputs():
    inputs = [np.arange(4, dtype=np.int64)] * 3
    session = _Session(inputs, threshold=2)
    for message in session.keys():
        session.clients[message.receiver].receive_key(message)
    session.server.add(session.clients[0].encrypt())
    session.server.survivors, session.server._candidates = (0,), [1]  # a server cutting corners
    with pytest.raises(DropoutError, match="refuses"):
        session.clients[1].decrypt(session.server.next_decrypt())
