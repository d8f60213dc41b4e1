"""The placement guard at emission: the last look at every constant the emitter will read.

``to_executorch()`` partitions nothing; it runs ``ExecutorchBackendConfig.passes``, then the
emitter copies each constant of each method's top-level program (parameters, buffers, lifted
constants, graph attributes: what partitioning left there, and what later passes added) from
host memory. Named data (what delegates store for the program or a ``.ptd``) is already bytes
by then: ``NamedDataStore.add_named_data`` turns a tensor into bytes when it is added, inside
the delegate's preprocess, which the partitioner guard covers.
"""

from __future__ import annotations

import torch
from executorch.exir.passes.spec_prop_pass import SpecPropPass
from torch.export import ExportedProgram
from torch.fx import GraphModule
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from export_guards.errors import GuardError
from export_guards.internals import replace_constants_in_place
from export_guards.passes.control_flow import ControlFlowOutputsPass
from export_guards.passes.placement.host_copy import host_constants, host_graph
from export_guards.passes.placement.messages import placement_error
from export_guards.passes.placement.plan import EMITTER, check_policy, plan_placement
from export_guards.passes.quantized_ops import QuantizedKernelsPass
from export_guards.passes.result import GuardGraphPassResult
from export_guards.report import Report
from export_guards.settings import PlacementPolicy

__all__ = ["EmitPlacementPass", "EmittedProgram", "emit_passes"]


def emit_passes(policy: PlacementPolicy = "error") -> list[PassBase]:
    """The guard passes for ``to_executorch(ExecutorchBackendConfig(passes=emit_passes()))``.

    Right before emission, every constant the emitter will read must be in host memory:
    ``"error"`` raises :class:`~export_guards.ConstantPlacementError` naming each one of the
    method (its device, the node that uses it, the user's source line); ``"copy"`` emits the
    method's host twin instead: its ``.pte`` is the CPU export's, byte for byte.

    Four passes, in this order: :class:`EmittedProgram`, which ``to_executorch`` hands the
    program it is emitting, the :class:`EmitPlacementPass` that checks that program,
    :class:`~export_guards.passes.control_flow.ControlFlowOutputsPass`, which gives each
    ``torch.cond`` result that outlives its branch's memory bytes of its own (EG518; a program
    without one is left as it is), and
    :class:`~export_guards.passes.quantized_ops.QuantizedKernelsPass`, which registers
    ExecuTorch's quantized kernels where quantize ops are left outside the delegates (and stops,
    saying what works, on torchao's, which have no kernel).

    Raises:
        ValueError: ``policy`` is not ``"error"`` or ``"copy"``.
    """
    guard = EmitPlacementPass(policy)
    return [guard.emitted, guard, ControlFlowOutputsPass(), QuantizedKernelsPass()]


class EmittedProgram(SpecPropPass):
    """Receives the program that ``to_executorch`` is emitting, for the
    :class:`EmitPlacementPass` after it.

    ``ExecutorchBackendConfig.passes`` are handed one method's graph module; the emitter reads
    the constants from that method's program, which ``to_executorch`` may have replaced by
    then (its constant propagation makes a new one). ``to_executorch`` hands that program to
    every ``SpecPropPass`` among its passes, right after the pass ran
    (``update_placeholder_tensor_specs(program, graph_module)``, in executorch 1.4 and 1.5, as in 1.3):
    this pass is one only to be handed it. It leaves the graph module as it is.
    """

    def __init__(self) -> None:
        super().__init__()
        self.program: ExportedProgram | None = None

    def __call__(self, graph_module: torch.nn.Module) -> PassResult:
        return PassResult(graph_module, False)

    def update_placeholder_tensor_specs(self, exported_program: ExportedProgram, graph_module: GraphModule) -> None:
        self.program = exported_program

    def taken(self) -> ExportedProgram | None:
        """The program handed over since the last call, once."""
        program, self.program = self.program, None
        return program


class EmitPlacementPass(PassBase):
    """The placement guard as a pass of ``ExecutorchBackendConfig.passes``, after its
    :attr:`emitted` pass (:func:`emit_passes` lists both), which hands it the method's program.
    Called without that program (outside ``to_executorch``, or without the pass before it), it
    raises a ``GuardError`` instead of checking nothing.

    With ``"copy"``, the pass returns the graph module of the program's host twin, and that
    program (the edge program, which ``to_executorch`` rewrites in place anyway) takes the
    twin's constants: it changes its input (``changes_input`` is ``True``), as every pass of
    ``ExecutorchBackendConfig.passes`` may. The torch.export program, the model and the
    device tensors are untouched. The result's ``report`` holds one ``EG103`` finding per copy.

    Args:
        policy: ``"error"`` or ``"copy"``, as for :func:`emit_passes`.
    """

    changes_input = True
    """With ``"copy"``, the method's program takes the host twin's constants."""

    def __init__(self, policy: PlacementPolicy = "error") -> None:
        check_policy(policy)
        self.policy: PlacementPolicy = policy
        self.emitted = EmittedProgram()

    def call(self, graph_module: GraphModule) -> GuardGraphPassResult:
        program = self.emitted.taken()
        if program is None:
            raise GuardError(
                "EmitPlacementPass was handed no program being emitted: it runs only inside "
                "to_executorch(ExecutorchBackendConfig(passes=emit_passes())), after the pass that "
                "emit_passes() lists before it. To check a program yourself, use "
                "check_constant_placement(program)",
                Report(),
            )
        plan = plan_placement(None, program, self.policy, reader=EMITTER)
        if plan.stops:
            raise placement_error(plan.stops)
        if not plan.to_copy:
            return GuardGraphPassResult(graph_module, False)
        # The graph is twinned alone: to_executorch has made it non-functional (buffer
        # write-backs), which an ExportedProgram refuses. An earlier pass may have replaced it.
        copies, graph = plan.copies() + plan.kept_decompositions(graph_module), host_graph(graph_module, plan.to_copy)
        replace_constants_in_place(program, *host_constants(program))
        return GuardGraphPassResult(graph, True, copies)
