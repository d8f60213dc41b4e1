"""Small programs for the ``.pte`` checks, written with the real ExecuTorch pipeline."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower


class ConvLinear(torch.nn.Module):
    """A conv and a linear (both delegated to XNNPACK) and a buffer added outside them."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3)
        self.linear = torch.nn.Linear(8, 5)
        self.register_buffer("offset", torch.linspace(-1, 1, 5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.conv(x).mean((2, 3))) + self.offset


class Counter(torch.nn.Module):
    """A mutated buffer: memory-planned state next to constants."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(4, 4))
        self.register_buffer("count", torch.zeros(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.count.add_(1)
        return x @ self.weight + self.count


def example() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """A factory for ``export-guards check --reproducible``: seeded, so exports repeat."""
    torch.manual_seed(0)
    return ConvLinear().eval(), (torch.randn(1, 3, 8, 8),)


def unseeded() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """Fresh random weights at every call: two exports differ."""
    return ConvLinear().eval(), (torch.randn(1, 3, 8, 8),)


@dataclass(frozen=True)
class Written:
    pte: Path
    data_files: tuple[Path, ...] = ()


def write_programs(folder: Path) -> dict[str, Written]:
    """Portable, XNNPACK, external-data and mutable-buffer programs, written to ``folder``."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    torch.manual_seed(0)
    model, inputs = example()
    program = torch.export.export(model, inputs)
    written = {}
    portable = folder / "portable.pte"
    portable.write_bytes(to_edge_transform_and_lower(program).to_executorch().buffer)
    written["portable"] = Written(portable)
    xnnpack = folder / "xnnpack.pte"
    xnnpack.write_bytes(to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()]).to_executorch().buffer)
    written["xnnpack"] = Written(xnnpack)
    manager = to_edge_transform_and_lower(program).to_executorch(ExecutorchBackendConfig(external_constants=True))
    external = folder / "external" / "external.pte"
    external.parent.mkdir(exist_ok=True)
    external.write_bytes(manager.buffer)
    manager.write_tensor_data_to_file(str(external.parent))
    written["external"] = Written(external, tuple(sorted(external.parent.glob("*.ptd"))))
    counter = torch.export.export(Counter(), (torch.randn(2, 4),))
    mutable = folder / "mutable.pte"
    mutable.write_bytes(to_edge_transform_and_lower(counter).to_executorch().buffer)
    written["mutable"] = Written(mutable)
    return written
