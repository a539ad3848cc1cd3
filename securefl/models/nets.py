"""Backbones split into a feature extractor f_phi and a classifier head f_psi.

Every network is an :class:`SplitNet`: ``features(x)`` is f_phi (the embedding FedProp's
label propagation and ProtoFSSL's prototypes use), ``head(z)`` is f_psi and
``forward = head o features`` returns logits (softmax lives in the loss).

* ``mlp`` -- two hidden ReLU layers, for scikit-learn's 8x8 digits.
* ``cnn`` -- FedSemi's MNIST CNN (fedsemi.md Table 7, from the PyTorch MNIST example):
  conv 10x5x5 -> max-pool 2 -> ReLU -> conv 20x5x5 -> max-pool 2 -> ReLU -> FC 320x50 ->
  ReLU | FC 50xC.  21,840 parameters on 28x28x1 with C=10, as the paper states.
* ``resnet9`` / ``resnet8`` -- ProtoFSSL Table 6: eight bias-free 3x3 convolutions (64,
  128, pool, 128, 128 [+skip], 256, pool, 512, pool, 512, 512 [+skip], pool 4) each
  followed by a normalisation (``norm``: "bn", "gn", "none") and ReLU; ResNet9 adds a
  bias-free 512xC linear head, ResNet8 has none (``head`` is the identity and the
  512-d features are the output, for prototype-based classifiers).
* ``cnn13`` -- the 13-layer "ConvLarge" CNN of Tarvainen & Valpola (2017, Mean Teacher),
  FedProp's CIFAR network (fedprop.md §5.1: "13-layer CNNs ... embeddings have dimension
  128"): three 3x3 convolutions of 128 channels, max-pool 2, dropout; three of 256,
  max-pool 2, dropout; a valid 3x3 convolution of 512, 1x1 convolutions of 256 and 128,
  global average pooling (6x6 on 32x32 inputs) -> f_phi(x) in R^128 | linear 128xC.
  Every convolution is followed by batch normalisation and LeakyReLU(0.1); dropout
  ``p = 0.5`` as in the reference.  3,123,850 parameters for CIFAR-10: 2 x 4 bytes x that
  = 23.8 MiB per round trip, the "24MB of payload per client" of fedprop.md §4.2.  The
  reference's weight normalisation is left out: it reparametrises the same function
  (w = g v/|v|), and FedAvg would average g and v rather than w.

* ``cnn_cifar`` -- FedSemi's CIFAR-10 / SVHN CNN (fedsemi.md Table 7): 3x3 convolutions
  (padding 1) 32 +BN+ReLU, 64 +ReLU+max-pool 2, 128 +BN+ReLU, 128 +ReLU+max-pool 2+dropout
  0.05, 256 +BN+ReLU, 256 +ReLU+max-pool 2, FC 4096x1024 +ReLU+dropout 0.1, FC 1024x512
  +ReLU+dropout 0.1 -> f_phi(x) in R^512 | FC 512xC.  5,852,170 parameters on 32x32x3 with
  C=10, the paper's count (batch-norm scales and shifts included).
* ``wrn28_2`` -- Wide ResNet-28-2 (Zagoruyko & Komodakis 2016) as FixMatch / FedAnchor
  (fedanchor.md §5) use it: a 3x3 convolution of 16, three groups of four pre-activation
  basic blocks (BN, LeakyReLU(0.1), 3x3 conv, twice; 1x1 projection shortcut where the
  shape changes) of widths 32, 64, 128 with strides 1, 2, 2, a final BN + LeakyReLU(0.1),
  global average pooling -> f_phi(x) in R^128 | linear 128xC.  1,467,610 parameters for
  C=10 (FixMatch's "1.5M").
* ``resnet18`` -- "the most standard version of ResNet-18" (fedanchor.md §5) in its
  CIFAR form (He et al. 2016's basic blocks; a 3x3 stem of 64 without max-pool, as for
  32x32 inputs): four stages of two basic blocks (conv-BN-ReLU-conv-BN + shortcut, ReLU)
  of widths 64, 128, 256, 512 with strides 1, 2, 2, 2, global average pooling -> f_phi(x)
  in R^512 | linear 512xC.  11,173,962 parameters for C=10.

Global pooling is :class:`GlobalPool`: torch's adaptive pooling on the CPU (the kernels of
every earlier CPU result) and a plain mean / maximum over the spatial axes on CUDA, whose
backward passes are deterministic (the adaptive pools' CUDA backward is not, and
``torch.use_deterministic_algorithms`` refuses it).

Dropout draws its masks from a ``torch.Generator`` that the training code binds with
:func:`dropout_generator` (the client's generator for the round, or the server's for
server-side training), so that runs are seeded, real and plaintext runs identical, and
resumed runs exact; a dropout layer in training mode without a bound generator raises
instead of falling back to torch's global RNG.

Written by hand because these exact small architectures are not in torchvision.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn

from securefl.errors import InputError


class SplitNet(nn.Module):
    """``forward(x) = head(features(x))``; ``feature_dim`` is the embedding size d."""

    def __init__(self, body: nn.Module, head: nn.Module, feature_dim: int) -> None:
        super().__init__()
        self.body = body
        self.classifier = head
        self.feature_dim = feature_dim

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """f_phi: inputs ``(n, *input_shape)`` -> embeddings ``(n, feature_dim)``."""
        return self.body(x)

    def head(self, z: torch.Tensor) -> torch.Tensor:
        """f_psi: embeddings -> logits."""
        return self.classifier(z)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.body(x))


def mlp(input_shape: tuple[int, ...], num_classes: int, *,
        hidden: tuple[int, ...] = (128, 64)) -> SplitNet:
    layers: list[nn.Module] = [nn.Flatten()]
    width = 1
    for size in input_shape:
        width *= size
    for size in hidden:
        layers += [nn.Linear(width, size), nn.ReLU()]
        width = size
    return SplitNet(nn.Sequential(*layers), nn.Linear(width, num_classes), width)


def fedsemi_cnn(input_shape: tuple[int, ...], num_classes: int) -> SplitNet:
    channels, height, width = input_shape
    flat_h = ((height - 4) // 2 - 4) // 2
    flat_w = ((width - 4) // 2 - 4) // 2
    body = nn.Sequential(
        nn.Conv2d(channels, 10, 5), nn.MaxPool2d(2), nn.ReLU(),
        nn.Conv2d(10, 20, 5), nn.MaxPool2d(2), nn.ReLU(),
        nn.Flatten(), nn.Linear(20 * flat_h * flat_w, 50), nn.ReLU(),
    )
    return SplitNet(body, nn.Linear(50, num_classes), 50)


def _norm(kind: str, channels: int) -> nn.Module:
    if kind == "bn":
        return nn.BatchNorm2d(channels)
    if kind == "gn":
        return nn.GroupNorm(min(32, channels), channels)
    return nn.Identity()


def _conv(cin: int, cout: int, norm: str) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), _norm(norm, cout),
                         nn.ReLU())


class _Residual(nn.Module):
    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.block = block

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.block(x)


def resnet(input_shape: tuple[int, ...], num_classes: int, *, with_head: bool,
           norm: str = "bn") -> SplitNet:
    channels = input_shape[0]
    body = nn.Sequential(
        _conv(channels, 64, norm), _conv(64, 128, norm), nn.MaxPool2d(2),
        _Residual(nn.Sequential(_conv(128, 128, norm), _conv(128, 128, norm))),
        _conv(128, 256, norm), nn.MaxPool2d(2),
        _conv(256, 512, norm), nn.MaxPool2d(2),
        _Residual(nn.Sequential(_conv(512, 512, norm), _conv(512, 512, norm))),
        GlobalPool("max"), nn.Flatten(),
    )
    head: nn.Module = nn.Linear(512, num_classes, bias=False) if with_head else nn.Identity()
    return SplitNet(body, head, 512)


class GlobalPool(nn.Module):
    """Global average (``kind="avg"``) or maximum (``"max"``) pooling ``(n, C, H, W) ->
    (n, C, 1, 1)``: ``adaptive_{avg,max}_pool2d`` on the CPU, ``mean`` / ``amax`` over
    ``(H, W)`` elsewhere (deterministic CUDA backward; module docstring).  The two agree
    in value; on ties of the maximum the CUDA gradient is shared among the tied
    positions instead of going to one."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        if kind not in ("avg", "max"):
            raise InputError("kind", kind, "must be 'avg' or 'max'")
        self.kind = kind

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type == "cpu":
            pool = F.adaptive_avg_pool2d if self.kind == "avg" else F.adaptive_max_pool2d
            return pool(x, 1)
        if self.kind == "avg":
            return x.mean(dim=(2, 3), keepdim=True)
        return x.amax(dim=(2, 3), keepdim=True)

    def extra_repr(self) -> str:
        return f"kind={self.kind!r}"


class SeededDropout(nn.Module):
    """Element-wise dropout ``x * m / (1 - p)``, ``m ~ Bernoulli(1 - p)``, with the masks
    drawn from the generator bound by :func:`dropout_generator` (identity in eval mode); the
    generator must live on the input's device."""

    def __init__(self, p: float) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise InputError("dropout", p, "must lie in [0, 1)")
        self.p = p
        self.generator: torch.Generator | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        if self.generator is None:
            raise InputError("generator", None, "dropout in training mode needs a seeded generator: "
                             "train inside securefl.models.dropout_generator(model, generator)")
        keep = torch.rand(x.shape, generator=self.generator, dtype=x.dtype, device=x.device) >= self.p
        return x * keep / (1.0 - self.p)

    def extra_repr(self) -> str:
        return f"p={self.p}"


@contextmanager
def dropout_generator(model: nn.Module, generator: torch.Generator) -> Iterator[nn.Module]:
    """Bind ``generator`` to every :class:`SeededDropout` of ``model`` for the duration of
    the block (models without dropout are unaffected and draw nothing from it)."""
    layers = [m for m in model.modules() if isinstance(m, SeededDropout)]
    previous = [m.generator for m in layers]
    for layer in layers:
        layer.generator = generator
    try:
        yield model
    finally:
        for layer, old in zip(layers, previous):
            layer.generator = old


def _conv_bn_lrelu(cin: int, cout: int, kernel: int, padding: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, kernel, padding=padding), nn.BatchNorm2d(cout),
                         nn.LeakyReLU(0.1))


def cnn13(input_shape: tuple[int, ...], num_classes: int, *, dropout: float = 0.5) -> SplitNet:
    channels = input_shape[0]
    body = nn.Sequential(
        _conv_bn_lrelu(channels, 128, 3, 1), _conv_bn_lrelu(128, 128, 3, 1),
        _conv_bn_lrelu(128, 128, 3, 1), nn.MaxPool2d(2), SeededDropout(dropout),
        _conv_bn_lrelu(128, 256, 3, 1), _conv_bn_lrelu(256, 256, 3, 1),
        _conv_bn_lrelu(256, 256, 3, 1), nn.MaxPool2d(2), SeededDropout(dropout),
        _conv_bn_lrelu(256, 512, 3, 0), _conv_bn_lrelu(512, 256, 1, 0),
        _conv_bn_lrelu(256, 128, 1, 0),
        GlobalPool("avg"), nn.Flatten(),
    )
    return SplitNet(body, nn.Linear(128, num_classes), 128)


def cnn_cifar(input_shape: tuple[int, ...], num_classes: int, *, conv_dropout: float = 0.05,
              fc_dropout: float = 0.1) -> SplitNet:
    """FedSemi's CIFAR-10 / SVHN CNN (module docstring; fedsemi.md Table 7); the dropout
    rates are the table's."""
    channels, height, width = input_shape
    flat = 256 * (height // 8) * (width // 8)
    body = nn.Sequential(
        nn.Conv2d(channels, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 128, 3, padding=1), nn.BatchNorm2d(128), nn.ReLU(),
        nn.Conv2d(128, 128, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), SeededDropout(conv_dropout),
        nn.Conv2d(128, 256, 3, padding=1), nn.BatchNorm2d(256), nn.ReLU(),
        nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(flat, 1024), nn.ReLU(), SeededDropout(fc_dropout),
        nn.Linear(1024, 512), nn.ReLU(), SeededDropout(fc_dropout),
    )
    return SplitNet(body, nn.Linear(512, num_classes), 512)


class _WideBlock(nn.Module):
    """Pre-activation basic block of a Wide ResNet: BN-LeakyReLU-conv3x3 twice, plus the
    input (or its 1x1 projection, taken from the pre-activated input, where the shape
    changes)."""

    def __init__(self, cin: int, cout: int, stride: int, *, slope: float) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, stride=1, padding=1, bias=False)
        self.act = nn.LeakyReLU(slope)
        self.shortcut = (nn.Conv2d(cin, cout, 1, stride=stride, bias=False)
                         if stride != 1 or cin != cout else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        activated = self.act(self.bn1(x))
        out = self.conv2(self.act(self.bn2(self.conv1(activated))))
        return out + (x if self.shortcut is None else self.shortcut(activated))


def wide_resnet(input_shape: tuple[int, ...], num_classes: int, *, depth: int = 28,
                widen: int = 2, slope: float = 0.1) -> SplitNet:
    """Wide ResNet-``depth``-``widen`` (module docstring); ``slope`` is the LeakyReLU's
    negative slope (FixMatch's 0.1)."""
    if depth < 10 or (depth - 4) % 6:
        raise InputError("depth", depth, "must be 6n + 4 with n >= 1")
    if widen < 1:
        raise InputError("widen", widen, "must be >= 1")
    per_group = (depth - 4) // 6
    widths = (16, 16 * widen, 32 * widen, 64 * widen)
    layers: list[nn.Module] = [nn.Conv2d(input_shape[0], widths[0], 3, padding=1, bias=False)]
    for group, stride in zip(range(3), (1, 2, 2)):
        for block in range(per_group):
            layers.append(_WideBlock(widths[group] if block == 0 else widths[group + 1],
                                     widths[group + 1], stride if block == 0 else 1, slope=slope))
    layers += [nn.BatchNorm2d(widths[3]), nn.LeakyReLU(slope), GlobalPool("avg"), nn.Flatten()]
    return SplitNet(nn.Sequential(*layers), nn.Linear(widths[3], num_classes), widths[3])


class _BasicBlock(nn.Module):
    """ResNet basic block: conv3x3-BN-ReLU-conv3x3-BN plus the input (or its strided 1x1
    conv + BN projection where the shape changes), then ReLU."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.residual = nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(cout),
            nn.ReLU(), nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout))
        self.shortcut = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                       nn.BatchNorm2d(cout))
                         if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.residual(x) + self.shortcut(x))


def resnet18(input_shape: tuple[int, ...], num_classes: int) -> SplitNet:
    """ResNet-18 in its CIFAR form (module docstring)."""
    layers: list[nn.Module] = [nn.Conv2d(input_shape[0], 64, 3, padding=1, bias=False),
                               nn.BatchNorm2d(64), nn.ReLU()]
    cin = 64
    for width, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [_BasicBlock(cin, width, stride), _BasicBlock(width, width, 1)]
        cin = width
    layers += [GlobalPool("avg"), nn.Flatten()]
    return SplitNet(nn.Sequential(*layers), nn.Linear(512, num_classes), 512)
