"""Backbones: architecture sizes from the papers, f_psi o f_phi split, seeded init."""

from __future__ import annotations

import pytest
import torch

from securefl.errors import InputError
from securefl.models import SeededDropout, build_model, dropout_generator, resolve_model_name


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
                                         ("resnet9", (3, 32, 32)), ("cnn13", (3, 32, 32))])
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
    ({"name": "cnn13", "input_shape": (1, 8, 8)}, "input_shape"),
    ({"name": "cnn13", "input_shape": (3, 32, 32), "dropout": 1.0}, "dropout"),
    ({"name": "cnn13", "input_shape": (3, 32, 32), "norm": "none"}, "norm"),
])
def test_bad_arguments(kwargs, parameter):
    options = {"input_shape": (1, 28, 28), "num_classes": 10, **kwargs}
    with pytest.raises(InputError, match=parameter):
        build_model(options.pop("name"), **options)


def _cnn13_parameter_count(channels: int, classes: int) -> int:
    """Tarvainen & Valpola's ConvLarge, layer by layer: (c_in, c_out, kernel) of each
    convolution (weights + bias + batch-norm scale and shift), then the 128 x C head."""
    convs = [(channels, 128, 3), (128, 128, 3), (128, 128, 3), (128, 256, 3), (256, 256, 3),
             (256, 256, 3), (256, 512, 3), (512, 256, 1), (256, 128, 1)]
    return sum(cin * cout * k * k + cout + 2 * cout for cin, cout, k in convs) + 128 * classes + classes


def test_cnn13_is_tarvainen_valpolas_conv_large_with_128d_features():
    model = build_model("cnn13", input_shape=(3, 32, 32), num_classes=10)
    assert n_params(model) == _cnn13_parameter_count(3, 10) == 3_123_850
    # FedProp §4.2: "transferring the model to the client and back requires 24MB"
    assert 2 * 4 * n_params(model) / 2**20 == pytest.approx(23.8, abs=0.05)
    convs = [m for m in model.body.modules() if isinstance(m, torch.nn.Conv2d)]
    assert [c.out_channels for c in convs] == [128, 128, 128, 256, 256, 256, 512, 256, 128]
    assert [c.kernel_size[0] for c in convs] == [3] * 7 + [1, 1]
    assert sum(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules()) == 9
    assert sum(isinstance(m, torch.nn.LeakyReLU) and m.negative_slope == 0.1 for m in model.modules()) == 9
    assert [m.p for m in model.modules() if isinstance(m, SeededDropout)] == [0.5, 0.5]
    assert model.feature_dim == 128 and model.classifier.in_features == 128
    model.eval()
    x = torch.rand(3, 3, 32, 32)
    assert model.features(x).shape == (3, 128) and model(x).shape == (3, 10)
    mnist = build_model("cnn13", input_shape=(1, 28, 28), num_classes=10).eval()
    assert mnist.features(torch.rand(2, 1, 28, 28)).shape == (2, 128)
    assert n_params(mnist) == _cnn13_parameter_count(1, 10)


def test_cnn13_dropout_is_seeded_by_the_bound_generator():
    model = build_model("cnn13", input_shape=(3, 16, 16), num_classes=4, seed=1).train()
    x = torch.rand(2, 3, 16, 16)
    with pytest.raises(InputError, match="generator"):
        model(x)
    outputs = []
    for _ in range(2):
        generator = torch.Generator().manual_seed(7)
        with dropout_generator(model, generator):
            outputs.append((model(x), model(x)))
    torch.testing.assert_close(outputs[0][0], outputs[1][0])  # same seed, same masks
    assert not torch.equal(outputs[0][0], outputs[0][1])  # the stream moves on
    assert all(m.generator is None for m in model.modules() if isinstance(m, SeededDropout))
    model.eval()
    torch.testing.assert_close(model(x), model(x))  # no dropout, no generator needed


def test_seeded_dropout_keeps_the_expectation():
    layer = SeededDropout(0.5).train()
    layer.generator = torch.Generator().manual_seed(0)
    out = layer(torch.ones(200_000))
    assert set(out.unique().tolist()) == {0.0, 2.0}
    assert out.mean().item() == pytest.approx(1.0, abs=0.01)
