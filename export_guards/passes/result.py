"""What a guard pass returns: ExecuTorch's or torch.fx's pass result, with the findings of that one call."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

import torch
from executorch.exir.pass_base import ExportedProgramPassResult
from torch.fx.passes.infra.pass_base import PassResult

from export_guards.report import Report

__all__ = ["GuardGraphPassResult", "GuardPassResult"]


@dataclass(frozen=True)
class GuardPassResult(ExportedProgramPassResult):
    """``exported_program`` and ``modified``, as ExecuTorch's pass managers read them, and
    ``report``: what the pass found or did in this call (nothing is kept on the pass)."""

    report: Report = field(default_factory=Report)


class GuardGraphPassResult(PassResult):
    """A graph-module pass's result (``graph_module``, ``modified``), as torch.fx's and
    ExecuTorch's pass managers read it, with ``report``: what the pass found or did."""

    report: Report

    def __new__(
        cls, graph_module: torch.nn.Module, modified: bool, report: Report | None = None
    ) -> GuardGraphPassResult:
        result = cast(GuardGraphPassResult, super().__new__(cls, graph_module, modified))
        result.report = report if report is not None else Report()
        return result
