"""The drop-in claim on a second real partitioner: Vulkan's, whose preprocess runs here without
a GPU (the runtime that would execute its blobs is not in the pip package, so the programs are
checked with ``check_pte``, not run)."""

from __future__ import annotations

import pytest
import torch
from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower
from torch import nn

import export_guards as eg

pytestmark = [pytest.mark.slow]  # Vulkan's partitioner preprocesses real models


vulkan = pytest.importorskip(
    "executorch.backends.vulkan.partitioner.vulkan_partitioner", reason="this ExecuTorch has no Vulkan backend"
)


class Reparametrized(nn.Module):
    """A weight-normed conv and a spectral-normed linear: both weights are computed at every
    forward until the fold makes them static."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.utils.parametrizations.weight_norm(nn.Conv2d(3, 8, 3, padding=1))
        self.head = nn.utils.parametrizations.spectral_norm(nn.Linear(8, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.conv(x)).mean(dim=(2, 3)))


INPUT = torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(0))


def program(device: torch.device | str = "cpu") -> torch.export.ExportedProgram:
    torch.manual_seed(0)
    model = Reparametrized().eval().to(device)
    return torch.export.export(model, (INPUT.to(device),))


def weight_ops(edge) -> list[str]:
    """The ops each Vulkan delegate runs, besides the conv and linear themselves."""
    ops = []
    for module in edge.exported_program().graph_module.modules():
        if type(module).__name__ == "LoweredBackendModule":
            ops += [str(n.target) for n in module.original_module.graph.nodes if n.op == "call_function"]
    return ops


def test_vulkan_lowers_with_the_guards_and_delegates_the_folded_weights() -> None:
    stock = to_edge_transform_and_lower(program(), partitioner=[vulkan.VulkanPartitioner()])
    guarded = to_edge_transform_and_lower(
        program(), transform_passes=eg.guard_passes(), partitioner=[vulkan.VulkanPartitioner()]
    )

    for edge in (stock, guarded):
        summary = eg.delegation_summary(edge)
        assert summary.delegated["convolution"] == 1 and summary.delegated["addmm"] == 1, summary
        assert summary.backends.keys() == {"VulkanBackend"}
    # Stock Vulkan recomputes both weights on the GPU at every call (pow, sum, div in its
    # delegates); after the fold it only holds them.
    assert any("pow" in op for op in weight_ops(stock))
    assert not any("pow" in op or "div" in op for op in weight_ops(guarded))

    stock_pte = stock.to_executorch().buffer
    guarded_pte = guarded.to_executorch(ExecutorchBackendConfig(passes=eg.emit_passes())).buffer
    assert len(guarded_pte) < len(stock_pte)
    assert not eg.check_pte(guarded_pte).errors


def test_vulkan_is_a_host_reader_for_device_constants(trapdev: torch.device) -> None:
    partitioner = eg.guard_partitioners([vulkan.VulkanPartitioner()])
    with pytest.raises(eg.ConstantPlacementError, match="VulkanBackend's preprocess will read it from host memory"):
        to_edge_transform_and_lower(
            program(trapdev), transform_passes=eg.guard_passes(partitioner=partitioner), partitioner=partitioner
        )
