"""A client's generators for one round (securefl.fl.rng.client_rng): the documented
derivation, known answers, distinct streams, input checks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from securefl.errors import InputError
from securefl.fl import client_rng
from securefl.fl.rng import client_entropy, client_generator


def _draws(rng) -> tuple[list[int], list[int]]:
    return rng.numpy.integers(0, 2**32, size=3).tolist(), torch.randint(0, 2**31, (3,), generator=rng.torch).tolist()


def test_derivation_is_the_documented_one():
    """entropy (seed, zigzag(round), client, ASCII of purpose); numpy from spawn key 0,
    torch from the first 64-bit word of spawn key 1 shifted right by one."""
    assert client_entropy(7, 2, 3) == (7, 4, 3, int.from_bytes(b"train", "big"))
    assert client_entropy(7, -1, 3, "episodes") == (7, 1, 3, int.from_bytes(b"episodes", "big"))
    entropy = (7, 4, 3, int.from_bytes(b"train", "big"))
    numpy = np.random.Generator(np.random.PCG64(np.random.SeedSequence(entropy, spawn_key=(0,))))
    word = int(np.random.SeedSequence(entropy, spawn_key=(1,)).generate_state(1, np.uint64)[0])
    torch_generator = torch.Generator().manual_seed(word >> 1)
    rng = client_rng(7, 2, 3)
    assert rng.numpy.integers(0, 2**32, size=5).tolist() == numpy.integers(0, 2**32, size=5).tolist()
    assert torch.equal(torch.randn(5, generator=rng.torch), torch.randn(5, generator=torch_generator))


def test_known_answers():
    assert _draws(client_rng(7, 2, 3)) == ([2936818644, 713774620, 1243339796], [1106971083, 1611872851, 1815485562])
    assert _draws(client_rng(7, -1, 3, purpose="episodes")) == (
        [54438868, 3323459896, 546729351], [475994016, 1684503218, 349415218])


def test_client_generator_is_the_torch_half_of_client_rng():
    assert torch.equal(torch.randn(4, generator=client_generator(7, 2, 3)),
                       torch.randn(4, generator=client_rng(7, 2, 3).torch))


def test_every_label_gives_its_own_stream():
    """Seeds, rounds (warm-up rounds negative), clients and purposes never share a stream."""
    keys = [(s, r, c, p) for s in (0, 1) for r in (-2, -1, 0, 1) for c in (0, 1) for p in ("train", "noise")]
    draws = {key: _draws(client_rng(key[0], key[1], key[2], purpose=key[3])) for key in keys}
    assert len({str(d[0]) for d in draws.values()}) == len(keys)
    assert len({str(d[1]) for d in draws.values()}) == len(keys)
    assert len({client_entropy(*key) for key in keys}) == len(keys)


def test_the_same_labels_give_the_same_stream_whatever_ran_before():
    first = _draws(client_rng(5, 0, 2))
    for client in (0, 1, 3):
        _draws(client_rng(5, 0, client))
    assert _draws(client_rng(5, 0, 2)) == first


@pytest.mark.parametrize("labels, parameter", [
    ((-1, 0, 0, "train"), "seed"), ((0, 0, -1, "train"), "client"), ((0, 1.5, 0, "train"), "round_index"),
    ((0, True, 0, "train"), "round_index"), ((0, 0, 0, ""), "purpose"), ((0, 0, 0, "Train"), "purpose"),
    ((0, 0, 0, "-x"), "purpose"), ((0, 0, 0, "naïve"), "purpose"),
])
def test_bad_labels_raise_input_error(labels, parameter):
    seed, round_index, client, purpose = labels
    with pytest.raises(InputError, match=parameter):
        client_rng(seed, round_index, client, purpose=purpose)
