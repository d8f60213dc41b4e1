"""The placement guard on a whole program: every constant must sit in host memory before
anything reads it there.

What the host cannot read is a fact of ``analysis.storage``, reported by the lint's rules EG101
and EG102; this guard raises one error that names every such constant or, by policy, replaces
the program by its host twin (``host_copy``), with an EG103 finding for each copy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar, get_args

from executorch.exir import EdgeProgramManager
from executorch.exir.pass_base import ExportedProgramPassBase
from torch.export import ExportedProgram

from export_guards.analysis.programs import Program, methods_of
from export_guards.linter import lint, lint_method
from export_guards.linter.rules.placement import PLACEMENT_RULES, constant_on_device
from export_guards.passes.placement.host_copy import host_twin
from export_guards.passes.placement.messages import copy_findings, placement_error
from export_guards.passes.result import GuardPassResult
from export_guards.report import Report
from export_guards.ruleset import RuleSet
from export_guards.settings import PlacementPolicy

__all__ = ["ConstantPlacementPass", "check_constant_placement", "check_policy", "guard_constant_placement"]

P = TypeVar("P", ExportedProgram, Mapping[str, ExportedProgram], EdgeProgramManager)


def check_constant_placement(program: Program) -> Report:
    """Report every constant of ``program`` that cannot be read from host memory.

    Never raises for a misplaced constant: each one becomes an ``EG101`` (non-CPU device) or
    ``EG102`` (no data) error finding naming the constant, its kind, shape, dtype, device and
    size, the node that uses it and the user's source line. Zero-size tensors are fine.

    Args:
        program: an ``ExportedProgram`` (ATen or edge dialect), a dict of method name to
            ``ExportedProgram``, or an ``EdgeProgramManager``.

    Raises:
        TypeError: ``program`` is none of those forms.
    """
    return lint(program, rules=PLACEMENT_RULES)


def guard_constant_placement(program: P, policy: PlacementPolicy = "error") -> P:
    """Return ``program`` with every constant in host memory, or raise.

    Use it on the torch.export program, on an edge program, or on an ``EdgeProgramManager``
    right before ``to_executorch()``. The caller's program, model and tensors are never
    modified.

    Args:
        program: an ``ExportedProgram``, a dict of method name to ``ExportedProgram``, or an
            ``EdgeProgramManager``. The result has the same form (the same object when
            nothing had to change).
        policy: ``"error"`` raises on any misplaced constant. ``"copy"`` returns the host
            twin of each method that needs one: its constants (and example inputs and device
            arguments) on the CPU, and every node's metadata recomputed there, so that its
            ``.pte`` is byte-identical to exporting the same weights from the CPU, at any
            dialect. Each constant is copied to the host once, one at a time.

    Raises:
        ConstantPlacementError: a constant is not in host memory and ``policy`` is
            ``"error"``, or a constant has no data (either policy). It lists every offending
            constant of every method.
        TypeError: ``program`` is none of the accepted forms.
        ValueError: ``policy`` is not ``"error"`` or ``"copy"``.
    """
    check_policy(policy)
    report = check_constant_placement(program)
    if not report.errors:
        return program
    _raise_unless_copyable(report, policy)
    methods = methods_of(program)
    moving = {f.method for f in report.errors}
    if isinstance(program, EdgeProgramManager):
        return program.transform({name: [ConstantPlacementPass("copy", method=name)] for name in moving})  # type: ignore[return-value]
    moved = {name: host_twin(name, ep) if name in moving else ep for name, ep in methods.items()}
    if isinstance(program, ExportedProgram):
        return moved["forward"]  # type: ignore[return-value]
    return moved  # type: ignore[return-value]


class ConstantPlacementPass(ExportedProgramPassBase):
    """The placement guard as an ExecuTorch pass over one ``ExportedProgram``.

    Put it in ``to_edge_transform_and_lower(..., transform_passes=[ConstantPlacementPass()])``
    to stop a misplaced constant before a partitioner's preprocess reads it, or call it on a
    program: ``ConstantPlacementPass("copy")(ep).exported_program``. ExecuTorch's pass manager
    re-raises a pass's error as a plain ``Exception`` naming the pass; the
    ``ConstantPlacementError`` is its ``__cause__``.

    Args:
        policy: ``"error"`` or ``"copy"``, as for :func:`guard_constant_placement`.
        method: the method name to put in findings, when known.
        defer_device_constants: leave constants in device memory (EG101) to the partitioners
            of :func:`~export_guards.guard_partitioners`, which see, once each partitioner
            has decided, whether a backend that handles device memory itself (the CUDA
            backend) or a host reader will read them. Constants without data (EG102) are an
            error either way.

    The pass never modifies its input (``changes_input`` is ``False``) and keeps nothing
    between calls: the result's ``report`` holds the ``EG103`` copies of that call.
    """

    changes_input = False
    """The input program is never modified: a copy is a new program."""

    def __init__(
        self, policy: PlacementPolicy = "error", method: str | None = None, *, defer_device_constants: bool = False
    ) -> None:
        check_policy(policy)
        self.policy: PlacementPolicy = policy
        self.method = method
        self.defer_device_constants = defer_device_constants

    def call(self, exported_program: ExportedProgram) -> GuardPassResult:
        deferring = self.defer_device_constants and self.policy == "error"
        rules = PLACEMENT_RULES.without(RuleSet.of(constant_on_device)) if deferring else PLACEMENT_RULES
        report = lint_method(exported_program, self.method, rules=rules)
        if not report.errors:
            return GuardPassResult(exported_program, False)
        _raise_unless_copyable(report, self.policy)
        return GuardPassResult(host_twin(self.method, exported_program), True, copy_findings(self.method, exported_program))


def check_policy(policy: str) -> None:
    """Raise ``ValueError`` unless ``policy`` is a placement policy."""
    if policy not in get_args(PlacementPolicy):
        raise ValueError(f"placement policy must be 'error' or 'copy', not {policy!r}")


def _raise_unless_copyable(report: Report, policy: PlacementPolicy) -> None:
    if policy != "copy" or any(f.code == "EG102" for f in report.errors):
        raise placement_error(report)
