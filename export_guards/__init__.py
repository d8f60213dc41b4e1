"""export-guards: safety passes for the PyTorch to ExecuTorch export pipeline.

Public names load on first use, so that ``import export_guards`` (and the pytest plugin,
which every pytest run loads) stays cheap until torch and ExecuTorch are needed. The few lines
those libraries print that no user can act on are filtered at their source from the start
(``export_guards.quiet.KNOWN_NOISE``).
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

from export_guards.compat import say_once_if_untested
from export_guards.quiet import filter_known_noise

if TYPE_CHECKING:  # each public name as its own re-export (X as X), which type checkers read
    from export_guards.analysis.delegation import (
        DelegationSummary as DelegationSummary,
        delegation_summary as delegation_summary,
    )
    from export_guards.errors import (
        ConstantPlacementError as ConstantPlacementError,
        GradModeWriteError as GradModeWriteError,
        GuardError as GuardError,
        KnownWrongDelegationError as KnownWrongDelegationError,
        LintError as LintError,
        LoweringFailed as LoweringFailed,
        ProgramRefused as ProgramRefused,
        SharedMemoryError as SharedMemoryError,
    )
    from export_guards.linter import LintConfig as LintConfig, lint as lint
    from export_guards.passes.control_flow import ControlFlowOutputsPass as ControlFlowOutputsPass
    from export_guards.passes.defaults import GuardPasses as GuardPasses, guard_passes as guard_passes
    from export_guards.passes.initial_values import keep_initial_values as keep_initial_values
    from export_guards.passes.fold import (
        FoldConstantsPass as FoldConstantsPass,
        fold_constants as fold_constants,
        fold_non_core_constants as fold_non_core_constants,
    )
    from export_guards.passes.known_wrong import KnownWrongDelegationPass as KnownWrongDelegationPass
    from export_guards.passes.lint import LintPass as LintPass
    from export_guards.passes.module_fold import fold_parametrizations as fold_parametrizations
    from export_guards.passes.placement import (
        DEVICE_BACKENDS as DEVICE_BACKENDS,
        ConstantPlacementPass as ConstantPlacementPass,
        EmitPlacementPass as EmitPlacementPass,
        GuardedPartitioner as GuardedPartitioner,
        check_constant_placement as check_constant_placement,
        emit_passes as emit_passes,
        guard_constant_placement as guard_constant_placement,
        guard_partitioners as guard_partitioners,
    )
    from export_guards.passes.result import (
        GuardGraphPassResult as GuardGraphPassResult,
        GuardPassResult as GuardPassResult,
    )
    from export_guards.pipeline import (
        GuardedExport as GuardedExport,
        export_with_guards as export_with_guards,
        export_with_recipe as export_with_recipe,
        lower_with_guards as lower_with_guards,
    )
    from export_guards.pte.inventory import RuntimeInventory as RuntimeInventory
    from export_guards.pte.check import (
        ExportFailed as ExportFailed,
        check_pte as check_pte,
        check_reproducible as check_reproducible,
        compare_pte as compare_pte,
        diff_pte as diff_pte,
    )
    from export_guards.pte.store_once import (
        SharedCopy as SharedCopy,
        shared_copies as shared_copies,
        store_once as store_once,
    )
    from export_guards.recipes import (
        guard_recipe as guard_recipe,
        recipe_named as recipe_named,
        recipe_names as recipe_names,
        recipe_report as recipe_report,
    )
    from export_guards.report import (
        Finding as Finding,
        Report as Report,
        Severity as Severity,
        SourceLocation as SourceLocation,
    )
    from export_guards.ruleset import RULES as RULES
    from export_guards.ruleset import Rule as Rule
    from export_guards.settings import PlacementPolicy as PlacementPolicy, Settings as Settings
    from export_guards.targets import Exportable as Exportable
    from export_guards.verify import (
        Tolerance as Tolerance,
        check_program as check_program,
        run_program as run_program,
    )
    from export_guards.lowering import Lowering as Lowering

_EXPORTS = {
    "ConstantPlacementError": "export_guards.errors",
    "ConstantPlacementPass": "export_guards.passes.placement",
    "ControlFlowOutputsPass": "export_guards.passes.control_flow",
    "DEVICE_BACKENDS": "export_guards.passes.placement",
    "EmitPlacementPass": "export_guards.passes.placement",
    "DelegationSummary": "export_guards.analysis.delegation",
    "ExportFailed": "export_guards.pte.check",
    "Exportable": "export_guards.targets",
    "Lowering": "export_guards.lowering",
    "Finding": "export_guards.report",
    "FoldConstantsPass": "export_guards.passes.fold",
    "KnownWrongDelegationPass": "export_guards.passes.known_wrong",
    "KnownWrongDelegationError": "export_guards.errors",
    "GradModeWriteError": "export_guards.errors",
    "GuardError": "export_guards.errors",
    "GuardGraphPassResult": "export_guards.passes.result",
    "GuardPassResult": "export_guards.passes.result",
    "GuardPasses": "export_guards.passes.defaults",
    "GuardedPartitioner": "export_guards.passes.placement",
    "GuardedExport": "export_guards.pipeline",
    "LintConfig": "export_guards.linter",
    "LintError": "export_guards.errors",
    "LintPass": "export_guards.passes.lint",
    "LoweringFailed": "export_guards.errors",
    "ProgramRefused": "export_guards.errors",
    "SharedMemoryError": "export_guards.errors",
    "SharedCopy": "export_guards.pte.store_once",
    "PlacementPolicy": "export_guards.settings",
    "RULES": "export_guards.ruleset",
    "Report": "export_guards.report",
    "Rule": "export_guards.ruleset",
    "RuntimeInventory": "export_guards.pte.inventory",
    "Settings": "export_guards.settings",
    "Severity": "export_guards.report",
    "Tolerance": "export_guards.verify",
    "SourceLocation": "export_guards.report",
    "check_constant_placement": "export_guards.passes.placement",
    "check_pte": "export_guards.pte.check",
    "check_program": "export_guards.verify",
    "check_reproducible": "export_guards.pte.check",
    "compare_pte": "export_guards.pte.check",
    "diff_pte": "export_guards.pte.check",
    "delegation_summary": "export_guards.analysis.delegation",
    "export_with_guards": "export_guards.pipeline",
    "export_with_recipe": "export_guards.pipeline",
    "fold_constants": "export_guards.passes.fold",
    "fold_non_core_constants": "export_guards.passes.fold",
    "emit_passes": "export_guards.passes.placement",
    "fold_parametrizations": "export_guards.passes.module_fold",
    "guard_constant_placement": "export_guards.passes.placement",
    "guard_partitioners": "export_guards.passes.placement",
    "guard_passes": "export_guards.passes.defaults",
    "keep_initial_values": "export_guards.passes.initial_values",
    "guard_recipe": "export_guards.recipes",
    "lint": "export_guards.linter",
    "lower_with_guards": "export_guards.pipeline",
    "recipe_named": "export_guards.recipes",
    "recipe_names": "export_guards.recipes",
    "recipe_report": "export_guards.recipes",
    "run_program": "export_guards.verify",
    "shared_copies": "export_guards.pte.store_once",
    "store_once": "export_guards.pte.store_once",
}

_DEPRECATED_CODES = {
    "CONSTANT_ON_DEVICE": "EG101",
    "CONSTANT_WITHOUT_DATA": "EG102",
    "CONSTANT_COPIED": "EG103",
    "CONSTANT_FOLDED": "EG201",
    "PARAMETRIZATION_FOLDED": "EG202",
}
"""Bare code constants of 0.1, kept for old scripts: a code is its string (``"EG103"``), and its
rule is ``RULES["EG103"]``."""

__all__ = sorted(_EXPORTS)

filter_known_noise()
say_once_if_untested()


def __getattr__(name: str) -> Any:
    if name in _DEPRECATED_CODES:
        code = _DEPRECATED_CODES[name]
        warnings.warn(f"export_guards.{name} is deprecated: use the code {code!r} (its rule: export_guards.RULES[{code!r}])", DeprecationWarning, stacklevel=2)
        return code
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'export_guards' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
