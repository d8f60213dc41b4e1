"""One export's ledger: what its guards found and did, and the one report assembled from it.

Each export owns one :class:`Ledger` (``lower_with_guards`` makes one per call, ``guard_recipe``
one per guarded recipe): the copies (EG103), the folds made before ``to_edge`` or before a
quantizer (EG201), and every guard pass's report, by method and by the step that wrote it.
:meth:`Ledger.report` then assembles the report the same way for every entry point: the
program-stage lint (placement aside: the guard stopped the export or found nothing), what the
ledger holds, and the partitioned-stage lint where its rules apply.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from executorch.exir import EdgeProgramManager
from executorch.exir.pass_base import ExportedProgramPassBase, ExportedProgramPassResult
from torch.export import ExportedProgram

from export_guards.analysis.programs import Program, methods_of
from export_guards.analysis.source import source_lines
from export_guards.linter import LINT_RULES, lint
from export_guards.linter.rules.placement import PLACEMENT_RULES
from export_guards.passes.result import GuardPassResult
from export_guards.report import Finding, Report
from export_guards.ruleset import known_rules, settle, with_project_rules, without_symptoms
from export_guards.ruleset.noqa import unused_noqa
from export_guards.settings import Settings

__all__ = ["PROGRAM_LINT_RULES", "Ledger", "Recorded"]

PROGRAM_LINT_RULES = LINT_RULES.without(PLACEMENT_RULES)
"""The lint of a guarded export's torch.export program: placement is the guard's own."""


class Ledger:
    """The findings of one export, by method and step; a step written again is replaced, so
    that a guarded recipe exported again holds its latest export's findings only."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str | None, str], list[Finding]] = {}

    def put(self, method: str | None, step: str, findings: Iterable[Finding]) -> None:
        """Record what ``step`` found in ``method``, replacing what it recorded before."""
        self._entries[(method, step)] = _in_method(findings, method)

    def extend(self, method: str | None, step: str, findings: Iterable[Finding]) -> None:
        """Add to what ``step`` recorded in ``method``."""
        self._entries.setdefault((method, step), []).extend(_in_method(findings, method))

    def recorded(self, method: str | None, guards: Iterable[ExportedProgramPassBase]) -> list[Recorded]:
        """``guards``, each recording its reports here under ``method``; what an earlier
        lowering of that method recorded is dropped."""
        passes = [_recorded(guard, self, method) for guard in guards]
        for guard in passes:
            self.put(method, guard.step, ())
        return passes

    @property
    def findings(self) -> list[Finding]:
        """Everything recorded, in the order the steps first ran."""
        return [f for found in self._entries.values() for f in found]

    def report(
        self,
        program: Program,
        settings: Settings,
        *,
        edge: EdgeProgramManager | None = None,
        partitioned_lint: bool = False,
        reasons: Mapping[str, Mapping[str, str]] | None = None,
        stopped: Report | None = None,
    ) -> Report:
        """The export's report: the program-stage lint of ``program`` (each method's
        torch.export program), the ledger as ``settings`` select it, ``stopped`` (what
        stopped the export: always shown, whatever the settings), and, for a lowered
        ``edge`` whose backend the partitioned-stage rules speak of, that lint. A finding
        whose cause another stage reported is left out (``without_symptoms``); where selected,
        each ``# noqa`` on the program's lines that suppressed nothing is an EG003 finding."""
        report = lint(program, settings, rules=with_project_rules(PROGRAM_LINT_RULES)) + settle(self.findings, settings)
        if stopped:
            report += stopped
        if edge is not None and partitioned_lint:
            report += lint(edge, settings, stage="partitioned", reasons=reasons)
        report = without_symptoms(report)
        if settings.enabled("EG003"):  # off by default: reading every node's line costs time
            ran = {"program", "action"} | ({"partitioned"} if edge is not None and partitioned_lint else set())
            known = known_rules()

            def judged(code: str) -> bool:  # a code this run checked: selected, of a stage that ran
                return settings.enabled(code) and code in known and known[code].stage in ran

            lines = {line for ep in methods_of(program).values() for line in source_lines(ep.graph_module)}
            report += settle(unused_noqa(report, lines, judged), settings)
        return report


class Recorded(ExportedProgramPassBase):
    """A guard pass inside ``transform_passes``, which keep only the program of each result:
    this one also records each call's report in its export's ledger."""

    def __init__(self, guard: ExportedProgramPassBase, ledger: Ledger, method: str | None) -> None:
        self.guard, self.ledger, self.method = guard, ledger, method
        self.step = type(guard).__name__
        self.changes_input: bool = getattr(guard, "changes_input", True)

    def call(self, exported_program: ExportedProgram) -> ExportedProgramPassResult:
        result = self.guard(exported_program)
        if isinstance(result, GuardPassResult):
            self.ledger.extend(self.method, self.step, result.report)
        return result


def _recorded(guard: ExportedProgramPassBase, ledger: Ledger, method: str | None) -> Recorded:
    """``guard``, recorded; named as ``guard``'s class, by which ExecuTorch's pass manager
    names a pass that fails."""
    return type(type(guard).__name__, (Recorded,), {})(guard, ledger, method)


def _in_method(findings: Iterable[Finding], method: str | None) -> list[Finding]:
    """``findings``, each naming ``method`` (a pass sees a program, not its method's name)."""
    return [f if f.method or method is None else dataclasses.replace(f, method=method) for f in findings]
