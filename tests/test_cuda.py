"""The upstream CUDA-backend reproducer, three ways, on a real GPU (skipped elsewhere).

ExecuTorch's CUDA backend (``CudaPartitioner``, AOTInductor) holds device constants on
purpose: ``to_edge_transform_and_lower(export(cuda_model, (cuda_input,)),
partitioner=[CudaPartitioner([])]).to_executorch()`` works upstream. With the guards it must
still work, with the same bytes; XNNPACK on the same program must stop with the guard's
error; and the copy policy must give a program that runs on the host and matches eager.
"""

from __future__ import annotations

import pytest
import torch
from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower
from executorch.runtime import Runtime
from torch import nn

import export_guards as eg

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(
        not torch.cuda.is_available(),
        reason="needs a CUDA GPU: ExecuTorch's CUDA backend compiles with AOTInductor on the device",
    ),
]


class Reproducer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.head = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.conv(x)).mean(dim=(2, 3)))


def reproducer() -> tuple[nn.Module, torch.Tensor, torch.export.ExportedProgram]:
    torch.manual_seed(0)
    model = Reproducer().eval().cuda()
    x = torch.randn(1, 3, 32, 32, device="cuda")
    return model, x, torch.export.export(model, (x,))


def cuda_pte(program: torch.export.ExportedProgram, *, guarded: bool) -> bytes:
    from executorch.backends.cuda.cuda_partitioner import CudaPartitioner

    if not guarded:
        return to_edge_transform_and_lower(program, partitioner=[CudaPartitioner([])]).to_executorch().buffer
    partitioner = eg.guard_partitioners([CudaPartitioner([])])
    edge = to_edge_transform_and_lower(
        program, transform_passes=eg.guard_passes(partitioner=partitioner), partitioner=partitioner
    )
    return edge.to_executorch(ExecutorchBackendConfig(passes=eg.emit_passes())).buffer


def test_cuda_backend_with_the_guards_succeeds_with_the_same_bytes() -> None:
    _, _, program = reproducer()
    stock, guarded, stock_again = (
        cuda_pte(program, guarded=False),
        cuda_pte(program, guarded=True),
        cuda_pte(program, guarded=False),
    )
    assert guarded, "the guarded export produced a program"
    if stock == stock_again:  # AOTInductor's output is reproducible here: the guards change nothing
        assert guarded == stock
    else:  # it is not: the guards must at least not change the program's size
        assert abs(len(guarded) - len(stock)) <= abs(len(stock_again) - len(stock))
    guarded_export = eg.lower_with_guards(program, config=eg.Settings(backend="cuda"))
    assert guarded_export.edge is not None, guarded_export.report


def test_cuda_model_with_xnnpack_is_stopped_with_the_guard_error() -> None:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    _, _, program = reproducer()
    partitioner = eg.guard_partitioners([XnnpackPartitioner()])
    with pytest.raises(eg.ConstantPlacementError, match="is on cuda:0") as raised:
        to_edge_transform_and_lower(
            program, transform_passes=eg.guard_passes(partitioner=partitioner), partitioner=partitioner
        )
    assert {f.constant for f in raised.value.report.errors} == {"conv.weight", "conv.bias", "head.weight", "head.bias"}


def test_cuda_model_with_the_copy_policy_runs_and_matches_eager() -> None:
    model, x, program = reproducer()
    guarded = eg.lower_with_guards(program, config=eg.Settings(backend="xnnpack", placement="copy"))
    outputs = Runtime.get().load_program(guarded.to_pte()).load_method("forward").execute([x.cpu()])
    with torch.no_grad():
        torch.testing.assert_close(outputs[0], model(x).cpu(), rtol=1e-4, atol=1e-4)


def attention_program(device: str) -> torch.export.ExportedProgram:
    """4-D attention in float32, where decomposing it on CUDA picks a fused kernel
    (``_scaled_dot_product_efficient_attention``) and on the CPU its flash path."""
    torch.manual_seed(0)
    attention = nn.MultiheadAttention(16, 2, batch_first=True).eval().to(device)
    x = torch.randn(1, 5, 16, device=device)
    with torch.no_grad():
        return torch.export.export(attention, (x, x, x), {"need_weights": False})


def test_cuda_attention_copied_before_decomposition_is_the_cpu_export() -> None:
    """The guarded partitioners handed the copy copy before ExecuTorch decomposes, so the
    attention decomposes as on the CPU: the CPU export's bytes. A copy made after decomposing
    could not undo the fused CUDA kernel (docs/placement.md)."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    def lowered(program: torch.export.ExportedProgram) -> bytes:
        partitioner = eg.guard_partitioners([XnnpackPartitioner()])
        passes = eg.guard_passes(partitioner=partitioner, config=eg.Settings(placement="copy"))
        edge = to_edge_transform_and_lower(program, transform_passes=passes, partitioner=partitioner)
        return edge.to_executorch(ExecutorchBackendConfig(passes=eg.emit_passes())).buffer

    assert lowered(attention_program("cuda")) == lowered(attention_program("cpu"))
    assert (
        eg.lower_with_guards(attention_program("cuda"), config=eg.Settings(placement="copy")).to_pte()
        == eg.lower_with_guards(attention_program("cpu")).to_pte()
    )
