"""The whole guarded export in one call: placement, lint, fold, lowering, partitioned lint."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, final

import torch
from executorch.exir import EdgeProgramManager, ExecutorchBackendConfig, to_edge_transform_and_lower
from executorch.exir.backend.partitioner import Partitioner
from executorch.exir.pass_base import ExportedProgramPassBase, ExportedProgramPassResult
from torch.export import ExportedProgram

from export_guards.analysis.delegation import DelegationSummary, delegation_summary
from export_guards.analysis.partitioner_reasons import capture_partitioner_reasons
from export_guards.errors import ConstantPlacementError, GuardError, LoweringFailed
from export_guards.linter import LINT_RULES, lint
from export_guards.linter.rules.placement import CONSTANT_ON_DEVICE, PLACEMENT_RULES
from export_guards.passes.defaults import guard_passes
from export_guards.passes.emit import emit_passes
from export_guards.passes.partitioner import guard_partitioners
from export_guards.passes.placement import ConstantPlacementPass, check_constant_placement
from export_guards.passes.result import GuardPassResult
from export_guards.report import Report
from export_guards.ruleset import describe_error, settle
from export_guards.settings import DEVICE_MEMORY_BACKENDS, Backend, PlacementPolicy, Settings
from export_guards.targets import load_target, step, target_file

__all__ = ["Backend", "GuardedExport", "export_target", "export_with_guards", "lower_with_guards"]


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
        """The ``.pte`` bytes (``to_executorch()``, with :func:`emit_passes` guarding the
        emitter's reads).

        Raises:
            GuardError: the export stopped before lowering; ``report`` says why.
        """
        if self.edge is None:
            raise GuardError("the export stopped before lowering:\n" + str(Report.of(self.report.errors)), self.report)
        return self.edge.to_executorch(ExecutorchBackendConfig(passes=emit_passes())).buffer


def export_with_guards(
    model: torch.nn.Module,
    example_inputs: Sequence[object],
    *,
    backend: Backend | None = None,
    placement: PlacementPolicy | None = None,
    fold: bool | None = None,
    config: Settings | None = None,
) -> GuardedExport:
    """``torch.export`` ``model`` on ``example_inputs``, then :func:`lower_with_guards`."""
    return lower_with_guards(
        torch.export.export(model, tuple(example_inputs)),
        backend=backend,
        placement=placement,
        fold=fold,
        config=config,
    )


def export_target(target: str, arguments: Mapping[str, Any] | None = None, *, config: Settings | None = None) -> GuardedExport:
    """The guarded export of a model named ``path/to/file.py:factory`` (or
    ``package.module:factory``), called with ``arguments``, one step at a time.

    Raises:
        TargetError: the target names no file, module or callable.
        StepFailed: building the model, ``torch.export`` or lowering failed; the message names
            the step, the exception and the line of the target's file it went through.
    """
    settings = config or Settings()
    path = target_file(target)
    model, inputs = load_target(target, arguments)
    with step("torch.export", path):
        program = torch.export.export(model, inputs)
    with step(f"lowering ({settings.backend})", path):
        return lower_with_guards(program, config=settings)


def lower_with_guards(
    program: ExportedProgram,
    *,
    backend: Backend | None = None,
    placement: PlacementPolicy | None = None,
    fold: bool | None = None,
    config: Settings | None = None,
) -> GuardedExport:
    """Guard, lint and lower a torch.export program; never crashes on a device constant.

    ``backend``, ``placement`` and ``fold`` default to ``config``'s (``"xnnpack"``,
    ``"error"``, on).

    1. ``placement="copy"`` copies device constants to the host (EG103 findings).
    2. The program-stage lint (EG1xx-EG3xx). A constant the host cannot read (EG101 / EG102)
       stops here, whatever the settings select (lowering would crash): the report says
       why, and ``edge`` is ``None``. With ``"cuda"``, whose backend holds device constants
       on purpose, a device constant stops the export only where a host reader would read
       it: the guarded partitioner says so after it decides.
    3. ``to_edge_transform_and_lower`` with ``guard_passes(fold=fold)`` and the backend's
       partitioner (guarded: :func:`guard_partitioners`), recording the partitioner's reason
       for each node it leaves out.
    4. The partitioned-stage lint (EG4xx; for ``"xnnpack"``, whose decisions those rules
       explain) and the fold's findings (EG201).

    ``GuardedExport.to_pte`` emits with :func:`emit_passes` as well.

    The lint does not raise: compare ``report`` with a fail level, as the command line does.

    Raises:
        ValueError: an unknown backend or placement policy.
        LoweringFailed: ExecuTorch could not lower the program; its ``report`` holds the
            lint's findings, which often say why.
    """
    given = {"backend": backend, "placement": placement, "fold": fold}
    settings = (config or Settings()).updated({k: v for k, v in given.items() if v is not None}, "lower_with_guards")
    report = Report()
    if settings.placement == "copy":
        try:
            copied = ConstantPlacementPass("copy")(program)
            program, report = copied.exported_program, settle(copied.report, settings)
        except GuardError:
            pass  # constants without data: reported below
    partitioners = guard_partitioners(_partitioners(settings.backend))
    unreadable = check_constant_placement(program)
    if settings.backend in DEVICE_MEMORY_BACKENDS:  # the guarded partitioners check device constants
        unreadable = Report.of(f for f in unreadable if f.code != CONSTANT_ON_DEVICE)
    report += lint(program, settings, rules=LINT_RULES.without(PLACEMENT_RULES))  # that fact once, above
    if unreadable:  # say why the export stopped, whatever the settings select
        return GuardedExport(program, None, report + unreadable)

    passes = [_recorded(guard) for guard in guard_passes(fold=settings.fold, partitioner=partitioners or None)]
    try:
        with capture_partitioner_reasons() as reasons:
            edge = to_edge_transform_and_lower(program, transform_passes=passes, partitioner=partitioners)
    except ConstantPlacementError as error:  # a partition would have read device memory
        return GuardedExport(program, None, report + error.report)
    except GuardError:
        raise
    except Exception as error:  # keep what the lint found: it often says why, in the user's terms
        raise LoweringFailed(f"to_edge_transform_and_lower failed: {describe_error(error)}", report) from error
    report += settle((f for guard in passes for found in guard.reports for f in found), settings)
    if settings.backend == "xnnpack":  # the partitioned-stage rules speak of XNNPACK's decisions
        report += lint(edge, settings, stage="partitioned", reasons={"forward": reasons})
    return GuardedExport(program, edge, report)


def _partitioners(backend: Backend) -> list[Partitioner]:
    """The partitioners of ``backend``, imported only when asked for."""
    if backend == "xnnpack":
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        return [XnnpackPartitioner()]
    if backend == "cuda":
        from executorch.backends.cuda.cuda_partitioner import CudaPartitioner

        return [CudaPartitioner([])]
    return []


class _Recorded(ExportedProgramPassBase):
    """A guard pass inside ``transform_passes``, which keep only the program of each result:
    this one keeps, for this one export, the report of each call."""

    def __init__(self, guard: ExportedProgramPassBase) -> None:
        self.guard = guard
        self.reports: list[Report] = []

    def call(self, exported_program: ExportedProgram) -> ExportedProgramPassResult:
        result = self.guard(exported_program)
        if isinstance(result, GuardPassResult):
            self.reports.append(result.report)
        return result


def _recorded(guard: ExportedProgramPassBase) -> _Recorded:
    """``guard``, recorded; named as ``guard``'s class, by which ExecuTorch's pass manager
    names a pass that fails."""
    return type(type(guard).__name__, (_Recorded,), {})(guard)
