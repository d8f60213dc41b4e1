"""pytest plugin for model authors: export with the guards, run on the ExecuTorch runtime,
compare with eager, in one line. Active whenever export-guards is installed (``pytest11``).

Fixtures: ``guarded_export``, ``check_export``, ``assert_delegated``, ``eg_device``.
Marker: ``@pytest.mark.export_guards(select=..., ignore=..., backend=..., fail_level=...,
fold=..., placement=...)``. Options: ``--eg-backend``, ``--eg-artifacts DIR``, ``--eg-trapdev``
(and the ini keys ``export_guards_backend``, ``export_guards_artifacts``).
"""

from __future__ import annotations

import hashlib
import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, final

import pytest

from export_guards.settings import BACKENDS, Settings

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

    export: Any  # GuardedExport
    pte: bytes
    comparisons: list[list[Any]] = field(default_factory=list)  # per input set, per output

    @property
    def report(self) -> Any:
        return self.export.report

    @property
    def delegation(self) -> Any:
        return self.export.delegation


@pytest.fixture
def export_guards_settings(request: pytest.FixtureRequest) -> Settings:
    """This test's settings: ``[tool.export-guards]`` of the project's ``pyproject.toml``, then
    the ini keys, the command line, and ``@pytest.mark.export_guards`` (module, class, then
    function: the closest wins, key by key)."""
    config = request.config
    pyproject = config.rootpath / "pyproject.toml"
    settings = _checked(lambda: Settings.from_pyproject(pyproject) if pyproject.is_file() else Settings())
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
def _eg_artifacts(request: pytest.FixtureRequest) -> Callable[[Any, bytes | None], str]:
    """``save(result, pte)``: keep a failing check's artifacts where ``--eg-artifacts`` says;
    returns the sentence that says where."""
    config = request.config
    folder = config.getoption("--eg-artifacts") or config.getini("export_guards_artifacts")
    # Relative to where pytest was started, whatever directory a test moves to.
    root = (config.invocation_params.dir / folder) if folder else None
    return lambda result, pte: _save(root, request.node.nodeid, result, pte)


@pytest.fixture
def guarded_export(export_guards_settings: Settings) -> Callable[..., Any]:
    """``guarded_export(model, example_inputs, **settings) -> GuardedExport``: export with
    the guards (placement, fold, lint before and after partitioning). Never fails the test."""

    def run(model: Any, example_inputs: Sequence[Any], **overrides: Any) -> Any:
        settings = _with_overrides(export_guards_settings, overrides, "guarded_export")
        return _export(settings, model, example_inputs)

    return run


@pytest.fixture
def check_export(
    export_guards_settings: Settings, _eg_artifacts: Callable[[Any, bytes | None], str]
) -> Callable[..., ExportCheck]:
    """``check_export(model, example_inputs, *, extra_inputs=(), atol=1e-5, rtol=1e-5,
    **settings) -> ExportCheck``: export with the guards, fail on lint findings at the fail
    level, run the ``.pte`` in ``executorch.runtime`` on the example inputs and each set of
    ``extra_inputs``, and fail on any output that differs from eager beyond atol / rtol."""
    import torch

    from export_guards.render import render_text
    from export_guards.testing.compare import compare_outputs, run_pte

    def check(
        model: Any,
        example_inputs: Sequence[Any],
        *,
        extra_inputs: Sequence[Sequence[Any]] = (),
        atol: float = 1e-5,
        rtol: float = 1e-5,
        **overrides: Any,
    ) -> ExportCheck:
        settings = _with_overrides(export_guards_settings, overrides, "check_export")
        result = _export(settings, model, example_inputs)
        failing = result.report.at_least(settings.fail_level)
        if failing or result.edge is None:
            saved = _eg_artifacts(result, None)
            pytest.fail(
                f"export-guards: {len(failing)} finding(s) at or above {settings.fail_level.value} "
                f"({settings.backend}):\n{render_text(type(result.report).of(failing))}{saved}",
                pytrace=False,
            )
        pte = result.to_pte()
        comparisons = []
        for label, inputs in [("example inputs", example_inputs), *((f"extra inputs #{i}", x) for i, x in enumerate(extra_inputs))]:
            with torch.no_grad():
                eager = model(*inputs)
            try:
                actual = run_pte(pte, inputs)
            except Exception as error:  # noqa: BLE001 - the runtime refused these inputs
                saved = _eg_artifacts(result, pte)
                pytest.fail(
                    f"export-guards: the .pte could not run the {label}: {type(error).__name__}: "
                    f"{str(error).strip().splitlines()[0] if str(error).strip() else ''}\n"
                    "torch.export fixes shapes (and branches on them) to the example inputs': export "
                    f"with dynamic_shapes, or give inputs of the exported shapes.{saved}",
                    pytrace=False,
                )
            errors = compare_outputs(eager, actual, atol=atol, rtol=rtol)
            comparisons.append(errors)
            if not all(e.within for e in errors):
                saved = _eg_artifacts(result, pte)
                lines = "\n".join(f"  {e}" for e in errors)
                pytest.fail(
                    f"export-guards: the .pte's outputs differ from eager on the {label} "
                    f"(atol={atol}, rtol={rtol}, {settings.backend}):\n{lines}\n"
                    "A common cause: torch.export specialised a branch or a shape on the example "
                    f"inputs; pass inputs that take the other paths as extra_inputs.{saved}",
                    pytrace=False,
                )
        return ExportCheck(result, pte, comparisons)

    return check


@pytest.fixture
def assert_delegated() -> Callable[..., None]:
    """``assert_delegated(result, *, min_fraction=1.0, portable_allowed=())``: fail unless at
    least ``min_fraction`` of the compute ops are delegated and none of the ops left portable
    is outside ``portable_allowed`` (op names such as ``"convolution"``); the message names
    each op left out, its source line and the partitioner's reason."""

    def check(result: Any, *, min_fraction: float = 1.0, portable_allowed: Sequence[str] = ()) -> None:
        export = getattr(result, "export", result)
        summary = export.delegation
        if summary is None:
            pytest.fail("export-guards: the program was not lowered; see its report", pytrace=False)
        left = sorted(set(summary.portable) - set(portable_allowed))
        if summary.fraction_delegated < min_fraction or left:
            details = "\n".join(f"  {f.location or '<unknown>'}: {f.message}" for f in export.report.with_code("EG401"))
            counts = ", ".join(f"{op} x{summary.portable[op]}" for op in sorted(summary.portable))
            pytest.fail(
                f"export-guards: {summary.fraction_delegated:.0%} of compute ops delegated "
                f"(at least {min_fraction:.0%} expected); left in the portable graph: {counts}"
                + (f" (not allowed: {', '.join(left)})" if left else "")
                + (f"\n{details}" if details else ""),
                pytrace=False,
            )

    return check


@pytest.fixture
def eg_device(request: pytest.FixtureRequest) -> Any:
    """Each device to run on: ``cpu``; ``cuda`` where present; ``trapdev`` with ``--eg-trapdev``."""
    import torch

    if request.param == "trapdev":
        from export_guards.testing import load_trapdev

        return load_trapdev()
    return torch.device(request.param)


def _export(settings: Settings, model: Any, example_inputs: Sequence[Any]) -> Any:
    """``export_with_guards`` with ``settings``."""
    from export_guards.pipeline import export_with_guards

    return export_with_guards(model, tuple(example_inputs), config=settings)


def _save(root: Path | None, test_name: str, result: Any, pte: bytes | None) -> str:
    """Keep the failing check's artifacts under ``root``; returns the sentence that says where."""
    if root is None:
        return "\n(keep the .pte and report of failing checks with --eg-artifacts DIR)"
    from export_guards.render import render_json, render_text

    # Readable, and unique: different node ids can read alike once sanitised.
    digest = hashlib.sha1(test_name.encode()).hexdigest()[:8]
    folder = root / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', test_name).strip('_')}-{digest}"
    shutil.rmtree(folder, ignore_errors=True)  # nothing stale from an earlier run
    folder.mkdir(parents=True)
    (folder / "report.txt").write_text(render_text(result.report))
    (folder / "report.json").write_text(render_json(result.report))
    if pte is not None:
        (folder / "model.pte").write_bytes(pte)
    return f"\nartifacts saved in {folder}"
