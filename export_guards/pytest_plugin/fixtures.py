"""The fixtures: ``guarded_export``, ``check_export``, ``assert_delegated``, ``eg_device``; every
failure of theirs in a few lines, out of the ``except`` block, through ``_eg_fail``."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar, final

import pytest

from export_guards.pytest_plugin.options import with_overrides
from export_guards.pytest_plugin.quiet import import_runtime, is_library_module, libraries_kept_quiet
from export_guards.settings import Settings

if TYPE_CHECKING:  # the plugin loads in every pytest run: torch and the pipeline load when a fixture runs
    import torch

    from export_guards.analysis.delegation import DelegationSummary
    from export_guards.pipeline import GuardedExport
    from export_guards.report import Report
    from export_guards.targets import StepFailed
    from export_guards.testing.compare import OutputError

__all__ = ["ExportCheck", "assert_delegated", "check_export", "eg_device", "guarded_export"]

_T = TypeVar("_T")


@final
@dataclass(frozen=True)
class ExportCheck:
    """What ``check_export`` produced: the guarded export and the ``.pte`` bytes."""

    export: GuardedExport
    pte: bytes
    comparisons: list[list[OutputError]] = field(default_factory=list)  # per input set, per output

    @property
    def report(self) -> Report:
        """The export's findings."""
        return self.export.report

    @property
    def delegation(self) -> DelegationSummary | None:
        """Compute ops delegated and left portable (``None`` if not lowered)."""
        return self.export.delegation


@pytest.fixture
def guarded_export(export_guards_settings: Settings) -> Callable[..., GuardedExport]:
    """``guarded_export(model, example_inputs, **settings) -> GuardedExport``: export with
    the guards (placement, fold, lint before and after partitioning). Never fails the test."""

    def run(model: torch.nn.Module, example_inputs: Sequence[object], **overrides: Any) -> GuardedExport:
        settings = with_overrides(export_guards_settings, overrides, "guarded_export")
        with libraries_kept_quiet():
            return _export(settings, model, example_inputs)

    return run


@pytest.fixture
def check_export(export_guards_settings: Settings, _eg_fail: Callable[..., NoReturn]) -> Callable[..., ExportCheck]:
    """``check_export(model, example_inputs, *, extra_inputs=(), atol=1e-5, rtol=1e-5,
    **settings) -> ExportCheck``: export with the guards, fail on lint findings at the fail
    level, run the ``.pte`` in ``executorch.runtime`` on the example inputs and each set of
    ``extra_inputs``, and fail on any output that differs from eager beyond atol / rtol. Where
    executorch's runtime cannot run with the installed torch, the test skips at the run, saying
    in one line which torch it needs."""
    import torch

    with libraries_kept_quiet():
        from export_guards.render import render_text
        from export_guards.targets import StepFailed
        from export_guards.compat import RuntimeMismatch
        from export_guards.testing.compare import compare_outputs, input_differences, run_pte

        import_runtime()

    def check(
        model: torch.nn.Module,
        example_inputs: Sequence[object],
        *,
        extra_inputs: Sequence[Sequence[object]] = (),
        atol: float = 1e-5,
        rtol: float = 1e-5,
        **overrides: Any,
    ) -> ExportCheck:
        settings = with_overrides(export_guards_settings, overrides, "check_export")
        result = _failed_or(lambda: _export_in_steps(settings, model, example_inputs))
        if isinstance(result, StepFailed):  # failed here, out of the except block: no chained tracebacks
            _eg_fail(_step_failed(result), _failed_report(result))
        failing = result.report.at_least(settings.fail_level)
        if failing or result.edge is None:
            _eg_fail(
                f"export-guards: {len(failing)} finding(s) at or above {settings.fail_level.value} "
                f"({settings.recipe or settings.backend}):\n{render_text(type(result.report).of(failing), show_info=True)}",
                result,
            )
        pte = _failed_or(result.to_pte, "writing the program (to_executorch)", _source_of(model))
        if isinstance(pte, StepFailed):
            _eg_fail(_step_failed(pte), result.report + _failed_report(pte))
        with libraries_kept_quiet():
            checked = result.check_program(pte, config=settings)  # as `export-guards check` against executorch.runtime
        failing = checked.at_least(settings.fail_level)
        if failing:
            _eg_fail(
                f"export-guards: the written program would not load or run in executorch.runtime: {len(failing)} "
                f"finding(s) at or above {settings.fail_level.value}:\n{render_text(type(checked).of(failing), show_info=True)}",
                result.report + checked,
                pte,
            )
        comparisons = []
        for label, inputs in [("example inputs", example_inputs), *((f"extra inputs #{i}", x) for i, x in enumerate(extra_inputs))]:
            with torch.no_grad():
                eager = model(*inputs)
            actual = _ran(lambda: run_pte(pte, inputs))
            if isinstance(actual, RuntimeMismatch):  # the runtime cannot run with this torch: not the model's failure
                pytest.skip(str(actual))
            if isinstance(actual, Exception):  # failed here, out of the except block: no chained tracebacks
                _eg_fail(_run_failed(label, actual, input_differences(result.program, inputs)), result.report + checked, pte)
            errors = compare_outputs(eager, actual, atol=atol, rtol=rtol)
            comparisons.append(errors)
            if not all(e.within for e in errors):
                lines = "\n".join(f"  {e}" for e in errors)
                _eg_fail(
                    f"export-guards: the .pte's outputs differ from eager on the {label} "
                    f"(atol={atol}, rtol={rtol}, {settings.recipe or settings.backend}):\n{lines}\n"
                    "A common cause: torch.export specialised a branch or a shape on the example "
                    "inputs; pass inputs that take the other paths as extra_inputs.",
                    result,
                    pte,
                )
        return ExportCheck(result, pte, comparisons)

    return check


@pytest.fixture
def assert_delegated(_eg_fail: Callable[..., NoReturn]) -> Callable[..., None]:
    """``assert_delegated(result, *, min_fraction=1.0, portable_allowed=())``: fail unless at
    least ``min_fraction`` of the compute ops are delegated and none of the ops left portable
    is outside ``portable_allowed`` (op names such as ``"convolution"``); the message names
    each op left out, its source line and the partitioner's reason."""

    def check(result: ExportCheck | GuardedExport, *, min_fraction: float = 1.0, portable_allowed: Sequence[str] = ()) -> None:
        export = getattr(result, "export", result)
        summary = export.delegation
        if summary is None:
            _eg_fail("export-guards: the program was not lowered; see its report", export)
        left = sorted(set(summary.portable) - set(portable_allowed))
        if summary.fraction_delegated < min_fraction or left:
            details = "\n".join(f"  {f.location or '<unknown>'}: {f.message}" for f in export.report.with_code("EG401"))
            counts = ", ".join(f"{op} x{summary.portable[op]}" for op in sorted(summary.portable))
            # An ExportCheck has its .pte; a GuardedExport's is made only when it is kept.
            pte = result.pte if isinstance(result, ExportCheck) else export.to_pte
            _eg_fail(
                f"export-guards: {summary.fraction_delegated:.0%} of compute ops delegated "
                f"(at least {min_fraction:.0%} expected); left in the portable graph: {counts}"
                + (f" (not allowed: {', '.join(left)})" if left else "")
                + (f"\n{details}" if details else ""),
                export,
                pte,
            )

    return check


@pytest.fixture
def eg_device(request: pytest.FixtureRequest) -> torch.device:
    """Each device to run on: ``cpu``; ``cuda`` where present; ``trapdev`` with ``--eg-trapdev``."""
    import torch

    if request.param == "trapdev":
        from export_guards.testing import load_trapdev

        return load_trapdev()
    return torch.device(request.param)


def _export(settings: Settings, model: torch.nn.Module, example_inputs: Sequence[object]) -> GuardedExport:
    """``export_with_guards`` with ``settings``."""
    from export_guards.pipeline import export_with_guards

    return export_with_guards(model, tuple(example_inputs), config=settings)


def _export_in_steps(settings: Settings, model: torch.nn.Module, example_inputs: Sequence[object]) -> GuardedExport:
    """``export_with_guards`` with ``settings``, a step at a time: a step that fails raises a
    ``StepFailed`` that names it, its innermost cause and the line of the model's file."""
    from export_guards.pipeline import export_in_steps

    return export_in_steps(model, example_inputs, config=settings, source=_source_of(model))


def _failed_or(run: Callable[[], _T], step: str = "", source: Path | None = None) -> _T | StepFailed:
    """What ``run()`` returns, with the fixtures' own warnings hidden; or, when it fails, the
    ``StepFailed`` that says so (``run``'s own, else one for ``step``), returned rather than
    raised so that the test fails outside the ``except`` block, without the chain of the
    libraries' tracebacks."""
    from export_guards.targets import StepFailed
    from export_guards.targets import step as named

    try:
        with libraries_kept_quiet(), named(step, source) if step else contextlib.nullcontext():
            return run()
    except StepFailed as failed:
        return failed


def _ran(run: Callable[[], _T]) -> _T | Exception:
    """What ``run()`` returns, or what it raised (the runtime refusing a program or its inputs),
    returned for the same reason as :func:`_failed_or`."""
    try:
        with libraries_kept_quiet():
            return run()
    except Exception as error:  # noqa: BLE001 - reported as the test's failure
        return error


def _run_failed(label: str, error: BaseException, differences: Sequence[str]) -> str:
    """Why executorch.runtime could not run the program on ``label``: its error, and the inputs'
    shapes only where they differ from the exported ones."""
    from export_guards.testing.compare import runtime_error_text

    said = f"export-guards: executorch.runtime could not run the program on the {label}: {runtime_error_text(error)}"
    if differences:
        return (
            f"{said}\n" + "\n".join(f"  {d}" for d in differences[:8]) + "\ntorch.export fixes shapes (and branches on "
            "them) to the example inputs': export with dynamic_shapes, or give inputs of the exported shapes."
        )
    return (
        f"{said}\nThe inputs have the exported shapes and dtypes, and the program check found nothing at the fail "
        "level: `export-guards check model.pte --runtime` shows the runtime's own log."
    )


def _source_of(model: torch.nn.Module) -> Path | None:
    """The file that defines the model's class, where a failure is placed; ``None`` for a class
    of torch's own (an ``nn.Sequential``): then the innermost frame outside torch is."""
    try:
        path = inspect.getsourcefile(type(model))
    except (TypeError, OSError):  # a class made at run time
        return None
    return Path(path) if path is not None and not is_library_module(type(model).__module__) else None


def _step_failed(failed: StepFailed) -> str:
    """A failed step in a few lines, as the command says it: the step, the innermost cause, the
    user's line, what the lint had found; not the traceback, which is the libraries'."""
    return f"export-guards: {failed}\n(guarded_export raises the error itself, with its traceback)"


def _failed_report(failed: StepFailed) -> Report:
    """The report of a failed step, for the artifacts: what the lint found before it failed
    (a ``GuardError``'s report), then the step's own (``StepFailed.report``)."""
    from export_guards.report import Report

    found = getattr(failed.__cause__, "report", None)
    return (found if isinstance(found, Report) else Report()) + failed.report
