"""pytest plugin for model authors: export with the guards, run on the ExecuTorch runtime,
compare with eager, in one line. Active whenever export-guards is installed (``pytest11``).

Fixtures: ``guarded_export``, ``check_export``, ``assert_delegated``, ``eg_device``.
Marker: ``@pytest.mark.export_guards(select=..., ignore=..., backend=..., fail_level=...,
fold=..., placement=...)``. Options: ``--eg-backend``, ``--eg-artifacts DIR``, ``--eg-trapdev``
(and the ini keys ``export_guards_backend``, ``export_guards_artifacts``). Under pytest-xdist each
worker gives torch its share of the cores. The warnings of the fixtures' own steps (torch's,
ExecuTorch's) are not reported; the test's and the model's are.

One module per concern, as ``_pytest`` splits its own: ``options`` (options, marker, ini keys,
settings, devices, the cores under xdist), ``fixtures`` (the fixtures), ``artifacts`` (what a
failing check keeps, written as the command writes its outputs), ``quiet`` (what the test's
output shows of the libraries). pytest reads the hooks and fixtures off this module.
"""

from __future__ import annotations

import pytest

pytest.register_assert_rewrite("export_guards.testing")

# pytest finds the hooks and fixtures here by name: imported for it (F401), after the rewrite (E402).
from export_guards.pytest_plugin.artifacts import _eg_fail  # noqa: E402, F401
from export_guards.pytest_plugin.fixtures import ExportCheck, assert_delegated, check_export, eg_device, guarded_export  # noqa: E402, F401
from export_guards.pytest_plugin.options import (  # noqa: E402, F401
    export_guards_settings,
    pytest_addoption,
    pytest_configure,
    pytest_generate_tests,
)
from export_guards.pytest_plugin.quiet import pytest_runtest_call, pytest_runtest_setup, pytest_runtest_teardown  # noqa: E402, F401

__all__ = ["ExportCheck"]
