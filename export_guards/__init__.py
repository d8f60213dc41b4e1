"""export-guards: safety passes for the PyTorch to ExecuTorch export pipeline."""

from __future__ import annotations

from export_guards.constant_fold import CONSTANT_FOLDED, FoldConstantsPass, fold_constants
from export_guards.delegation import DelegationSummary, delegation_summary
from export_guards.errors import ConstantPlacementError, GuardError, LintError
from export_guards.lint import RULES, LintConfig, LintPass, lint
from export_guards.pipeline import GuardedExport, export_with_guards, lower_with_guards
from export_guards.module_fold import PARAMETRIZATION_FOLDED, fold_parametrizations
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
    "CONSTANT_FOLDED",
    "CONSTANT_ON_DEVICE",
    "CONSTANT_WITHOUT_DATA",
    "ConstantPlacementError",
    "ConstantPlacementPass",
    "DelegationSummary",
    "Finding",
    "FoldConstantsPass",
    "GuardError",
    "GuardedExport",
    "LintConfig",
    "LintError",
    "LintPass",
    "PARAMETRIZATION_FOLDED",
    "PlacementPolicy",
    "RULES",
    "Report",
    "Severity",
    "SourceLocation",
    "check_constant_placement",
    "delegation_summary",
    "export_with_guards",
    "fold_constants",
    "fold_parametrizations",
    "guard_constant_placement",
    "guard_passes",
    "lint",
    "lower_with_guards",
]
