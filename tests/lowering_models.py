"""Factories that say how they lower, as a user's export script does (tests/test_lowering.py)."""

from __future__ import annotations

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import EdgeCompileConfig, ExecutorchBackendConfig
from torch import nn

import export_guards as eg

NOT_CORE = EdgeCompileConfig(_core_aten_ops_exception_list=[torch.ops.aten.masked_select.default])


class Select(nn.Module):
    """``masked_select``: outside core ATen, which the user's config lets through."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.masked_select(x, x > 0) * 2


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(64, 64), nn.Linear(64, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)))


def net() -> Net:
    torch.manual_seed(0)
    return Net().eval()


def inputs() -> tuple[torch.Tensor]:
    return (torch.randn(2, 64, generator=torch.Generator().manual_seed(1)),)


def select_default() -> tuple[nn.Module, tuple[torch.Tensor]]:
    return Select().eval(), (torch.randn(4, 12, generator=torch.Generator().manual_seed(1)),)


def select_with_config() -> eg.Exportable:
    return eg.Exportable(*select_default(), compile_config=NOT_CORE)


def per_op() -> eg.Exportable:
    return eg.Exportable(net(), inputs(), partitioners=[XnnpackPartitioner(per_op_mode=True)])


def portable_only() -> eg.Exportable:
    return eg.Exportable(net(), inputs(), partitioners=[])


def realigned() -> eg.Exportable:
    return eg.Exportable(net(), inputs(), backend_config=ExecutorchBackendConfig(constant_tensor_alignment=256))


def quantize_8da4w(model: nn.Module, example: tuple[torch.Tensor, ...]) -> nn.Module:
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerGroup

    quantize_(model, Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(32)))  # type: ignore[attr-defined]  # torch's stubs lack the sub-byte dtypes
    return model


def quantized() -> eg.Exportable:
    return eg.Exportable(net(), inputs(), quantize=quantize_8da4w)


def not_a_partitioner() -> eg.Exportable:
    return eg.Exportable(net(), inputs(), partitioners=["xnnpack"])
