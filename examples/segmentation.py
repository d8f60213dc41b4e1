"""Reported model (a): a ViT-backbone segmentation model, lowered to XNNPACK, that crashed inside
XNNPACK's weights cache on one phone model.

The report: a DINOv3-style ViT-B/16 backbone feeding a decoder of ``spectral_norm``-wrapped
upsampling convs (``SpectralUpsampleBlock``: spectral_norm(Conv2d 3x3, C -> 4C),
PixelShuffle(2), GroupNorm(32), GELU), fixed difference-of-Gaussians depthwise convs whose
weights were assigned through ``.data`` (5x5 and 9x9), depthwise 11x11 context gates,
GroupNorm, reflect padding to a multiple of 16, input 1x3x400x400, lowered with
``XnnpackPartitioner``.

The pretrained backbone cannot be downloaded here, so ``Backbone`` is a small ViT of the same
structure: a 16x16 patch embedding, a class token, learned position embeddings, pre-norm
transformer blocks, and hidden states taken from four layers. Weights are deterministic
random. The upsampling blocks narrow the channels as the resolution grows (C -> 4C' with
C' <= C; the report's C -> 4C is the case C' = C). ``model()`` is a factory usable by
``export-guards lint``.

What export-guards shows on it: the four spectral_norm convs are left out of XNNPACK unless
folded (``make demo``); the written program's structure and a runtime run are checked with
``export-guards check`` (see docs/howto-delegate-crash.md for the crash itself).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

PATCH = 16


class Block(nn.Module):
    """A pre-norm transformer block: attention and an MLP, each with a residual."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm1(x)
        x = x + self.attn(y, y, y, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class Backbone(nn.Module):
    """A ViT/16: patch embedding, class token, position embeddings, blocks; returns the patch
    tokens of the layers in ``taps`` as feature maps."""

    def __init__(
        self, dim: int = 192, depth: int = 4, heads: int = 3, taps: tuple[int, ...] = (1, 2, 3, 4), grid: int = 25
    ) -> None:
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, PATCH, stride=PATCH)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, 1 + grid * grid, dim) * 0.02)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.taps = taps

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        tokens = self.patch_embed(x)
        height, width = tokens.shape[-2:]
        tokens = tokens.flatten(2).transpose(1, 2)
        tokens = torch.cat([self.cls_token.expand(tokens.shape[0], -1, -1), tokens], dim=1) + self.pos_embed
        hidden = []
        for depth, block in enumerate(self.blocks, start=1):
            tokens = block(tokens)
            if depth in self.taps:
                patches = self.norm(tokens)[:, 1:]
                # contiguous: the transposed tokens are channels-last, and ExecuTorch's portable
                # GroupNorm kernel rejects that dim order at run time (error 0x12).
                hidden.append(patches.transpose(1, 2).reshape(x.shape[0], -1, height, width).contiguous())
        return hidden


class SpectralUpsampleBlock(nn.Module):
    """spectral_norm(Conv2d 3x3, C -> 4C'), PixelShuffle(2), GroupNorm(32), GELU: twice the size."""

    def __init__(self, channels: int, out_channels: int | None = None) -> None:
        super().__init__()
        out_channels = out_channels or channels
        self.conv = nn.utils.spectral_norm(nn.Conv2d(channels, 4 * out_channels, 3, padding=1))
        self.shuffle = nn.PixelShuffle(2)
        self.norm = nn.GroupNorm(32, out_channels)
        self.act = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.norm(self.shuffle(self.conv(x))))


def gaussian(size: int, sigma: float) -> torch.Tensor:
    """A normalized 2-d Gaussian kernel."""
    axis = torch.arange(size, dtype=torch.float32) - (size - 1) / 2
    kernel = torch.exp(-(axis[:, None] ** 2 + axis[None, :] ** 2) / (2 * sigma**2))
    return kernel / kernel.sum()


class DifferenceOfGaussians(nn.Module):
    """Fixed depthwise 5x5 and 9x9 Gaussian blurs; their difference is a band-pass edge map.
    The weights are assigned through ``.data``, as in the report."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.fine = nn.Conv2d(channels, channels, 5, padding=2, groups=channels, bias=False)
        self.coarse = nn.Conv2d(channels, channels, 9, padding=4, groups=channels, bias=False)
        self.fine.weight.data = gaussian(5, 1.0).expand(channels, 1, 5, 5).clone()
        self.coarse.weight.data = gaussian(9, 2.0).expand(channels, 1, 9, 9).clone()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fine(x) - self.coarse(x)


class ContextGate(nn.Module):
    """A depthwise 11x11 conv, GroupNorm and a sigmoid gate: wide context, few weights."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.context = nn.Conv2d(channels, channels, 11, padding=5, groups=channels)
        self.norm = nn.GroupNorm(32, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(self.norm(self.context(x)))


class SegmentationModel(nn.Module):
    """Backbone hidden states, fused, then upsampled 16x by four SpectralUpsampleBlocks with
    context gates, an edge branch, and a per-pixel class head."""

    def __init__(self, classes: int = 4, dim: int = 192, width: int = 128, grid: int = 25) -> None:
        super().__init__()
        self.backbone = Backbone(dim, grid=grid)
        taps = len(self.backbone.taps)
        self.fuse = nn.Sequential(nn.Conv2d(taps * dim, width, 1), nn.GroupNorm(32, width), nn.GELU())
        self.up = nn.ModuleList(
            [
                SpectralUpsampleBlock(width, 64),  # 1/16 -> 1/8
                SpectralUpsampleBlock(64, 32),  # 1/8 -> 1/4
                SpectralUpsampleBlock(32),  # 1/4 -> 1/2
                SpectralUpsampleBlock(32),  # 1/2 -> 1/1
            ]
        )
        self.gates = nn.ModuleList([ContextGate(64), ContextGate(32)])
        self.edges = DifferenceOfGaussians(32)
        self.head = nn.Conv2d(64, classes, 1)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        height, width = image.shape[-2:]
        padded = F.pad(image, _padding_to(height, width, PATCH), mode="reflect")
        x = self.fuse(torch.cat(self.backbone(padded), dim=1))
        x = self.gates[0](self.up[0](x))
        x = self.gates[1](self.up[1](x))
        x = self.up[3](self.up[2](x))
        x = torch.cat([x, self.edges(x)], dim=1)
        return self.head(x)[..., :height, :width]


def _padding_to(height: int, width: int, multiple: int) -> tuple[int, int, int, int]:
    """Reflect-padding (left, right, top, bottom) that makes both sides a multiple of ``multiple``."""
    return (0, math.ceil(width / multiple) * multiple - width, 0, math.ceil(height / multiple) * multiple - height)


def example_input(size: int = 400) -> torch.Tensor:
    return torch.rand(1, 3, size, size, generator=torch.Generator().manual_seed(1))


def segmentation_model(size: int = 400) -> SegmentationModel:
    """The model for ``size`` x ``size`` images, in eval mode, with deterministic weights, after a
    few train-mode forwards so that spectral norm's power iteration has moved its vectors, as in
    a trained model."""
    torch.manual_seed(0)
    model = SegmentationModel(grid=math.ceil(size / PATCH))
    with torch.no_grad():  # biases and norm scales away from their init, as after training
        for parameter in model.parameters():
            if parameter.dim() == 1:
                parameter.add_(0.05 * torch.randn_like(parameter))
    with torch.no_grad():
        for _ in range(3):
            model(example_input(size))
    return model.eval()


def model(size: int = 400) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """Factory: the segmentation model and a 1x3xSIZExSIZE image (400 in the report)."""
    return segmentation_model(size), (example_input(size),)
