"""pytest plugin for model authors: export with the guards, run on the ExecuTorch runtime,
compare with eager, in one line. Active whenever export-guards is installed (``pytest11``).

Fixtures: ``guarded_export``, ``check_export``, ``assert_delegated``, ``eg_device``.
Marker: ``@pytest.mark.export_guards(select=..., ignore=..., backend=..., fail_level=...,
fold=..., placement=...)``. Options: ``--eg-backend``, ``--eg-artifacts DIR``, ``--eg-trapdev``
(and the ini keys ``export_guards_backend``, ``export_guards_artifacts``). Under pytest-xdist each
worker gives torch its share of the cores. The warnings of the fixtures' own steps (torch's,
ExecuTorch's) are not reported; the test's and the model's are.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import logging
import os
import re
import shutil
import sys
import warnings
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar, final

import pytest

from export_guards.quiet import libraries_quiet
from export_guards.settings import BACKENDS, Settings

if TYPE_CHECKING:  # the plugin loads in every pytest run: torch and the pipeline load when a fixture runs
    import torch

    from export_guards.analysis.delegation import DelegationSummary
    from export_guards.pipeline import GuardedExport
    from export_guards.report import Report
    from export_guards.targets import StepFailed
    from export_guards.testing.compare import OutputError

pytest.register_assert_rewrite("export_guards.testing")

__all__ = ["ExportCheck"]

_T = TypeVar("_T")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("export-guards", "export-guards: export, lint, run on ExecuTorch, compare")
    group.addoption("--eg-backend", choices=BACKENDS, help="backend of the export-guards fixtures (default xnnpack)")
    group.addoption("--eg-artifacts", metavar="DIR", help="keep the .pte and report of each failing export check here")
    group.addoption("--eg-trapdev", action="store_true", help="also run eg_device tests on the trapdev test accelerator")
    parser.addini("export_guards_backend", f"backend of the export-guards fixtures: {' or '.join(BACKENDS)}", default="")
    parser.addini("export_guards_artifacts", "directory for the .pte and report of each failing export check", default="")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "export_guards(select=None, ignore=None, backend=None, fail_level=None, fold=None, placement=None): "
        "settings of the export-guards fixtures for this test",
    )
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:  # a pytest-xdist worker
        _share_cores(int(workerinput["workercount"]))


def _share_cores(workers: int) -> None:
    """Set torch's thread count to one worker's share of this process's cores.

    By default every worker's torch runs as many threads as there are cores, so ``workers``
    times too many threads fight for them (measured, ``-n 2`` on 2 cores, tests running a conv
    net eagerly: 1.6x the wall time and 1.7x the CPU time). An explicit ``OMP_NUM_THREADS`` is
    the user's choice and is left alone.
    """
    if "OMP_NUM_THREADS" in os.environ:
        return
    import torch

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    torch.set_num_threads(max(1, cores // workers))


# pytest (9.2+) also hands its log capture to loggers that do not propagate. torch's
# structured-trace logger ``torch.__trace`` is one: always at DEBUG, with empty messages meant
# for tlparse, so every failure report grew ~25 empty "DEBUG torch.__trace" lines (and torch
# built each trace payload for them). Each test phase detaches from it the handlers it shares
# with the root logger (pytest's); torch's own ``TORCH_TRACE`` handler stays, and no other
# logger is touched. ``trylast``: runs inside pytest's logging wrapper, after it attached.
@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    __tracebackhide__ = True
    _detach_torch_trace()
    return (yield)


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    __tracebackhide__ = True
    _detach_torch_trace()
    return (yield)


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    __tracebackhide__ = True
    _detach_torch_trace()
    return (yield)


def _detach_torch_trace() -> None:
    trace = logging.Logger.manager.loggerDict.get("torch.__trace")  # never imports torch
    if isinstance(trace, logging.Logger):
        for handler in set(trace.handlers) & set(logging.getLogger().handlers):
            trace.removeHandler(handler)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "eg_device" in metafunc.fixturenames:
        import torch

        devices = ["cpu"]
        if torch.cuda.is_available():
            devices.append("cuda")
        if metafunc.config.getoption("--eg-trapdev"):
            devices.append("trapdev")
        metafunc.parametrize("eg_device", devices, indirect=True)


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
def export_guards_settings(request: pytest.FixtureRequest) -> Settings:
    """This test's settings: ``[tool.export-guards]`` of the nearest ``pyproject.toml`` that has
    the table, from the test file's folder up, then the ini keys, the command line, and
    ``@pytest.mark.export_guards`` (module, class, then function: the closest wins, key by key)."""
    config = request.config
    settings = _checked(lambda: Settings.discover(request.path)[0])
    backend = config.getoption("--eg-backend") or config.getini("export_guards_backend")
    if backend:
        settings = _checked(lambda: settings.updated({"backend": backend}, "--eg-backend / export_guards_backend"))
    for marker in reversed(list(request.node.iter_markers("export_guards"))):
        if marker.args:
            raise pytest.UsageError("@pytest.mark.export_guards takes keyword arguments only")
        settings = _with_overrides(settings, marker.kwargs, "@pytest.mark.export_guards")
    return settings


def _with_overrides(settings: Settings, overrides: dict[str, Any], where: str) -> Settings:
    return _checked(lambda: settings.updated(overrides, where))


def _checked(make: Callable[[], Settings]) -> Settings:
    """Settings, or a usage error that says what is wrong with them."""
    try:
        return make()
    except (OSError, ValueError) as error:
        raise pytest.UsageError(str(error)) from None


@pytest.fixture
def _eg_fail(request: pytest.FixtureRequest) -> Callable[..., NoReturn]:
    """``fail(message, export, pte=None)``: fail the test with ``message``, keeping ``export``'s
    report (``export``: a ``GuardedExport``, or the ``Report`` of a step that failed; and
    ``pte``: bytes, or a function that makes them) where ``--eg-artifacts`` says, plus the line
    that says where, or why they could not be kept. Every failure of the fixtures goes through
    here."""
    config = request.config
    folder = config.getoption("--eg-artifacts") or config.getini("export_guards_artifacts")
    # Relative to where pytest was started, whatever directory a test moves to.
    root = (config.invocation_params.dir / folder) if folder else None

    def fail(message: str, export: GuardedExport | Report, pte: bytes | Callable[[], bytes | None] | None = None) -> NoReturn:
        pytest.fail(message + _save(root, request.node.nodeid, export, pte), pytrace=False)

    return fail


@pytest.fixture
def guarded_export(export_guards_settings: Settings) -> Callable[..., GuardedExport]:
    """``guarded_export(model, example_inputs, **settings) -> GuardedExport``: export with
    the guards (placement, fold, lint before and after partitioning). Never fails the test."""

    def run(model: torch.nn.Module, example_inputs: Sequence[object], **overrides: Any) -> GuardedExport:
        settings = _with_overrides(export_guards_settings, overrides, "guarded_export")
        with _libraries_kept_quiet():
            return _export(settings, model, example_inputs)

    return run


@pytest.fixture
def check_export(export_guards_settings: Settings, _eg_fail: Callable[..., NoReturn]) -> Callable[..., ExportCheck]:
    """``check_export(model, example_inputs, *, extra_inputs=(), atol=1e-5, rtol=1e-5,
    **settings) -> ExportCheck``: export with the guards, fail on lint findings at the fail
    level, run the ``.pte`` in ``executorch.runtime`` on the example inputs and each set of
    ``extra_inputs``, and fail on any output that differs from eager beyond atol / rtol."""
    import torch

    with _libraries_kept_quiet():
        from export_guards.render import render_text
        from export_guards.targets import StepFailed
        from export_guards.testing.compare import compare_outputs, input_differences, run_pte

        _import_runtime()

    def check(
        model: torch.nn.Module,
        example_inputs: Sequence[object],
        *,
        extra_inputs: Sequence[Sequence[object]] = (),
        atol: float = 1e-5,
        rtol: float = 1e-5,
        **overrides: Any,
    ) -> ExportCheck:
        settings = _with_overrides(export_guards_settings, overrides, "check_export")
        result = _failed_or(lambda: _export_in_steps(settings, model, example_inputs))
        if isinstance(result, StepFailed):  # failed here, out of the except block: no chained tracebacks
            _eg_fail(_step_failed(result), _failed_report(result))
        failing = result.report.at_least(settings.fail_level)
        if failing or result.edge is None:
            _eg_fail(
                f"export-guards: {len(failing)} finding(s) at or above {settings.fail_level.value} "
                f"({settings.recipe or settings.backend}):\n{render_text(type(result.report).of(failing))}",
                result,
            )
        pte = _failed_or(result.to_pte, "writing the program (to_executorch)", _source_of(model))
        if isinstance(pte, StepFailed):
            _eg_fail(_step_failed(pte), result.report + _failed_report(pte))
        with _libraries_kept_quiet():
            checked = result.check_program(pte, config=settings)  # as `export-guards check` against executorch.runtime
        failing = checked.at_least(settings.fail_level)
        if failing:
            _eg_fail(
                f"export-guards: the written program would not load or run in executorch.runtime: {len(failing)} "
                f"finding(s) at or above {settings.fail_level.value}:\n{render_text(type(checked).of(failing))}",
                result.report + checked,
                pte,
            )
        comparisons = []
        for label, inputs in [("example inputs", example_inputs), *((f"extra inputs #{i}", x) for i, x in enumerate(extra_inputs))]:
            with torch.no_grad():
                eager = model(*inputs)
            actual = _ran(lambda: run_pte(pte, inputs))
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
        with _libraries_kept_quiet(), named(step, source) if step else contextlib.nullcontext():
            return run()
    except StepFailed as failed:
        return failed


def _ran(run: Callable[[], _T]) -> _T | Exception:
    """What ``run()`` returns, or what it raised (the runtime refusing a program or its inputs),
    returned for the same reason as :func:`_failed_or`."""
    try:
        with _libraries_kept_quiet():
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
    return Path(path) if path is not None and not _is_library_module(type(model).__module__) else None


def _step_failed(failed: StepFailed) -> str:
    """A failed step in a few lines, as the command says it: the step, the innermost cause, the
    user's line, what the lint had found; not the traceback, which is the libraries'."""
    return f"export-guards: {failed}\n(guarded_export raises the error itself, with its traceback)"


def _failed_report(failed: StepFailed) -> Report:
    """The report of a failed step, for the artifacts: what the lint found before it failed
    (a ``GuardError``'s report) and the step's EG002 finding, on the user's line."""
    from dataclasses import replace

    from export_guards.report import Report
    from export_guards.ruleset import CATALOG, Hit, finding

    found = getattr(failed.__cause__, "report", None)
    failure = replace(finding(CATALOG["EG002"], Hit(f"{failed.step} failed: {failed.cause}")), location=failed.location)
    return (found if isinstance(found, Report) else Report()) + Report.of([failure])


# Whose warnings are the fixtures' own: the libraries they run, and the standard library that
# those call (``importlib.resources``, ``copyreg``: where a library's warning may be placed).
_LIBRARY_MODULES = ("torch", "torchao", "executorch", "coremltools", "export_guards", "numpy", "sympy", *(sys.stdlib_module_names - {"test"}))
_LIBRARY_MODULE = r"(" + "|".join(re.escape(name) for name in sorted(_LIBRARY_MODULES)) + r")(\.|$)"


def _is_library_module(module: str) -> bool:
    return re.match(_LIBRARY_MODULE, module) is not None


@contextlib.contextmanager
def _libraries_kept_quiet() -> Iterator[None]:
    """Ignore, for the block, the warnings placed in the libraries' modules (torch's and
    ExecuTorch's deprecations, raised by the fixture's export, lowering and runtime): not the
    test's to act on, and ``-W error`` must not turn them into its failure. A warning placed in
    the model's or the test's code (``warnings.warn`` in ``forward``) is reported as always.
    The libraries' log lines and prints stay out of the test's captured output too
    (``export_guards.quiet``)."""
    with warnings.catch_warnings(), libraries_quiet():
        warnings.filterwarnings("ignore", module=_LIBRARY_MODULE)
        yield


def _import_runtime() -> None:
    """Import ``executorch.runtime`` without the ``ExperimentalWarning`` its bindings give on
    import: ExecuTorch's note on its own API, nothing a test can act on. Under pytest-xdist it
    also cost ~5 s a run: the controller rebuilds each worker's warning from its class, so it
    imported ExecuTorch for it, while every worker waited for its next test."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "This API is experimental", DeprecationWarning, r"executorch\.")
        import executorch.runtime  # noqa: F401


_READABLE = 100  # characters of the sanitised test id in a folder name (file systems allow 255)


def _artifact_folder(root: Path, test_name: str) -> Path:
    """``root/<sanitised test id, at most 100 characters>-<hash of the whole id>``: readable,
    unique (ids can read alike once sanitised or cut), and short enough for any file system
    whatever the id's length."""
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "_", test_name)[:_READABLE].strip("_.")
    digest = hashlib.sha1(test_name.encode()).hexdigest()[:8]
    return root / f"{readable}-{digest}"


def _save(root: Path | None, test_name: str, export: GuardedExport | Report, pte: bytes | Callable[[], bytes | None] | None) -> str:
    """Keep the failing check's artifacts under ``root``; returns the line that says where, or
    why they could not be kept (never an exception: that would hide the test's own failure)."""
    if root is None:
        return "\n(keep the .pte and report of failing checks with --eg-artifacts DIR)"
    from export_guards.render import render_json, render_text

    folder = _artifact_folder(root, test_name)
    try:
        shutil.rmtree(folder, ignore_errors=True)  # nothing stale from an earlier run
        folder.mkdir(parents=True)
        report = getattr(export, "report", export)  # a GuardedExport's, or a failed step's
        (folder / "report.txt").write_text(render_text(report))
        (folder / "report.json").write_text(render_json(report))
        with _libraries_kept_quiet():
            data = pte() if callable(pte) else pte
        if data is not None:
            (folder / "model.pte").write_bytes(data)
    except Exception as error:  # noqa: BLE001 - a full disk, a file in the way, a .pte that cannot be made
        return f"\nexport-guards: the artifacts could not be saved in {folder}: {type(error).__name__}: {error}"
    return f"\nartifacts saved in {folder}"
