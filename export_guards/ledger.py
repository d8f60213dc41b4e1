"""One export's ledger: what its guards found and did, step by step, and the one report made
of it.

Each export owns one :class:`Ledger` (``lower_with_guards`` makes one per call, ``guard_recipe``
one per guarded recipe). The ledger only records: the copies (EG103), the folds made before
``to_edge`` or before a quantizer (EG201), every guard pass's report, by method and by the step
that wrote it; each lint the export ran (the program-stage lint of its torch.export programs,
the partitioned-stage lint of what it lowered), as that lint settled it; and what stopped the
export. :meth:`Ledger.report` then merges and settles, the same way for every entry point.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator

from executorch.exir.pass_base import ExportedProgramPassBase, ExportedProgramPassResult
from torch.export import ExportedProgram
from torch.fx import GraphModule

from export_guards.analysis.programs import Program, methods_of
from export_guards.analysis.source import source_lines
from export_guards.internals import name_pass
from export_guards.passes.result import GuardPassResult
from export_guards.report import Finding, Report
from export_guards.ruleset import Stage, known_rules, once, settle, without_symptoms
from export_guards.ruleset.noqa import unused_noqa_report
from export_guards.settings import Settings

__all__ = ["Ledger", "Recorded"]


class Ledger:
    """The findings of one export, by method and step; a step written again is replaced, so
    that a guarded recipe exported again holds its latest export's findings only."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str | None, str], list[Finding]] = {}
        self._lints: dict[Stage, tuple[Report, tuple[GraphModule, ...]]] = {}
        self._stopped = Report()

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

    def put_lint(self, stage: Stage, program: Program, report: Report) -> None:
        """Record the lint of ``stage`` over ``program`` (each method's), ``report`` as that
        lint settled it, replacing an earlier lint of that stage."""
        self._lints[stage] = (report, tuple(ep.graph_module for ep in methods_of(program).values()))

    def stop(self, report: Report) -> None:
        """Record what stopped the export: reported whatever the settings select."""
        self._stopped = report

    @property
    def findings(self) -> list[Finding]:
        """Every guard step's findings, in the order the steps first ran."""
        return [f for found in self._entries.values() for f in found]

    def report(self, settings: Settings) -> Report:
        """The export's report: the program-stage lint, the guards' findings as ``settings``
        select them, what stopped the export, and the partitioned-stage lint, each finding once
        (``once``: a finding another step already reported is left out). A finding whose
        cause another stage reported is left out (``without_symptoms``); where selected, each
        ``# noqa`` on the torch.export program's lines that suppressed nothing is an EG003
        finding."""
        steps = [settle(found, settings) for found in self._entries.values()]
        report = once([self._lint("program", settings), *steps, self._stopped, self._lint("partitioned", settings)])
        report = without_symptoms(report)
        ran = {"action", *self._lints}
        return report + settle(unused_noqa_report(report, self._program_lines, settings, ran, known_rules), settings)

    def _lint(self, stage: Stage, settings: Settings) -> Report:
        """The lint of ``stage``, as ``settings`` select (as the lint settled it, when they are
        the settings it ran with), with what its ``# noqa`` comments suppressed."""
        if stage not in self._lints:
            return Report()
        linted = self._lints[stage][0]
        return settle(linted.findings, settings) + Report((), linted.suppressed)

    def _program_lines(self) -> Iterator[tuple[str, int]]:
        """The user's lines the torch.export programs' nodes come from."""
        for graph_module in self._lints["program"][1] if "program" in self._lints else ():
            yield from source_lines(graph_module)


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
    recorded = Recorded(guard, ledger, method)
    name_pass(recorded, type(guard).__name__)
    return recorded


def _in_method(findings: Iterable[Finding], method: str | None) -> list[Finding]:
    """``findings``, each naming ``method`` (a pass sees a program, not its method's name)."""
    return [f if f.method or method is None else dataclasses.replace(f, method=method) for f in findings]
