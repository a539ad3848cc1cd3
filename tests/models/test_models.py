"""Backbones: architecture sizes from the papers, f_psi o f_phi split, seeded init."""

from __future__ import annotations

import pytest
import torch

from securefl.errors import InputError
from securefl.models import build_model, resolve_model_name


def n_params(model, *, weights_only=False):
    return sum(p.numel() for p in model.parameters() if not weights_only or p.dim() > 1)


def test_fedsemi_cnn_has_the_papers_21840_parameters():
    model = build_model("cnn", input_shape=(1, 28, 28), num_classes=10)
    assert n_params(model) == 21840
    assert model.feature_dim == 50


def test_resnet9_matches_protofssl_table6():
    model = build_model("resnet9", input_shape=(3, 32, 32), num_classes=10)
    assert n_params(model, weights_only=True) == 6_563_520 + 5_120
    resnet8 = build_model("resnet8", input_shape=(3, 32, 32), num_classes=10, norm="none")
    assert n_params(resnet8) == 6_563_520
    x = torch.zeros(2, 3, 32, 32)
    assert resnet8(x).shape == (2, 512)


@pytest.mark.parametrize("name, shape", [("mlp", (1, 8, 8)), ("cnn", (1, 28, 28)),
                                         ("resnet9", (3, 32, 32))])
def test_forward_is_head_of_features(name, shape):
    model = build_model(name, input_shape=shape, num_classes=7, seed=3).eval()
    x = torch.rand(4, *shape)
    z = model.features(x)
    assert z.shape == (4, model.feature_dim)
    torch.testing.assert_close(model(x), model.head(z))
    assert model(x).shape == (4, 7)


def test_seeded_init_is_reproducible_and_leaves_global_rng_alone():
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    a = build_model("mlp", input_shape=(1, 8, 8), num_classes=10, seed=5)
    assert torch.equal(torch.random.get_rng_state(), before)
    b = build_model("mlp", input_shape=(1, 8, 8), num_classes=10, seed=5)
    c = build_model("mlp", input_shape=(1, 8, 8), num_classes=10, seed=6)
    for (ka, va), (_, vb), (_, vc) in zip(a.state_dict().items(), b.state_dict().items(),
                                          c.state_dict().items()):
        assert torch.equal(va, vb), ka
    assert not all(torch.equal(va, vc) for va, vc in zip(a.state_dict().values(),
                                                         c.state_dict().values()))


def test_auto_picks_by_input_shape():
    assert resolve_model_name("auto", (1, 8, 8)) == "mlp"
    assert resolve_model_name("auto", (1, 28, 28)) == "cnn"
    assert resolve_model_name("auto", (3, 32, 32)) == "resnet9"
    assert resolve_model_name("auto", (64,)) == "mlp"


@pytest.mark.parametrize("kwargs, parameter", [
    ({"name": "vgg"}, "model"),
    ({"name": "cnn", "input_shape": (1, 8, 8)}, "input_shape"),
    ({"name": "mlp", "num_classes": 1}, "num_classes"),
    ({"name": "mlp", "norm": "bn"}, "norm"),
    ({"name": "resnet9", "input_shape": (3, 32, 32), "norm": "layer"}, "norm"),
])
def test_bad_arguments(kwargs, parameter):
    options = {"input_shape": (1, 28, 28), "num_classes": 10, **kwargs}
    with pytest.raises(InputError, match=parameter):
        build_model(options.pop("name"), **options)
