"""The rows of the flow matrix: one small model of each kind a user exports, built in code.

Each factory returns an eval-mode model with deterministic weights and non-trivial statistics,
and its example inputs. They are small on purpose (the matrix lowers each through every flow);
a linear layer takes 32 features or more, the smallest group that the int4 recipes quantize.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrizations

Inputs = tuple[torch.Tensor, ...]


def _image(channels: int = 3, size: int = 8) -> Inputs:
    return (torch.randn(1, channels, size, size, generator=torch.Generator().manual_seed(1)),)


def _settled(model: nn.Module) -> nn.Module:
    """``model`` in eval mode with batch-norm statistics that are not the identity."""
    generator = torch.Generator().manual_seed(2)
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            module.running_mean.copy_(torch.rand(module.num_features, generator=generator) - 0.5)
            module.running_var.copy_(torch.rand(module.num_features, generator=generator) + 0.5)
    return model.eval()


class ConvBatchNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x)))


class DepthwiseSeparable(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.depthwise = nn.Conv2d(4, 4, 3, padding=1, groups=4)
        self.pointwise = nn.Conv2d(4, 8, 1)
        self.bn = nn.BatchNorm2d(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.hardswish(self.bn(self.pointwise(torch.relu(self.depthwise(x)))))


class TransposedConv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.ConvTranspose2d(4, 4, 2, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.up(x))


class CachedAttention(nn.Module):
    """Single-head attention over a key/value cache buffer that each call writes in place (a
    decoder's KV cache, starting at zeros)."""

    def __init__(self, dim: int = 32, length: int = 6) -> None:
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.register_buffer("k_cache", torch.zeros(1, length, dim))
        self.k_cache: torch.Tensor
        self.register_buffer("v_cache", torch.zeros(1, length, dim))
        self.v_cache: torch.Tensor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        steps = x.shape[1]
        self.k_cache[:, :steps].copy_(k)
        self.v_cache[:, :steps].copy_(v)
        attended = F.scaled_dot_product_attention(q, self.k_cache, self.v_cache)
        return self.out(attended)


class Recurrent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(4, 32, batch_first=True)
        self.gru = nn.GRU(32, 32, batch_first=True)
        self.head = nn.Linear(32, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden, _ = self.lstm(x)
        hidden, _ = self.gru(hidden)
        return self.head(hidden[:, -1])


class TiedEmbedding(nn.Module):
    def __init__(self, vocabulary: int = 16, dim: int = 32) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocabulary, dim)
        self.mix = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, vocabulary, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.mix(self.embed(tokens))))


class Norms(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 32, 3, padding=1)
        self.group = nn.GroupNorm(4, 32)
        self.layer = nn.LayerNorm(32)
        self.head = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled = self.group(self.conv(x)).mean(dim=(2, 3))
        return self.head(self.layer(pooled))


class ScaledStdConv2d(nn.Conv2d):
    """NFNet's weight-standardized conv, as timm writes it: the weight is standardized in
    forward, at every call."""

    def __init__(self, *args: object, eps: float = 1e-6, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.gain = nn.Parameter(torch.ones(self.out_channels, 1, 1, 1))
        self.scale = self.weight[0].numel() ** -0.5
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = F.batch_norm(
            self.weight.reshape(1, self.out_channels, -1),
            None,
            None,
            weight=(self.gain * self.scale).view(-1),
            training=True,
            momentum=0.0,
            eps=self.eps,
        ).reshape_as(self.weight)
        return F.conv2d(x, weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class WeightStandardized(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = ScaledStdConv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.grouped = ScaledStdConv2d(8, 8, 3, padding=1, groups=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.grouped(torch.relu(self.bn(self.stem(x)))))


class Reparametrized(nn.Module):
    """Reparametrized layers in every position: conv → batch norm, grouped conv → activation,
    depthwise, transposed conv, linear. ``norm`` wraps each layer (both APIs alternate)."""

    def __init__(self, norm: Callable[[nn.Module, int], nn.Module]) -> None:
        super().__init__()
        self.conv = norm(nn.Conv2d(3, 8, 3, padding=1), 0)
        self.bn = nn.BatchNorm2d(8)
        self.grouped = norm(nn.Conv2d(8, 8, 3, padding=1, groups=2), 1)
        self.depthwise = norm(nn.Conv2d(8, 8, 3, padding=1, groups=8), 0)
        self.up = norm(nn.ConvTranspose2d(8, 32, 2, stride=2), 1)
        self.head = norm(nn.Linear(32, 4), 0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn(self.conv(x)))
        x = F.silu(self.grouped(x))
        x = self.up(self.depthwise(x))
        return self.head(x.mean(dim=(2, 3)))


def _spectral(layer: nn.Module, api: int) -> nn.Module:
    return parametrizations.spectral_norm(layer) if api == 0 else nn.utils.spectral_norm(layer)


def _weight(layer: nn.Module, api: int) -> nn.Module:
    dim = 1 if isinstance(layer, nn.ConvTranspose2d) else 0
    return parametrizations.weight_norm(layer, dim=dim) if api == 0 else nn.utils.weight_norm(layer, dim=dim)


class Orthogonal(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rotate = parametrizations.orthogonal(nn.Linear(32, 32))
        self.head = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.rotate(x)))


def _quantized_conv() -> tuple[nn.Module, Inputs]:
    """A conv → batch norm → conv model quantized with PT2E (XNNPACK's quantizer): the
    converted graph module, whose weights are int8 with their (de)quantize ops."""
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    torch.manual_seed(0)
    float_model = _settled(
        nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 4, 1))
    )
    inputs = _image()
    captured = torch.export.export(float_model, inputs).module()
    prepared = prepare_pt2e(captured, XNNPACKQuantizer().set_global(get_symmetric_quantization_config()))
    prepared(*inputs)
    return convert_pt2e(prepared), inputs


def _sequence(features: int = 4, steps: int = 2) -> Inputs:
    return (torch.randn(1, steps, features, generator=torch.Generator().manual_seed(1)),)


def _seeded(factory: Callable[[], nn.Module], inputs: Inputs) -> Callable[[], tuple[nn.Module, Inputs]]:
    def build() -> tuple[nn.Module, Inputs]:
        torch.manual_seed(0)
        return _settled(factory()), inputs

    return build


ROWS: dict[str, Callable[[], tuple[nn.Module, Inputs]]] = {
    "conv + batch norm": _seeded(ConvBatchNorm, _image()),
    "depthwise-separable": _seeded(DepthwiseSeparable, _image(4)),
    "transposed conv": _seeded(TransposedConv, _image(4, 4)),
    "attention + KV buffer": _seeded(
        CachedAttention, (torch.randn(1, 4, 32, generator=torch.Generator().manual_seed(1)),)
    ),
    "LSTM + GRU": _seeded(Recurrent, _sequence()),
    "embedding + tied head": _seeded(TiedEmbedding, (torch.tensor([[1, 5, 9, 2]]),)),
    "layer + group norm": _seeded(Norms, _image()),
    "weight-standardized conv": _seeded(WeightStandardized, _image()),
    "spectral norm": _seeded(lambda: Reparametrized(_spectral), _image()),
    "weight norm": _seeded(lambda: Reparametrized(_weight), _image()),
    "orthogonal": _seeded(Orthogonal, (torch.randn(2, 32, generator=torch.Generator().manual_seed(1)),)),
    "PT2E-quantized conv": _quantized_conv,
}
"""Each row's factory: a fresh model and its example inputs."""
