"""What the placement guard says: the error that lists every misplaced constant, the fixes for
each stage, and the ``EG103`` finding for each constant the copy policy copies."""

from __future__ import annotations

from export_guards.analysis.source import node_site
from export_guards.analysis.storage import describe, first_user, unreadable_constants
from export_guards.errors import ConstantPlacementError
from export_guards.report import Finding, Report
from export_guards.ruleset import CATALOG, Hit, finding
from torch.export import ExportedProgram

__all__ = ["FIX", "FIX_BACKEND", "FIX_EMITTER", "copy_findings", "placement_error"]


FIX = (
    "move the model to the CPU before torch.export, or copy the constants to the host "
    "(guard_constant_placement(program, policy='copy'), or lower_with_guards(..., placement='copy'))"
)
"""The fix for a device constant that a host reader will read."""
FIX_BACKEND = (
    FIX + ", or, if {backend} reads device memory itself, declare it: "
    "guard_partitioners(partitioners, device_backends=DEVICE_BACKENDS + ('{backend}',))"
)
"""The fix when a backend's preprocess would read it; format with ``backend``."""
FIX_EMITTER = (
    FIX + ", or have to_executorch copy them: guard_partitioners(..., emitter='copy') with "
    "to_executorch(ExecutorchBackendConfig(passes=emit_passes('copy')))"
)
"""The fix when the emitter would read it."""


def copy_findings(method: str | None, ep: ExportedProgram) -> Report:
    """One ``EG103`` finding for each constant of ``ep`` in device memory, which the copy
    policy copies to the host."""
    copies = [
        finding(
            CATALOG["EG103"],
            Hit(f"copied {describe(constant)} from {constant.tensor.device} to host memory", first_user(constant.node), constant.fqn),
            method=method,
            locate=node_site,
        )
        for constant, problem in unreadable_constants(method, ep)
        if problem.on_device
    ]
    return Report.of(copies)


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
