"""The papers' CIFAR-sized networks: shapes and parameter counts against the papers, dropout
through the seeded generator, and the global pooling that keeps CUDA deterministic."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from securefl.errors import InputError
from securefl.models import GlobalPool, build_model, dropout_generator

CIFAR = (3, 32, 32)


@pytest.mark.parametrize("name, parameters, feature_dim, source", [
    ("cnn_cifar", 5_852_170, 512, "fedsemi.md 7.1.3: 5,852,170 total parameters"),
    ("wrn28_2", 1_467_610, 128, "FixMatch's WRN-28-2 (1.5M), FedAnchor's backbone"),
    ("resnet18", 11_173_962, 512, "CIFAR ResNet-18, FedAnchor's second backbone"),
    ("cnn13", 3_123_850, 128, "fedprop.md: 24 MB per round trip"),
])
def test_parameter_counts_and_shapes_match_the_papers(name, parameters, feature_dim, source):
    model = build_model(name, input_shape=CIFAR, num_classes=10, seed=0)
    assert sum(p.numel() for p in model.parameters()) == parameters, source
    model.eval()
    x = torch.rand(3, *CIFAR)
    assert model.features(x).shape == (3, feature_dim) and model.feature_dim == feature_dim
    assert model(x).shape == (3, 10)
    assert torch.equal(model(x), model.head(model.features(x)))


def test_cnn_cifar_follows_table_7():
    model = build_model("cnn_cifar", input_shape=CIFAR, num_classes=10, seed=0)
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert [c.out_channels for c in convs] == [32, 64, 128, 128, 256, 256]
    assert all(c.kernel_size == (3, 3) for c in convs)
    assert [(l.in_features, l.out_features) for l in linears] == [(4096, 1024), (1024, 512), (512, 10)]
    assert sum(isinstance(m, nn.BatchNorm2d) for m in model.modules()) == 3


def test_wide_resnet_28_2_has_four_blocks_per_group_of_widths_32_64_128():
    model = build_model("wrn28_2", input_shape=CIFAR, num_classes=10, seed=0)
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d) and m.kernel_size == (3, 3)]
    projections = [m for m in model.modules() if isinstance(m, nn.Conv2d) and m.kernel_size == (1, 1)]
    assert len(convs) == 1 + 3 * 4 * 2  # the stem, then n = (28 - 4) / 6 = 4 blocks per group
    assert [p.out_channels for p in projections] == [32, 64, 128]
    assert sorted({c.out_channels for c in convs}) == [16, 32, 64, 128]


def test_resnet18_has_eighteen_weight_layers():
    model = build_model("resnet18", input_shape=CIFAR, num_classes=100, seed=0)
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d) and m.kernel_size == (3, 3)]
    assert len(convs) + 1 == 18
    assert model(torch.rand(2, *CIFAR)).shape == (2, 100)


def test_models_take_stl10_sized_images():
    for name in ("wrn28_2", "resnet18", "cnn13"):
        model = build_model(name, input_shape=(3, 96, 96), num_classes=10, seed=0).eval()
        assert model(torch.rand(1, 3, 96, 96)).shape == (1, 10)


def test_seed_fixes_the_weights_and_device_places_them():
    a = build_model("wrn28_2", input_shape=CIFAR, num_classes=10, seed=4, device="cpu")
    b = build_model("wrn28_2", input_shape=CIFAR, num_classes=10, seed=4)
    assert all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values()))
    assert {p.device for p in a.parameters()} == {torch.device("cpu")}


def test_cnn_cifar_dropout_draws_from_the_bound_generator():
    model = build_model("cnn_cifar", input_shape=CIFAR, num_classes=10, seed=0).train()
    x = torch.rand(4, *CIFAR)
    with pytest.raises(InputError, match="generator"):
        model(x)
    outputs = []
    for _ in range(2):
        with dropout_generator(model, torch.Generator().manual_seed(9)):
            outputs.append(model(x))
    assert torch.equal(outputs[0], outputs[1])


@pytest.mark.parametrize("name, option", [("wrn28_2", "dropout"), ("resnet18", "norm"),
                                          ("cnn_cifar", "hidden")])
def test_unknown_options_are_refused(name, option):
    with pytest.raises(InputError, match=option):
        build_model(name, input_shape=CIFAR, num_classes=10, **{option: 1})


def test_too_small_images_are_refused():
    with pytest.raises(InputError, match="input_shape"):
        build_model("cnn_cifar", input_shape=(3, 4, 4), num_classes=10)


@pytest.mark.parametrize("kind, reference", [("avg", nn.AdaptiveAvgPool2d(1)),
                                             ("max", nn.AdaptiveMaxPool2d(1))])
def test_global_pool_is_the_adaptive_pool_on_the_cpu(kind, reference):
    x = torch.randn(5, 7, 6, 6, requires_grad=True)
    assert torch.equal(GlobalPool(kind)(x), reference(x))
    # the CUDA branch (mean / amax over H, W) agrees in value
    other = x.mean(dim=(2, 3), keepdim=True) if kind == "avg" else x.amax(dim=(2, 3), keepdim=True)
    assert torch.allclose(GlobalPool(kind)(x), other, atol=1e-6)


def test_global_pool_kind_is_checked():
    with pytest.raises(InputError, match="kind"):
        GlobalPool("sum")
