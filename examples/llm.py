"""A small Llama-style decoder, as ExecuTorch's LLM flow exports it, in every variant users ship.

RMSNorm, rotary positions (RoPE), grouped attention over a static KV cache (buffers written in
place with ``index_copy_``, one slot per position), a SiLU-gated MLP and an output head tied to
the token embedding. ``forward(tokens, input_pos)`` runs a prefill (several positions) or a
decode step (one) and returns the logits of every position given.

Variants (``model(variant)``): ``fp32``; torchao ``quantize_`` with ``8da4w`` (int8 dynamic
activations, int4 weights in groups of 32, ExecuTorch's XNNPACK LLM default) or ``int8wo``
(int8 weight-only); ``pt2e`` (the XNNPACK quantizer's dynamic per-channel int8, converted); and
``lora``, whose attention projections add a low-rank update to a frozen base weight in forward
(``W + B @ A * scale``), as a LoRA adapter merged at export does.

Built small (about 0.2 M parameters) so that each variant exports in seconds.
``model()`` and ``prefill()`` are factories usable by ``export-guards lint``; ``prefill()``
returns torch.export's ``dynamic_shapes`` for the sequence length too.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

VARIANTS = ("fp32", "8da4w", "int8wo", "pt2e", "lora")


@dataclass(frozen=True)
class Config:
    vocab: int = 256
    dim: int = 64
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    hidden: int = 128
    max_len: int = 32
    lora_rank: int = 0


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class LoRALinear(nn.Module):
    """A frozen linear plus a low-rank update, merged into the weight in forward."""

    def __init__(self, features_in: int, features_out: int, rank: int, alpha: float = 16.0) -> None:
        super().__init__()
        self.base = nn.Linear(features_in, features_out, bias=False)
        self.A = nn.Parameter(torch.randn(rank, features_in) * 0.02)
        self.B = nn.Parameter(torch.randn(features_out, rank) * 0.02)
        self.scale = alpha / rank

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.base.weight + (self.B @ self.A) * self.scale)


def _linear(config: Config, features_in: int, features_out: int) -> nn.Module:
    if config.lora_rank:
        return LoRALinear(features_in, features_out, config.lora_rank)
    return nn.Linear(features_in, features_out, bias=False)


def rope_tables(config: Config) -> tuple[torch.Tensor, torch.Tensor]:
    head_dim = config.dim // config.heads
    frequencies = 1.0 / (10000.0 ** (torch.arange(0, head_dim, 2).float() / head_dim))
    angles = torch.outer(torch.arange(config.max_len).float(), frequencies)
    return torch.cos(angles), torch.sin(angles)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on ``x`` [batch, heads, length, head_dim] with ``cos`` / ``sin`` [length, head_dim / 2]."""
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


class Attention(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.heads, self.kv_heads = config.heads, config.kv_heads
        self.head_dim = config.dim // config.heads
        self.wq = _linear(config, config.dim, config.heads * self.head_dim)
        self.wk = _linear(config, config.dim, config.kv_heads * self.head_dim)
        self.wv = _linear(config, config.dim, config.kv_heads * self.head_dim)
        self.wo = _linear(config, config.heads * self.head_dim, config.dim)
        cache = (1, config.kv_heads, config.max_len, self.head_dim)
        self.register_buffer("k_cache", torch.zeros(cache))
        self.k_cache: torch.Tensor
        self.register_buffer("v_cache", torch.zeros(cache))
        self.v_cache: torch.Tensor

    def forward(
        self, x: torch.Tensor, input_pos: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        batch, length, _ = x.shape
        q = self.wq(x).view(batch, length, self.heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(batch, length, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(batch, length, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        self.k_cache.index_copy_(2, input_pos, k)
        self.v_cache.index_copy_(2, input_pos, v)
        repeat = self.heads // self.kv_heads
        keys = self.k_cache.repeat_interleave(repeat, dim=1)
        values = self.v_cache.repeat_interleave(repeat, dim=1)
        scores = q @ keys.transpose(2, 3) / self.head_dim**0.5
        weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
        return self.wo((weights @ values).transpose(1, 2).reshape(batch, length, -1))


class Block(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.attention_norm, self.ffn_norm = RMSNorm(config.dim), RMSNorm(config.dim)
        self.attention = Attention(config)
        self.w1 = nn.Linear(config.dim, config.hidden, bias=False)
        self.w2 = nn.Linear(config.hidden, config.dim, bias=False)
        self.w3 = nn.Linear(config.dim, config.hidden, bias=False)

    def forward(
        self, x: torch.Tensor, input_pos: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), input_pos, cos, sin, mask)
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Decoder(nn.Module):
    """Token embedding, ``layers`` blocks, a final RMSNorm and an output head tied to the embedding."""

    def __init__(self, config: Config = Config()) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab, config.dim)
        self.layers = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.norm = RMSNorm(config.dim)
        self.output = nn.Linear(config.dim, config.vocab, bias=False)
        self.output.weight = self.embed.weight  # tied
        cos, sin = rope_tables(config)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.rope_cos: torch.Tensor
        self.register_buffer("rope_sin", sin, persistent=False)
        self.rope_sin: torch.Tensor

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        cos, sin = self.rope_cos[input_pos], self.rope_sin[input_pos]
        # Each position attends to the cache slots up to its own (made on the inputs' device, so
        # that the decoder exports from an accelerator too).
        mask = torch.arange(self.config.max_len, device=input_pos.device).unsqueeze(0) <= input_pos.unsqueeze(1)
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x, input_pos, cos, sin, mask)
        return self.output(self.norm(x))


def tokens(length: int, start: int = 0, seed: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """``length`` deterministic tokens at positions ``start`` on: a decoder's inputs."""
    generator = torch.Generator().manual_seed(seed + start)
    return torch.randint(0, Config.vocab, (1, length), generator=generator), torch.arange(start, start + length)


def steps(prompt: int = 4, decode: int = 3) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """A prefill of ``prompt`` positions, then ``decode`` single-position steps."""
    return [tokens(prompt), *(tokens(1, prompt + i) for i in range(decode))]


SHIPPED = Config(vocab=32000, dim=768, layers=12, heads=12, kv_heads=4, hidden=2048, max_len=128)
"""The decoder at the size users ship: 100 M parameters (a quarter of them the tied embedding)."""


def decoder(variant: str = "fp32", config: Config = Config()) -> nn.Module:
    """The decoder with deterministic weights in eval mode, quantized or with LoRA as ``variant``
    says (one of ``VARIANTS``), of ``config``'s size. Its KV cache is empty (zeros)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}: expected one of {', '.join(VARIANTS)}")
    torch.manual_seed(0)
    if variant == "lora":
        config = replace(config, lora_rank=4)
    # Frozen, as ExecuTorch's LLM flow exports: the KV cache's in-place writes need it.
    return quantized(Decoder(config).eval().requires_grad_(False), variant)


def quantized(model: nn.Module, variant: str) -> nn.Module:
    """``model`` quantized as ``variant`` says (``8da4w`` and ``int8wo`` in place, ``pt2e`` a new
    module); ``fp32`` and ``lora`` as it is."""
    if variant in ("8da4w", "int8wo"):
        _quantize_torchao(model, variant)
    elif variant == "pt2e":
        model = _quantize_pt2e(model)
    return model


def _quantize_torchao(model: nn.Module, variant: str) -> None:
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, Int8WeightOnlyConfig, quantize_
    from torchao.quantization.granularity import PerGroup

    if variant == "8da4w":
        config = Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(32))  # type: ignore[attr-defined]  # torch's stubs lack the sub-byte dtypes
    else:
        config = Int8WeightOnlyConfig()
    # The head shares the embedding's weight: quantizing it would untie them (torchao swaps the
    # linear's weight for a quantized copy), so the head stays float as in ExecuTorch's flow.
    quantize_(model, config, filter_fn=lambda module, fqn: isinstance(module, nn.Linear) and fqn != "output")


def _quantize_pt2e(model: nn.Module) -> nn.Module:
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True))
    prepared = prepare_pt2e(torch.export.export(model, tokens(4)).module(), quantizer)
    prepared(*tokens(4))  # calibration, which writes the KV cache: empty it again
    for name, buffer in prepared.named_buffers():
        if name.endswith("_cache"):
            buffer.zero_()
    return convert_pt2e(prepared)


def model(variant: str = "fp32") -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """Factory: the decoder (``variant``, one of ``VARIANTS``) and a 4-token prefill."""
    return decoder(variant), tokens(4)


def dynamic_length() -> dict[str, dict[int, torch.export.Dim]]:
    """torch.export's ``dynamic_shapes`` for ``forward(tokens, input_pos)``: one length, from a
    single decode step to the whole cache, shared by the tokens and their positions."""
    length = torch.export.Dim("length", min=1, max=Config.max_len)
    return {"tokens": {1: length}, "input_pos": {0: length}}


def prefill(
    variant: str = "fp32",
) -> tuple[nn.Module, tuple[torch.Tensor, ...], dict[str, dict[int, torch.export.Dim]]]:
    """Factory: the decoder, a 4-token prefill and a dynamic length, so that one program runs
    the prefill and then each single-token decode step (``steps()``)."""
    return decoder(variant), tokens(4), dynamic_length()
