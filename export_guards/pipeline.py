"""The whole guarded export in one call: placement, lint, fold, lowering, partitioned lint."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, final

import torch
from executorch.exir import EdgeProgramManager, to_edge_transform_and_lower
from torch.export import ExportedProgram

from export_guards.constant_fold import FoldConstantsPass
from export_guards.delegation import DelegationSummary, delegation_summary
from export_guards.errors import GuardError
from export_guards.linter import LintConfig, lint
from export_guards.partitioner_reasons import capture_partitioner_reasons
from export_guards.passes import guard_passes
from export_guards.placement import ConstantPlacementPass, PlacementPolicy, check_constant_placement
from export_guards.report import Report

__all__ = ["Backend", "GuardedExport", "export_with_guards", "lower_with_guards"]

Backend = Literal["xnnpack", "portable"]
"""``"xnnpack"`` lowers with ``XnnpackPartitioner``; ``"portable"`` delegates nothing."""


@final
@dataclass(frozen=True)
class GuardedExport:
    """The outcome of a guarded export.

    Attributes:
        program: the torch.export program (on the host when the copy policy moved it).
        edge: the lowered program, or ``None`` when a constant the host cannot read stopped
            the export before lowering (lowering would have crashed).
        report: every finding: placement, lint before and after partitioning, folds.
    """

    program: ExportedProgram
    edge: EdgeProgramManager | None
    report: Report

    @property
    def delegation(self) -> DelegationSummary | None:
        """Compute ops delegated and left portable (``None`` if not lowered)."""
        return delegation_summary(self.edge) if self.edge is not None else None

    def to_pte(self) -> bytes:
        """The ``.pte`` bytes (``to_executorch()``).

        Raises:
            GuardError: the export stopped before lowering; ``report`` says why.
        """
        if self.edge is None:
            raise GuardError("the export stopped before lowering:\n" + str(Report.of(self.report.errors)), self.report)
        return self.edge.to_executorch().buffer


def export_with_guards(
    model: torch.nn.Module,
    example_inputs: Sequence[object],
    *,
    backend: Backend = "xnnpack",
    placement: PlacementPolicy = "error",
    fold: bool = True,
    config: LintConfig | None = None,
) -> GuardedExport:
    """``torch.export`` ``model`` on ``example_inputs``, then :func:`lower_with_guards`."""
    return lower_with_guards(
        torch.export.export(model, tuple(example_inputs)),
        backend=backend,
        placement=placement,
        fold=fold,
        config=config,
    )


def lower_with_guards(
    program: ExportedProgram,
    *,
    backend: Backend = "xnnpack",
    placement: PlacementPolicy = "error",
    fold: bool = True,
    config: LintConfig | None = None,
) -> GuardedExport:
    """Guard, lint and lower a torch.export program; never crashes on a device constant.

    1. ``placement="copy"`` copies device constants to the host (EG103 findings).
    2. The program-stage lint (EG1xx-EG3xx). A constant the host cannot read (EG101 / EG102)
       stops here: the report says why, and ``edge`` is ``None``.
    3. ``to_edge_transform_and_lower`` with ``guard_passes(fold=fold)`` and the backend's
       partitioner, recording the partitioner's reason for each node it leaves out.
    4. The partitioned-stage lint (EG4xx; not for ``"portable"``, which delegates nothing)
       and the fold's findings (EG201).

    The lint does not raise: compare ``report`` with a fail level, as the command line does.
    """
    if backend not in ("xnnpack", "portable"):
        raise ValueError(f"backend must be 'xnnpack' or 'portable', not {backend!r}")
    config = config or LintConfig()
    report = Report()
    if placement == "copy":
        copier = ConstantPlacementPass("copy")
        try:
            program = copier(program).exported_program
            report += copier.report
        except GuardError:
            pass  # constants without data: the lint below reports them
    report += lint(program, config, fold=fold)
    unreadable = check_constant_placement(program)
    if unreadable.errors:  # stop even where the config ignores EG101 / EG102: lowering would crash
        reported = {f.code for f in report.errors}
        return GuardedExport(program, None, report + Report.of(f for f in unreadable if f.code not in reported))

    passes = guard_passes(fold=fold)
    partitioners = []
    if backend == "xnnpack":
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        partitioners = [XnnpackPartitioner()]
    with capture_partitioner_reasons() as reasons:
        edge = to_edge_transform_and_lower(program, transform_passes=passes, partitioner=partitioners)
    for guard in passes:
        if isinstance(guard, FoldConstantsPass):
            report += guard.report
    if partitioners:  # with no partitioner, nothing is meant to be delegated
        report += lint(edge, config, stage="partitioned", fold=fold, reasons={"forward": reasons})
    return GuardedExport(program, edge, report)
