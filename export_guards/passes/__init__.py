"""The guards as ExecuTorch passes (``ExportedProgramPassBase``): placement, fold, lint, and
the default pass list; and the module-level fold of reparametrized weights, before export."""

from __future__ import annotations

from export_guards.passes.control_flow import ControlFlowOutputsPass
from export_guards.passes.defaults import GuardPasses, guard_passes
from export_guards.passes.initial_values import keep_initial_values
from export_guards.passes.known_wrong import KnownWrongDelegationPass
from export_guards.passes.lint import LintPass
from export_guards.passes.result import GuardGraphPassResult, GuardPassResult

__all__ = [
    "ControlFlowOutputsPass",
    "GuardGraphPassResult",
    "GuardPassResult",
    "GuardPasses",
    "KnownWrongDelegationPass",
    "LintPass",
    "guard_passes",
    "keep_initial_values",
]
