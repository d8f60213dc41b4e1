"""The placement guard: every constant must sit in host memory before anything reads it there.

ExecuTorch's emitter (``_tensor_spec_to_evalue``) and XNNPACK's preprocess
(``get_serialized_buffer_index``) read each constant's bytes through a raw host pointer. A
constant in device memory makes that read a segmentation fault; one without storage (meta,
fake) a NULL-pointer error. This guard finds every such constant first and either raises one
error that names them all or, by policy, copies the program's constants to the host.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, TypeVar, get_args

import torch
from executorch.exir import EdgeProgramManager
from executorch.exir.pass_base import ExportedProgramPassBase, ExportedProgramPassResult
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import is_traceable_wrapper_subclass
from torch.export import ExportedProgram
from torch.export.experimental import _copy_graph_module_and_signature
from torch.export.passes import move_to_device_pass

from export_guards.errors import ConstantPlacementError
from export_guards.programs import Program, ProgramConstant, iter_constants, methods_of
from export_guards.report import Finding, Report, Severity
from export_guards.source import node_location

__all__ = [
    "CONSTANT_COPIED",
    "CONSTANT_ON_DEVICE",
    "CONSTANT_WITHOUT_DATA",
    "ConstantPlacementPass",
    "PlacementPolicy",
    "check_constant_placement",
    "guard_constant_placement",
]

PlacementPolicy = Literal["error", "copy"]
"""``"error"`` raises on a misplaced constant; ``"copy"`` copies constants to the host."""

CONSTANT_ON_DEVICE = "EG101"
"""Rule code: a constant lives in non-CPU (device) memory."""
CONSTANT_WITHOUT_DATA = "EG102"
"""Rule code: a constant has no storage to read (meta, fake, or a null data pointer)."""
CONSTANT_COPIED = "EG103"
"""Rule code (info): the ``"copy"`` policy copied a constant to host memory."""

FIX_DEVICE = (
    "move the model and its example inputs to the CPU before torch.export "
    "(model.to('cpu')), or apply guard_constant_placement(exported_program, policy='copy') "
    "to the torch.export program before to_edge / to_edge_transform_and_lower"
)
FIX_NO_DATA = (
    "give the constant real data before export: load the weights (for example "
    "model.load_state_dict(state_dict, assign=True)) or materialise the module with "
    "module.to_empty(device='cpu') and initialise it; a meta or fake tensor has no bytes to "
    "write into the program, and copying cannot create them"
)
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
    return Report.of(
        _error_finding(*problem)
        for method, ep in methods_of(program).items()
        for problem in _problems(method, ep)
    )


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
    _check_policy(policy)
    methods = methods_of(program)
    report = check_constant_placement(program)
    if not report.errors:
        return program
    _raise_unless_copyable(report, policy, methods)
    moved = {
        name: ConstantPlacementPass(policy, method=name)(ep).exported_program
        for name, ep in methods.items()
    }
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

    The pass never modifies its input. ``report`` accumulates the ``EG103`` copies of every
    program the pass ran on.
    """

    def __init__(self, policy: PlacementPolicy = "error", method: str | None = None) -> None:
        _check_policy(policy)
        self.policy: PlacementPolicy = policy
        self.method = method
        self.report = Report()

    def call(self, exported_program: ExportedProgram) -> ExportedProgramPassResult:
        problems = _problems(self.method, exported_program)
        if not problems:
            return ExportedProgramPassResult(exported_program, False)
        _raise_unless_copyable(
            Report.of(_error_finding(*p) for p in problems),
            self.policy,
            {self.method: exported_program},
        )
        moved = _copied_to_host(self.method, exported_program)
        self.report += Report.of(_copy_finding(constant) for constant, _, _ in problems)
        return ExportedProgramPassResult(moved, True)


def _check_policy(policy: str) -> None:
    if policy not in get_args(PlacementPolicy):
        raise ValueError(f"placement policy must be 'error' or 'copy', not {policy!r}")


def storage_problem(tensor: torch.Tensor) -> tuple[str, str] | None:
    """``(code, why)`` if the host cannot read ``tensor``'s bytes; ``None`` if it can.
    (Shared with the lint's placement rules.)"""
    if tensor.numel() == 0:
        return None
    if is_traceable_wrapper_subclass(tensor):  # torchao's quantized weights: their inner tensors hold the bytes
        inner_names, _ = tensor.__tensor_flatten__()
        inner = (getattr(tensor, name) for name in inner_names)
        return next((p for t in inner if isinstance(t, torch.Tensor) and (p := storage_problem(t))), None)
    if isinstance(tensor, FakeTensor):
        return CONSTANT_WITHOUT_DATA, f"is a fake tensor (device {tensor.device}) with no data"
    if tensor.device.type == "meta":
        return CONSTANT_WITHOUT_DATA, "is on the meta device and has no data"
    if tensor.device.type != "cpu":
        return CONSTANT_ON_DEVICE, f"is on {tensor.device}, not in host (CPU) memory"
    try:
        pointer = tensor.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError) as error:
        return CONSTANT_WITHOUT_DATA, f"has no readable storage ({error})"
    if pointer == 0:
        return CONSTANT_WITHOUT_DATA, "has a null data pointer"
    return None


def _problems(method: str | None, ep: ExportedProgram) -> list[tuple[ProgramConstant, str, str]]:
    """``(constant, code, why)`` for each constant of ``ep`` that the host cannot read."""
    return [
        (constant, *problem)
        for constant in iter_constants(method, ep)
        if (problem := storage_problem(constant.tensor))
    ]


def _error_finding(constant: ProgramConstant, code: str, why: str) -> Finding:
    fix = FIX_DEVICE if code == CONSTANT_ON_DEVICE else FIX_NO_DATA
    return _finding(constant, code, Severity.ERROR, f"{describe(constant)} {why}", fix)


def _copy_finding(constant: ProgramConstant) -> Finding:
    message = f"copied {describe(constant)} from {constant.tensor.device} to host memory"
    return _finding(constant, CONSTANT_COPIED, Severity.INFO, message, None)


def _finding(
    constant: ProgramConstant, code: str, severity: Severity, message: str, fix: str | None
) -> Finding:
    user = first_user(constant.node)
    return Finding(
        code=code,
        severity=severity,
        message=message,
        method=constant.method,
        node=user.name,
        constant=constant.fqn,
        location=node_location(user),
        fix=fix,
    )


def describe(constant: ProgramConstant) -> str:
    tensor = constant.tensor
    dtype = str(tensor.dtype).removeprefix("torch.")
    return (
        f"{constant.kind.value} '{constant.fqn}' ({dtype}{list(tensor.shape)}, "
        f"{tensor.nbytes:,} bytes)"
    )


def first_user(node: torch.fx.Node) -> torch.fx.Node:
    """The node to point the user at: the first user with a stack trace, else ``node``."""
    traced = [user for user in node.users if user.meta.get("stack_trace")]
    return traced[0] if traced else next(iter(node.users), node)


def _raise_unless_copyable(
    report: Report, policy: PlacementPolicy, methods: Mapping[str | None, ExportedProgram]
) -> None:
    errors = report.errors
    if policy == "copy" and not any(f.code == CONSTANT_WITHOUT_DATA for f in errors):
        if not any(methods[f.method].dialect == "EDGE" for f in errors):
            return
        raise ConstantPlacementError(_message(errors, advice=_FIX_AFTER_EDGE), report)
    raise ConstantPlacementError(_message(errors, advice=None), report)


def _message(errors: tuple[Finding, ...], advice: str | None) -> str:
    count = f"{len(errors)} constant{'s' if len(errors) != 1 else ''}"
    lines = [
        f"{count} cannot be read from host memory. The ExecuTorch emitter and delegates such "
        "as XNNPACK read every constant's bytes through a host pointer; reading these would "
        "crash the process (SIGSEGV) or fail with a NULL pointer access."
    ]
    for finding in errors:
        where = f"node '{finding.node}'"
        if finding.method:
            where += f" of method '{finding.method}'"
        if finding.location:
            where += f" at {finding.location}"
        lines.append(f"  {finding.code} {finding.message}; used by {where}")
        if finding.location and finding.location.code:
            lines.append(f"      {finding.location.code}")
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
    program = ep._update(
        graph_module, signature, state_dict=dict(ep.state_dict), constants=dict(ep.constants)
    )
    moved = move_to_device_pass(program, "cpu")
    left = Report.of(_error_finding(*p) for p in _problems(method, moved))
    if left:  # e.g. a tensor held as a graph attribute, which the library pass does not move
        raise ConstantPlacementError(_message(left.errors, advice=FIX_DEVICE), left)
    return moved
