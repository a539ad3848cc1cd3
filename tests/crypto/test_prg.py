"""AES-CTR PRG: known answers against ``cryptography``, shapes, dtypes, uniformity; RandomSource."""

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from scipy import stats

from securefl.crypto import prg
from securefl.crypto.rand import RandomSource, random_source
from securefl.errors import InputError

KEY = bytes(range(16))


def reference_ctr(key: bytes, nbytes: int, nonce: int = 0) -> bytes:
    iv = nonce.to_bytes(8, "big") + bytes(8)
    return Cipher(algorithms.AES(key), modes.CTR(iv)).encryptor().update(bytes(nbytes))


@pytest.mark.parametrize("nbytes", [1, 15, 16, 17, 1000, (1 << 20) - 1, 1 << 20, (1 << 20) + 17, 3 * (1 << 20) + 5])
@pytest.mark.parametrize("nonce", [0, 7, 2**64 - 1])
def test_keystream_matches_cryptography_ctr(nbytes, nonce):
    assert prg.expand(KEY, nbytes, np.uint8, nonce=nonce).tobytes() == reference_ctr(KEY, nbytes, nonce)


def test_expand_dtypes_and_shapes_reinterpret_the_same_stream():
    words = prg.expand(KEY, (3, 4), np.uint64)
    assert words.shape == (3, 4) and words.dtype == np.uint64
    assert words.tobytes() == reference_ctr(KEY, 96)
    np.testing.assert_array_equal(prg.expand(KEY, 48, np.uint16), words.reshape(-1).view(np.uint16)[:48])


def test_expand_into_reused_buffer():
    out = np.empty(100, dtype=np.uint32)
    assert prg.expand(KEY, 100, np.uint32, out=out) is out
    assert out.tobytes() == reference_ctr(KEY, 400)


def test_expand_many_rows_equal_expand():
    seeds = prg.random_seeds(4)
    rows = prg.expand_many(seeds, 33, np.uint16, nonce=3)
    for seed, row in zip(seeds, rows):
        np.testing.assert_array_equal(row, prg.expand(seed.tobytes(), 33, np.uint16, nonce=3))


def test_nonces_and_seeds_give_different_streams():
    a = prg.expand(KEY, 64, nonce=1)
    assert not np.array_equal(a, prg.expand(KEY, 64, nonce=2))
    assert not np.array_equal(a, prg.expand(bytes(16), 64, nonce=1))


def test_random_seeds_are_fresh():
    seeds = prg.random_seeds(8)
    assert seeds.shape == (8, 16) and seeds.dtype == np.uint8
    assert len({bytes(s) for s in seeds}) == 8
    assert len(prg.random_seed()) == 16


def test_output_bytes_are_uniform():
    counts = np.bincount(prg.expand(prg.random_seed(), 1 << 18, np.uint8), minlength=256)
    assert stats.chisquare(counts).pvalue > 1e-6


def test_uniformity_check_has_power():
    biased = prg.expand(prg.random_seed(), 1 << 18, np.uint8) & 0xFE
    assert stats.chisquare(np.bincount(biased, minlength=256)).pvalue < 1e-6


@pytest.mark.parametrize(
    "call, parameter",
    [
        (lambda: prg.expand(b"short", 4), "seed"),
        (lambda: prg.expand(KEY, 4, np.float32), "dtype"),
        (lambda: prg.expand(KEY, (-1, 2)), "shape"),
        (lambda: prg.expand(KEY, 4, nonce=-1), "nonce"),
        (lambda: prg.expand(KEY, 4, np.uint8, out=np.empty(5, np.uint8)), "out"),
        (lambda: prg.expand_many(np.zeros((2, 15), np.uint8), 4), "seeds"),
        (lambda: prg.random_seeds(-1), "count"),
        (lambda: prg.keystream_into(KEY, np.empty((4, 4), np.uint8)[:, ::2]), "out"),
    ],
)
def test_bad_input_names_the_parameter(call, parameter):
    with pytest.raises(InputError, match=parameter):
        call()


def test_measure_throughput_is_positive():
    assert prg.measure_throughput(1 << 20, repeats=1) > 0


def test_random_source_seeded_is_reproducible_and_children_differ():
    a, b = random_source(5), random_source(5)
    assert a.bytes(32) == b.bytes(32)
    assert a.bytes(32) != random_source(6).bytes(32)
    assert a.child("x").bytes(16) != a.child("y").bytes(16)
    assert 1 <= a.below(7) < 7
    assert RandomSource().bytes(16) != RandomSource().bytes(16)


@pytest.mark.parametrize("seed", [-1, 1.5, "x", True])
def test_random_source_rejects_bad_seed(seed):
    with pytest.raises(InputError, match="seed"):
        random_source(seed)


def test_counter_blocks_under_ecb_are_the_ctr_keystream():
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    from securefl.crypto.prg import counter_blocks, expand

    seed = bytes(range(16))
    blocks = counter_blocks(5, nonce=7)
    ecb = Cipher(algorithms.AES(seed), modes.ECB()).encryptor().update(blocks.tobytes())
    assert ecb == expand(seed, 80, nonce=7).tobytes()
