"""What a guard pass returns: ExecuTorch's pass result, with the findings of that one call."""

from __future__ import annotations

from dataclasses import dataclass, field

from executorch.exir.pass_base import ExportedProgramPassResult

from export_guards.report import Report

__all__ = ["GuardPassResult"]


@dataclass(frozen=True)
class GuardPassResult(ExportedProgramPassResult):
    """``exported_program`` and ``modified``, as ExecuTorch's pass managers read them, and
    ``report``: what the pass found or did in this call (nothing is kept on the pass)."""

    report: Report = field(default_factory=Report)
