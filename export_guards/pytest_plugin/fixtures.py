"""The fixtures: ``guarded_export``, ``check_export``, ``assert_delegated``, ``eg_device``; every
failure of theirs in a few lines, out of the ``except`` block, through ``_eg_fail``."""

from __future__ import annotations

import contextlib
import copy
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar, final

import pytest

from export_guards.pytest_plugin.options import with_keywords
from export_guards.pytest_plugin.quiet import import_runtime, is_library_module, libraries_kept_quiet
from export_guards.settings import Settings

if TYPE_CHECKING:  # the plugin loads in every pytest run: torch and the pipeline load when a fixture runs
    import torch

    from export_guards.analysis.delegation import DelegationSummary
    from export_guards.lowering import Lowering
    from export_guards.pipeline import GuardedExport
    from export_guards.report import Report
    from export_guards.targets import Exportable, StepFailed
    from export_guards.verify import EagerReference, InputSet, OutputError, Tolerance

__all__ = ["ExportCheck", "assert_delegated", "check_export", "eg_device", "guarded_export"]

_T = TypeVar("_T")


@final
@dataclass(frozen=True)
class ExportCheck:
    """What ``check_export`` produced: the guarded export and the ``.pte`` bytes."""

    export: GuardedExport
    pte: bytes
    comparisons: list[list[OutputError]] = field(default_factory=list)  # per input set, then per step; per output
    skipped: list[str] = field(default_factory=list)
    """Each dynamic dimension's bound that did not run, and why (``length=64 (the upper bound):
    eager raised IndexError: ...``): eager refused the inputs made for it, or none could be made."""

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
    """``guarded_export(model, example_inputs, *, dynamic_shapes=None, strict=None, lowering=None,
    **settings) -> GuardedExport``: export with the guards (placement, fold, lint before and after
    partitioning); ``dynamic_shapes`` and ``strict`` as torch.export takes them; ``lowering`` (a
    ``Lowering``, or an ``Exportable``'s) quantizes a copy of the model first and lowers as it
    says. ``guarded_export(exportable)`` takes all of them from an ``Exportable``, as the lint
    does. Never fails the test."""

    def run(
        model: torch.nn.Module | Exportable,
        example_inputs: Sequence[object] | None = None,
        *,
        dynamic_shapes: Any = None,
        strict: bool | None = None,
        lowering: Lowering | Exportable | None = None,
        **overrides: Any,
    ) -> GuardedExport:
        settings = with_keywords(
            export_guards_settings,
            overrides,
            "guarded_export",
            ("example_inputs", "dynamic_shapes", "strict", "lowering"),
        )
        given = _Given.of("guarded_export", model, example_inputs, dynamic_shapes, strict, lowering)
        if given.inputs is None:
            pytest.fail("export-guards: guarded_export(model, example_inputs) needs the example inputs", pytrace=False)
        with libraries_kept_quiet():
            return _export(settings, given.model, given.inputs, given.dynamic_shapes, given.strict, given.lowering)

    return run


@pytest.fixture
def check_export(export_guards_settings: Settings, _eg_fail: Callable[..., NoReturn]) -> Callable[..., ExportCheck]:
    """``check_export(model, example_inputs=None, *, steps=(), extra_inputs=(), dynamic_shapes=None,
    strict=None, lowering=None, atol=None, rtol=None, **settings) -> ExportCheck``: export with the
    guards (``dynamic_shapes`` and ``strict`` as torch.export takes them; ``lowering``, a
    ``Lowering`` or an ``Exportable``'s: its quantize step run on a copy of the model, which is
    then the model exported and compared, and its partitioners and configs), fail on lint findings at
    the fail level, run the ``.pte`` in ``executorch.runtime`` and fail on any output that
    differs from eager beyond atol / rtol (``Tolerance.absolute``; 1e-5 each where not given, or,
    with neither given, the lint's tolerance for a program that quantizes, ``Tolerance.by_dtype(
    quantized=True)``: a delegate rounds otherwise than torchao's reference). The example inputs and each
    set of ``extra_inputs`` run on a freshly loaded program, and eagerly on a fresh copy of the
    model; ``steps`` run in order through one loaded method, and eagerly through one copy,
    compared step by step (a model with state: a decoder's prefill, then its decode steps).
    Without ``example_inputs`` the export takes the first step's. With ``dynamic_shapes``, the
    export's inputs also run at each dynamic dimension's bounds, cropped or tiled to them (the
    input sets ``export-guards lint`` runs, ``export_guards.verify.input_sets``; a bound where
    eager raises on those inputs is not run), each on a freshly loaded program. Outputs that
    eager does not repeat from the same state (a random op) are not compared. The caller's model
    is never run nor changed. ``check_export(exportable)`` takes the model, inputs, dynamic shapes,
    strictness and lowering from an ``Exportable`` (a factory's, as ``export-guards lint`` does:
    the same program, byte for byte). Where executorch's runtime cannot run with the installed torch, the test
    skips at the run, saying in one line which torch it needs."""
    with libraries_kept_quiet():
        from export_guards.verify import EagerReference

        import_runtime()

    def check(
        model: torch.nn.Module | Exportable,
        example_inputs: Sequence[object] | None = None,
        *,
        steps: Sequence[Sequence[object]] = (),
        extra_inputs: Sequence[Sequence[object]] = (),
        dynamic_shapes: Any = None,
        strict: bool | None = None,
        lowering: Lowering | Exportable | None = None,
        atol: float | None = None,
        rtol: float | None = None,
        **overrides: Any,
    ) -> ExportCheck:
        settings = with_keywords(export_guards_settings, overrides, "check_export", _OWN_KEYWORDS)
        given = _Given.of("check_export", model, example_inputs, dynamic_shapes, strict, lowering)
        if given.inputs is None and not steps:
            pytest.fail(
                "export-guards: check_export(model, example_inputs) needs the example inputs, or steps=[...]",
                pytrace=False,
            )
        inputs = steps[0] if given.inputs is None else given.inputs
        exported_model = given.quantized(inputs, _eg_fail)  # the caller's model when nothing quantizes it
        pristine = copy.deepcopy(exported_model)  # the state the program starts from, for each eager run
        exported = _Exported.made(
            settings,
            exported_model,
            inputs,
            given.dynamic_shapes,
            given.strict,
            given.lowering.after_quantize,
            _eg_fail,
        )
        reference = EagerReference(pristine, exported.result.program, copy_model=True)
        sets, skipped = _input_sets(exported.result.program, given.inputs, extra_inputs, steps, inputs)
        tolerance = _tolerance(exported.result.program, atol, rtol)
        comparisons = [
            compared
            for label, each in sets
            for compared in exported.compared(label, each, reference, tolerance, skipped)
        ]
        return ExportCheck(exported.result, exported.pte, comparisons, skipped)

    return check


def _tolerance(program: torch.export.ExportedProgram, atol: float | None, rtol: float | None) -> Tolerance:
    """``atol`` / ``rtol`` as ``torch.allclose`` takes them (1e-5 where not given); with neither
    given, for a program that quantizes, the lint's tolerance for one (what it passes, the
    fixture passes)."""
    from export_guards.analysis.ops import inserted_by_quantizer
    from export_guards.verify import Tolerance

    if atol is None and rtol is None and any(inserted_by_quantizer(node) for node in program.graph.nodes):
        return Tolerance.by_dtype(quantized=True)
    return Tolerance.absolute(atol=1e-5 if atol is None else atol, rtol=1e-5 if rtol is None else rtol)


def _said(tolerance: Tolerance) -> str:
    """The tolerance, as a failure's first line says it."""
    if tolerance.scaled:
        return "the lint's tolerance for a quantized program"
    return f"atol={tolerance.atol}, rtol={tolerance.rtol}"


_OWN_KEYWORDS = ("example_inputs", "steps", "extra_inputs", "dynamic_shapes", "strict", "lowering", "atol", "rtol")


@final
@dataclass(frozen=True)
class _Given:
    """What a fixture exports: the model, its example inputs (``None``: none given), dynamic
    shapes, strictness and lowering, given one by one or as an ``Exportable`` (a factory's
    return value: the lint's), first or as ``lowering=``."""

    model: torch.nn.Module
    inputs: tuple[object, ...] | None
    dynamic_shapes: Any
    strict: bool | None
    lowering: Lowering

    @classmethod
    def of(
        cls,
        fixture: str,
        model: Any,
        inputs: Sequence[object] | None,
        dynamic_shapes: Any,
        strict: bool | None,
        lowering: Lowering | Exportable | None,
    ) -> _Given:
        """What the fixture named ``fixture`` was given; the test fails on a value given twice
        (in the ``Exportable`` and as a keyword) or a lowering that ExecuTorch does not take."""
        from export_guards.lowering import Lowering
        from export_guards.targets import Exportable

        if isinstance(lowering, Exportable):  # the whole lowering, its quantize step too
            lowering = _lowering_of(lowering, fixture)
        if not isinstance(model, Exportable):
            return cls(model, None if inputs is None else tuple(inputs), dynamic_shapes, strict, lowering or Lowering())
        made, own = model, _lowering_of(model, fixture)
        twice = [
            name
            for name, mine, theirs in (
                ("example_inputs", inputs, made.inputs),
                ("dynamic_shapes", dynamic_shapes, made.dynamic_shapes),
                ("strict", strict, made.strict),
            )
            if mine is not None and theirs is not None
        ]
        twice += ["lowering"] if lowering is not None and (own.chosen or own.quantize is not None) else []
        if twice:
            pytest.fail(
                f"export-guards: {fixture}(exportable, ...) was given {', '.join(twice)} twice, in the Exportable and as a keyword: "
                "give each once (other inputs to compare: extra_inputs=[...])",
                pytrace=False,
            )
        made_inputs = (
            made.inputs
            if isinstance(made.inputs, tuple)
            else tuple(made.inputs)
            if isinstance(made.inputs, list)
            else (made.inputs,)
        )
        return cls(
            made.model,
            made_inputs if inputs is None else tuple(inputs),
            made.dynamic_shapes if dynamic_shapes is None else dynamic_shapes,
            made.strict if strict is None else strict,
            own if lowering is None else lowering,
        )

    def quantized(self, inputs: Sequence[object], fail: Callable[..., NoReturn]) -> torch.nn.Module:
        """The model the lowering's quantize step makes of a copy of the caller's (as the lint
        quantizes: ``export_guards.targets.quantized``), or the caller's model without one; the
        test fails, in a few lines, where the step fails."""
        from export_guards.targets import StepFailed, quantized

        made = _failed_or(lambda: quantized(self.lowering, self.model, tuple(inputs), _source_of(self.model)))
        if isinstance(made, StepFailed):  # failed here, out of the except block: no chained tracebacks
            fail(_step_failed(made), _failed_report(made))
        return made


def _lowering_of(made: Exportable, fixture: str) -> Lowering:
    """``made.lowering``; the test fails where one of its settings is not what ExecuTorch takes."""
    try:
        return made.lowering
    except TypeError as error:
        pytest.fail(f"export-guards: {fixture}'s Exportable: its {error}", pytrace=False)


def _input_sets(
    program: torch.export.ExportedProgram,
    example_inputs: Sequence[object] | None,
    extra_inputs: Sequence[Sequence[object]],
    steps: Sequence[Sequence[object]],
    exported_on: Sequence[object],
) -> tuple[list[tuple[str, InputSet]], list[str]]:
    """The input sets ``check_export`` runs, each with how a failure names it: the example
    inputs, each set of extra inputs, the steps, then the inputs at each dynamic dimension's
    bounds (made from ``exported_on``); and each bound no inputs could be made for, and why."""
    from export_guards.verify import InputSet, input_sets

    sets = [] if example_inputs is None else [("example inputs", InputSet((example_inputs,)))]
    sets += [(f"extra inputs #{i}", InputSet((inputs,))) for i, inputs in enumerate(extra_inputs)]
    sets += [("steps", InputSet(tuple(steps)))] if steps else []
    at_bounds, not_made = input_sets(program, exported_on)
    return sets + [(f"inputs at {each.bound}", each) for each in at_bounds[1:]], not_made


@final
@dataclass(frozen=True)
class _Exported:
    """The guarded export ``check_export`` made, its written program and that program's check;
    the fixture's settings and the way a failure ends the test."""

    result: GuardedExport
    pte: bytes
    checked: Report
    settings: Settings
    fail: Callable[..., NoReturn]

    @classmethod
    def made(
        cls,
        settings: Settings,
        model: torch.nn.Module,
        inputs: Sequence[object],
        dynamic_shapes: Any,
        strict: bool | None,
        lowering: Lowering | None,
        fail: Callable[..., NoReturn],
    ) -> _Exported:
        """Export, write and check the program; the test fails at the first step that fails, at
        a finding at the fail level, or at a program that would not load or run."""
        from export_guards.render import render_text
        from export_guards.targets import StepFailed
        from export_guards.verify import check_program

        result = _failed_or(lambda: _export_in_steps(settings, model, inputs, dynamic_shapes, strict, lowering))
        if isinstance(result, StepFailed):  # failed here, out of the except block: no chained tracebacks
            fail(_step_failed(result), _failed_report(result))
        failing = result.report.at_least(settings.fail_level)
        if failing or result.edge is None:
            said = render_text(type(result.report).of(failing), show_info=True)
            fail(
                f"export-guards: {len(failing)} finding(s) at or above {settings.fail_level.value} ({settings.recipe or settings.backend}):\n{said}",
                result,
            )
        pte = _failed_or(
            lambda: result.to_pte(refuse=False), "writing the program (to_executorch)", _source_of(model)
        )  # checked below
        if isinstance(pte, StepFailed):
            fail(_step_failed(pte), result.report + _failed_report(pte))
        with libraries_kept_quiet():
            checked = check_program(
                result, pte, settings=settings
            )  # as `export-guards check` against executorch.runtime
        failing = checked.at_least(settings.fail_level)
        if failing:
            fail(
                f"export-guards: the written program would not load or run in executorch.runtime: {len(failing)} "
                f"finding(s) at or above {settings.fail_level.value}:\n{render_text(type(checked).of(failing), show_info=True)}",
                result.report + checked,
                pte,
            )
        return cls(result, pte, checked, settings, fail)

    def compared(
        self, label: str, each: InputSet, reference: EagerReference, tolerance: Tolerance, skipped: list[str]
    ) -> list[list[OutputError]]:
        """``each`` run on a freshly loaded program and on eager from the same state, step by
        step, each step's outputs compared under ``tolerance``; the test fails at the first step
        that fails or differs. A bound where eager raises is added to ``skipped`` instead."""
        from export_guards.compat import RuntimeMismatch
        from export_guards.verify import LoadedMethod, compare_outputs, expected_at

        expected = expected_at(reference, each)
        if isinstance(expected, str):  # inputs made for a bound that the model does not take: no reference there
            skipped.append(expected)
            return []
        method = _ran(lambda: LoadedMethod(self.pte))
        comparisons = []
        for index, (inputs, eager) in enumerate(zip(each.steps, expected)):
            name = f"step #{index}" if label == "steps" else label
            actual = method if isinstance(method, Exception) else _ran(lambda: method(inputs))  # noqa: B023 - called at once, in this iteration
            if isinstance(actual, RuntimeMismatch):  # the runtime cannot run with this torch: not the model's failure
                pytest.skip(str(actual))
            if isinstance(actual, Exception):  # failed here, out of the except block: no chained tracebacks
                self.fail(
                    _run_failed(name, actual, self.result.program, inputs, at_bound=bool(each.bound)),
                    self.result.report + self.checked,
                    self.pte,
                )
            errors = compare_outputs(eager.outputs, actual, tolerance, unsteady=eager.unsteady)
            comparisons.append(errors)
            if not all(e.within for e in errors):
                self.fail(
                    self._differs(name, errors, tolerance, label == "steps", index, bool(each.bound)),
                    self.result,
                    self.pte,
                )
        return comparisons

    def _differs(
        self, name: str, errors: Sequence[OutputError], tolerance: Tolerance, stepped: bool, index: int, at_bound: bool
    ) -> str:
        """Why the program's outputs on ``name`` differ from eager's: each output, then the likely cause."""
        from export_guards.verify import QUANTIZATION_ERROR, mutable_buffers, quantizes

        state = mutable_buffers(self.result.program)
        lines = "\n".join(f"  {e}" for e in errors)
        return (
            f"export-guards: the .pte's outputs differ from eager on the {name} ({_said(tolerance)}, "
            f"{self.settings.recipe or self.settings.backend}):\n{lines}\n"
            + (
                _state_advice(state, stepped, index)
                if state
                else _AT_BOUND
                if at_bound
                else QUANTIZATION_ERROR
                if quantizes(self.result.program)
                else _SPECIALISED
            )
        )


_SPECIALISED = (
    "A common cause: torch.export specialised a branch or a shape on the example "
    "inputs; pass inputs that take the other paths as extra_inputs."
)


_AT_BOUND = (
    "The program matched eager on the example inputs: it computes otherwise at this size (code that "
    "torch.export traced for the example's size, such as a branch it could not see, or a kernel that fails "
    "there). The inputs are the example's, cropped or tiled to this size."
)


def _state_advice(buffers: Sequence[str], stepped: bool, index: int) -> str:
    """Why a program that keeps state (writes ``buffers``) may differ from eager: its state, not its shapes."""
    named = ", ".join(buffers[:4]) + (f" and {len(buffers) - 4} more" if len(buffers) > 4 else "")
    said = f"The program keeps state between calls in {len(buffers)} mutable buffer(s) ({named}). "
    if not stepped:
        return said + (
            "Each set of inputs runs on a freshly loaded program and eagerly on a fresh copy of the model, both "
            "from the model's state before export; inputs that follow earlier calls (a decode step after a "
            "prefill) go in steps=[...], run in order through one loaded method."
        )
    before = f"steps #0 to #{index - 1} matched, so " if index else ""
    return said + (
        f"The steps run in order through one loaded method and eagerly through one copy of the model: {before}"
        "the state the program carries differs from eager's: its starting values (the program starts a "
        "mutable buffer from zeros, EG308) or what a step writes."
    )


@pytest.fixture
def assert_delegated(_eg_fail: Callable[..., NoReturn]) -> Callable[..., None]:
    """``assert_delegated(result, *, min_fraction=1.0, portable_allowed=())``: fail unless at
    least ``min_fraction`` of the compute ops are delegated and none of the ops left portable
    is outside ``portable_allowed`` (op names such as ``"convolution"``); the message names
    each op left out, its source line and the partitioner's reason."""

    def check(
        result: ExportCheck | GuardedExport, *, min_fraction: float = 1.0, portable_allowed: Sequence[str] = ()
    ) -> None:
        export = result.export if isinstance(result, ExportCheck) else result
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


def _export(
    settings: Settings,
    model: torch.nn.Module,
    example_inputs: Sequence[object],
    dynamic_shapes: Any,
    strict: bool | None,
    lowering: Lowering | None,
) -> GuardedExport:
    """``export_with_guards`` with ``settings``."""
    from export_guards.pipeline import export_with_guards

    return export_with_guards(
        model, tuple(example_inputs), config=settings, dynamic_shapes=dynamic_shapes, strict=strict, lowering=lowering
    )


def _export_in_steps(
    settings: Settings,
    model: torch.nn.Module,
    example_inputs: Sequence[object],
    dynamic_shapes: Any,
    strict: bool | None,
    lowering: Lowering | None,
) -> GuardedExport:
    """``export_with_guards`` with ``settings``, a step at a time: a step that fails raises a
    ``StepFailed`` that names it, its innermost cause and the line of the model's file."""
    from export_guards.pipeline import export_in_steps

    return export_in_steps(
        model,
        example_inputs,
        config=settings,
        source=_source_of(model),
        dynamic_shapes=dynamic_shapes,
        strict=strict,
        lowering=lowering,
    )


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


def _run_failed(
    label: str,
    error: BaseException,
    program: torch.export.ExportedProgram,
    inputs: Sequence[object],
    *,
    at_bound: bool = False,
) -> str:
    """Why executorch.runtime could not run the program on ``label``: its error, and the inputs'
    shapes only where they differ from the exported ones."""
    from export_guards.verify import input_differences, runtime_error_text

    differences = input_differences(program, inputs)
    said = f"export-guards: executorch.runtime could not run the program on the {label}: {runtime_error_text(error)}"
    if at_bound:
        return f"{said}\n{_AT_BOUND}"
    if differences:
        return (
            f"{said}\n" + "\n".join(f"  {d}" for d in differences[:8]) + "\ntorch.export fixes shapes (and branches on "
            "them) to the example inputs': export with dynamic_shapes (check_export(..., dynamic_shapes=...), or "
            "a factory's third item), or give inputs of the exported shapes."
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
