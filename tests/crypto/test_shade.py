"""SHADE secure Hamming distance: exactness, share uniformity, views, bad input, tampering;
the pair-level functions run the deployed hops on the driver (securefl.protocols)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from securefl.crypto import HammingResult
from securefl.crypto.channel import SERVER
from securefl.crypto.hamming import pair_roles
from securefl.crypto.hamming_plain import hamming_matrix, pack_codes
from securefl.crypto.ot import OTSetups
from securefl.errors import InputError
from securefl.protocols import secure_hamming_matrix, shade_distance, shade_one_vs_many, shade_pair


def plain(codes):
    stacked = np.concatenate([np.asarray(c, dtype=np.int64) for c in codes])
    return (stacked[:, None, :] != stacked[None, :, :]).sum(axis=2)


@settings(max_examples=15, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 9), min_size=1, max_size=3),
    length=st.sampled_from([1, 7, 37, 65, 100, 129]),
    seed=st.integers(0, 2**31),
)
def test_matrix_equals_plaintext_for_random_codes(sizes, length, seed):
    rng = np.random.default_rng(seed)
    codes = [rng.integers(0, 2, size=(n, length)) for n in sizes]
    result = secure_hamming_matrix(codes, seed=seed)
    expected = plain(codes)
    assert isinstance(result, HammingResult) and result.matrix.dtype == np.int32
    np.testing.assert_array_equal(result.matrix, expected)
    np.testing.assert_array_equal(secure_hamming_matrix(codes, backend="plaintext").matrix, expected)
    receivers = [pair_roles(a, b)[1] for a in range(len(sizes)) for b in range(a + 1, len(sizes))]
    assert result.ots == sum(sizes[r] * length for r in receivers)


@settings(max_examples=6, deadline=None)
@given(n_a=st.integers(1, 20), n_b=st.integers(1, 20), length=st.sampled_from([37, 65, 100]), seed=st.integers(0, 2**31))
def test_pair_shares_sum_to_the_distance(n_a, n_b, length, seed):
    rng = np.random.default_rng(seed)
    x, y = rng.integers(0, 2, (n_a, length)), rng.integers(0, 2, (n_b, length))
    share_x, share_y = shade_pair(x, y, sender=seed % 7, receiver=7, seed=seed)
    assert share_x.shape == share_y.shape == (n_a, n_b) and share_x.dtype == np.uint16
    np.testing.assert_array_equal((share_x + share_y).astype(np.int64), plain([x, y])[:n_a, n_a:])


def test_one_pair_and_one_vs_many():
    rng = np.random.default_rng(14)
    many, one = rng.integers(0, 2, (7, 65)), rng.integers(0, 2, 65)
    a, b = shade_one_vs_many(many, one, seed=3)
    assert a.shape == b.shape == (7,)
    np.testing.assert_array_equal((a + b).astype(np.int64), (many != one).sum(axis=1))
    x, y = many[0], one
    s, t = shade_distance(x, y)
    assert (s + t) % 2**16 == int((x != y).sum())
    with pytest.raises(InputError, match="one"):
        shade_one_vs_many(many, many)
    with pytest.raises(InputError, match="x"):
        shade_distance(many, one)
    with pytest.raises(InputError, match="receiver"):
        shade_pair(many, many, sender=2, receiver=2)
    with pytest.raises(InputError, match="sender"):
        shade_pair(many, many, sender=-1)


def test_uneven_parties_bool_and_uint8_inputs_and_one_thread_per_client():
    """SHADE runs each client's hops on one thread, as deployed: workers above 1 are refused."""
    rng = np.random.default_rng(3)
    codes = [rng.integers(0, 2, (1, 300)).astype(bool), rng.integers(0, 2, (40, 300), dtype=np.uint8), rng.integers(0, 2, (3, 300))]
    with pytest.raises(InputError, match="one thread") as info:
        secure_hamming_matrix(codes, seed=1, workers=2)
    assert info.value.parameter == "workers"
    result = secure_hamming_matrix(codes, seed=1)
    np.testing.assert_array_equal(result.matrix, plain(codes))
    assert result.offsets == (0, 1, 41)
    assert set(result.bytes_sent) == {0, 1, 2, SERVER}


def test_long_codes_use_several_chunks_and_frames(monkeypatch):
    from securefl.crypto import shade

    monkeypatch.setattr(shade, "CHUNK_OTS", 1000)
    monkeypatch.setattr(shade, "FRAME_BYTES", 1 << 12)
    rng = np.random.default_rng(4)
    codes = [rng.integers(0, 2, (17, 999)), rng.integers(0, 2, (6, 999))]
    np.testing.assert_array_equal(secure_hamming_matrix(codes).matrix, plain(codes))


def test_seed_makes_runs_reproducible():
    rng = np.random.default_rng(5)
    x, y = rng.integers(0, 2, (4, 65)), rng.integers(0, 2, (3, 65))
    a, b, c = shade_pair(x, y, seed=1), shade_pair(x, y, seed=1), shade_pair(x, y, seed=2)
    np.testing.assert_array_equal(a[0], b[0])
    assert not np.array_equal(a[0], c[0])


def _chi2_low_byte(values):
    counts = np.bincount((np.asarray(values).reshape(-1) & 0xFF).astype(np.int64), minlength=256)
    return stats.chisquare(counts).pvalue


@pytest.mark.parametrize("side", [0, 1])
def test_each_share_alone_is_uniform(side):
    """Each party's share of HD is uniform mod 2^16 (low byte and high bit checked)."""
    rng = np.random.default_rng(6)
    x, y = np.zeros((64, 9), dtype=np.uint8), rng.integers(0, 2, (80, 9))
    share = shade_pair(x, y, seed=7 + side)[side]
    assert _chi2_low_byte(share) > 1e-5
    assert stats.binomtest(int((share >> 15).sum()), share.size).pvalue > 1e-5


def test_uniformity_check_rejects_the_distances_themselves():
    rng = np.random.default_rng(8)
    x, y = rng.integers(0, 2, (64, 9)), rng.integers(0, 2, (80, 9))
    assert _chi2_low_byte(plain([x, y])[:64, 64:]) < 1e-5


def test_receiver_view_of_corrections_is_uniform(monkeypatch):
    """u = p0 + Delta - p1 looks uniform to the receiver even for structured x (every frame
    it absorbs, recorded where it absorbs them)."""
    from securefl.crypto import shade

    seen, absorb = [], shade.ReceiverSession.absorb_frame

    def absorb_frame(self, index, number, seeds, message, party, worker):
        seen.append(np.array(message.arrays[0]))
        return absorb(self, index, number, seeds, message, party, worker)

    monkeypatch.setattr(shade.ReceiverSession, "absorb_frame", absorb_frame)
    rng = np.random.default_rng(9)
    x, y = np.zeros((16, 64), dtype=np.uint8), rng.integers(0, 2, (32, 64))
    shade_pair(x, y, seed=10)
    seen = np.concatenate([u[:, :16].reshape(-1) for u in seen])
    assert seen.size == 32 * 64 * 16
    assert _chi2_low_byte(seen) > 1e-5
    assert _chi2_low_byte(seen >> 8) > 1e-5


def test_plaintext_kernel_pads_codes_to_words():
    bits = np.random.default_rng(13).integers(0, 2, (6, 70))
    packed = pack_codes(bits)
    assert packed.shape == (6, 16)
    np.testing.assert_array_equal(hamming_matrix(packed), plain([bits]))
    np.testing.assert_array_equal(hamming_matrix(packed[:2], packed[2:]), plain([bits])[:2, 2:])


@pytest.mark.parametrize(
    "codes, parameter",
    [
        ([np.array([[0, 2]])], "codes[0]"),
        ([np.array([[0, -1]])], "codes[0]"),
        ([np.zeros((2, 3), int), np.zeros((2, 4), int)], "codes[1]"),
        ([np.zeros((2, 3), int), np.zeros((0, 3), int)], "codes[1]"),
        ([np.zeros(3, int)], "codes[0]"),
        ([np.zeros((2, 2, 2), int)], "codes[0]"),
        ([np.zeros((2, 3), np.float64)], "codes[0]"),
        ([np.zeros((2, 0), int)], "codes[0]"),
        ([np.zeros((1, 1 << 16), np.uint8)], "codes"),
        ([], "codes"),
        (np.zeros((2, 3), int), "codes"),
        (5, "codes"),
    ],
)
def test_bad_codes_name_the_parameter(codes, parameter):
    for backend in ("shade", "plaintext"):
        with pytest.raises(InputError) as info:
            secure_hamming_matrix(codes, backend=backend)
        assert info.value.parameter == parameter


def test_bad_backend_seed_and_workers():
    codes = [np.zeros((1, 3), int)]
    with pytest.raises(InputError, match="backend"):
        secure_hamming_matrix(codes, backend="magic")
    with pytest.raises(InputError, match="workers"):
        secure_hamming_matrix(codes, workers=0)
    with pytest.raises(InputError, match="seed"):
        secure_hamming_matrix(codes, seed=-1)


@pytest.mark.parametrize("parties", [2, 3, 4, 5, 6])
def test_pair_roles_are_active_in_about_half_of_each_partys_pairs(parties):
    sends = [0] * parties
    for a in range(parties):
        for b in range(a + 1, parties):
            sender, receiver = pair_roles(a, b)
            assert {sender, receiver} == {a, b}
            sends[sender] += 1
    assert max(sends) - min(sends) <= 1
    assert all(abs(2 * s - (parties - 1)) <= 1 for s in sends)


def test_all_pairs_traffic_is_spread_over_the_parties():
    rng = np.random.default_rng(3)
    codes = [rng.integers(0, 2, size=(24, 64)) for _ in range(5)]
    result = secure_hamming_matrix(codes, seed=3)
    np.testing.assert_array_equal(result.matrix, plain(codes))
    sent = [result.bytes_sent[p] for p in range(5)]
    assert max(sent) < 1.2 * min(sent), sent


def test_setups_carry_across_rounds_and_positions_and_the_matrix_stays_exact():
    """Four rounds of the all-pairs matrix with one OTSetups: parties change positions and one
    sits a round out; every matrix equals the plaintext one, and base OTs run only for pairs
    (and directions) not met before."""
    rng = np.random.default_rng(3)
    setups = OTSetups()
    plan = [[10, 11, 12], [10, 11, 12], [12, 10, 11, 13], [11, 12]]
    fresh = []
    for ids in plan:
        codes = [rng.integers(0, 2, (int(rng.integers(2, 9)), 96)) for _ in ids]
        result = secure_hamming_matrix(codes, setups=setups, identities=ids)
        np.testing.assert_array_equal(result.matrix, secure_hamming_matrix(codes, backend="plaintext").matrix)
        assert len(result.pair_seconds) == len(ids) * (len(ids) - 1) // 2
        fresh.append(result.fresh_setups)
    assert fresh[0] == 3 and fresh[1] == 0 and fresh[3] == 0
    assert 3 <= fresh[2] <= 6


def test_setups_and_identities_bad_input():
    codes = [np.zeros((2, 8), np.uint8), np.ones((2, 8), np.uint8)]
    with pytest.raises(InputError, match="setups"):
        secure_hamming_matrix(codes, backend="lwe", setups=OTSetups())
    with pytest.raises(InputError, match="identities"):
        secure_hamming_matrix(codes, identities=[4, 4])
    with pytest.raises(InputError, match="identities"):
        secure_hamming_matrix(codes, identities=[1])


def test_correction_frames_are_made_in_the_batch_that_carries_them(monkeypatch):
    """The sender writes every correction frame where the sealed batch to its peer carries it
    (no copy of a frame between the SHADE kernel and the link), over several stream exchanges,
    and the distances stay exact."""
    from securefl.crypto import shade
    from securefl.runtime import links

    monkeypatch.setattr(shade, "CHUNK_OTS", 1000)
    monkeypatch.setattr(shade, "FRAME_BYTES", 1 << 12)
    placed, seal = [], links.seal

    def recording_seal(state, messages, **kwargs):
        blob = seal(state, messages, **kwargs)
        lo = blob.__array_interface__["data"][0]
        for message in messages:
            if message.tag == "shade/u":
                at = message.arrays[0].__array_interface__["data"][0]
                placed.append(lo <= at and at + message.arrays[0].nbytes <= lo + blob.nbytes)
        return blob

    monkeypatch.setattr(links, "seal", recording_seal)
    rng = np.random.default_rng(9)
    x, y = rng.integers(0, 2, (17, 999)), rng.integers(0, 2, (6, 999))
    sender_share, receiver_share = shade_pair(x, y, chunk_bytes=1 << 14)
    np.testing.assert_array_equal((sender_share + receiver_share).astype(np.int64), plain([x, y])[:17, 17:])
    assert len(placed) > 5 and all(placed)


def test_a_pair_keeps_its_setup_across_calls():
    """shade_pair with ``setups``: the base OTs run on the first call only; the second is the
    next session of the same IKNP extension, and both are exact."""
    rng = np.random.default_rng(12)
    setups = OTSetups()
    for _ in range(2):
        x, y = rng.integers(0, 2, (5, 70)), rng.integers(0, 2, (4, 70))
        a, b = shade_pair(x, y, sender=3, receiver=5, setups=setups)
        np.testing.assert_array_equal((a + b).astype(np.int64), plain([x, y])[:5, 5:])
    (kept,) = [s for (peer, role), s in setups.held[3].items() if role == "sender"]
    assert kept.next_session == 2


@pytest.mark.skipif(not __import__("securefl.crypto.aesni").crypto.aesni.available(), reason="no AES-NI target")
@pytest.mark.parametrize("n_a", [5, 64, 135])
def test_fused_aesni_and_openssl_tiles_send_and_output_the_same(monkeypatch, n_a):
    """The two expansion paths are one function: with the same seed every correction frame
    on the link and both shares are equal, bit for bit (17 blocks at 135 points: the
    eight-wide body and the tail; 64 points: the body alone; 5: the tail alone)."""
    from securefl.crypto import aesni, shade

    absorb = shade.ReceiverSession.absorb_frame
    rng = np.random.default_rng(n_a)
    x, y = rng.integers(0, 2, (n_a, 70)), rng.integers(0, 2, (9, 70))
    runs = {}
    for fused in (True, False):
        seen = []

        def absorb_frame(self, index, number, seeds, message, party, worker, seen=seen):
            seen.append(np.array(message.arrays[0]))
            return absorb(self, index, number, seeds, message, party, worker)

        monkeypatch.setattr(shade.ReceiverSession, "absorb_frame", absorb_frame)
        monkeypatch.setattr(aesni, "available", lambda fused=fused: fused)
        shares = shade_pair(x, y, seed=11)
        runs[fused] = (shares, seen)
        assert shade._Expander(blocks=1, rows=1).fused is fused
    (fused_shares, fused_frames), (tile_shares, tile_frames) = runs[True], runs[False]
    np.testing.assert_array_equal(fused_shares[0], tile_shares[0])
    np.testing.assert_array_equal(fused_shares[1], tile_shares[1])
    assert len(fused_frames) == len(tile_frames) > 0
    for a, b in zip(fused_frames, tile_frames):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal((fused_shares[0] + fused_shares[1]).astype(np.int64), plain([x, y])[:n_a, n_a:])
