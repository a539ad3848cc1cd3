"""FedAvg+FixMatch: the strong augmentation, FixMatch's loss and the local training."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from securefl.data import ClientData, Federation
from securefl.errors import InputError
from securefl.fl import fixmatch_loss, train_fixmatch
from securefl.methods import build_method
from securefl.methods.randaugment import CUTOUT_FILL, OPS, randaugment

OP = {op.name: op for op in OPS}


def quantised(x: torch.Tensor) -> torch.Tensor:
    return (x.clamp(0, 1) * 255).round() / 255


def pillow(array: np.ndarray) -> Image.Image:
    return Image.fromarray(array.astype(np.uint8))


# ------------------------------------------------------------------ randaugment
def test_randaugment_is_reproducible_from_its_generator_and_leaves_the_global_one_alone():
    x = torch.rand(12, 1, 28, 28)
    before = torch.get_rng_state()
    a = randaugment(x, torch.Generator().manual_seed(5))
    b = randaugment(x, torch.Generator().manual_seed(5))
    c = randaugment(x, torch.Generator().manual_seed(6))
    assert torch.equal(torch.get_rng_state(), before)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert a.shape == x.shape and a.dtype == torch.float32
    assert float(a.min()) >= 0.0 and float(a.max()) <= 1.0


@pytest.mark.parametrize("shape", [(4, 1, 8, 8), (4, 3, 32, 32)])
def test_randaugment_keeps_shape_for_gray_and_colour_images(shape):
    out = randaugment(torch.rand(shape), torch.Generator().manual_seed(0))
    assert out.shape == shape


def test_no_operations_and_no_cutout_is_the_8_bit_image():
    x = torch.rand(6, 1, 10, 10)
    out = randaugment(x, torch.Generator().manual_seed(0), num_ops=0, cutout=0.0)
    assert torch.equal(out, quantised(x))


def test_cutout_paints_one_gray_square_and_nothing_else():
    x = torch.rand(40, 1, 16, 16) * 0.4
    out = randaugment(x, torch.Generator().manual_seed(1), num_ops=0, cutout=1.0)
    changed = out != quantised(x)
    assert changed.any()
    assert torch.all(out[changed] == CUTOUT_FILL)
    for image in changed[:, 0]:
        rows, cols = image.any(dim=1).nonzero(), image.any(dim=0).nonzero()
        if len(rows):
            box = image[rows.min():rows.max() + 1, cols.min():cols.max() + 1]
            assert box.all()  # a filled rectangle, no stray pixels
            assert len(rows) <= 16 and len(cols) <= 16


@pytest.mark.parametrize("argument, value", [("num_ops", -1), ("cutout", 1.5)])
def test_randaugment_refuses_bad_arguments(argument, value):
    with pytest.raises(InputError, match=argument):
        randaugment(torch.rand(2, 1, 8, 8), torch.Generator(), **{argument: value})


def test_randaugment_refuses_images_that_are_not_gray_or_rgb():
    with pytest.raises(InputError, match="images"):
        randaugment(torch.rand(2, 2, 8, 8), torch.Generator())


def test_the_table_is_fixmatchs():
    """Sohn et al. 2020, Table 12: 14 operations with these ranges."""
    assert {op.name for op in OPS} == {
        "Identity", "AutoContrast", "Equalize", "Brightness", "Color", "Contrast", "Sharpness",
        "Posterize", "Solarize", "Rotate", "ShearX", "ShearY", "TranslateX", "TranslateY"}
    for name in ("Brightness", "Color", "Contrast", "Sharpness"):
        assert (OP[name].low, OP[name].high) == (0.05, 0.95)
    assert (OP["Rotate"].low, OP["Rotate"].high) == (-30.0, 30.0)
    for name in ("ShearX", "ShearY", "TranslateX", "TranslateY"):
        assert (OP[name].low, OP[name].high) == (-0.3, 0.3)
    assert {int(OP["Posterize"].magnitude(level)) for level in np.linspace(0, 0.999, 50)} == \
        {4, 5, 6, 7, 8}


def test_operations_known_answers():
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (10, 10))
    image = pillow(pixels)
    same = lambda out: np.array_equal(np.asarray(out), pixels)  # noqa: E731
    assert same(OP["Identity"].apply(image, 0.0))
    assert same(OP["Posterize"].apply(image, 8.0))
    assert same(OP["Rotate"].apply(image, 0.0))
    assert same(OP["ShearX"].apply(image, 0.0)) and same(OP["TranslateY"].apply(image, 0.0))
    assert np.array_equal(np.asarray(OP["Solarize"].apply(image, 0.0)), 255 - pixels)
    assert same(OP["Solarize"].apply(image, 1.0))
    assert np.array_equal(np.asarray(OP["Posterize"].apply(image, 4.0)), pixels & 0xF0)
    # TranslateX by 0.3 of 10 pixels: output column j shows input column j + 3; black beyond
    moved = np.asarray(OP["TranslateX"].apply(image, 0.3))
    assert np.array_equal(moved[:, :7], pixels[:, 3:]) and not moved[:, 7:].any()
    darker = np.asarray(OP["Brightness"].apply(image, 0.5)).astype(int)
    assert np.abs(darker - pixels * 0.5).max() <= 1


# ------------------------------------------------------------------ the loss
def test_fixmatch_loss_known_answer():
    logits_l = torch.tensor([[2.0, 0.0], [0.0, 1.0]])
    y_l = torch.tensor([0, 0])
    logits_w = torch.tensor([[5.0, 0.0], [0.2, 0.0], [0.0, 4.0]])   # confident, not, confident
    logits_s = torch.tensor([[1.0, 1.0], [3.0, 0.0], [2.0, 0.0]])
    loss, mask = fixmatch_loss(logits_l, y_l, logits_w, logits_s, threshold=0.95,
                               unlabeled_weight=2.0)
    assert mask.tolist() == [True, False, True]
    ce = lambda z, c: -math.log(math.exp(z[c]) / sum(math.exp(v) for v in z))  # noqa: E731
    supervised = (ce([2.0, 0.0], 0) + ce([0.0, 1.0], 0)) / 2
    unlabeled = (ce([1.0, 1.0], 0) + 0.0 + ce([2.0, 0.0], 1)) / 3  # divided by mu B, not by the mask
    assert loss.item() == pytest.approx(supervised + 2.0 * unlabeled, rel=1e-6)


def test_fixmatch_loss_gives_no_gradient_to_the_weak_view_and_none_below_the_threshold():
    logits_w = torch.tensor([[0.1, 0.0]], requires_grad=True)
    logits_s = torch.tensor([[0.0, 3.0]], requires_grad=True)
    loss, mask = fixmatch_loss(torch.zeros(0, 2), torch.zeros(0, dtype=torch.int64),
                               logits_w, logits_s, threshold=0.95, unlabeled_weight=1.0)
    loss.backward()
    assert not mask.any() and loss.item() == 0.0
    assert logits_w.grad is None or not logits_w.grad.any()
    assert not logits_s.grad.any()


def test_fixmatch_loss_without_unlabeled_points_is_cross_entropy():
    logits = torch.randn(5, 3)
    y = torch.tensor([0, 1, 2, 1, 0])
    loss, mask = fixmatch_loss(logits, y, torch.zeros(0, 3), torch.zeros(0, 3), threshold=0.5,
                               unlabeled_weight=1.0)
    assert mask.numel() == 0 and loss.item() == pytest.approx(F.cross_entropy(logits, y).item())


# ------------------------------------------------------------------ local training
def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10))


def _train(x_unlabeled, *, weight, threshold=0.0, epochs=1):
    rng = np.random.default_rng(0)
    x_l = rng.random((12, 1, 8, 8), dtype=np.float32)
    y_l = rng.integers(0, 10, 12)
    model = _net()
    generator = torch.Generator().manual_seed(3)
    steps = train_fixmatch(model, x_l, y_l, x_unlabeled, epochs=epochs, batch_size=4,
                           unlabeled_ratio=2, threshold=threshold, unlabeled_weight=weight,
                           lr=0.1, generator=generator,
                           strong=lambda b: randaugment(b, generator))
    return model, steps


def test_steps_follow_the_larger_set():
    """12 labeled in batches of 4 (3 steps) vs 30 unlabeled in batches of 2 * 4 (4 steps)."""
    _, steps = _train(np.random.default_rng(1).random((30, 1, 8, 8), dtype=np.float32),
                      weight=1.0, epochs=2)
    assert steps == 2 * 4


def test_unlabeled_points_matter_only_through_the_unlabeled_term():
    """With lambda_u = 0 (or tau above every probability) the unlabeled images do not change
    the model (no batch statistics in this network); with lambda_u = 1 and tau = 0 they do."""
    rng = np.random.default_rng(1)
    real, noise = rng.random((2, 30, 1, 8, 8), dtype=np.float32)

    def weights(x, **kw):
        return [p.detach().clone() for p in _train(x, **kw)[0].parameters()]

    for kw, same in (({"weight": 0.0}, True), ({"weight": 1.0, "threshold": 1.1}, True),
                     ({"weight": 1.0}, False)):
        a, b = weights(real, **kw), weights(noise, **kw)
        assert all(torch.equal(p, q) for p, q in zip(a, b)) is same, kw


def test_train_fixmatch_refuses_a_bad_ratio():
    with pytest.raises(InputError, match="unlabeled_ratio"):
        train_fixmatch(_net(), np.zeros((2, 1, 8, 8), np.float32), np.zeros(2, np.int64),
                       np.zeros((2, 1, 8, 8), np.float32), epochs=1, batch_size=2,
                       unlabeled_ratio=0, threshold=0.9, unlabeled_weight=1.0, lr=0.1,
                       generator=torch.Generator(), strong=lambda b: b)


# ------------------------------------------------------------------ the method

def test_clients_without_labels_train_on_the_unlabeled_term(tiny_digits, tiny_hyper):
    """A federation where no client holds a label still trains (FixMatch's unlabeled term
    alone, tau = 0): the global model moves."""
    unlabeled = Federation(tiny_digits.name,
                           [ClientData(c.x, c.y, np.zeros_like(c.labeled)) for c in tiny_digits.clients],
                           tiny_digits.num_classes, tiny_digits.input_shape)
    method = build_method("fedavg-fixmatch", threshold=0.0, **tiny_hyper)
    method.setup(unlabeled)
    before = [p.detach().clone() for p in method.network.parameters()]
    method.run_round(0)
    assert any(not torch.equal(p, q) for p, q in zip(before, method.network.parameters()))
