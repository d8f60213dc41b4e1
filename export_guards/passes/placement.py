"""The placement guard: every constant must sit in host memory before anything reads it there.

What the host cannot read is a fact of ``analysis.storage``, reported by the lint's rules EG101
and EG102; this guard raises one error that names every such constant or, by policy, copies
the program's constants to the host (EG103 for each).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar, get_args

from executorch.exir import EdgeProgramManager
from executorch.exir.pass_base import ExportedProgramPassBase
from torch.export import ExportedProgram
from torch.export.experimental import _copy_graph_module_and_signature
from torch.export.passes import move_to_device_pass

from export_guards.analysis.programs import Program, methods_of
from export_guards.analysis.source import node_site
from export_guards.analysis.storage import describe, first_user, unreadable_constants
from export_guards.errors import ConstantPlacementError
from export_guards.linter import lint, lint_method
from export_guards.linter.rules.placement import (
    CONSTANT_ON_DEVICE,
    CONSTANT_WITHOUT_DATA,
    PLACEMENT_RULES,
    constant_on_device,
)
from export_guards.passes.result import GuardPassResult
from export_guards.report import Finding, Report
from export_guards.ruleset import CATALOG, Hit, RuleSet, finding
from export_guards.settings import PlacementPolicy

__all__ = [
    "CONSTANT_COPIED",
    "CONSTANT_ON_DEVICE",
    "CONSTANT_WITHOUT_DATA",
    "ConstantPlacementPass",
    "PlacementPolicy",
    "check_constant_placement",
    "check_policy",
    "copy_findings",
    "guard_constant_placement",
    "placement_error",
]

CONSTANT_COPIED = "EG103"
"""Rule code (info): the ``"copy"`` policy copied a constant to host memory."""

_FIX_AFTER_EDGE = (
    "the 'copy' policy is exact only on the torch.export program: ops traced on the device "
    "keep device-specific shapes after to_edge. Apply guard_constant_placement(exported_program, "
    "policy='copy') before to_edge / to_edge_transform_and_lower, or move the model to the "
    "CPU before torch.export"
)

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

    Use it on the torch.export program before ``to_edge`` / ``to_edge_transform_and_lower``
    (the only place where ``"copy"`` can be exact), or on an ``EdgeProgramManager`` right
    before ``to_executorch()``. The caller's program, model and tensors are never modified.

    Args:
        program: an ``ExportedProgram``, a dict of method name to ``ExportedProgram``, or an
            ``EdgeProgramManager``. The result has the same form (the same object when
            nothing had to change).
        policy: ``"error"`` raises on any misplaced constant. ``"copy"`` returns a new
            program whose constants (and example inputs and device arguments) are on the CPU,
            built with ``torch.export.passes.move_to_device_pass``; its ``.pte`` is
            byte-identical to exporting the same weights from the CPU. Only the methods that
            need it are copied, one constant at a time.

    Raises:
        ConstantPlacementError: a constant is not in host memory and ``policy`` is
            ``"error"``; a constant has no data (either policy); or ``"copy"`` was asked of
            an edge-dialect program. It lists every offending constant of every method.
        TypeError: ``program`` is none of the accepted forms.
        ValueError: ``policy`` is not ``"error"`` or ``"copy"``.
    """
    check_policy(policy)
    methods = methods_of(program)
    report = check_constant_placement(program)
    if not report.errors:
        return program
    _raise_unless_copyable(report, policy, methods)
    moved = {name: ConstantPlacementPass(policy, method=name)(ep).exported_program for name, ep in methods.items()}
    if isinstance(program, ExportedProgram):
        return moved["forward"]  # type: ignore[return-value]
    return moved  # type: ignore[return-value]


class ConstantPlacementPass(ExportedProgramPassBase):
    """The placement guard as an ExecuTorch pass over one ``ExportedProgram``.

    Put it in ``to_edge_transform_and_lower(..., transform_passes=[ConstantPlacementPass()])``
    to stop a misplaced constant before a partitioner's preprocess reads it, or call it on a
    torch.export program: ``ConstantPlacementPass("copy")(ep).exported_program``.

    Inside ``transform_passes`` the program is already in edge dialect, so ``"copy"`` cannot
    be exact there: the pass raises, advising to apply the guard before ``to_edge``.
    ExecuTorch's pass manager re-raises a pass's error as a plain ``Exception`` naming the
    pass; the ``ConstantPlacementError`` is its ``__cause__``.

    Args:
        policy: ``"error"`` or ``"copy"``, as for :func:`guard_constant_placement`.
        method: the method name to put in findings, when known.
        defer_device_constants: leave constants in device memory (EG101) to the partitioners
            of :func:`~export_guards.guard_partitioners`, which see, once each partitioner
            has decided, whether a backend that handles device memory itself (the CUDA
            backend) or a host reader will read them. Constants without data (EG102) are an
            error either way.

    The pass never modifies its input, and keeps nothing between calls: the result's
    ``report`` holds the ``EG103`` copies of that call.
    """

    def __init__(
        self, policy: PlacementPolicy = "error", method: str | None = None, *, defer_device_constants: bool = False
    ) -> None:
        check_policy(policy)
        self.policy: PlacementPolicy = policy
        self.method = method
        self.defer_device_constants = defer_device_constants

    def call(self, exported_program: ExportedProgram) -> GuardPassResult:
        rules = PLACEMENT_RULES.without(RuleSet.of(constant_on_device)) if self.defer_device_constants else PLACEMENT_RULES
        report = lint_method(exported_program, self.method, rules=rules)
        if not report.errors:
            return GuardPassResult(exported_program, False)
        _raise_unless_copyable(report, self.policy, {self.method: exported_program})
        moved = _copied_to_host(self.method, exported_program)
        return GuardPassResult(moved, True, copy_findings(self.method, exported_program))


def copy_findings(method: str | None, ep: ExportedProgram) -> Report:
    """One ``EG103`` finding for each constant of ``ep`` in device memory, which the copy
    policy copies to the host."""
    copies = [
        finding(
            CATALOG[CONSTANT_COPIED],
            Hit(f"copied {describe(constant)} from {constant.tensor.device} to host memory", first_user(constant.node), constant.fqn),
            method=method,
            locate=node_site,
        )
        for constant, problem in unreadable_constants(method, ep)
        if problem.on_device
    ]
    return Report.of(copies)


def check_policy(policy: str) -> None:
    """Raise ``ValueError`` unless ``policy`` is a placement policy."""
    if policy not in get_args(PlacementPolicy):
        raise ValueError(f"placement policy must be 'error' or 'copy', not {policy!r}")


def _raise_unless_copyable(report: Report, policy: PlacementPolicy, methods: Mapping[str | None, ExportedProgram]) -> None:
    errors = report.errors
    if policy == "copy" and not any(f.code == CONSTANT_WITHOUT_DATA for f in errors):
        if not any(methods[f.method].dialect == "EDGE" for f in errors):
            return
        raise placement_error(report, advice=_FIX_AFTER_EDGE)
    raise placement_error(report)


def placement_error(report: Report, advice: str | None = None) -> ConstantPlacementError:
    """The error for ``report``'s misplaced constants: one line per constant (its node,
    method and source line), then ``advice`` or each finding's fix."""
    return ConstantPlacementError(_message(report.errors, advice), report)


def _message(errors: tuple[Finding, ...], advice: str | None) -> str:
    count = f"{len(errors)} constant{'s' if len(errors) != 1 else ''}"
    lines = [
        f"{count} cannot be read from host memory. The ExecuTorch emitter and delegates such "
        "as XNNPACK read every constant's bytes through a host pointer; reading these would "
        "crash the process (SIGSEGV) or fail with a NULL pointer access."
    ]
    for found in errors:
        where = f"node '{found.node}'"
        if found.method:
            where += f" of method '{found.method}'"
        if found.location:
            where += f" at {found.location}"
        lines.append(f"  {found.code} {found.message}; used by {where}")
        if found.location and found.location.code:
            lines.append(f"      {found.location.code}")
    fixes = [advice] if advice else list(dict.fromkeys(f.fix for f in errors if f.fix))
    lines.extend(f"Fix: {fix}." for fix in fixes)
    return "\n".join(lines)


def _copied_to_host(method: str | None, ep: ExportedProgram) -> ExportedProgram:
    """A copy of ``ep`` moved to the CPU, holding one host copy of its constants.

    ``move_to_device_pass`` edits the program it is given, so it gets a new program: a copy
    of the graph and signature (torch's own helper, which keeps placeholder names such as
    ``input`` that a plain deepcopy renames) and new dicts over the *same* constant tensors.
    The device tensors are never duplicated; each is copied to the host once, one at a time.
    """
    graph_module, signature = _copy_graph_module_and_signature(ep)
    program = ep._update(graph_module, signature, state_dict=dict(ep.state_dict), constants=dict(ep.constants))
    moved = move_to_device_pass(program, "cpu")
    left = lint_method(moved, method, rules=PLACEMENT_RULES)
    if left:  # e.g. a tensor held as a graph attribute, which the library pass does not move
        raise placement_error(left, advice=CATALOG[CONSTANT_ON_DEVICE].fix)
    return moved
