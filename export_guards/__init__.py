"""export-guards: safety passes for the PyTorch to ExecuTorch export pipeline.

Public names load on first use, so that ``import export_guards`` (and the pytest plugin,
which every pytest run loads) stays cheap until torch and ExecuTorch are needed: the few names of
a guarded export here (``_EXPORTS``, which a test holds the type checkers' imports below to), the
rest in the namespaces ``export_guards.placement``, ``.fold``, ``.program``, ``.passes``,
``.recipes``, ``.errors`` and ``.testing`` (docs/api.md). The few lines
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
    from export_guards import errors as errors
    from export_guards import fold as fold
    from export_guards import passes as passes
    from export_guards import placement as placement
    from export_guards import program as program
    from export_guards import recipes as recipes
    from export_guards import testing as testing
    from export_guards.analysis.delegation import delegation_summary as delegation_summary
    from export_guards.errors import (
        ConstantPlacementError as ConstantPlacementError,
    )
    from export_guards.errors import (
        Error as Error,
    )
    from export_guards.errors import (
        GuardError as GuardError,
    )
    from export_guards.errors import (
        LintError as LintError,
    )
    from export_guards.errors import (
        LoweringFailed as LoweringFailed,
    )
    from export_guards.errors import (
        ProgramRefused as ProgramRefused,
    )
    from export_guards.linter import lint as lint
    from export_guards.lowering import Lowering as Lowering
    from export_guards.passes.defaults import guard_passes as guard_passes
    from export_guards.passes.fold import fold_non_core_constants as fold_non_core_constants
    from export_guards.passes.placement import emit_passes as emit_passes
    from export_guards.passes.placement import guard_partitioners as guard_partitioners
    from export_guards.pipeline import (
        GuardedExport as GuardedExport,
    )
    from export_guards.pipeline import (
        export_with_guards as export_with_guards,
    )
    from export_guards.pipeline import (
        lower_with_guards as lower_with_guards,
    )
    from export_guards.pte.check import check_pte as check_pte
    from export_guards.recipes import guard_recipe as guard_recipe
    from export_guards.report import (
        Finding as Finding,
    )
    from export_guards.report import (
        Report as Report,
    )
    from export_guards.report import (
        Severity as Severity,
    )
    from export_guards.report import (
        SourceLocation as SourceLocation,
    )
    from export_guards.ruleset import RULES as RULES
    from export_guards.ruleset import Rule as Rule
    from export_guards.settings import Settings as Settings
    from export_guards.targets import Exportable as Exportable

_EXPORTS = {
    "ConstantPlacementError": "export_guards.errors",
    "Error": "export_guards.errors",
    "Exportable": "export_guards.targets",
    "Finding": "export_guards.report",
    "GuardError": "export_guards.errors",
    "GuardedExport": "export_guards.pipeline",
    "LintError": "export_guards.errors",
    "Lowering": "export_guards.lowering",
    "LoweringFailed": "export_guards.errors",
    "ProgramRefused": "export_guards.errors",
    "RULES": "export_guards.ruleset",
    "Report": "export_guards.report",
    "Rule": "export_guards.ruleset",
    "Settings": "export_guards.settings",
    "Severity": "export_guards.report",
    "SourceLocation": "export_guards.report",
    "check_pte": "export_guards.pte.check",
    "delegation_summary": "export_guards.analysis.delegation",
    "emit_passes": "export_guards.passes.placement",
    "export_with_guards": "export_guards.pipeline",
    "fold_non_core_constants": "export_guards.passes.fold",
    "guard_partitioners": "export_guards.passes.placement",
    "guard_passes": "export_guards.passes.defaults",
    "guard_recipe": "export_guards.recipes",
    "lint": "export_guards.linter",
    "lower_with_guards": "export_guards.pipeline",
}
"""The top level: each public name and the module it loads from on first use. The rest is in the
public namespaces below, real modules each (``export_guards.placement.ConstantPlacementPass``)."""

_NAMESPACES = ("errors", "fold", "passes", "placement", "program", "recipes", "testing")
"""The public namespaces, each a module imported on first use (``export_guards.program``)."""

_MOVED = {
    **dict.fromkeys(["GradModeWriteError", "KnownWrongDelegationError", "SharedMemoryError"], "errors"),
    **dict.fromkeys(["FoldConstantsPass", "fold_constants", "fold_parametrizations"], "fold"),
    **dict.fromkeys(
        [
            "ControlFlowOutputsPass",
            "GuardGraphPassResult",
            "GuardPassResult",
            "GuardPasses",
            "KnownWrongDelegationPass",
            "LintPass",
            "keep_initial_values",
        ],
        "passes",
    ),
    **dict.fromkeys(
        [
            "DEVICE_BACKENDS",
            "ConstantPlacementPass",
            "EmitPlacementPass",
            "GuardedPartitioner",
            "PlacementPolicy",
            "check_constant_placement",
            "guard_constant_placement",
        ],
        "placement",
    ),
    **dict.fromkeys(
        [
            "DelegationSummary",
            "ExportFailed",
            "RuntimeInventory",
            "SharedCopy",
            "Tolerance",
            "check_program",
            "check_reproducible",
            "compare_pte",
            "diff_pte",
            "run_program",
            "shared_copies",
            "store_once",
        ],
        "program",
    ),
    **dict.fromkeys(["recipe_named", "recipe_names", "recipe_report"], "recipes"),
}
"""Top-level names of 0.x that moved into a namespace: kept one release, with a warning that
names the new spelling."""

_RENAMED = {
    "LintConfig": ("export_guards.settings", "Settings", "export_guards.Settings (LintConfig was its alias)"),
    "export_with_recipe": (
        "export_guards.pipeline",
        "export_with_recipe",
        "export_guards.export_with_guards(model, inputs, config=Settings(recipe=name)); an ExportRecipe value: "
        "executorch.export.export(model, inputs, export_guards.guard_recipe(recipe))",
    ),
}
"""Top-level names of 0.x replaced by another spelling: kept one release, with a warning that
names it (module, attribute, the new spelling)."""

_DEPRECATED_CODES = {
    "CONSTANT_ON_DEVICE": "EG101",
    "CONSTANT_WITHOUT_DATA": "EG102",
    "CONSTANT_COPIED": "EG103",
    "CONSTANT_FOLDED": "EG201",
    "PARAMETRIZATION_FOLDED": "EG202",
}
"""Bare code constants of 0.1, kept for old scripts: a code is its string (``"EG103"``), and its
rule is ``RULES["EG103"]``."""

__all__ = sorted(_EXPORTS)  # noqa: PLE0605 - one list of exports: _EXPORTS

filter_known_noise()
say_once_if_untested()


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value
    if name in _NAMESPACES:
        return importlib.import_module(f"export_guards.{name}")  # which sets it here as well
    return _deprecated(name)


def _deprecated(name: str) -> Any:
    """An old name, with a warning that says how to spell it now (not cached: it warns each time)."""
    if name in _DEPRECATED_CODES:
        code = _DEPRECATED_CODES[name]
        warnings.warn(
            f"export_guards.{name} is deprecated: use the code {code!r} (its rule: export_guards.RULES[{code!r}])",
            DeprecationWarning,
            stacklevel=3,
        )
        return code
    if name in _MOVED:
        namespace = _MOVED[name]
        warnings.warn(
            f"export_guards.{name} is deprecated: use export_guards.{namespace}.{name}",
            DeprecationWarning,
            stacklevel=3,
        )
        return getattr(importlib.import_module(f"export_guards.{namespace}"), name)
    if name in _RENAMED:
        module, attribute, spelling = _RENAMED[name]
        warnings.warn(f"export_guards.{name} is deprecated: use {spelling}", DeprecationWarning, stacklevel=3)
        return getattr(importlib.import_module(module), attribute)
    raise AttributeError(f"module 'export_guards' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | set(_NAMESPACES))
