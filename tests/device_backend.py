"""A test backend that holds device constants on purpose, as ExecuTorch's CUDA backend does.

``HostCopyBackend``'s preprocess reads constants correctly whatever their device: like the
AOTInductor backends, which move the program to the device they compile for, it moves the
program to the host (``move_to_device_pass``) and then compiles it with XNNPACK. Its
partitioner takes what XNNPACK's takes, under its own backend id.

The runtime knows no backend of that name, so :func:`runnable` renames the lowered modules
to ``XnnpackBackend``, whose blob they hold, before ``to_executorch()``.
"""

from __future__ import annotations

from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.backends.xnnpack.xnnpack_preprocess import XnnpackBackend
from executorch.exir import EdgeProgramManager
from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from executorch.exir.backend.compile_spec_schema import CompileSpec
from executorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult
from executorch.exir.lowered_backend_module import LoweredBackendModule
from torch.export import ExportedProgram
from torch.export.passes import move_to_device_pass

BACKEND_ID = "HostCopyBackend"


class HostCopyBackend(BackendDetails):
    @staticmethod
    def preprocess(edge_program: ExportedProgram, compile_specs: list[CompileSpec]) -> PreprocessResult:
        return XnnpackBackend.preprocess(move_to_device_pass(edge_program, "cpu"), compile_specs)


class HostCopyPartitioner(Partitioner):
    """XNNPACK's partitioning, tagged for :class:`HostCopyBackend`."""

    def __init__(self) -> None:
        super().__init__()
        self.xnnpack = XnnpackPartitioner()
        self.delegation_spec = DelegationSpec(BACKEND_ID, [])

    def partition(self, exported_program: ExportedProgram) -> PartitionResult:
        result = self.xnnpack.partition(exported_program)
        return PartitionResult(
            result.tagged_exported_program, dict.fromkeys(result.partition_tags, self.delegation_spec)
        )

    def ops_to_not_decompose(self, ep: ExportedProgram):
        return self.xnnpack.ops_to_not_decompose(ep)


def runnable(edge: EdgeProgramManager) -> EdgeProgramManager:
    """``edge`` with each HostCopyBackend module named for the runtime's XNNPACK backend."""
    for name in edge.methods:
        for module in edge.exported_program(name).graph_module.modules():
            if isinstance(module, LoweredBackendModule) and module.backend_id == BACKEND_ID:
                module._backend_id = "XnnpackBackend"
    return edge
