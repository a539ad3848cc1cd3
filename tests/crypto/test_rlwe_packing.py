"""Packed ring-LWE ciphertexts (``P = floor(N / L)`` points per secret, :mod:`securefl.crypto.rlwe`):
the rotation helper against a schoolbook negacyclic product, the rebuilt rows of ``C`` against
the rotation identity computed with exact integers, exactness against plaintext at every
``P`` and the worst-case noise, the bytes sent, and ``P = 1`` byte-identical to the unpacked
messages."""

import hashlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from securefl.crypto import lwe, rlwe
from securefl.crypto.channel import SERVER, Message
from securefl.crypto.hamming import link_bytes_model
from securefl.crypto.projection import busiest_link_bytes
from securefl.crypto.rand import RandomSource
from securefl.errors import InputError, ProtocolError
from securefl.protocols import secure_hamming_matrix
from tests.crypto.test_rlwe import negacyclic_reference, plain

N, Q = rlwe.RING_DIMENSION, 1 << lwe.MODULUS_BITS


def times_monomial_reference(v, power):
    """v * X^power in Z[X]/(X^n + 1), schoolbook: X^power with power in [0, 2n) is
    (-1)^(power div n) X^(power mod n)."""
    n = len(v)
    monomial = [0] * n
    monomial[power % n] = (-1) ** (power // n)
    return negacyclic_reference(monomial, v)


@settings(max_examples=30, deadline=None)
@given(log_n=st.integers(1, 6), data=st.data())
def test_times_power_is_the_negacyclic_product_by_the_monomial(log_n, data):
    n = 1 << log_n
    rows = np.array(data.draw(st.lists(st.lists(st.integers(-5, 5), min_size=n, max_size=n), min_size=1, max_size=3)))
    power = data.draw(st.integers(-n + 1, n - 1))
    got = rlwe.times_power(rows.astype(np.float64), power)
    for row, out in zip(rows, got):
        assert [int(x) for x in out] == times_monomial_reference([int(x) for x in row], power % (2 * n))
    if power >= 0:
        start = data.draw(st.integers(0, n))
        stop = data.draw(st.integers(start, n))
        np.testing.assert_array_equal(rlwe.times_power_columns(rows, power, start, stop), got[:, start:stop])


def test_packing_and_its_bad_input():
    assert [rlwe.packing(length) for length in (1, 1024, 1025, 1365, 1366, 2048, 2049, 4096, 9000)] == [
        4096, 4, 3, 3, 2, 2, 1, 1, 1]
    assert rlwe.groups(5, 1024) == 2 and rlwe.groups(8, 1024) == 2 and rlwe.groups(5, 4096) == 5
    assert rlwe.ciphertext_elements(5, 1024) == 5 * 1024 + 2 * N
    assert rlwe.ciphertext_elements(5, 2049) == 5 * (2049 + N)
    with pytest.raises(InputError, match="L"):
        rlwe.packing(0)
    with pytest.raises(InputError, match="power"):
        rlwe.times_power(np.zeros((1, 8)), 8)
    with pytest.raises(InputError, match="power"):
        rlwe.times_power_columns(np.zeros((1, 8)), 2, 5, 3)


def _encryptor(codes):
    """A ring encryptor of ``codes`` with fixed seeds, its broadcasts of ``C`` and its ring
    products (rows of secrets, polynomial)."""
    party = lwe.LWEParty(index=0, codes=codes, encrypts_for=(1,), evaluates_for=(),
                         sizes={0: codes.shape[0], 1: 1}, session=b"packing", rng=RandomSource(), ring=True)
    party._seed, party._m_seed = bytes(range(16)), bytes(range(16, 32))
    party._pair = {1: lwe._PairKeys(mac=bytes(16), seal=None)}
    party._prepare("broadcast")
    calls = []
    products = party._ring.ciphertext_products
    party._ring.ciphertext_products = lambda secret, k: calls.append((secret.shape[0], k)) or products(secret, k)
    return party, list(party.broadcasts()), calls


def _elements(planes):
    """Wire planes -> Python ints mod 2^104."""
    low, top, middle = (p.astype(object) for p in planes)
    return low + (middle << 64) + (top << 72)


def _ring_product(limbs, secret):
    """a * s mod (X^N + 1, 2^104) with exact int64 convolutions of the 26-bit limbs (no FFT)."""
    total = np.zeros(N, dtype=object)
    for t in range(rlwe.FFT_LIMBS):
        full = np.convolve(limbs[t].astype(np.int64), secret.astype(np.int64))
        folded = full[:N].copy()
        folded[: N - 1] -= full[N:]
        total += folded.astype(object) << (rlwe.FFT_LIMB_BITS * t)
    return total % Q


@pytest.mark.parametrize("points, length", [(5, 1024), (4, 1365)])
def test_the_rebuilt_rows_are_the_rotation_identity(points, length):
    """The row of point ``gP + t`` rebuilt from the packed broadcast, ``[c_g coefficients tL ..
    tL + L - 1 | p_g X^(-tL)]`` (the rotation by a schoolbook product on Python ints), is
    today's row of ``C`` for the encryptor's decryption secret ``sigma = s_g X^(-tL)``:
    ``[(a_0 sigma)_{0..L-1} | a_1 sigma] + Delta [-2 x | 0]`` plus noise of at most eta per
    coefficient, with ``a_0 sigma`` computed by exact integer convolutions."""
    codes = np.random.default_rng(3).integers(0, 2, (points, length))
    party, messages, calls = _encryptor(codes)
    packing, groups = rlwe.packing(length), rlwe.groups(points, length)
    assert calls == [(groups, 0), (groups, 1)]  # 2 G ring products, not 2 n
    assert [m.arrays[0].shape for m in messages] == [(points, length)] + [(groups, lwe.BLOCK_ROWS)] * 2
    message = _elements(messages[0].arrays[:3])
    rerandomisation = np.concatenate([_elements(m.arrays[:3]) for m in messages[1:]], axis=1)
    limbs = rlwe.public_limbs(party._m_seed, length).astype(np.int64)
    delta = 1 << lwe.DELTA_BITS
    assert set(np.unique(party._secret)) <= {-1.0, 0.0, 1.0}
    for i in range(points):
        g, t = divmod(i, packing)
        rotated = times_monomial_reference(list(rerandomisation[g]), 2 * N - t * length)
        row = np.concatenate([message[i], np.array(rotated, dtype=object) % Q])
        sigma = party._secret[i]
        expected = np.concatenate([_ring_product(limbs[0], sigma)[:length], _ring_product(limbs[1], sigma)])
        expected[:length] += (-2 * delta * codes[i].astype(object)) % Q
        noise = (row - expected) % Q
        noise = np.where(noise >= Q // 2, noise - Q, noise)
        assert np.abs(noise).max() <= lwe.ETA, (i, np.abs(noise).max())


def test_one_point_per_ciphertext_is_byte_identical_to_the_unpacked_messages():
    """At ``P = 1`` the ring encryptor's broadcasts hash to what the code before packing sent
    (computed with this harness on the code of f9fc6eb)."""
    codes = np.random.default_rng(7).integers(0, 2, (3, 2049))
    _, messages, calls = _encryptor(codes)
    assert calls == [(3, 0), (3, 1)]
    digest = hashlib.sha256()
    for message in messages:
        digest.update(message.tag.encode())
        for array in message.arrays:
            digest.update(array.tobytes())
    assert digest.hexdigest() == "666e0c433294fba41f1669c7dec03f121363d949e59bb99c62f7f7ef39da862a"


@pytest.mark.parametrize("length, sign", [(2049, 1), (2048, -1), (1365, 1), (1024, -1), (1000, 1)])
def test_packed_matrix_is_exact_at_the_worst_case_noise(length, sign, monkeypatch):
    """P = 1, 2, 3, 4, 4 with a last group of fewer points (5 and 3 points), every noise
    coefficient at +-eta, through the relayed hops."""
    monkeypatch.setattr(lwe, "_binomial", lambda seed, label, shape: np.full(shape, float(sign * lwe.ETA)))
    rng = np.random.default_rng(length)
    codes = [rng.integers(0, 2, (5, length)), rng.integers(0, 2, (3, length))]
    codes[0][0], codes[1][0] = 1, 0
    result = secure_hamming_matrix(codes, backend="rlwe", seed=length)
    np.testing.assert_array_equal(result.matrix, plain(codes))


@pytest.mark.parametrize("length", [2049, 1024])
def test_the_ciphertext_bytes_are_the_packed_size(length):
    """C carries 13 (n L + ceil(n / P) N) bytes plus headers and tags (13 n (L + N) at P = 1,
    the LWE backend's), and the busiest link is the model's."""
    rng = np.random.default_rng(1)
    sizes = [5, 3]
    codes = [rng.integers(0, 2, (n, length)) for n in sizes]
    result = secure_hamming_matrix(codes, backend="rlwe", seed=1)
    np.testing.assert_array_equal(result.matrix, plain(codes))
    encryptor = lwe.pair_roles(0, 1)[0]
    model = lwe.ELEMENT_BYTES * rlwe.ciphertext_elements(sizes[encryptor], length)
    assert model <= result.bytes_by_message["C"] < model + 1000
    if rlwe.packing(length) == 1:
        assert model == lwe.ELEMENT_BYTES * sizes[encryptor] * (length + N)
    else:
        assert model < 0.5 * lwe.ELEMENT_BYTES * sizes[encryptor] * (length + N)
    measured = busiest_link_bytes(result.bytes_sent, result.bytes_received)
    assert link_bytes_model("rlwe", sizes, length) <= measured <= 1.02 * link_bytes_model("rlwe", sizes, length) + 8192


def test_a_packed_block_altered_or_shaped_as_unpacked_is_refused():
    """The evaluator checks each packed block's shape (one row per ciphertext past column L) and
    its end-to-end tag over what was sent."""
    codes = np.random.default_rng(5).integers(0, 2, (5, 1024))
    _, messages, _ = _encryptor(codes)

    def evaluator():
        party = lwe.LWEParty(index=1, codes=np.zeros((2, 1024), np.uint8), encrypts_for=(), evaluates_for=(0,),
                             sizes={0: 5, 1: 2}, session=b"packing", rng=RandomSource(), ring=True)
        party._seed, party._m_seed = bytes(range(32, 48)), bytes(range(16, 32))
        party._pair = {0: lwe._PairKeys(mac=bytes(16), seal=None)}
        party._prepare("evaluate")
        return party

    def relayed(message, arrays):
        return Message(SERVER, 1, message.tag, arrays)

    honest = evaluator()
    for message in messages:
        honest.absorb(relayed(message, (*message.arrays[:3], message.arrays[3][0])))
    altered = evaluator()
    altered.absorb(relayed(messages[0], (*messages[0].arrays[:3], messages[0].arrays[3][0])))
    low = messages[1].arrays[0].copy()
    low[1, 7] ^= 1
    with pytest.raises(ProtocolError, match="tag"):
        altered.absorb(relayed(messages[1], (low, *messages[1].arrays[1:3], messages[1].arrays[3][0])))
    unpacked = evaluator()
    unpacked.absorb(relayed(messages[0], (*messages[0].arrays[:3], messages[0].arrays[3][0])))
    wide = tuple(np.concatenate([p] * 3)[:5] for p in messages[1].arrays[:3])
    with pytest.raises(ProtocolError, match=r"expected \(2, 2048\)"):
        unpacked.absorb(relayed(messages[1], (*wide, messages[1].arrays[3][0])))
