"""Factories whose quantize step the fixtures must run as the lint does
(tests/test_fixture_lowering.py): torchao's quantization of an embedding and two linears, on
XNNPACK and on the portable kernels alone."""

from __future__ import annotations

import torch
from torch import nn

import export_guards as eg

WIDTH, HIDDEN, VOCAB = 96, 40, 50  # not multiples of one another: the group size divides WIDTH alone

INT4 = torch.int4  # type: ignore[attr-defined]  # torch's stubs lack the sub-byte dtypes


class Tagger(nn.Module):
    """Token ids to 7 scores: an embedding, then two linears."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.hidden, self.out = nn.Linear(WIDTH, HIDDEN), nn.Linear(HIDDEN, 7)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.hidden(self.embed(tokens))))


def tagger() -> Tagger:
    torch.manual_seed(0)
    return Tagger().eval()


def tokens() -> tuple[torch.Tensor]:
    return (torch.randint(0, VOCAB, (1, 6), generator=torch.Generator().manual_seed(1)),)


def quantize_8da4w(model: nn.Module, inputs: tuple[torch.Tensor, ...]) -> nn.Module:
    """ExecuTorch's XNNPACK LLM default for the linears, in groups of 32 (of the first's 96)."""
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerGroup

    quantize_(model.hidden, Int8DynamicActivationIntxWeightConfig(weight_dtype=INT4, weight_granularity=PerGroup(32)))
    return model


def quantize_weights_int8(model: nn.Module, inputs: tuple[torch.Tensor, ...]) -> nn.Module:
    """int8 weights per channel, the embedding's table too (torchao's IntxWeightOnlyConfig)."""
    from torchao.quantization import IntxWeightOnlyConfig, quantize_
    from torchao.quantization.granularity import PerAxis

    config = IntxWeightOnlyConfig(weight_dtype=torch.int8, granularity=PerAxis(0))
    quantize_(model, config, filter_fn=lambda module, _: isinstance(module, (nn.Linear, nn.Embedding)))
    return model


def xnnpack_8da4w() -> eg.Exportable:
    return eg.Exportable(tagger(), tokens(), quantize=quantize_8da4w)


def portable_int8() -> eg.Exportable:
    return eg.Exportable(tagger(), tokens(), partitioners=[], quantize=quantize_weights_int8)


def returns_none() -> eg.Exportable:
    """torchao's ``quantize_`` returned as if it were the model: it returns None."""
    from torchao.quantization import IntxWeightOnlyConfig, quantize_

    return eg.Exportable(tagger(), tokens(), quantize=lambda model, inputs: quantize_(model, IntxWeightOnlyConfig()))
