"""Models whose constants the fold judges on the written program: an HF-style rotary embedding
and a Gemma-2-style decoder, in plain torch (transformers is not needed)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class RotaryEmbedding(nn.Module):
    """Hugging Face's rotary embedding: ``inv_freq`` a buffer, cos / sin computed in forward."""

    def __init__(self, dim: int = 16, base: float = 10000.0) -> None:
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.inv_freq: torch.Tensor

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        inv_freq_expanded = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        position_ids_expanded = position_ids[:, None, :].float()
        freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


class RopeModel(nn.Module):
    """A projection rotated by positions given as an input."""

    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.rotary = RotaryEmbedding(dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        cos, sin = self.rotary(x, position_ids)
        q = self.proj(x)
        return q * cos + rotate_half(q) * sin


class GemmaRMSNorm(nn.Module):
    """Gemma's RMSNorm: the weight is stored zero-centred and applied as ``1 + weight``."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return (out * (1.0 + self.weight.float())).type_as(x)


class Attention(nn.Module):
    """Causal attention, soft-capped scores, a sliding window when ``window`` is set."""

    def __init__(self, dim: int, heads: int, head_dim: int, window: int | None, softcap: float) -> None:
        super().__init__()
        self.heads, self.head_dim, self.window, self.softcap = heads, head_dim, window, softcap
        self.q = nn.Linear(dim, heads * head_dim, bias=False)
        self.k = nn.Linear(dim, heads * head_dim, bias=False)
        self.v = nn.Linear(dim, heads * head_dim, bias=False)
        self.o = nn.Linear(heads * head_dim, dim, bias=False)
        self.rotary = RotaryEmbedding(head_dim)

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        v = self.v(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        cos, sin = self.rotary(x, position_ids)
        cos, sin = cos[:, None], sin[:, None]
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        scores = q @ k.transpose(-1, -2) * self.head_dim**-0.5
        scores = torch.tanh(scores / self.softcap) * self.softcap
        i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
        allowed = j <= i
        if self.window is not None:
            allowed = allowed & (i - j < self.window)
        scores = scores.masked_fill(~allowed, float("-inf"))
        return self.o((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, -1))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, head_dim: int, window: int | None, softcap: float) -> None:
        super().__init__()
        self.norm1, self.norm2 = GemmaRMSNorm(dim), GemmaRMSNorm(dim)
        self.post1, self.post2 = GemmaRMSNorm(dim), GemmaRMSNorm(dim)
        self.attn = Attention(dim, heads, head_dim, window, softcap)
        self.up = nn.Linear(dim, 2 * dim, bias=False)
        self.gate = nn.Linear(dim, 2 * dim, bias=False)
        self.down = nn.Linear(2 * dim, dim, bias=False)

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        x = x + self.post1(self.attn(self.norm1(x), position_ids))
        h = self.norm2(x)
        return x + self.post2(self.down(F.gelu(self.gate(h), approximate="tanh") * self.up(h)))


class Gemma2Like(nn.Module):
    """Gemma 2's shape: sliding-window and global layers alternating, logits soft-capped as
    ``tanh(x / cap) * cap`` with the cap a tensor, the tied embedding scaled by sqrt(dim)."""

    def __init__(
        self, vocab: int = 64, dim: int = 32, heads: int = 2, head_dim: int = 16, layers: int = 2, window: int = 4
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.dim, self.final_cap = dim, 30.0
        self.layers = nn.ModuleList(
            [Block(dim, heads, head_dim, window if i % 2 == 0 else None, 50.0) for i in range(layers)]
        )
        self.norm = GemmaRMSNorm(dim)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        position_ids = torch.arange(tokens.shape[1])[None, :].expand(tokens.shape[0], -1)
        x = self.embed(tokens) * torch.tensor(self.dim**0.5, dtype=torch.float32)
        for layer in self.layers:
            x = layer(x, position_ids)
        logits = F.linear(self.norm(x), self.embed.weight)
        return torch.tanh(logits / torch.tensor(self.final_cap)) * torch.tensor(self.final_cap)


def rope() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    return RopeModel().eval(), (torch.randn(1, 8, 16), torch.arange(8)[None])


def gemma2_like() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    return Gemma2Like().eval(), (torch.randint(0, 64, (1, 8)),)
