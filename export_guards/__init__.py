"""export-guards: safety passes for the PyTorch to ExecuTorch export pipeline."""

from __future__ import annotations

from export_guards.errors import ConstantPlacementError, GuardError
from export_guards.passes import guard_passes
from export_guards.placement import (
    CONSTANT_COPIED,
    CONSTANT_ON_DEVICE,
    CONSTANT_WITHOUT_DATA,
    ConstantPlacementPass,
    PlacementPolicy,
    check_constant_placement,
    guard_constant_placement,
)
from export_guards.report import Finding, Report, Severity, SourceLocation

__all__ = [
    "CONSTANT_COPIED",
    "CONSTANT_ON_DEVICE",
    "CONSTANT_WITHOUT_DATA",
    "ConstantPlacementError",
    "ConstantPlacementPass",
    "Finding",
    "GuardError",
    "PlacementPolicy",
    "Report",
    "Severity",
    "SourceLocation",
    "check_constant_placement",
    "guard_constant_placement",
    "guard_passes",
]
