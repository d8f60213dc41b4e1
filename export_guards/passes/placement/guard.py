"""The placement guard on a whole program: every constant must sit in host memory before
anything reads it there.

What the host cannot read is a fact of ``analysis.storage``; what to do about it is each
method's placement plan (``plan.py``): this guard raises one error that names every constant
that stops the export or, by policy, replaces the program by its host twin (``host_copy``),
with an EG103 finding for each copy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from executorch.exir import EdgeProgramManager
from executorch.exir.pass_base import ExportedProgramPassBase
from torch.export import ExportedProgram

from export_guards.analysis.programs import Program, methods_of
from export_guards.errors import ConstantPlacementError
from export_guards.internals import name_pass, unname_pass
from export_guards.passes.placement.messages import placement_error
from export_guards.passes.placement.plan import check_policy, plan_placement
from export_guards.passes.result import GuardPassResult
from export_guards.report import Report
from export_guards.settings import PlacementPolicy

__all__ = ["ConstantPlacementPass", "check_constant_placement", "guard_constant_placement"]

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
    return sum((plan_placement(name, ep).findings() for name, ep in methods_of(program).items()), Report())


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
    methods = methods_of(program)
    plans = {name: plan_placement(name, ep, policy) for name, ep in methods.items()}
    stops = sum((plan.stops for plan in plans.values()), Report())
    if stops:
        raise placement_error(stops)
    moving = [name for name, plan in plans.items() if plan.to_copy]
    if not moving:
        return program
    if isinstance(program, EdgeProgramManager):  # its transform keeps the manager's other state
        return program.transform({name: [ConstantPlacementPass("copy", method=name)] for name in moving})
    moved = {name: plans[name].carried_out(ep).exported_program for name, ep in methods.items()}
    if isinstance(program, ExportedProgram):
        return moved["forward"]
    return moved


class ConstantPlacementPass(ExportedProgramPassBase):
    """The placement guard as an ExecuTorch pass over one ``ExportedProgram``.

    Hand it to ``to_edge_transform_and_lower(..., transform_passes=...)`` in a
    :class:`~export_guards.passes.GuardPasses` (``guard_passes(config=Settings(fold=False))`` is one holding it alone)
    to stop a misplaced constant before a partitioner's preprocess reads it: its
    ``ConstantPlacementError`` reaches the caller as raised. In a plain list, ExecuTorch's pass
    manager re-raises it as a bare ``Exception`` naming the pass by its class's name, which a
    call that stops names after each constant and its device (until the next call); the
    ``ConstantPlacementError`` is that exception's ``__cause__``. Or call it on a program:
    ``ConstantPlacementPass("copy")(ep).exported_program``.

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
        unname_pass(self)  # a failed call's name is not kept
        plan = plan_placement(
            self.method, exported_program, self.policy, defer_device_constants=self.defer_device_constants
        )
        try:
            return plan.carried_out(exported_program)
        except ConstantPlacementError as error:
            # In a plain transform_passes list, ExecuTorch's pass manager re-raises this as a
            # bare Exception whose message names the pass by its class's name, and nothing
            # else: this call's class is named after the constants, so that that line names
            # each one and its device too.
            name_pass(self, _named_after(type(self).__name__, error.report))
            raise


def _named_after(name: str, stops: Report) -> str:
    """The pass's name ``name``, followed by ``stops``' constants, each with why the host
    cannot read it (its device)."""
    listed = "; ".join(f"{f.code} {f.message}" for f in stops.errors)
    return f"{name}, which stopped {len(stops.errors)} constant{'s' * (len(stops.errors) != 1)}: {listed}"
