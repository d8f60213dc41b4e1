"""A transformer block with sinusoidal positions and a weight-normed output projection.

Attention is written with ``bmm``: the stock XNNPACK FP32 recipe fails on the decomposition
of ``scaled_dot_product_attention`` (its ``ConvertToLinearPass`` meets a 3-D ``linear``), with
or without the guards. ``model()`` is a factory usable by ``export-guards lint``.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def sinusoidal_positions(length: int, width: int) -> torch.Tensor:
    """The ``length`` x ``width`` table of sine / cosine positions."""
    position = torch.arange(length).unsqueeze(1)
    frequency = torch.exp(torch.arange(0, width, 2) * (-math.log(10000.0) / width))
    table = torch.zeros(length, width)
    table[:, 0::2], table[:, 1::2] = torch.sin(position * frequency), torch.cos(position * frequency)
    return table


class TransformerBlock(nn.Module):
    """Pre-norm attention and MLP, sinusoidal positions, a weight-normed output projection."""

    def __init__(self, width: int = 32, heads: int = 4, length: int = 16) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.utils.parametrizations.weight_norm(nn.Linear(width, width))
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
        self.register_buffer("positions", sinusoidal_positions(length, width))
        self.positions: torch.Tensor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.positions
        batch, length, width = x.shape
        q, k, v = (
            self.qkv(self.norm1(x)).reshape(batch, length, 3, self.heads, width // self.heads).permute(2, 0, 3, 1, 4)
        )
        q, k, v = (t.reshape(batch * self.heads, length, width // self.heads) for t in (q, k, v))
        weights = torch.softmax(torch.bmm(q, k.transpose(1, 2)) / math.sqrt(width // self.heads), dim=-1)
        attended = (
            torch.bmm(weights, v).reshape(batch, self.heads, length, -1).transpose(1, 2).reshape(batch, length, width)
        )
        x = x + self.proj(attended)
        return x + self.mlp(self.norm2(x))


def model(
    width: int = 32, heads: int = 4, length: int = 16, batch: int = 2
) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """Factory: the block with deterministic weights, in eval mode, and its example input."""
    torch.manual_seed(0)
    block = TransformerBlock(width, heads, length).eval()
    return block, (torch.randn(batch, length, width, generator=torch.Generator().manual_seed(2)),)
