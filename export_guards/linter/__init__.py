"""The graph lint: the EG1xx-EG4xx rules, run by the engine over every method of a program."""

from __future__ import annotations

from collections.abc import Mapping

from torch.export import ExportedProgram

from export_guards.analysis.fold_plan import FoldPlan
from export_guards.analysis.programs import Program, methods_of
from export_guards.analysis.source import node_site
from export_guards.linter.context import LintContext
from export_guards.linter.rules import LINT_RULES
from export_guards.linter.rules.placement import PLACEMENT_RULES
from export_guards.report import Report
from export_guards.ruleset import RuleSet, Stage, run, with_project_rules
from export_guards.settings import Settings

__all__ = ["LINT_RULES", "PROGRAM_LINT_RULES", "LintConfig", "LintContext", "lint", "lint_guarded", "lint_method"]

PROGRAM_LINT_RULES = LINT_RULES.without(PLACEMENT_RULES)
"""The lint of a guarded export's torch.export program: placement (EG101 / EG102) is the
guard's own, which its placement plan decides and reports."""

LintConfig = Settings
"""The settings object's former name, kept for existing code: use ``Settings``."""


def lint(
    program: Program,
    config: Settings | None = None,
    *,
    stage: Stage = "program",
    fold: bool | None = None,
    reasons: Mapping[str, Mapping[str, str]] | None = None,
    rules: RuleSet | None = None,
    fold_plans: Mapping[str, FoldPlan] | None = None,
) -> Report:
    """Run every selected rule of ``stage`` over every method of ``program``.

    Args:
        program: an ``ExportedProgram``, a dict of them, or an ``EdgeProgramManager``.
        config: which codes are reported and their severities (default: all, default severities).
        stage: ``"program"`` before lowering; ``"partitioned"`` for a lowered program.
        fold: whether the guards' fold will run (changes EG210 / EG212's advice and severity);
            default ``config.fold``.
        reasons: per method, the partitioner's reason for each node it left out, by node name.
        rules: the rule set to run (default ``LINT_RULES`` and the installed project rules).
        fold_plans: per method, the fold plan of its program when the caller has made it
            already (the weight rules read it; otherwise it is made when a rule asks).

    Raises:
        TypeError: ``program`` is none of the accepted forms.
    """
    reports = (
        lint_method(
            ep,
            method,
            config,
            stage=stage,
            fold=fold,
            reasons=(reasons or {}).get(method, {}),
            rules=rules,
            fold_plan=(fold_plans or {}).get(method),
        )
        for method, ep in methods_of(program).items()
    )
    return sum(reports, Report())


def lint_method(
    program: ExportedProgram,
    method: str | None,
    config: Settings | None = None,
    *,
    stage: Stage = "program",
    fold: bool | None = None,
    reasons: Mapping[str, str] | None = None,
    rules: RuleSet | None = None,
    fold_plan: FoldPlan | None = None,
) -> Report:
    """:func:`lint` for one method's program (``method`` may be ``None`` where it is unknown,
    as inside ``transform_passes``)."""
    settings = config or Settings()
    context = LintContext(program, method, settings.fold if fold is None else fold, reasons or {}, fold_plan)
    where = f"method '{method}'" if method else "the program"
    return run(
        rules or with_project_rules(LINT_RULES), stage, context, settings, name=where, method=method, locate=node_site
    )


def lint_guarded(program: Program, config: Settings, *, fold_plans: Mapping[str, FoldPlan] | None = None) -> Report:
    """The program-stage lint of a guarded export's torch.export ``program``: every rule of
    ``PROGRAM_LINT_RULES`` and the installed project rules."""
    return lint(program, config, rules=with_project_rules(PROGRAM_LINT_RULES), fold_plans=fold_plans)
