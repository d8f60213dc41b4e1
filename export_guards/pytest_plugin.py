"""pytest plugin for model authors: export with the guards, run on the ExecuTorch runtime,
compare with eager, in one line. Active whenever export-guards is installed (``pytest11``).

Fixtures: ``guarded_export``, ``check_export``, ``assert_delegated``, ``eg_device``.
Marker: ``@pytest.mark.export_guards(select=..., ignore=..., backend=..., fail_level=...,
fold=..., placement=...)``. Options: ``--eg-backend``, ``--eg-artifacts DIR``, ``--eg-trapdev``
(and the ini keys ``export_guards_backend``, ``export_guards_artifacts``). Under pytest-xdist each
worker gives torch its share of the cores.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import warnings
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, final

import pytest

from export_guards.settings import BACKENDS, Settings

if TYPE_CHECKING:  # the plugin loads in every pytest run: torch and the pipeline load when a fixture runs
    import torch

    from export_guards.analysis.delegation import DelegationSummary
    from export_guards.pipeline import GuardedExport
    from export_guards.report import Report
    from export_guards.testing.compare import OutputError

pytest.register_assert_rewrite("export_guards.testing")

__all__ = ["ExportCheck"]


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
    report (and ``pte``: bytes, or a function that makes them) where ``--eg-artifacts`` says,
    plus the line that says where, or why they could not be kept. Every failure of the
    fixtures goes through here."""
    config = request.config
    folder = config.getoption("--eg-artifacts") or config.getini("export_guards_artifacts")
    # Relative to where pytest was started, whatever directory a test moves to.
    root = (config.invocation_params.dir / folder) if folder else None

    def fail(message: str, export: GuardedExport, pte: bytes | Callable[[], bytes | None] | None = None) -> NoReturn:
        pytest.fail(message + _save(root, request.node.nodeid, export, pte), pytrace=False)

    return fail


@pytest.fixture
def guarded_export(export_guards_settings: Settings) -> Callable[..., GuardedExport]:
    """``guarded_export(model, example_inputs, **settings) -> GuardedExport``: export with
    the guards (placement, fold, lint before and after partitioning). Never fails the test."""

    def run(model: torch.nn.Module, example_inputs: Sequence[object], **overrides: Any) -> GuardedExport:
        settings = _with_overrides(export_guards_settings, overrides, "guarded_export")
        return _export(settings, model, example_inputs)

    return run


@pytest.fixture
def check_export(export_guards_settings: Settings, _eg_fail: Callable[..., NoReturn]) -> Callable[..., ExportCheck]:
    """``check_export(model, example_inputs, *, extra_inputs=(), atol=1e-5, rtol=1e-5,
    **settings) -> ExportCheck``: export with the guards, fail on lint findings at the fail
    level, run the ``.pte`` in ``executorch.runtime`` on the example inputs and each set of
    ``extra_inputs``, and fail on any output that differs from eager beyond atol / rtol."""
    import torch

    from export_guards.render import render_text
    from export_guards.testing.compare import compare_outputs, run_pte

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
        result = _export(settings, model, example_inputs)
        failing = result.report.at_least(settings.fail_level)
        if failing or result.edge is None:
            _eg_fail(
                f"export-guards: {len(failing)} finding(s) at or above {settings.fail_level.value} "
                f"({settings.backend}):\n{render_text(type(result.report).of(failing))}",
                result,
            )
        pte = result.to_pte()
        comparisons = []
        for label, inputs in [("example inputs", example_inputs), *((f"extra inputs #{i}", x) for i, x in enumerate(extra_inputs))]:
            with torch.no_grad():
                eager = model(*inputs)
            try:
                actual = run_pte(pte, inputs)
            except Exception as error:  # noqa: BLE001 - the runtime refused these inputs
                _eg_fail(
                    f"export-guards: the .pte could not run the {label}: {type(error).__name__}: "
                    f"{str(error).strip().splitlines()[0] if str(error).strip() else ''}\n"
                    "torch.export fixes shapes (and branches on them) to the example inputs': export "
                    "with dynamic_shapes, or give inputs of the exported shapes.",
                    result,
                    pte,
                )
            errors = compare_outputs(eager, actual, atol=atol, rtol=rtol)
            comparisons.append(errors)
            if not all(e.within for e in errors):
                lines = "\n".join(f"  {e}" for e in errors)
                _eg_fail(
                    f"export-guards: the .pte's outputs differ from eager on the {label} "
                    f"(atol={atol}, rtol={rtol}, {settings.backend}):\n{lines}\n"
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


def _save(root: Path | None, test_name: str, export: GuardedExport, pte: bytes | Callable[[], bytes | None] | None) -> str:
    """Keep the failing check's artifacts under ``root``; returns the line that says where, or
    why they could not be kept (never an exception: that would hide the test's own failure)."""
    if root is None:
        return "\n(keep the .pte and report of failing checks with --eg-artifacts DIR)"
    from export_guards.render import render_json, render_text

    folder = _artifact_folder(root, test_name)
    try:
        shutil.rmtree(folder, ignore_errors=True)  # nothing stale from an earlier run
        folder.mkdir(parents=True)
        (folder / "report.txt").write_text(render_text(export.report))
        (folder / "report.json").write_text(render_json(export.report))
        data = pte() if callable(pte) else pte
        if data is not None:
            (folder / "model.pte").write_bytes(data)
    except Exception as error:  # noqa: BLE001 - a full disk, a file in the way, a .pte that cannot be made
        return f"\nexport-guards: the artifacts could not be saved in {folder}: {type(error).__name__}: {error}"
    return f"\nartifacts saved in {folder}"
