"""LWE secure Hamming backend: exactness, share uniformity, views, the statistical bound, bad input, tampering."""

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy import stats

from securefl.crypto import kernels, linalg, lwe
from securefl.crypto.channel import SERVER, Message
from securefl.crypto.hamming import pair_roles
from securefl.errors import InputError, PlatformError, ProtocolError
from securefl.protocols import lwe_distance, lwe_one_vs_many, lwe_pair, secure_hamming_matrix


def plain(codes):
    stacked = np.concatenate([np.asarray(c, dtype=np.int64) for c in codes])
    return (stacked[:, None, :] != stacked[None, :, :]).sum(axis=2)


@settings(max_examples=5, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 4), min_size=2, max_size=5),
    length=st.sampled_from([1, 7, 65]),
    seed=st.integers(0, 2**31),
)
@example(sizes=[2, 1], length=4095, seed=0)
def test_lwe_matrix_equals_plaintext_for_random_codes(sizes, length, seed):
    rng = np.random.default_rng(seed)
    codes = [rng.integers(0, 2, size=(n, length)) for n in sizes]
    result = secure_hamming_matrix(codes, backend="lwe", seed=seed)
    assert result.backend == "lwe" and result.matrix.dtype == np.int32
    np.testing.assert_array_equal(result.matrix, plain(codes))
    assert set(result.cpu_seconds_by_party) == {*range(len(sizes)), SERVER}


@settings(max_examples=20, deadline=None)
@given(seed=st.binary(min_size=16, max_size=16), count=st.integers(1, 3000))
def test_the_noise_samplers_are_their_specification_on_the_stream(seed, count):
    """Known answer from the AES-CTR stream, in plain Python: CBD(21) is the popcount of the
    low 21 bits minus that of the next 21; a ternary entry is the next byte below 255, mod 3,
    minus 1 (bytes 255 rejected, a fresh stream per attempt)."""
    words = lwe._stream(seed, "E", (count,), np.uint64)
    mask = (1 << lwe.ETA) - 1
    expected = [(int(w) & mask).bit_count() - ((int(w) >> lwe.ETA) & mask).bit_count() for w in words]
    np.testing.assert_array_equal(lwe._binomial(seed, "E", (count,)), np.array(expected, dtype=np.float64))
    kept, attempt = [], 0
    while len(kept) < count:
        need = count - len(kept)
        raw = lwe._stream(seed, f"S/{attempt}", (need + need // 128 + 64,), np.uint8)
        kept += [int(b) % 3 - 1 for b in raw if b < 255][:need]
        attempt += 1
    np.testing.assert_array_equal(lwe._ternary(seed, "S", (count,)), np.array(kept, dtype=np.float64))


def test_the_sampling_kernels_at_their_edges():
    words = np.array([0, 2**64 - 1, (1 << 21) - 1, ((1 << 21) - 1) << 21, 1 << 42, 0b101 | (0b1 << 21)], dtype=np.uint64)
    out = np.empty(words.shape)
    kernels.centered_binomial_into(words, 21, out)
    np.testing.assert_array_equal(out, [0, 0, 21, -21, 0, 1])
    raw = np.array([255, 0, 1, 255, 2, 254, 3, 4], dtype=np.uint8)
    filled = np.full(6, 7.0)
    assert kernels.ternary_fill(raw, filled, 1) == 6  # stops when full, rejects 255
    np.testing.assert_array_equal(filled, [7.0, -1, 0, 1, 1, -1])
    assert kernels.ternary_fill(np.full(4, 255, dtype=np.uint8), filled, 2) == 2


@pytest.mark.parametrize("sizes", [[1, 1], [1, 6], [5, 1, 2], [1, 2, 1, 3, 1]])
def test_uneven_splits_and_single_points(sizes):
    rng = np.random.default_rng(len(sizes))
    codes = [rng.integers(0, 2, size=(n, 33)).astype(bool) for n in sizes]
    np.testing.assert_array_equal(secure_hamming_matrix(codes, backend="lwe").matrix, plain(codes))


def test_pair_one_vs_many_and_distance_forms():
    rng = np.random.default_rng(2)
    x, y = rng.integers(0, 2, (5, 40)), rng.integers(0, 2, (3, 40))
    share_x, share_y = lwe_pair(x, y, seed=3, encryptor=4, evaluator=7)
    assert share_x.shape == share_y.shape == (5, 3) and share_x.dtype == np.uint16
    np.testing.assert_array_equal((share_x + share_y).astype(np.int64), plain([x, y])[:5, 5:])
    a, b = lwe_one_vs_many(x, y[0])
    np.testing.assert_array_equal((a + b).astype(np.int64), (x != y[0]).sum(axis=1))
    s, t = lwe_distance(x[1], y[2])
    assert (s + t) % 2**16 == int((x[1] != y[2]).sum())
    with pytest.raises(InputError, match="one"):
        lwe_one_vs_many(x, y)
    with pytest.raises(InputError, match="x"):
        lwe_distance(x, y[0])
    with pytest.raises(InputError) as info:
        lwe_pair(x, y, encryptor=1, evaluator=1)
    assert info.value.parameter == "evaluator"


def test_seed_makes_runs_reproducible_and_workers_do_not_matter():
    rng = np.random.default_rng(5)
    x, y = rng.integers(0, 2, (4, 65)), rng.integers(0, 2, (3, 65))
    first = lwe_pair(x, y, seed=1)
    again = lwe_pair(x, y, seed=1, workers=2)
    other = lwe_pair(x, y, seed=2)
    np.testing.assert_array_equal(first[0], again[0])
    assert not np.array_equal(first[0], other[0])


def _chi2_low_byte(values):
    counts = np.bincount((np.asarray(values).reshape(-1) & 0xFF).astype(np.int64), minlength=256)
    return stats.chisquare(counts).pvalue


@pytest.mark.parametrize("side", [0, 1])
def test_each_share_alone_is_uniform(side):
    """Encryptor's and evaluator's shares of HD are each uniform mod 2^16 for structured codes."""
    rng = np.random.default_rng(6)
    x, y = np.zeros((64, 9), dtype=np.uint8), rng.integers(0, 2, (80, 9))
    share = lwe_pair(x, y, seed=7 + side)[side]
    assert _chi2_low_byte(share) > 1e-5
    assert stats.binomtest(int((share >> 15).sum()), share.size).pvalue > 1e-5


def test_uniformity_check_rejects_the_distances_themselves():
    rng = np.random.default_rng(8)
    x, y = rng.integers(0, 2, (64, 9)), rng.integers(0, 2, (80, 9))
    assert _chi2_low_byte(plain([x, y])[:64, 64:]) < 1e-5


class Recording:
    """Between the server and the clients: keeps what every party receives from the relay (its
    view of the relayed keys, ``C`` blocks and hints), as ``(tag, arrays)``."""

    def __init__(self, inner):
        self.inner, self.seen = inner, []

    def exchange(self, step, requests, timeout=None):
        for request in requests.values():
            for i in range(int(request.config.get("cclp/lwe/in/n", 0))):
                tag = request.config[f"cclp/lwe/in/{i}/tag"]
                count = int(request.config[f"cclp/lwe/in/{i}/count"])
                self.seen.append((tag, [np.array(request.arrays[f"cclp/lwe/in/{i}/{k}"])
                                        for k in range(count)]))
        return self.inner.exchange(step, requests, timeout=timeout)


def _recorded(x, y, seed):
    """The views of one LWE pair's parties (a :class:`Recording`)."""
    views = []

    def wrap(transport):
        views.append(Recording(transport))
        return views[-1]

    lwe_pair(x, y, seed=seed, wrap=wrap)
    return views[0]


def _ciphertext_low_words(network, kind):
    return np.concatenate([arrays[0].reshape(-1) for tag, arrays in network.seen if tag.startswith(f"lwe/{kind}/")])


def test_evaluator_view_of_the_ciphertext_is_uniform_and_the_check_can_fail(monkeypatch):
    """C hides all-zero codes behind uniform bytes; with the secrets forced to 0 it does not."""
    x, y = np.zeros((2, 9), dtype=np.uint8), np.ones((1, 9), dtype=np.uint8)
    seen = _ciphertext_low_words(_recorded(x, y, 4), "C")
    assert seen.size == 2 * (9 + lwe.RERANDOMISATION) and seen.dtype == np.uint64
    assert _chi2_low_byte(seen) > 1e-5
    assert _chi2_low_byte(seen >> np.uint64(56)) > 1e-5
    secret_free = lwe._ternary

    def zero_secret(seed, label, shape):
        return np.zeros(shape) if label == "S" else secret_free(seed, label, shape)

    monkeypatch.setattr(lwe, "_ternary", zero_secret)
    assert _chi2_low_byte(_ciphertext_low_words(_recorded(x, y, 4), "C")) < 1e-5


def _hint_attack(hint_top):
    """The encryptor's guess of y_j for L = 1 without re-randomisation from the top limb it
    receives: H = M_0^T y_j + G is small (its top 32 bits all 0 or all 1) exactly when y_j = 0."""
    return ~np.all((hint_top == 0) | (hint_top == (1 << 32) - 1), axis=1)


def test_hint_hides_the_codes_only_because_of_the_rerandomisers(monkeypatch):
    """An attack script: without R the hint reveals every code bit; with R it guesses at chance."""
    y = np.array([[0], [1]] * 16, dtype=np.uint8)
    x = np.zeros((1, 1), dtype=np.uint8)
    (hint,) = [arrays[0] for tag, arrays in _recorded(x, y, 9).seen if tag.startswith("lwe/H/")]
    guesses = _hint_attack(hint)
    assert np.all(guesses)  # every hint looks "large": the guess carries no information
    secret_free = lwe._ternary

    def no_rerandomiser(seed, label, shape):
        return np.zeros(shape) if label == "R" else secret_free(seed, label, shape)

    monkeypatch.setattr(lwe, "_ternary", no_rerandomiser)
    (hint,) = [arrays[0] for tag, arrays in _recorded(x, y, 9).seen if tag.startswith("lwe/H/")]
    np.testing.assert_array_equal(_hint_attack(hint), y[:, 0].astype(bool))


@pytest.mark.parametrize("sign", [1, -1])
def test_exact_at_the_worst_case_noise(sign, monkeypatch):
    """|N| = N_max exactly (every noise term at +-eta, every secret and re-randomiser entry
    aligned with it, all-ones codes) still decrypts exactly: no tail bound is involved."""
    monkeypatch.setattr(lwe, "_binomial", lambda seed, label, shape: np.full(shape, float(sign * lwe.ETA)))
    monkeypatch.setattr(
        lwe, "_ternary", lambda seed, label, shape: np.full(shape, float(-sign if label == "S" else sign))
    )
    codes = [np.ones((3, 50), dtype=np.uint8), np.ones((2, 50), dtype=np.uint8)]
    codes[0][1, ::3] = 0
    np.testing.assert_array_equal(secure_hamming_matrix(codes, backend="lwe", seed=0).matrix, plain(codes))


def test_statistical_bound_formula_and_value_at_the_shapes_in_use():
    """The docstring's bound, recomputed from the parameters in force, stays below 2^-40 for
    every shape the project runs (bench n = 1000 / 5000, FedProp's CIFAR-10 and MNIST rounds)."""
    length = 4096
    n_max = lwe.ETA * (length + lwe.RERANDOMISATION + lwe.LWE_DIMENSION)
    assert lwe.noise_bound(length) == n_max == 258_048
    shapes = {"n=1000": [500, 500], "n=5000": [2500, 2500], "cifar10": [500] * 5, "mnist": [600] * 10}
    for name, sizes in shapes.items():
        entries = sum(a * b for i, a in enumerate(sizes) for b in sizes[i + 1 :])
        bound = entries * n_max / 2.0**lwe.MASK_BITS
        assert lwe.statistical_distance(sizes, length) == pytest.approx(bound, rel=1e-12)
        assert bound <= 2.0**-40, (name, np.log2(bound))
    assert np.log2(lwe.statistical_distance([2500, 2500], length)) == pytest.approx(-46.4, abs=0.05)
    assert np.log2(lwe.statistical_distance([600] * 10, length)) == pytest.approx(-45.1, abs=0.05)
    assert np.log2(lwe.statistical_distance([500] * 5, length)) == pytest.approx(-47.8, abs=0.05)
    window = 2 * n_max + 2**lwe.DROPPED_BITS + 2**lwe.MASK_BITS
    assert window < 2**lwe.DELTA_BITS
    assert lwe.MODULUS_BITS <= lwe.HE_STANDARD_128_TERNARY[lwe.LWE_DIMENSION]
    assert lwe.MODULUS_BITS <= lwe.HE_STANDARD_128_TERNARY[lwe.RERANDOMISATION]
    assert (length + lwe.RERANDOMISATION) * 2**max(lwe.LIMB_BITS) < 2**53


def _no_transport(transport):
    raise AssertionError("the session was refused after its transport was opened")


def test_a_session_beyond_the_bound_is_refused_before_any_work():
    codes = [np.zeros((32_000, 1), dtype=np.uint8), np.zeros((32_000, 1), dtype=np.uint8)]
    with pytest.raises(InputError) as info:
        secure_hamming_matrix(codes, backend="lwe", wrap=_no_transport)
    assert info.value.parameter == "codes" and "statistical bound" in str(info.value)


@pytest.mark.parametrize(
    "name, value, parameter",
    [
        ("MODULUS_BITS", 112, "LWE_DIMENSION"),
        ("RERANDOMISATION", 2048, "RERANDOMISATION"),
        ("LIMB_BITS", (44, 36, 24), "L"),
        ("MASK_BITS", 88, "MASK_BITS"),
        ("RESPONSE_BITS", 40, "RESPONSE_BITS"),
    ],
)
def test_bad_parameters_are_refused_naming_the_parameter(name, value, parameter, monkeypatch):
    monkeypatch.setattr(lwe, name, value)
    if name in ("MODULUS_BITS", "MASK_BITS", "RESPONSE_BITS"):
        monkeypatch.setattr(lwe, "DELTA_BITS", lwe.MODULUS_BITS - 16)
        monkeypatch.setattr(lwe, "DROPPED_BITS", lwe.MODULUS_BITS - lwe.RESPONSE_BITS)
    with pytest.raises(InputError) as info:
        secure_hamming_matrix([np.zeros((1, 8), int), np.ones((1, 8), int)], backend="lwe")
    assert info.value.parameter == parameter


def test_bad_backend_seed_workers_and_codes_name_the_parameter():
    codes = [np.zeros((1, 3), int), np.ones((2, 3), int)]
    for kwargs, parameter in [({"workers": 0}, "workers"), ({"seed": -1}, "seed"), ({"workers": True}, "workers")]:
        with pytest.raises(InputError) as info:
            secure_hamming_matrix(codes, backend="lwe", **kwargs)
        assert info.value.parameter == parameter
    with pytest.raises(InputError) as info:
        secure_hamming_matrix([np.zeros((1, 1 << 16), np.uint8)] * 2, backend="lwe")
    assert info.value.parameter == "codes"


def test_inexact_float_products_are_refused_before_any_message(monkeypatch):
    monkeypatch.setattr(
        linalg, "gemm", lambda a, b, *, device, out=None: (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float64)
    )
    with pytest.raises(PlatformError, match="not exact"):
        secure_hamming_matrix([np.zeros((2, 5), int), np.ones((1, 5), int)], backend="lwe",
                              wrap=_no_transport)


def _relay_with(monkeypatch, change):
    original = lwe.LWEServer.relay

    def relay(self, message):
        return change(original(self, message))

    monkeypatch.setattr(lwe.LWEServer, "relay", relay)


def test_a_relay_that_alters_or_reorders_broadcasts_is_caught(monkeypatch):
    """The end-to-end tags under the pair keys catch a server that re-MACs altered frames."""
    codes = [np.zeros((2, 10), int), np.ones((3, 10), int)]

    def flip(forwards):
        if forwards and forwards[0].tag.startswith("lwe/H/"):
            low = np.array(forwards[0].arrays[0])
            low[0, 0] ^= np.uint64(1)
            return [Message(f.sender, f.receiver, f.tag, (low, *f.arrays[1:])) for f in forwards]
        return forwards

    _relay_with(monkeypatch, flip)
    with pytest.raises(ProtocolError, match="end-to-end tag"):
        secure_hamming_matrix(codes, backend="lwe")
    monkeypatch.undo()
    held = []

    def hold_first_block(forwards):
        if forwards and forwards[0].tag == "lwe/C/1/0":
            held.extend(forwards)
            return []
        return forwards

    _relay_with(monkeypatch, hold_first_block)
    with pytest.raises(ProtocolError, match="block 1"):
        secure_hamming_matrix(codes, backend="lwe")


def test_out_of_range_messages_raise_protocol_error(monkeypatch):
    codes = [np.zeros((2, 10), int), np.ones((3, 10), int)]
    # A low-order X25519 point as public key (signed by its own party: a malicious client).
    original_key = lwe.LWEParty.public_key

    def bad_key(self):
        message = original_key(self)
        if self.index != 0:
            return message
        signature = np.frombuffer(self.binding.sign(0, bytes(32)), np.uint8)
        return Message(message.sender, message.receiver, message.tag, (np.zeros(32, np.uint8), signature))

    monkeypatch.setattr(lwe.LWEParty, "public_key", bad_key)
    with pytest.raises(ProtocolError, match="invalid public key"):
        secure_hamming_matrix(codes, backend="lwe")
    monkeypatch.undo()
    # A ciphertext block, or a hint, of the wrong dtype (the hint: all 13 bytes, not its top limb).
    original_stream = lwe.LWEParty.broadcasts

    def wide_blocks(self):
        for message in original_stream(self):
            if message.tag.startswith("lwe/C/"):
                low, top, middle, tags = message.arrays
                yield Message(message.sender, message.receiver, message.tag, (low, top, middle.astype(np.uint16), tags))
            else:
                yield message

    def wide_hint(self):
        for message in original_stream(self):
            if message.tag.startswith("lwe/H/"):
                top, tags = message.arrays
                yield Message(message.sender, message.receiver, message.tag, (top.astype(np.uint64), tags))
            else:
                yield message

    for altered in (wide_blocks, wide_hint):
        monkeypatch.setattr(lwe.LWEParty, "broadcasts", altered)
        with pytest.raises(ProtocolError, match="expected"):
            secure_hamming_matrix(codes, backend="lwe")
        monkeypatch.undo()
    # Shares that do not belong together: a distance above L.
    original_share = lwe.LWEParty.share
    monkeypatch.setattr(
        lwe.LWEParty, "share", lambda self, peer: original_share(self, peer) + np.uint16(0x8000 if self.index == 0 else 0)
    )
    with pytest.raises(ProtocolError, match="exceeds L"):
        secure_hamming_matrix(codes, backend="lwe")


def test_bytes_are_linear_and_broadcast_once():
    """C and H' cross each client's uplink once per session whatever the number of peers;
    D is 3 bytes per entry; the cost model of the module docstring holds to the frame headers."""
    rng = np.random.default_rng(12)
    sizes, length = [3, 2, 4], 10
    codes = [rng.integers(0, 2, (n, length)) for n in sizes]
    result = secure_hamming_matrix(codes, backend="lwe")
    kinds = result.bytes_by_message
    encryptors = {pair_roles(a, b)[0] for a in range(3) for b in range(a + 1, 3)}
    evaluators = {pair_roles(a, b)[1] for a in range(3) for b in range(a + 1, 3)}
    columns = length + lwe.RERANDOMISATION
    c_model = sum(sizes[a] * columns * 13 for a in encryptors)
    assert c_model <= kinds["C"] < c_model + 1000 * len(encryptors)
    h_model = sum(lwe.LWE_DIMENSION * sizes[b] * lwe.HINT_BYTES for b in evaluators)
    assert h_model <= kinds["H"] < h_model + 300 * len(evaluators)
    assert kinds["relay/C"] >= c_model and kinds["relay/H"] >= h_model
    d_model = sum(sizes[a] * sizes[b] * 3 + 16 for a in range(3) for b in range(a + 1, 3))
    assert d_model <= kinds["D"] < d_model + 200 * 3
