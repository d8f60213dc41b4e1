"""The lint as an ExecuTorch pass: stop a lowering at the first method with failing findings."""

from __future__ import annotations

from executorch.exir.pass_base import ExportedProgramPassBase
from torch.export import ExportedProgram

from export_guards.errors import LintError
from export_guards.linter import lint_method
from export_guards.passes.result import GuardPassResult
from export_guards.report import Report
from export_guards.settings import Settings

__all__ = ["LintPass"]


class LintPass(ExportedProgramPassBase):
    """The lint as an ExecuTorch pass, for ``transform_passes``: raises one ``LintError``
    listing every finding at or above ``config.fail_level``; never modifies the program. The
    result's ``report`` holds every finding of that call."""

    changes_input = False
    """The program is only read."""

    def __init__(self, config: Settings | None = None, *, fold: bool | None = None) -> None:
        self.config = config or Settings()
        self.fold = fold

    def call(self, exported_program: ExportedProgram) -> GuardPassResult:
        found = lint_method(exported_program, None, self.config, fold=self.fold)
        failing = found.at_least(self.config.fail_level)
        if failing:
            lines = "\n".join(str(f) for f in failing)
            raise LintError(
                f"{len(failing)} lint finding(s) at or above {self.config.fail_level.value}:\n{lines}",
                Report.of(failing),
            )
        return GuardPassResult(exported_program, False, found)
