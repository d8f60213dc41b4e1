"""The graph lint: rules with stable codes, run over every method of a program."""

from __future__ import annotations

from collections.abc import Mapping

from executorch.exir.pass_base import ExportedProgramPassBase, ExportedProgramPassResult
from torch.export import ExportedProgram

from export_guards.errors import LintError
from export_guards.linter import rules as _rules  # noqa: F401  (registers the built-in rules)
from export_guards.linter.config import LintConfig
from export_guards.linter.context import LintContext
from export_guards.linter.registry import RULES, Hit, Rule, Stage, rule
from export_guards.programs import Program, methods_of
from export_guards.report import Finding, Report
from export_guards.source import node_location, node_module

__all__ = ["RULES", "Hit", "LintConfig", "LintContext", "LintPass", "Rule", "Stage", "lint", "rule"]


def lint(
    program: Program,
    config: LintConfig | None = None,
    *,
    stage: Stage = "program",
    fold: bool = True,
    reasons: Mapping[str, Mapping[str, str]] | None = None,
) -> Report:
    """Run every selected rule of ``stage`` over every method of ``program``.

    Args:
        program: an ``ExportedProgram``, a dict of them, or an ``EdgeProgramManager``.
        config: which rules run and their severities (default: all, default severities).
        stage: ``"program"`` before lowering; ``"partitioned"`` for a lowered program.
        fold: whether the guards' fold will run (changes EG210 / EG212's advice and severity).
        reasons: per method, the partitioner's reason for each node it left out, by node name.
    """
    config = config or LintConfig()
    findings = []
    for method, ep in methods_of(program).items():
        context = LintContext(ep, method, fold, (reasons or {}).get(method, {}))
        for code, registered in sorted(RULES.items()):
            if registered.stage == stage and config.enabled(code):
                findings.extend(_finding(registered, hit, context, config) for hit in registered.check(context))
    return Report.of(findings)


def _finding(rule: Rule, hit: Hit, context: LintContext, config: LintConfig) -> Finding:
    severity = config.severity.get(rule.code) or hit.severity or rule.severity
    return Finding(
        code=rule.code,
        severity=severity,
        message=hit.message,
        method=context.method,
        node=hit.node.name if hit.node is not None else None,
        constant=hit.constant,
        location=node_location(hit.node) if hit.node is not None else None,
        fix=hit.fix or rule.fix,
        module=node_module(hit.node) if hit.node is not None else None,
    )


class LintPass(ExportedProgramPassBase):
    """The lint as an ExecuTorch pass, for ``transform_passes``: raises one ``LintError``
    listing every finding at or above ``config.fail_level``; never modifies the program.
    ``report`` accumulates every finding of every program it ran on."""

    def __init__(self, config: LintConfig | None = None, *, fold: bool = True) -> None:
        self.config = config or LintConfig()
        self.fold = fold
        self.report = Report()

    def call(self, exported_program: ExportedProgram) -> ExportedProgramPassResult:
        found = lint(exported_program, self.config, fold=self.fold)
        self.report += found
        failing = found.at_least(self.config.fail_level)
        if failing:
            lines = "\n".join(str(f) for f in failing)
            raise LintError(
                f"{len(failing)} lint finding(s) at or above {self.config.fail_level.value}:\n{lines}",
                Report.of(failing),
            )
        return ExportedProgramPassResult(exported_program, False)
