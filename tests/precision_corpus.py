"""A precision corpus: ordinary models, written the way their upstream code writes them.

Each factory builds one model in code with deterministic random weights (``torch.manual_seed``)
and returns ``(model.eval(), example_inputs)``. The models are small (each exports and lowers
with XNNPACK in a few seconds on 2 CPU cores) but keep the structure of the real architecture
they mirror: the module tree, the parameter and buffer names, the reparametrizations, the
initialisations (zero biases, deep-copied layers, tied weights) and the training-only state.
None of them is broken: a lint finding on this corpus that asks the user to change something is
a false positive unless its docstring says otherwise. Each factory's docstring names the real
architecture and the trap it covers.

``FACTORIES`` maps a name to each factory. ``tests/corpus_measure.py`` runs the guarded export
on every one of them.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrizations

__all__ = ["FACTORIES"]

Inputs = tuple[torch.Tensor, ...]
Factory = Callable[[], tuple[nn.Module, Inputs]]


def _generator(seed: int = 1) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _settle(model: nn.Module, inputs: Inputs, steps: int = 2) -> nn.Module:
    """A few train-mode forwards without gradients, as after training: batch norm's running
    statistics and ``num_batches_tracked`` move, spectral norm's power-iteration vectors move.
    Returns the model in eval mode."""
    model.train()
    with torch.no_grad():
        for _ in range(steps):
            model(*inputs)
    return model.eval()


# --------------------------------------------------------------------------------------------
# 1. tied_lm: a LLaMA-style decoder-only LM with tied embeddings and RoPE
# --------------------------------------------------------------------------------------------


class RMSNorm(nn.Module):
    """LLaMA's RMSNorm: ``weight * x / sqrt(mean(x^2) + eps)`` (computed in float32)."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps))


class RotaryEmbedding(nn.Module):
    """HF ``LlamaRotaryEmbedding``: a non-persistent ``inv_freq`` buffer; cos / sin of
    ``positions x inv_freq`` computed in forward."""

    def __init__(self, head_dim: int, base: float = 10000.0) -> None:
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.inv_freq: torch.Tensor

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = position_ids[:, :, None].float() * self.inv_freq[None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def _apply_rope(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    cos, sin = cos[:, None], sin[:, None]  # over heads
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


class LlamaAttention(nn.Module):
    """q / k / v / o projections without bias, RoPE on q and k, causal SDPA."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.q_proj = nn.Linear(dim, dim, bias=False)
        self.k_proj = nn.Linear(dim, dim, bias=False)
        self.v_proj = nn.Linear(dim, dim, bias=False)
        self.o_proj = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        batch, length, dim = x.shape
        shape = (batch, length, self.heads, self.head_dim)
        q = self.q_proj(x).view(shape).transpose(1, 2)
        k = self.k_proj(x).view(shape).transpose(1, 2)
        v = self.v_proj(x).view(shape).transpose(1, 2)
        q, k = _apply_rope(q, k, cos, sin)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(batch, length, dim))


class LlamaMLP(nn.Module):
    """SwiGLU: ``down(silu(gate(x)) * up(x))``."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int, hidden: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(dim)
        self.self_attn = LlamaAttention(dim, heads)
        self.post_attention_layernorm = RMSNorm(dim)
        self.mlp = LlamaMLP(dim, hidden)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class TiedCausalLM(nn.Module):
    """``embed_tokens`` -> layers -> ``norm`` -> ``lm_head`` whose weight is the embedding's."""

    def __init__(self, vocab: int = 512, dim: int = 64, heads: int = 4, layers: int = 2, hidden: int = 172) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, dim)
        self.rotary_emb = RotaryEmbedding(dim // heads)
        self.layers = nn.ModuleList(LlamaDecoderLayer(dim, heads, hidden) for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.embed_tokens.weight  # tie_word_embeddings=True

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.embed_tokens(input_ids)
        position_ids = torch.arange(input_ids.shape[1], device=input_ids.device)[None]
        cos, sin = self.rotary_emb(x, position_ids)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.norm(x))


def tied_lm() -> tuple[nn.Module, Inputs]:
    """Mirrors a LLaMA / Qwen2 / SmolLM decoder-only LM with ``tie_word_embeddings=True``
    (HF ``LlamaForCausalLM``): token embedding, pre-norm blocks with RMSNorm, RoPE from a
    non-persistent ``inv_freq`` buffer (cos / sin computed in forward), causal
    ``scaled_dot_product_attention``, SwiGLU MLP, and an LM head that shares the embedding's
    weight (``lm_head.weight = embed_tokens.weight``).

    Trap: the tied weight is one tensor under two names (the embedding reads it, the head's
    linear reads it): it is neither unused (EG307) nor a duplicate (EG306). The RoPE cos / sin
    are a constant-only computation (arange x inv_freq) that is not a weight."""
    torch.manual_seed(0)
    model = TiedCausalLM()
    with torch.no_grad():  # norm scales away from their init, as after training
        for name, parameter in model.named_parameters():
            if name.endswith("layernorm.weight") or name == "norm.weight":
                parameter.add_(0.1 * torch.randn_like(parameter))
    input_ids = torch.randint(0, 512, (1, 16), generator=_generator())
    return model.eval(), (input_ids,)


# --------------------------------------------------------------------------------------------
# 2. resnet_bn: a torchvision-style ResNet with BatchNorm and a downsample branch
# --------------------------------------------------------------------------------------------


class BasicBlock(nn.Module):
    """torchvision's ``BasicBlock``: conv-bn-relu, conv-bn, ``downsample`` on the identity."""

    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    """torchvision's ``ResNet`` (stem, maxpool, ``layer1..layer3``, avgpool, ``fc``), narrower
    and shallower, with torchvision's initialisation (kaiming convs, BN weight 1 / bias 0) and a
    zero-initialised classifier bias."""

    def __init__(
        self, layers: tuple[int, ...] = (2, 2, 2), widths: tuple[int, ...] = (16, 32, 64), classes: int = 100
    ) -> None:
        super().__init__()
        self.inplanes = widths[0]
        self.conv1 = nn.Conv2d(3, self.inplanes, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(self.inplanes)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        for index, (blocks, width) in enumerate(zip(layers, widths), start=1):
            setattr(self, f"layer{index}", self._make_layer(width, blocks, stride=1 if index == 1 else 2))
        self.depth = len(layers)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(widths[-1], classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)
        nn.init.zeros_(self.fc.bias)

    def _make_layer(self, planes: int, blocks: int, stride: int) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes, 1, stride=stride, bias=False), nn.BatchNorm2d(planes)
            )
        layers = [BasicBlock(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes
        layers += [BasicBlock(planes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        for index in range(1, self.depth + 1):
            x = getattr(self, f"layer{index}")(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet_bn() -> tuple[nn.Module, Inputs]:
    """Mirrors torchvision ``resnet18`` (``BasicBlock``, ``downsample`` = 1x1 conv + BN on the
    first block of a strided stage), three stages instead of four, narrower.

    Trap: eval-mode ``BatchNorm2d`` (running statistics, a ``num_batches_tracked`` int64 buffer
    per BN that the eval forward never reads), conv weights without bias, a zero-initialised
    ``fc.bias``. Running statistics moved by a few train-mode forwards, as after training; BN
    affine weights stay at their init (1 / 0), as in a model built from its config."""
    torch.manual_seed(0)
    model = ResNet()
    image = torch.randn(2, 3, 64, 64, generator=_generator())
    _settle(model, (image,))
    return model, (image[:1],)


# --------------------------------------------------------------------------------------------
# 3. wav2vec2_like: a wav2vec2 / HuBERT speech encoder
# --------------------------------------------------------------------------------------------


class Wav2Vec2GroupNormConvLayer(nn.Module):
    """The first feature-extractor layer: conv (no bias), GroupNorm(C, C), GELU."""

    def __init__(self, out_channels: int, kernel: int, stride: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(1, out_channels, kernel, stride=stride, bias=False)
        self.layer_norm = nn.GroupNorm(out_channels, out_channels, affine=True)
        self.activation = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation(self.layer_norm(self.conv(x)))


class Wav2Vec2NoLayerNormConvLayer(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel: int, stride: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel, stride=stride, bias=False)
        self.activation = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation(self.conv(x))


class Wav2Vec2FeatureEncoder(nn.Module):
    def __init__(self, channels: int, kernels: tuple[int, ...], strides: tuple[int, ...]) -> None:
        super().__init__()
        layers: list[nn.Module] = [Wav2Vec2GroupNormConvLayer(channels, kernels[0], strides[0])]
        layers += [Wav2Vec2NoLayerNormConvLayer(channels, channels, k, s) for k, s in zip(kernels[1:], strides[1:])]
        self.conv_layers = nn.ModuleList(layers)

    def forward(self, input_values: torch.Tensor) -> torch.Tensor:
        x = input_values[:, None]
        for layer in self.conv_layers:
            x = layer(x)
        return x


class Wav2Vec2FeatureProjection(nn.Module):
    def __init__(self, conv_dim: int, hidden: int) -> None:
        super().__init__()
        self.layer_norm = nn.LayerNorm(conv_dim)
        self.projection = nn.Linear(conv_dim, hidden)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.projection(self.layer_norm(x)))


class Wav2Vec2PositionalConvEmbedding(nn.Module):
    """A grouped conv over time, ``weight_norm(..., dim=2)``; ``SamePad`` drops the last frame
    for an even kernel; GELU."""

    def __init__(self, hidden: int, kernel: int, groups: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(hidden, hidden, kernel, padding=kernel // 2, groups=groups)
        self.conv = parametrizations.weight_norm(self.conv, name="weight", dim=2)
        self.num_pad_remove = 1 if kernel % 2 == 0 else 0
        self.activation = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x.transpose(1, 2))
        if self.num_pad_remove > 0:
            x = x[:, :, : -self.num_pad_remove]
        return self.activation(x).transpose(1, 2)


class Wav2Vec2Attention(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.k_proj = nn.Linear(hidden, hidden)
        self.v_proj = nn.Linear(hidden, hidden)
        self.q_proj = nn.Linear(hidden, hidden)
        self.out_proj = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, hidden = x.shape
        shape = (batch, length, self.heads, self.head_dim)
        q = self.q_proj(x).view(shape).transpose(1, 2)
        k = self.k_proj(x).view(shape).transpose(1, 2)
        v = self.v_proj(x).view(shape).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=0.0)
        return self.out_proj(out.transpose(1, 2).reshape(batch, length, hidden))


class Wav2Vec2EncoderLayer(nn.Module):
    """wav2vec2-base's post-norm layer."""

    def __init__(self, hidden: int, heads: int, intermediate: int) -> None:
        super().__init__()
        self.attention = Wav2Vec2Attention(hidden, heads)
        self.dropout = nn.Dropout(0.1)
        self.layer_norm = nn.LayerNorm(hidden)
        self.intermediate_dense = nn.Linear(hidden, intermediate)
        self.output_dense = nn.Linear(intermediate, hidden)
        self.final_layer_norm = nn.LayerNorm(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layer_norm(x + self.dropout(self.attention(x)))
        feed_forward = self.output_dense(F.gelu(self.intermediate_dense(x)))
        return self.final_layer_norm(x + self.dropout(feed_forward))


class Wav2Vec2Model(nn.Module):
    def __init__(
        self, conv_dim: int = 64, hidden: int = 96, heads: int = 4, layers: int = 2, intermediate: int = 192
    ) -> None:
        super().__init__()
        self.feature_extractor = Wav2Vec2FeatureEncoder(conv_dim, (10, 3, 3, 3, 2), (5, 2, 2, 2, 2))
        self.feature_projection = Wav2Vec2FeatureProjection(conv_dim, hidden)
        # used only to mask time steps while training (SpecAugment); the eval forward never reads it
        self.masked_spec_embed = nn.Parameter(torch.empty(hidden).uniform_())
        self.pos_conv_embed = Wav2Vec2PositionalConvEmbedding(hidden, kernel=16, groups=4)
        self.encoder_layer_norm = nn.LayerNorm(hidden)
        self.layers = nn.ModuleList(Wav2Vec2EncoderLayer(hidden, heads, intermediate) for _ in range(layers))

    def forward(self, input_values: torch.Tensor) -> torch.Tensor:
        features = self.feature_extractor(input_values).transpose(1, 2)
        hidden = self.feature_projection(features)
        if self.training:
            mask = torch.rand(hidden.shape[:2], device=hidden.device) < 0.05
            hidden = torch.where(mask[..., None], self.masked_spec_embed.to(hidden.dtype), hidden)
        hidden = hidden + self.pos_conv_embed(hidden)
        hidden = self.encoder_layer_norm(hidden)
        for layer in self.layers:
            hidden = layer(hidden)
        return hidden


def wav2vec2_like() -> tuple[nn.Module, Inputs]:
    """Mirrors HF ``Wav2Vec2Model`` (wav2vec2-base, ``feat_extract_norm="group"``): a conv
    feature extractor (GroupNorm(C, C) in the first layer only, GELU, no conv bias), the feature
    projection (LayerNorm, Linear, dropout), the positional conv embedding (a grouped Conv1d with
    ``parametrizations.weight_norm(dim=2)``, SamePad, GELU), post-norm transformer layers.

    Trap: ``masked_spec_embed``, an ``nn.Parameter`` that only the training forward reads
    (SpecAugment masking); the weight-normed positional conv, which the fold makes static."""
    torch.manual_seed(0)
    model = Wav2Vec2Model()
    audio = torch.randn(1, 4000, generator=_generator())
    return model.eval(), (audio,)


# --------------------------------------------------------------------------------------------
# 4. hifigan_like: a HiFi-GAN V1 generator
# --------------------------------------------------------------------------------------------

LRELU_SLOPE = 0.1
Wrap = Callable[[nn.Module], nn.Module]


# HiFi-GAN's init_weights draws conv weights from N(0, 0.01); a trained generator's weights are
# larger. N(0, 0.05) keeps this one's waveform at a realistic amplitude (std ~0.07, not ~7e-4), so
# that the comparison with eager measures something.
HIFIGAN_WEIGHT_STD = 0.05


def _init_weights(m: nn.Module, mean: float = 0.0, std: float = HIFIGAN_WEIGHT_STD) -> None:
    """HiFi-GAN's ``init_weights``: conv weights from N(0, std)."""
    if "Conv" in type(m).__name__:
        m.weight.data.normal_(mean, std)


def _padding(kernel: int, dilation: int = 1) -> int:
    return (kernel * dilation - dilation) // 2


class ResBlock1(nn.Module):
    """HiFi-GAN's ``ResBlock1``: three dilated convs (1, 3, 5), each followed by an undilated
    conv, leaky ReLU before each, residual after each pair. Every conv weight-normed."""

    def __init__(self, wrap: Wrap, channels: int, kernel: int, dilations: tuple[int, ...] = (1, 3, 5)) -> None:
        super().__init__()
        convs1 = [nn.Conv1d(channels, channels, kernel, dilation=d, padding=_padding(kernel, d)) for d in dilations]
        convs2 = [nn.Conv1d(channels, channels, kernel, dilation=1, padding=_padding(kernel)) for _ in dilations]
        for conv in convs1 + convs2:
            _init_weights(conv)
        self.convs1 = nn.ModuleList(wrap(c) for c in convs1)
        self.convs2 = nn.ModuleList(wrap(c) for c in convs2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for c1, c2 in zip(self.convs1, self.convs2):
            xt = c2(F.leaky_relu(c1(F.leaky_relu(x, LRELU_SLOPE)), LRELU_SLOPE))
            x = xt + x
        return x


class HiFiGANGenerator(nn.Module):
    """conv_pre -> (leaky ReLU, upsample, MRF) per rate -> leaky ReLU -> conv_post -> tanh."""

    def __init__(
        self,
        wrap: Wrap,
        mels: int = 80,
        initial_channels: int = 128,
        upsample_rates: tuple[int, ...] = (4, 4),
        upsample_kernels: tuple[int, ...] = (8, 8),
        resblock_kernels: tuple[int, ...] = (3, 7, 11),
    ) -> None:
        super().__init__()
        self.num_kernels, self.num_upsamples = len(resblock_kernels), len(upsample_rates)
        self.conv_pre = wrap(nn.Conv1d(mels, initial_channels, 7, padding=3))
        ups = []
        for i, (u, k) in enumerate(zip(upsample_rates, upsample_kernels)):
            up = nn.ConvTranspose1d(
                initial_channels // 2**i, initial_channels // 2 ** (i + 1), k, stride=u, padding=(k - u) // 2
            )
            _init_weights(up)
            ups.append(wrap(up))
        self.ups = nn.ModuleList(ups)
        self.resblocks = nn.ModuleList(
            ResBlock1(wrap, initial_channels // 2 ** (i + 1), k)
            for i in range(self.num_upsamples)
            for k in resblock_kernels
        )
        post = nn.Conv1d(initial_channels // 2**self.num_upsamples, 1, 7, padding=3)
        _init_weights(post)
        self.conv_post = wrap(post)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        x = self.conv_pre(mel)
        for i in range(self.num_upsamples):
            x = self.ups[i](F.leaky_relu(x, LRELU_SLOPE))
            xs = None
            for j in range(self.num_kernels):
                y = self.resblocks[i * self.num_kernels + j](x)
                xs = y if xs is None else xs + y
            x = xs / self.num_kernels
        x = self.conv_post(F.leaky_relu(x))
        return torch.tanh(x)


def _hifigan(wrap: Wrap) -> tuple[nn.Module, Inputs]:
    torch.manual_seed(0)
    model = HiFiGANGenerator(wrap)
    mel = torch.randn(1, 80, 32, generator=_generator())
    return model.eval(), (mel,)


def hifigan_like() -> tuple[nn.Module, Inputs]:
    """Mirrors the HiFi-GAN V1 generator (jik876/hifi-gan, as in SpeechT5HifiGan / Coqui TTS)
    with the current API: ``parametrizations.weight_norm`` on the Conv1d pre-conv, the
    ConvTranspose1d upsamplers (default ``dim=0``, the input-channel axis of a transposed conv)
    and every conv of the multi-receptive-field ``ResBlock1``s (kernels 3, 7, 11, dilations 1, 3,
    5), leaky ReLU 0.1, tanh output. Two upsampling stages (x4, x4) instead of four.

    Trap: 40 weight-normed convs the fold must make static, each reported once; the
    ``original0`` (g) tensors of each ResBlock's six convs have identical shapes; a few
    lifted scalar constants (the ``xs / num_kernels`` divisor)."""
    return _hifigan(parametrizations.weight_norm)


def hifigan_hook_weight_norm() -> tuple[nn.Module, Inputs]:
    """The same HiFi-GAN generator with the old hook-based ``torch.nn.utils.weight_norm``
    (``weight_g`` / ``weight_v`` parameters, the weight recomputed by a forward pre-hook), as in
    the original jik876/hifi-gan code and most released checkpoints' code.

    Trap: the hook-based names (``weight_g`` / ``weight_v``) rather than ``parametrizations``."""
    return _hifigan(nn.utils.weight_norm)


# --------------------------------------------------------------------------------------------
# 5. transformer_encoder: nn.TransformerEncoder with a sinusoidal position table
# --------------------------------------------------------------------------------------------


class PositionalEncoding(nn.Module):
    """The PyTorch tutorial's sinusoidal table, a ``pe`` buffer of shape (1, max_len, d_model)."""

    def __init__(self, d_model: int, max_len: int = 256) -> None:
        super().__init__()
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(1, max_len, d_model)
        pe[0, :, 0::2] = torch.sin(position * div_term)
        pe[0, :, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe)
        self.pe: torch.Tensor
        self.dropout = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(x + self.pe[:, : x.size(1)])


class SequenceClassifier(nn.Module):
    def __init__(
        self, features: int = 40, d_model: int = 64, heads: int = 4, layers: int = 3, classes: int = 10
    ) -> None:
        super().__init__()
        self.input_proj = nn.Linear(features, d_model)
        self.pos_encoder = PositionalEncoding(d_model)
        layer = nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=128, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=layers)
        self.classifier = nn.Linear(d_model, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.encoder(self.pos_encoder(self.input_proj(x)))
        return self.classifier(x.mean(dim=1))


def transformer_encoder() -> tuple[nn.Module, Inputs]:
    """Mirrors the PyTorch tutorial / torchaudio-style sequence model: a Linear input
    projection, the sinusoidal ``pe`` buffer, ``nn.TransformerEncoder(nn.TransformerEncoderLayer(
    ..., batch_first=True), num_layers=3)``, a mean-pooled classifier.

    Trap: ``nn.TransformerEncoder`` deep-copies the layer, so all three layers start with
    byte-identical weights (``in_proj_weight``, ``linear1.weight``, ...), as every freshly built
    model does until it is trained or loaded; ``pe`` is a 64 KiB persistent buffer of which the
    forward reads a slice."""
    torch.manual_seed(0)
    model = SequenceClassifier()
    features = torch.randn(1, 24, 40, generator=_generator())
    return model.eval(), (features,)


# --------------------------------------------------------------------------------------------
# 6. pt2e_quantized_convnet: PT2E int8 quantization for XNNPACK
# --------------------------------------------------------------------------------------------


class SmallConvNet(nn.Module):
    """conv-bn-relu x3 (the BN folded into the conv by PT2E), global pool, linear."""

    def __init__(self, wrap: Wrap = lambda m: m, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
            wrap(nn.Conv2d(16, 32, 3, stride=2, padding=1)), nn.ReLU(),
            nn.Conv2d(32, 64, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
        )  # fmt: skip
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(64, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.pool(self.features(x)).flatten(1))


def _quantized(wrap: Wrap) -> tuple[nn.Module, Inputs]:
    """``SmallConvNet`` quantized the way executorch's XNNPACK example does it
    (``examples/xnnpack/quantization/utils.py``): export, ``prepare_pt2e`` with
    ``XNNPACKQuantizer`` + symmetric per-channel config, calibrate, ``convert_pt2e``."""
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    torch.manual_seed(0)
    model = SmallConvNet(wrap)
    image = torch.randn(1, 3, 32, 32, generator=_generator())
    _settle(model, (torch.randn(4, 3, 32, 32, generator=_generator(2)),))
    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    prepared = prepare_pt2e(torch.export.export(model, (image,)).module(), quantizer)
    calibration = torch.randn(8, 1, 3, 32, 32, generator=_generator(3))
    with torch.no_grad():
        for batch in calibration:
            prepared(batch)
    return convert_pt2e(prepared), (image,)


def pt2e_quantized_convnet() -> tuple[nn.Module, Inputs]:
    """Mirrors executorch's XNNPACK int8 flow (``examples/xnnpack/quantization``; the flow of
    every quantized MobileNet / ResNet ``.pte``): a conv net with BatchNorm, quantized with
    ``XNNPACKQuantizer`` + ``get_symmetric_quantization_config(is_per_channel=True)`` through
    ``prepare_pt2e`` / ``convert_pt2e``. Returns the converted GraphModule.

    Trap: every conv / linear weight is ``dequantize_per_channel(int8 constant, scales,
    zero_points)``, a constant-only computation that XNNPACK must see unfolded (it fuses the
    dequantize into a quantized conv); per-channel zero points are all-zero int64 tensors."""
    return _quantized(lambda m: m)


def pt2e_quantized_weight_norm() -> tuple[nn.Module, Inputs]:
    """The same quantized conv net with its second conv wrapped in
    ``parametrizations.weight_norm``, to show what PT2E does with a reparametrized weight: the
    quantizer annotates the conv's weight, which is the weight-norm computation's output."""
    return _quantized(parametrizations.weight_norm)


# --------------------------------------------------------------------------------------------
# 7. spectral_norm_gan_disc: an SNGAN / BigGAN-style discriminator
# --------------------------------------------------------------------------------------------


class SNDiscriminator(nn.Module):
    """SNGAN's DCGAN-like discriminator (Miyato et al. 2018): 3x3 / 4x4 conv pairs with
    ``spectral_norm``, leaky ReLU 0.1, a spectral-normed linear head."""

    def __init__(self, width: int = 32) -> None:
        super().__init__()
        sn = parametrizations.spectral_norm
        self.conv1 = sn(nn.Conv2d(3, width, 3, padding=1))
        self.conv2 = sn(nn.Conv2d(width, width, 4, stride=2, padding=1))
        self.conv3 = sn(nn.Conv2d(width, 2 * width, 3, padding=1))
        self.conv4 = nn.utils.spectral_norm(nn.Conv2d(2 * width, 2 * width, 4, stride=2, padding=1))  # old hook API
        self.conv5 = sn(nn.Conv2d(2 * width, 4 * width, 3, padding=1))
        self.conv6 = sn(nn.Conv2d(4 * width, 4 * width, 4, stride=2, padding=1))
        self.conv7 = sn(nn.Conv2d(4 * width, 8 * width, 3, padding=1))
        self.fc = sn(nn.Linear(8 * width * 4 * 4, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv in (self.conv1, self.conv2, self.conv3, self.conv4, self.conv5, self.conv6, self.conv7):
            x = F.leaky_relu(conv(x), 0.1)
        return self.fc(x.flatten(1))


def spectral_norm_gan_disc() -> tuple[nn.Module, Inputs]:
    """Mirrors the SNGAN CIFAR discriminator (``torch.nn.utils.parametrizations.spectral_norm``
    on every conv and the linear head, one conv with the old hook-based
    ``torch.nn.utils.spectral_norm``), 32x32 input, run a few train-mode forwards so that u / v
    have moved, as in a trained discriminator.

    Trap: both spectral_norm APIs in one model (``parametrizations.weight.original`` + ``_u`` /
    ``_v`` buffers, and ``weight_orig`` / ``weight_u`` / ``weight_v``)."""
    torch.manual_seed(0)
    model = SNDiscriminator()
    image = torch.randn(1, 3, 32, 32, generator=_generator())
    _settle(model, (torch.randn(2, 3, 32, 32, generator=_generator(2)),), steps=3)
    return model, (image,)


# --------------------------------------------------------------------------------------------
# 8. mobilenet_like: MobileNetV3-style inverted residuals with squeeze-excitation
# --------------------------------------------------------------------------------------------


class SqueezeExcitation(nn.Module):
    """torchvision's ``SqueezeExcitation``: avgpool, 1x1 conv ``fc1``, ReLU, 1x1 conv ``fc2``,
    hard-sigmoid scale."""

    def __init__(self, channels: int, squeeze: int) -> None:
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)
        self.activation = nn.ReLU()
        self.scale_activation = nn.Hardsigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.scale_activation(self.fc2(self.activation(self.fc1(self.avgpool(x)))))
        return scale * x


def _conv_bn(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1, act: bool = True) -> nn.Sequential:
    layers: list[nn.Module] = [
        nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
    ]
    if act:
        layers.append(nn.ReLU6(inplace=True))
    return nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    """MobileNetV2's block (expand 1x1, depthwise 3x3, SE, project 1x1; residual when the shape
    allows), with V3's squeeze-excitation."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int, se: bool) -> None:
        super().__init__()
        hidden = cin * expand
        self.use_res_connect = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if expand != 1:
            layers.append(_conv_bn(cin, hidden, 1))
        layers.append(_conv_bn(hidden, hidden, 3, stride, groups=hidden))
        if se:
            layers.append(SqueezeExcitation(hidden, max(8, hidden // 4)))
        layers.append(_conv_bn(hidden, cout, 1, act=False))
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.block(x) if self.use_res_connect else self.block(x)


class MobileNet(nn.Module):
    def __init__(self, classes: int = 100) -> None:
        super().__init__()
        # (expand, out channels, stride, squeeze-excitation)
        settings = [
            (1, 16, 1, False),
            (4, 24, 2, False),
            (3, 24, 1, False),
            (3, 40, 2, True),
            (3, 40, 1, True),
            (6, 80, 2, True),
        ]
        layers: list[nn.Module] = [_conv_bn(3, 16, 3, stride=2)]
        cin = 16
        for expand, cout, stride, se in settings:
            layers.append(InvertedResidual(cin, cout, stride, expand, se))
            cin = cout
        layers.append(_conv_bn(cin, 256, 1))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(256, classes))
        for m in self.modules():  # torchvision's MobileNetV2 / V3 initialisation
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def mobilenet_like() -> tuple[nn.Module, Inputs]:
    """Mirrors torchvision ``mobilenet_v2`` / ``mobilenet_v3_small``: depthwise-separable
    inverted residuals with BatchNorm + ReLU6, squeeze-excitation (1x1 convs with bias,
    hard-sigmoid), a dropout + linear classifier, torchvision's initialisation (every conv and
    linear bias zero, BN weight 1 / bias 0). Running statistics moved by train-mode forwards.

    Trap: many all-zero biases and all-one BN scales of equal shape (duplicates under 1 KiB);
    eval-mode dropout; BN folded into the convs by XNNPACK."""
    torch.manual_seed(0)
    model = MobileNet()
    image = torch.randn(2, 3, 64, 64, generator=_generator())
    _settle(model, (image,))
    return model, (image[:1],)


# --------------------------------------------------------------------------------------------
# 9. unet_segmentation: a UNet-style decoder with PixelShuffle and GroupNorm
# --------------------------------------------------------------------------------------------


class ConvGNAct(nn.Sequential):
    def __init__(self, cin: int, cout: int, kernel: int = 3, stride: int = 1) -> None:
        super().__init__(
            nn.Conv2d(cin, cout, kernel, stride, kernel // 2, bias=False), nn.GroupNorm(8, cout), nn.SiLU()
        )


class UpBlock(nn.Module):
    """Sub-pixel upsampling (conv to 4C, PixelShuffle(2), ICNR-free), concat the skip, two
    conv-GN-SiLU."""

    def __init__(self, cin: int, skip: int, cout: int) -> None:
        super().__init__()
        self.up = nn.Sequential(nn.Conv2d(cin, 4 * cout, 3, padding=1), nn.PixelShuffle(2))
        self.fuse = nn.Sequential(ConvGNAct(cout + skip, cout), ConvGNAct(cout, cout))

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        return self.fuse(torch.cat([self.up(x), skip], dim=1))


class UNet(nn.Module):
    def __init__(self, classes: int = 3, widths: tuple[int, ...] = (16, 32, 64, 128)) -> None:
        super().__init__()
        self.stem = nn.Sequential(ConvGNAct(3, widths[0]), ConvGNAct(widths[0], widths[0]))
        self.down = nn.ModuleList(
            nn.Sequential(ConvGNAct(a, b, stride=2), ConvGNAct(b, b)) for a, b in itertools.pairwise(widths)
        )
        self.up = nn.ModuleList(UpBlock(b, a, a) for a, b in reversed(list(itertools.pairwise(widths))))
        self.head = nn.Conv2d(widths[0], classes, 1)
        nn.init.zeros_(self.head.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = [self.stem(x)]
        for down in self.down:
            skips.append(down(skips[-1]))
        x = skips.pop()
        for up in self.up:
            x = up(x, skips.pop())
        return self.head(x)


def unet_segmentation() -> tuple[nn.Module, Inputs]:
    """Mirrors a UNet-style segmentation network (segmentation_models_pytorch's UNet decoder
    with sub-pixel upsampling, or a diffusion UNet's GroupNorm + SiLU blocks): strided
    conv-GroupNorm-SiLU encoder, PixelShuffle(2) upsampling, skip concatenation, a 1x1 head with
    a zero bias. GroupNorm weights at their init (1 / 0).

    Trap: GroupNorm everywhere (no running statistics to fold), conv weights without bias, many
    equal GroupNorm affine tensors."""
    torch.manual_seed(0)
    model = UNet()
    image = torch.randn(1, 3, 64, 64, generator=_generator())
    return model.eval(), (image,)


# --------------------------------------------------------------------------------------------
# 10. dac_codec_encoder: a Descript Audio Codec encoder with Snake activations
# --------------------------------------------------------------------------------------------


# DAC's init_weights: trunc-normal(std=0.02) conv weights, zero biases. With 0.02 this small
# encoder's latents have std ~4e-4; 0.05 gives ~0.06, the scale of a trained encoder's output.
DAC_WEIGHT_STD = 0.05


def _wn_conv1d(*args: object, **kwargs: object) -> nn.Module:
    """DAC's ``WNConv1d`` with its ``init_weights``: a trunc-normal weight, a zero bias."""
    conv = nn.Conv1d(*args, **kwargs)
    nn.init.trunc_normal_(conv.weight, std=DAC_WEIGHT_STD)
    nn.init.constant_(conv.bias, 0)
    return parametrizations.weight_norm(conv)


class Snake1d(nn.Module):
    """DAC's Snake: ``x + 1 / (alpha + 1e-9) * sin(alpha * x)^2`` with a learnable per-channel
    ``alpha`` of shape (1, C, 1)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(1, channels, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + (self.alpha + 1e-9).reciprocal() * torch.sin(self.alpha * x).pow(2)


class ResidualUnit(nn.Module):
    def __init__(self, dim: int, dilation: int) -> None:
        super().__init__()
        pad = ((7 - 1) * dilation) // 2
        self.block = nn.Sequential(
            Snake1d(dim), _wn_conv1d(dim, dim, 7, dilation=dilation, padding=pad), Snake1d(dim), _wn_conv1d(dim, dim, 1)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        trim = (x.shape[-1] - y.shape[-1]) // 2
        if trim > 0:
            x = x[..., trim:-trim]
        return x + y


class EncoderBlock(nn.Module):
    def __init__(self, dim: int, stride: int) -> None:
        super().__init__()
        self.block = nn.Sequential(
            ResidualUnit(dim // 2, 1), ResidualUnit(dim // 2, 3), ResidualUnit(dim // 2, 9),
            Snake1d(dim // 2), _wn_conv1d(dim // 2, dim, 2 * stride, stride=stride, padding=math.ceil(stride / 2)),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)


class DACEncoder(nn.Module):
    def __init__(self, d_model: int = 16, strides: tuple[int, ...] = (2, 4, 5), d_latent: int = 32) -> None:
        super().__init__()
        layers: list[nn.Module] = [_wn_conv1d(1, d_model, 7, padding=3)]
        for stride in strides:
            d_model *= 2
            layers.append(EncoderBlock(d_model, stride))
        layers += [Snake1d(d_model), _wn_conv1d(d_model, d_latent, 3, padding=1)]
        self.block = nn.Sequential(*layers)

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        return self.block(audio)


def dac_codec_encoder() -> tuple[nn.Module, Inputs]:
    """Mirrors the Descript Audio Codec (``dac.model.dac.Encoder``; also EnCodec-like codecs):
    weight-normed Conv1d everywhere (``WNConv1d``), Snake1d activations with a learnable
    ``alpha`` (1, C, 1), residual units with dilations 1, 3, 9, strided downsampling convs.
    Three encoder blocks (strides 2, 4, 5) instead of four; a 4000-sample input.

    Trap: ``alpha`` parameters initialised to ones (equal bytes in every Snake of a width),
    zero conv biases; 23 weight-normed convs to fold; Snake's ``1 / alpha`` is a constant-only
    computation that is not a weight."""
    torch.manual_seed(0)
    model = DACEncoder()
    audio = torch.randn(1, 1, 4000, generator=_generator())
    return model.eval(), (audio,)


# --------------------------------------------------------------------------------------------
# 11. vit_tiny: a ViT / DeiT classifier with nn.MultiheadAttention
# --------------------------------------------------------------------------------------------


class ViTBlock(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.self_attention = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(
            nn.Linear(dim, 4 * dim), nn.GELU(), nn.Dropout(0.0), nn.Linear(4 * dim, dim), nn.Dropout(0.0)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm1(x)
        x = x + self.self_attention(y, y, y, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    def __init__(
        self, image: int = 64, patch: int = 8, dim: int = 96, depth: int = 3, heads: int = 3, classes: int = 100
    ) -> None:
        super().__init__()
        self.conv_proj = nn.Conv2d(3, dim, patch, stride=patch)
        self.class_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embedding = nn.Parameter(torch.empty(1, (image // patch) ** 2 + 1, dim).normal_(std=0.02))
        self.layers = nn.Sequential(*(ViTBlock(dim, heads) for _ in range(depth)))
        self.ln = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, classes)
        nn.init.zeros_(self.head.weight)  # torchvision zero-initialises the head
        nn.init.zeros_(self.head.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv_proj(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.class_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embedding
        return self.head(self.ln(self.layers(x))[:, 0])


def vit_tiny() -> tuple[nn.Module, Inputs]:
    """Mirrors torchvision ``vit_b_16`` (``conv_proj`` patch embedding, ``class_token``,
    ``pos_embedding``, pre-norm blocks with ``nn.MultiheadAttention``, GELU MLP), 64x64 input
    with 8x8 patches, 3 blocks of width 96.

    Trap: ``nn.MultiheadAttention`` keeps q / k / v in one packed ``in_proj_weight`` (and its
    ``out_proj`` is a ``NonDynamicallyQuantizableLinear``); a zero-initialised class token and
    head bias. torchvision zero-initialises the head's weight too; here it is random, as after
    training, so that the comparison with eager is not all zeros."""
    torch.manual_seed(0)
    model = VisionTransformer()
    with torch.no_grad():  # the head trained away from zero, or eager and the program both print zeros
        model.head.weight.normal_(std=0.02)
    image = torch.randn(1, 3, 64, 64, generator=_generator())
    return model.eval(), (image,)


FACTORIES: dict[str, Factory] = {
    "tied_lm": tied_lm,
    "resnet_bn": resnet_bn,
    "wav2vec2_like": wav2vec2_like,
    "hifigan_like": hifigan_like,
    "hifigan_hook_weight_norm": hifigan_hook_weight_norm,
    "transformer_encoder": transformer_encoder,
    "pt2e_quantized_convnet": pt2e_quantized_convnet,
    "pt2e_quantized_weight_norm": pt2e_quantized_weight_norm,
    "spectral_norm_gan_disc": spectral_norm_gan_disc,
    "mobilenet_like": mobilenet_like,
    "unet_segmentation": unet_segmentation,
    "dac_codec_encoder": dac_codec_encoder,
    "vit_tiny": vit_tiny,
}
