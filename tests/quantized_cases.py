"""Small models quantized as ExecuTorch and torchao document it for XNNPACK, by name: the cases
that ``benchmarks/delegate_numerics.py`` runs against eager to find what a delegate computes
wrong, and that ``tests/test_known_wrong.py`` proves each known-wrong entry on."""

from __future__ import annotations

from collections.abc import Callable

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from executorch.exir.pass_base import ExportedProgramPassBase, ExportedProgramPassResult
from torch import nn
from torch.export import ExportedProgram

Case = Callable[[], tuple[nn.Module, tuple[torch.Tensor, ...]]]

INT4 = torch.int4  # type: ignore[attr-defined]  # torch's stubs lack the sub-byte dtypes


class MLP(nn.Module):
    """Two linears with a ReLU between them, as a user writes an MLP."""

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(64, 32)
        self.down = nn.Linear(32, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


def linears(rank3: bool = False) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    return MLP().eval(), (torch.randn(2, 3, 64) if rank3 else torch.randn(2, 64),)


class TiedHead(nn.Module):
    """An embedding and an output head, as a decoder's ends."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(128, 64)
        self.head = nn.Linear(64, 128, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(tokens))


def convs() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 4, 1)).eval()
    return model, (torch.randn(1, 3, 16, 16),)


def _torchao_config(name: str) -> object:
    from torchao.quantization import (
        Int8DynamicActivationInt8WeightConfig,
        Int8DynamicActivationIntxWeightConfig,
        Int8WeightOnlyConfig,
        IntxWeightOnlyConfig,
    )
    from torchao.quantization.granularity import PerAxis, PerGroup

    configs: dict[str, Callable[[], object]] = {
        "int8wo": Int8WeightOnlyConfig,
        "intx8wo-channel": lambda: IntxWeightOnlyConfig(weight_dtype=torch.int8, granularity=PerAxis(0)),
        "intx8wo-group32": lambda: IntxWeightOnlyConfig(weight_dtype=torch.int8, granularity=PerGroup(32)),
        "intx4wo-group32": lambda: IntxWeightOnlyConfig(weight_dtype=INT4, granularity=PerGroup(32)),
        "intx4wo-channel": lambda: IntxWeightOnlyConfig(weight_dtype=INT4, granularity=PerAxis(0)),
        "8da4w-group32": lambda: Int8DynamicActivationIntxWeightConfig(
            weight_dtype=INT4, weight_granularity=PerGroup(32)
        ),
        "8da4w-channel": lambda: Int8DynamicActivationIntxWeightConfig(
            weight_dtype=INT4, weight_granularity=PerAxis(0)
        ),
        "8da8w-channel": lambda: Int8DynamicActivationIntxWeightConfig(
            weight_dtype=torch.int8, weight_granularity=PerAxis(0)
        ),
        "int8dq": Int8DynamicActivationInt8WeightConfig,
    }
    return configs[name]()


def torchao(config: str, *, embedding: bool = False, rank3: bool = False) -> Case:
    """torchao's ``quantize_`` with ``config`` on the linears (or on a tied head's embedding)."""

    def build() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
        from torchao.quantization import quantize_

        if embedding:
            torch.manual_seed(0)
            model: nn.Module = TiedHead().eval()
            inputs: tuple[torch.Tensor, ...] = (torch.randint(0, 128, (1, 8)),)
            quantize_(model, _torchao_config(config), filter_fn=lambda module, fqn: isinstance(module, nn.Embedding))
        else:
            model, inputs = linears(rank3)
            quantize_(model, _torchao_config(config))
        return model, inputs

    return build


def pt2e(*, per_channel: bool, dynamic: bool, conv: bool = False) -> Case:
    """The XNNPACK quantizer through PT2E, calibrated on the example input, converted."""

    def build() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
        from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
            XNNPACKQuantizer,
            get_symmetric_quantization_config,
        )
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

        model, inputs = convs() if conv else linears()
        quantizer = XNNPACKQuantizer().set_global(
            get_symmetric_quantization_config(is_per_channel=per_channel, is_dynamic=dynamic)
        )
        prepared = prepare_pt2e(torch.export.export(model, inputs).module(), quantizer)
        prepared(*inputs)
        return convert_pt2e(prepared), inputs

    return build


TORCHAO_CONFIGS = ("int8wo", "intx8wo-channel", "intx8wo-group32", "intx4wo-group32", "intx4wo-channel",
                   "8da4w-group32", "8da4w-channel", "8da8w-channel", "int8dq")  # fmt: skip

CASES: dict[str, Case] = {
    **{f"torchao-{name}": torchao(name) for name in TORCHAO_CONFIGS},
    "torchao-int8wo-3d": torchao("int8wo", rank3=True),
    "torchao-intx8wo-channel-embedding": torchao("intx8wo-channel", embedding=True),
    "torchao-intx4wo-group32-embedding": torchao("intx4wo-group32", embedding=True),
    **{
        f"pt2e-{'dynamic' if dynamic else 'static'}-{'channel' if channel else 'tensor'}-{'conv' if conv else 'linear'}": pt2e(
            per_channel=channel, dynamic=dynamic, conv=conv
        )
        for dynamic in (False, True)
        for channel in (False, True)
        for conv in (False, True)
        if not (dynamic and conv)  # the XNNPACK quantizer's dynamic configs quantize linears only
    },
}
"""Every case, by name."""


class Seen(ExportedProgramPassBase):
    """A transform pass that keeps the program it is handed: the one the partitioners see
    (XNNPACK keeps a dynamically quantized linear whole, where to_edge alone decomposes it)."""

    program: ExportedProgram

    def call(self, exported_program: ExportedProgram) -> ExportedProgramPassResult:
        self.program = exported_program
        return ExportedProgramPassResult(exported_program, False)


def as_partitioned(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> ExportedProgram:
    """The edge program that XNNPACK's partitioner is handed for ``model``."""
    seen = Seen()
    to_edge_transform_and_lower(
        torch.export.export(model, inputs), transform_passes=[seen], partitioner=[XnnpackPartitioner()]
    )
    return seen.program
