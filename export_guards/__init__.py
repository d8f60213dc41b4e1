"""export-guards: safety passes for the PyTorch to ExecuTorch export pipeline.

Public names load on first use, so that ``import export_guards`` (and the pytest plugin,
which every pytest run loads) stays cheap until torch and ExecuTorch are needed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from export_guards.constant_fold import CONSTANT_FOLDED, FoldConstantsPass, fold_constants
    from export_guards.delegation import DelegationSummary, delegation_summary
    from export_guards.errors import ConstantPlacementError, GuardError, LintError
    from export_guards.linter import RULES, LintConfig, LintPass, lint
    from export_guards.module_fold import PARAMETRIZATION_FOLDED, fold_parametrizations
    from export_guards.passes import guard_passes
    from export_guards.pipeline import GuardedExport, export_with_guards, lower_with_guards
    from export_guards.placement import (
        CONSTANT_COPIED,
        CONSTANT_ON_DEVICE,
        CONSTANT_WITHOUT_DATA,
        ConstantPlacementPass,
        PlacementPolicy,
        check_constant_placement,
        guard_constant_placement,
    )
    from export_guards.pte.check import ExportFailed, check_pte, check_reproducible, compare_pte
    from export_guards.report import Finding, Report, Severity, SourceLocation

_EXPORTS = {
    "CONSTANT_COPIED": "export_guards.placement",
    "CONSTANT_FOLDED": "export_guards.constant_fold",
    "CONSTANT_ON_DEVICE": "export_guards.placement",
    "CONSTANT_WITHOUT_DATA": "export_guards.placement",
    "ConstantPlacementError": "export_guards.errors",
    "ConstantPlacementPass": "export_guards.placement",
    "DelegationSummary": "export_guards.delegation",
    "ExportFailed": "export_guards.pte.check",
    "Finding": "export_guards.report",
    "FoldConstantsPass": "export_guards.constant_fold",
    "GuardError": "export_guards.errors",
    "GuardedExport": "export_guards.pipeline",
    "LintConfig": "export_guards.linter",
    "LintError": "export_guards.errors",
    "LintPass": "export_guards.linter",
    "PARAMETRIZATION_FOLDED": "export_guards.module_fold",
    "PlacementPolicy": "export_guards.placement",
    "RULES": "export_guards.linter",
    "Report": "export_guards.report",
    "Severity": "export_guards.report",
    "SourceLocation": "export_guards.report",
    "check_constant_placement": "export_guards.placement",
    "check_pte": "export_guards.pte.check",
    "check_reproducible": "export_guards.pte.check",
    "compare_pte": "export_guards.pte.check",
    "delegation_summary": "export_guards.delegation",
    "export_with_guards": "export_guards.pipeline",
    "fold_constants": "export_guards.constant_fold",
    "fold_parametrizations": "export_guards.module_fold",
    "guard_constant_placement": "export_guards.placement",
    "guard_passes": "export_guards.passes",
    "lint": "export_guards.linter",
    "lower_with_guards": "export_guards.pipeline",
}

__all__ = [
    "CONSTANT_COPIED",
    "CONSTANT_FOLDED",
    "CONSTANT_ON_DEVICE",
    "CONSTANT_WITHOUT_DATA",
    "ConstantPlacementError",
    "ConstantPlacementPass",
    "DelegationSummary",
    "ExportFailed",
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
    "check_pte",
    "check_reproducible",
    "compare_pte",
    "delegation_summary",
    "export_with_guards",
    "fold_constants",
    "fold_parametrizations",
    "guard_constant_placement",
    "guard_passes",
    "lint",
    "lower_with_guards",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'export_guards' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
