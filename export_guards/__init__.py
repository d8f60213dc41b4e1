"""export-guards: safety passes for the PyTorch to ExecuTorch export pipeline.

Public names load on first use, so that ``import export_guards`` (and the pytest plugin,
which every pytest run loads) stays cheap until torch and ExecuTorch are needed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from export_guards.analysis.delegation import DelegationSummary, delegation_summary
    from export_guards.errors import ConstantPlacementError, GuardError, LintError, LoweringFailed
    from export_guards.linter import LintConfig, lint
    from export_guards.passes.defaults import guard_passes
    from export_guards.passes.emit import EmitPlacementPass, emit_passes
    from export_guards.passes.fold import CONSTANT_FOLDED, FoldConstantsPass, fold_constants, fold_non_core_constants
    from export_guards.passes.lint import LintPass
    from export_guards.passes.module_fold import PARAMETRIZATION_FOLDED, fold_parametrizations
    from export_guards.passes.partitioner import DEVICE_BACKENDS, GuardedPartitioner, guard_partitioners
    from export_guards.passes.placement import (
        CONSTANT_COPIED,
        CONSTANT_ON_DEVICE,
        CONSTANT_WITHOUT_DATA,
        ConstantPlacementPass,
        check_constant_placement,
        guard_constant_placement,
    )
    from export_guards.passes.result import GuardGraphPassResult, GuardPassResult
    from export_guards.pipeline import GuardedExport, export_with_guards, export_with_recipe, lower_with_guards
    from export_guards.pte.check import ExportFailed, check_pte, check_reproducible, compare_pte
    from export_guards.recipes import guard_recipe, recipe_names, recipe_report
    from export_guards.report import Finding, Report, Severity, SourceLocation
    from export_guards.ruleset import CATALOG as RULES
    from export_guards.ruleset import Rule
    from export_guards.settings import PlacementPolicy, Settings

_EXPORTS = {
    "CONSTANT_COPIED": "export_guards.passes.placement",
    "CONSTANT_FOLDED": "export_guards.passes.fold",
    "CONSTANT_ON_DEVICE": "export_guards.passes.placement",
    "CONSTANT_WITHOUT_DATA": "export_guards.passes.placement",
    "ConstantPlacementError": "export_guards.errors",
    "ConstantPlacementPass": "export_guards.passes.placement",
    "DEVICE_BACKENDS": "export_guards.passes.partitioner",
    "EmitPlacementPass": "export_guards.passes.emit",
    "DelegationSummary": "export_guards.analysis.delegation",
    "ExportFailed": "export_guards.pte.check",
    "Finding": "export_guards.report",
    "FoldConstantsPass": "export_guards.passes.fold",
    "GuardError": "export_guards.errors",
    "GuardGraphPassResult": "export_guards.passes.result",
    "GuardPassResult": "export_guards.passes.result",
    "GuardedPartitioner": "export_guards.passes.partitioner",
    "GuardedExport": "export_guards.pipeline",
    "LintConfig": "export_guards.linter",
    "LintError": "export_guards.errors",
    "LintPass": "export_guards.passes.lint",
    "LoweringFailed": "export_guards.errors",
    "PARAMETRIZATION_FOLDED": "export_guards.passes.module_fold",
    "PlacementPolicy": "export_guards.settings",
    "RULES": "export_guards.ruleset",
    "Report": "export_guards.report",
    "Rule": "export_guards.ruleset",
    "Settings": "export_guards.settings",
    "Severity": "export_guards.report",
    "SourceLocation": "export_guards.report",
    "check_constant_placement": "export_guards.passes.placement",
    "check_pte": "export_guards.pte.check",
    "check_reproducible": "export_guards.pte.check",
    "compare_pte": "export_guards.pte.check",
    "delegation_summary": "export_guards.analysis.delegation",
    "export_with_guards": "export_guards.pipeline",
    "export_with_recipe": "export_guards.pipeline",
    "fold_constants": "export_guards.passes.fold",
    "fold_non_core_constants": "export_guards.passes.fold",
    "emit_passes": "export_guards.passes.emit",
    "fold_parametrizations": "export_guards.passes.module_fold",
    "guard_constant_placement": "export_guards.passes.placement",
    "guard_partitioners": "export_guards.passes.partitioner",
    "guard_passes": "export_guards.passes.defaults",
    "guard_recipe": "export_guards.recipes",
    "lint": "export_guards.linter",
    "lower_with_guards": "export_guards.pipeline",
    "recipe_names": "export_guards.recipes",
    "recipe_report": "export_guards.recipes",
}
_RENAMED = {"RULES": "CATALOG"}  # public name -> the name in its module

__all__ = [
    "CONSTANT_COPIED",
    "CONSTANT_FOLDED",
    "CONSTANT_ON_DEVICE",
    "CONSTANT_WITHOUT_DATA",
    "ConstantPlacementError",
    "ConstantPlacementPass",
    "DEVICE_BACKENDS",
    "DelegationSummary",
    "EmitPlacementPass",
    "ExportFailed",
    "Finding",
    "FoldConstantsPass",
    "GuardError",
    "GuardGraphPassResult",
    "GuardPassResult",
    "GuardedExport",
    "GuardedPartitioner",
    "LintConfig",
    "LintError",
    "LintPass",
    "LoweringFailed",
    "PARAMETRIZATION_FOLDED",
    "PlacementPolicy",
    "RULES",
    "Report",
    "Rule",
    "Settings",
    "Severity",
    "SourceLocation",
    "check_constant_placement",
    "check_pte",
    "check_reproducible",
    "compare_pte",
    "delegation_summary",
    "export_with_guards",
    "export_with_recipe",
    "emit_passes",
    "fold_constants",
    "fold_non_core_constants",
    "fold_parametrizations",
    "guard_constant_placement",
    "guard_partitioners",
    "guard_passes",
    "guard_recipe",
    "lint",
    "lower_with_guards",
    "recipe_names",
    "recipe_report",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'export_guards' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), _RENAMED.get(name, name))
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
