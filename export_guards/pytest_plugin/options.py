"""The plugin's options, marker and ini keys; the settings each test gets; the devices
``eg_device`` runs on; torch's share of the cores under pytest-xdist."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

import pytest

from export_guards.settings import BACKENDS, Settings

__all__ = [
    "export_guards_settings",
    "pytest_addoption",
    "pytest_configure",
    "pytest_generate_tests",
    "with_keywords",
    "with_overrides",
]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("export-guards", "export-guards: export, lint, run on ExecuTorch, compare")
    group.addoption("--eg-backend", choices=BACKENDS, help="backend of the export-guards fixtures (default xnnpack)")
    group.addoption("--eg-artifacts", metavar="DIR", help="keep the .pte and report of each failing export check here")
    group.addoption(
        "--eg-trapdev", action="store_true", help="also run eg_device tests on the trapdev test accelerator"
    )
    parser.addini(
        "export_guards_backend", f"backend of the export-guards fixtures: {' or '.join(BACKENDS)}", default=""
    )
    parser.addini(
        "export_guards_artifacts", "directory for the .pte and report of each failing export check", default=""
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "export_guards(select=None, ignore=None, backend=None, fail_level=None, fold=None, fold_max_growth=None, placement=None): "
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


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "eg_device" in metafunc.fixturenames:
        import torch

        devices = ["cpu"]
        if torch.cuda.is_available():
            devices.append("cuda")
        if metafunc.config.getoption("--eg-trapdev"):
            devices.append("trapdev")
        metafunc.parametrize("eg_device", devices, indirect=True)


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
        settings = with_overrides(settings, marker.kwargs, "@pytest.mark.export_guards")
    return settings


def with_overrides(settings: Settings, overrides: dict[str, Any], where: str) -> Settings:
    """``settings`` with the marker's keywords (Python names, ``fail_level``); a bad one is a usage error."""
    return _checked(lambda: settings.updated(overrides, where, keywords=()))


def with_keywords(settings: Settings, overrides: dict[str, Any], fixture: str, own: Iterable[str]) -> Settings:
    """``settings`` with a fixture call's keywords (Python names, ``fail_level``). A bad one fails
    the test in a line that names it and what ``fixture`` accepts (its ``own`` keywords too),
    without the plugin's traceback: the mistake is in the test's call, not in the plugin."""
    try:
        return settings.updated(overrides, f"the {fixture}(...) call", keywords=own)
    except ValueError as error:
        said = str(error)
    pytest.fail(f"export-guards: {said}", pytrace=False)


def _checked(make: Callable[[], Settings]) -> Settings:
    """Settings, or a usage error that says what is wrong with them."""
    try:
        return make()
    except (OSError, ValueError) as error:
        raise pytest.UsageError(str(error)) from None
