"""The placement guard at emission: the last look at every constant the emitter will read.

``to_executorch()`` partitions nothing; it runs ``ExecutorchBackendConfig.passes``, then the
emitter copies each constant of each method's top-level program (parameters, buffers, lifted
constants, graph attributes: what partitioning left there, and what later passes added) from
host memory. Named data (what delegates store for the program or a ``.ptd``) is already bytes
by then: ``NamedDataStore.add_named_data`` turns a tensor into bytes when it is added, inside
the delegate's preprocess, which the partitioner guard covers.
"""

from __future__ import annotations

import sys

from executorch.exir import EdgeProgramManager
from torch.export import ExportedProgram
from torch.fx import GraphModule
from torch.fx.passes.infra.pass_base import PassBase

from export_guards.errors import GuardError
from export_guards.linter import lint, lint_method
from export_guards.linter.rules.placement import PLACEMENT_RULES
from export_guards.passes.placement.guard import check_policy
from export_guards.passes.placement.host_copy import host_constants, host_graph
from export_guards.passes.placement.messages import copy_findings, placement_error
from export_guards.passes.result import GuardGraphPassResult
from export_guards.report import Report
from export_guards.settings import PlacementPolicy

__all__ = ["EmitPlacementPass", "emit_passes"]


def emit_passes(policy: PlacementPolicy = "error") -> list[PassBase]:
    """The guard passes for ``to_executorch(ExecutorchBackendConfig(passes=emit_passes()))``.

    Right before emission, every constant the emitter will read, in every method, must be in
    host memory: ``"error"`` raises :class:`~export_guards.ConstantPlacementError` naming each
    one (its device, the node that uses it, the user's source line); ``"copy"`` emits the
    method's host twin instead: its ``.pte`` is the CPU export's, byte for byte.

    Raises:
        ValueError: ``policy`` is not ``"error"`` or ``"copy"``.
    """
    return [EmitPlacementPass(policy)]


class EmitPlacementPass(PassBase):
    """The placement guard as a pass of ``ExecutorchBackendConfig.passes``.

    ExecuTorch hands these passes one method's graph module, not its program, while the
    emitter reads the constants from that program; the pass finds it among the locals of its
    caller, ``to_executorch`` (the program whose graph module is being passed), and raises a
    ``GuardError`` when called anywhere else.

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

    def call(self, graph_module: GraphModule) -> GuardGraphPassResult:
        manager, method, program = _program_being_emitted(graph_module)
        report = lint_method(program, method, rules=PLACEMENT_RULES)
        if not report.errors:
            return GuardGraphPassResult(graph_module, False)
        if self.policy == "error" or any(f.code == "EG102" for f in report.errors):
            others = {name: manager.exported_program(name) for name in manager.methods if name != method} if manager else {}
            raise placement_error(report + lint(others, rules=PLACEMENT_RULES) if others else report)
        # The graph is twinned alone: to_executorch has made it non-functional (buffer
        # write-backs), which an ExportedProgram refuses. An earlier pass may have replaced it.
        copies, graph = copy_findings(method, program), host_graph(method, program, graph_module)
        program._state_dict, program._constants = host_constants(program)  # their setters refuse
        return GuardGraphPassResult(graph, True, copies)


def _program_being_emitted(graph_module: GraphModule) -> tuple[EdgeProgramManager | None, str | None, ExportedProgram]:
    """The program that ``to_executorch`` is emitting with ``graph_module``, the
    ``EdgeProgramManager`` emitting it, and its method name.

    It is the frame that holds ``graph_module`` and one ``ExportedProgram`` as locals; the
    method is the name under which that frame's ``EdgeProgramManager`` (``self``) keeps it.
    """
    frame = sys._getframe(1)
    while frame is not None:
        values = list(frame.f_locals.values())
        programs = [v for v in values if isinstance(v, ExportedProgram)]
        if len(programs) == 1 and any(v is graph_module for v in values):
            program = programs[0]
            manager = frame.f_locals.get("self")
            if not isinstance(manager, EdgeProgramManager):
                return None, None, program
            method = next((name for name in manager.methods if manager.exported_program(name) is program), None)
            return manager, method, program
        frame = frame.f_back
    raise GuardError(
        "EmitPlacementPass found no program being emitted: it runs only inside "
        "to_executorch(ExecutorchBackendConfig(passes=emit_passes())). To check a program "
        "yourself, use check_constant_placement(program)",
        Report(),
    )
