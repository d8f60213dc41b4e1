"""What the placement guard says: the error that lists every misplaced constant, and the fixes
for each stage."""

from __future__ import annotations

from export_guards.errors import ConstantPlacementError
from export_guards.report import Finding, Report

__all__ = ["FIX", "FIX_BACKEND", "FIX_EMITTER", "placement_error"]


FIX = (
    "move the model to the CPU before torch.export, or copy the constants to the host "
    "(guard_constant_placement(program, policy='copy'), or lower_with_guards(..., config=Settings(placement='copy')))"
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


def placement_error(report: Report) -> ConstantPlacementError:
    """The error for ``report``'s misplaced constants: one line per constant (its node,
    method and source line), then each distinct fix."""
    return ConstantPlacementError(_message(report.errors), report)


def _message(errors: tuple[Finding, ...]) -> str:
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
    fixes = list(dict.fromkeys(f.fix for f in errors if f.fix))
    lines.extend(f"Fix: {fix}." for fix in fixes)
    return "\n".join(lines)
