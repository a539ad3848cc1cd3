"""FedProp App. A's horizontal flips after the translations (``hflip``)."""

from __future__ import annotations

import pytest
import torch

from securefl.errors import InputError
from securefl.fl import model_vector
from securefl.methods import build_method
from securefl.methods.common import perturb, random_hflip, translation


def test_each_image_is_mirrored_with_its_own_draw():
    x = torch.rand(64, 3, 8, 8)
    flipped = random_hflip(x, torch.Generator().manual_seed(5))
    mask = torch.rand(64, generator=torch.Generator().manual_seed(5)) < 0.5
    assert torch.equal(flipped[mask], x[mask].flip(3)) and torch.equal(flipped[~mask], x[~mask])
    assert 0 < int(mask.sum()) < 64


def test_without_flips_the_translation_draws_exactly_as_before():
    x = torch.rand(16, 3, 32, 32)
    ours, theirs = torch.Generator().manual_seed(2), torch.Generator().manual_seed(2)
    augment = translation((3, 32, 32), 2, ours)
    assert torch.equal(augment(x), perturb(x, 0.0, 2, theirs))
    assert torch.equal(ours.get_state(), theirs.get_state())


def test_flips_follow_the_translation_from_the_same_generator():
    x = torch.rand(16, 3, 32, 32)
    ours, theirs = torch.Generator().manual_seed(2), torch.Generator().manual_seed(2)
    augmented = translation((3, 32, 32), 2, ours, hflip=True)(x)
    assert torch.equal(augmented, random_hflip(perturb(x, 0.0, 2, theirs), theirs))
    only_flips = translation((3, 32, 32), 0, torch.Generator().manual_seed(3), hflip=True)
    assert only_flips is not None
    assert torch.equal(only_flips(x), random_hflip(x, torch.Generator().manual_seed(3)))


def test_off_and_no_shift_is_no_augmentation():
    assert translation((3, 32, 32), 0, torch.Generator()) is None


@pytest.mark.parametrize("shape, hflip", [((64,), True), ((3, 32, 32), "yes"), ((3, 32, 32), 1)])
def test_bad_flips_are_refused(shape, hflip):
    with pytest.raises(InputError, match="hflip"):
        translation(shape, 0, torch.Generator(), hflip=hflip)


@pytest.mark.parametrize("name", ["fedavg-labeled", "fedprop"])
def test_the_flag_reaches_the_clients(name, tiny_digits, tiny_hyper):
    vectors = []
    for hflip in (False, True):
        method = build_method(name, secure="plaintext", seed=1, hflip=hflip, max_shift=0,
                              **tiny_hyper, **({"warmup_rounds": 1} if name == "fedprop" else {}))
        method.setup(tiny_digits.for_training())
        method.run_round(1)
        vectors.append(model_vector(method.network))
    assert not (vectors[0] == vectors[1]).all()
