"""The pytest plugin, tested as a user runs it: test files written for it, run by pytest in a
child process.

Each such run imports torch and ExecuTorch and warms torch.export up (about 14 s of CPU) before
its first check, and costs little per test after it. So the cases that need no options of their
own share two runs (``run_kept``: ``--eg-artifacts kept``; ``run_blocked``: ``--eg-artifacts``
naming a file, and ``--eg-trapdev``), each case in its own test file, made once a session
(``conftest.built_once``): each test here asserts on its own file's outcomes and on its own
tests' failure sections. The cases about an option, an ini key, a ``pyproject.toml`` or pytest-xdist
have runs of their own (pytester)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from conftest import built_once

pytestmark = [pytest.mark.subprocess, pytest.mark.slow]  # each test reads a pytest run in a child process

pytest_plugins = ["pytester"]

MODELS = '''
import warnings

import torch
from torch import nn

class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.utils.parametrizations.spectral_norm(nn.Conv2d(3, 4, 3, padding=1))
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        y = torch.relu(self.conv(x)).mean(dim=(2, 3))
        return {"logits": self.head(y), "features": (y, y * 2)}

class Branchy(nn.Module):
    """Eager takes the other branch than the exported program."""
    def forward(self, x):
        return x * 2 if torch.compiler.is_exporting() else x - 1

class ShapeBranch(nn.Module):
    """torch.export specialises the branch (and the shape) to the example input's."""
    def forward(self, x):
        return x.sum(dim=0) if x.shape[0] > 1 else x[0] * 2

class Noisy(nn.Module):
    """Lowering refuses it: rand_like is not core ATen."""
    def forward(self, x):
        return x + torch.rand_like(x)

class Warns(nn.Module):
    def forward(self, x):
        warnings.warn("the model's own warning")
        return torch.relu(x)

class Modulated(nn.Module):
    """A linear whose weight depends on the input: XNNPACK leaves it (an mm) out."""
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(3, 4))

    def forward(self, x):
        return nn.functional.linear(x, self.w * x.mean())

def image(seed=0):
    return (torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(seed)),)
'''


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(models=MODELS)
    return pytester


OUTCOME = {"failure": "failed", "error": "error", "skipped": "skipped"}


@dataclass(frozen=True)
class Run:
    """A pytest run in a child process: where it ran, and what it printed (stdout)."""

    path: Path
    outlines: list[str]

    def outcomes(self, file: str) -> dict[str, str]:
        """Each test of ``file`` and its outcome (passed, failed, error or skipped), as the run's
        JUnit XML says them: ``{"test_x": "passed", "TestY::test_z": "failed", "test_x[id]": ...}``."""
        module = file.removesuffix(".py").replace("/", ".")  # as pytest's junitxml names it
        found = {}
        for case in ET.parse(self.path / "results.xml").iter("testcase"):  # noqa: S314 - the run's own report
            classname, name = case.get("classname", ""), case.get("name", "")
            if classname == module or classname.startswith(f"{module}."):
                within = classname[len(module) + 1 :]  # the class, if any
                test = f"{within.replace('.', '::')}::{name}" if within else name
                ends = [OUTCOME[child.tag] for child in case if child.tag in OUTCOME]
                found[test] = ends[0] if ends else "passed"
        return found

    def tally(self) -> dict[str, int]:
        """The run's last line as numbers: ``{"failed": 1, "passed": 5, "warnings": 3}``."""
        return pytest.RunResult.parse_summary_nouns(self.outlines)

    def section(self, test: str, *, with_captured: bool = False) -> list[str]:
        return _section(self.outlines, test, with_captured=with_captured)

    def matcher(self, test: str) -> pytest.LineMatcher:
        """The lines of ``test``'s failure, its captured output included, to match patterns in."""
        return pytest.LineMatcher(self.section(test, with_captured=True))


def _pytest_in_child(folder: Path, files: dict[str, str], *args: str) -> Run:
    """``files`` written in ``folder`` and pytest run there in a child process, as pytester's
    ``runpytest_subprocess`` runs it (no ``PYTEST_ADDOPTS``, ``HOME`` there, the folder on
    ``PYTHONPATH``, its own ``--basetemp``)."""
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(textwrap.dedent(text).strip() + "\n")
    env = {name: value for name, value in os.environ.items() if name != "PYTEST_ADDOPTS"}
    env["HOME"] = str(folder)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(folder), env.get("PYTHONPATH", "")]))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", f"--basetemp={folder / 'basetemp'}", "-rs", "--junitxml=results.xml", *args],
        capture_output=True,
        text=True,
        cwd=folder,
        env=env,
        timeout=1800,
    )
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]  # tests ran: no usage error
    return Run(folder, done.stdout.splitlines())


PASSING = """
import torch
from models import Small, image

def test_small(check_export, assert_delegated):
    torch.manual_seed(0)
    result = check_export(Small().eval(), image(), extra_inputs=[image(1), image(2)])
    assert result.pte[4:8] == b"ET12"
    assert len(result.comparisons) == 3 and all(e.within for c in result.comparisons for e in c)
    assert [f.code for f in result.report.with_code("EG201")]  # the spectral norm was folded
    assert_delegated(result)

def test_export_only(guarded_export):
    result = guarded_export(Small().eval(), image(), backend="portable")
    assert result.delegation.count("convolution") == (0, 1)

def test_own_warnings(check_export):
    import warnings
    from models import Warns

    warnings.warn("the test's own warning")
    check_export(Warns(), (torch.randn(2, 3),), backend="portable")
"""

FAILURES = """
import torch
from torch import nn
from models import Branchy, ShapeBranch

def test_training_mode(check_export):
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)).train()
    check_export(model, (torch.randn(2, 4),))

def test_branchy(check_export):
    check_export(Branchy(), (torch.full((3,), 2.0),), backend="portable")

def test_shape_branch(check_export):
    check_export(ShapeBranch(), (torch.ones(1, 3),), extra_inputs=[(torch.ones(4, 3),)], backend="portable")

def test_lowering_fails(check_export):
    from models import Noisy

    check_export(Noisy(), (torch.randn(2, 3),))

class Sorted(nn.Module):
    def forward(self, x):
        return torch.sort(x)[0].cumsum(-1)

def test_no_kernel(check_export):
    check_export(Sorted(), (torch.randn(4, 8),))

def test_refused_at_load(check_export):
    check_export(Sorted(), (torch.randn(4, 8),), ignore=["EG521"])
"""

DEVICE = """
import torch
from torch import nn

def test_device(eg_device, check_export):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU()).to(eg_device)
    check_export(model, (torch.randn(2, 4).to(eg_device),), placement="copy")
"""

EXACT_NAMES = """
import pytest
import torch
from torch import nn

from models import Modulated

def test_addmm_does_not_allow_mm(guarded_export, assert_delegated):
    result = guarded_export(Modulated(), (torch.randn(2, 4),))
    assert_delegated(result, min_fraction=0.0, portable_allowed=("addmm",))

@pytest.mark.export_guards(backend="portable")
class TestPortable:
    @pytest.mark.export_guards(fold=False)
    def test_settings_merge(self, export_guards_settings):
        assert (export_guards_settings.backend, export_guards_settings.fold) == ("portable", False)
"""

LONG_ID = """
import pytest
import torch
from torch import nn

@pytest.mark.parametrize("case", ["long"], ids=["a-very-long-case-name/" * 16])
def test_long_id(check_export, case):
    check_export(nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)).train(), (torch.randn(2, 4),))
"""

SAVES = """
import torch
from torch import nn

from models import Modulated

def test_guarded_export(guarded_export, assert_delegated):
    assert_delegated(guarded_export(Modulated(), (torch.randn(2, 4),)))

def test_export_check(check_export, assert_delegated):
    assert_delegated(check_export(Modulated(), (torch.randn(2, 4),)))
"""

LOGGED = """
import logging
import torch
from torch import nn

def test_logged_training_mode(check_export):
    logging.getLogger("my.model").warning("a warning of the model's own")
    check_export(nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)).train(), (torch.randn(2, 4),))
"""

NEWER_TORCH_CONFTEST = """
from importlib import metadata

import pytest

from export_guards import compat

@pytest.fixture(autouse=True)
def runtime_built_for_a_newer_torch(monkeypatch):
    # as if the runtime were built for a newer torch, for the tests of this folder
    monkeypatch.setitem(compat.RUNTIME_BUILT_FOR, compat._minor(metadata.version("executorch")), "9.0")
"""

NEWER_TORCH = """
import torch
from models import Small, image

def test_small_on_a_newer_runtime(check_export):
    torch.manual_seed(0)
    check_export(Small().eval(), image())
"""

STATE = """
import torch
from torch import nn

class Accumulate(nn.Module):
    def __init__(self, start=torch.zeros):
        super().__init__()
        self.register_buffer("total", start(3))
        self.total: torch.Tensor

    def forward(self, x):
        self.total.add_(x)
        return self.total * 1

def inputs(seed):
    return (torch.randn(3, generator=torch.Generator().manual_seed(seed)),)

def test_extra_inputs_and_steps(check_export):
    model = Accumulate()
    once = check_export(model, inputs(0), extra_inputs=[inputs(1)], fail_level="warning")
    assert len(once.comparisons) == 2
    stepped = check_export(model, steps=[inputs(0), inputs(1), inputs(2)])
    assert len(stepped.comparisons) == 3 and all(e.within for c in stepped.comparisons for e in c)
    assert torch.equal(model.total, torch.zeros(3))  # the caller's model never ran

def test_starts_elsewhere(check_export):
    check_export(Accumulate(torch.ones), steps=[inputs(0), inputs(1)], ignore=["EG308"])

def test_misspelt_option(check_export):
    check_export(Accumulate(), inputs(0), fail_levle="warning")
"""


@pytest.fixture(scope="session")
def run_kept(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """One run, ``--eg-artifacts kept``, of the cases that fail (and two that pass or skip)."""
    files = {
        "models.py": MODELS,
        "test_failures.py": FAILURES,
        "test_exact_names.py": EXACT_NAMES,
        "test_long_id.py": LONG_ID,
        "test_saves.py": SAVES,
        "test_logged.py": LOGGED,
        "test_state.py": STATE,
        "newer_torch/conftest.py": NEWER_TORCH_CONFTEST,
        "newer_torch/test_newer_torch.py": NEWER_TORCH,
    }

    def run() -> Run:
        return _pytest_in_child(tmp_path_factory.mktemp("plugin-kept"), files, "-q", "--eg-artifacts", "kept")

    return built_once(tmp_path_factory, "plugin-run-kept", run)


@pytest.fixture(scope="session")
def run_blocked(tmp_path_factory: pytest.TempPathFactory, trapdev: object) -> Run:
    """One run, ``--eg-trapdev --eg-artifacts blocked`` (a file), of the cases that pass, and of
    a failing one whose artifacts cannot be saved (``trapdev``: the extension built once, here,
    not in the child)."""
    files = {"models.py": MODELS, "test_model.py": PASSING, "test_device.py": DEVICE, "test_blocked.py": LONG_ID}

    def run() -> Run:
        folder = tmp_path_factory.mktemp("plugin-blocked")
        (folder / "blocked").write_text("a file where the artifacts folder should be\n")
        return _pytest_in_child(folder, files, "-q", "--eg-trapdev", "--eg-artifacts", "blocked")

    return built_once(tmp_path_factory, "plugin-run-blocked", run)


def test_a_model_that_exports_runs_and_matches_eager_passes(run_blocked: Run) -> None:
    assert run_blocked.outcomes("test_model.py") == {
        "test_small": "passed",
        "test_export_only": "passed",
        "test_own_warnings": "passed",
    }
    # The fixtures' own steps' warnings (torch's and ExecuTorch's deprecations) are not reported;
    # the test's and the model's are (the model's twice: the export traces it, then eager runs it).
    warned = _warnings_summary(run_blocked.outlines)
    pytest.LineMatcher(warned).fnmatch_lines(
        [
            "test_model.py::test_own_warnings",
            "*test_model.py:*: UserWarning: the test's own warning",
            "*models.py:*: UserWarning: the model's own warning",
        ]
    )
    assert run_blocked.tally()["warnings"] == 3, warned  # in the whole run: none but these
    assert not [line for line in run_blocked.outlines if "site-packages" in line or "DeprecationWarning" in line]


def test_each_failure_says_why_in_the_users_terms(run_kept: Run) -> None:
    """The ways a check fails, in one pytest run: lint findings (with the rule, module and
    line), outputs that diverge from eager (per output), extra inputs that a specialised
    export cannot run (naming the input), a step that fails, a program whose operator the
    runtime has no kernel for (the check's finding, on the user's line), and a runtime refusal
    on inputs of the exported shapes (no advice about shapes)."""
    tests = (
        "test_training_mode",
        "test_branchy",
        "test_shape_branch",
        "test_lowering_fails",
        "test_no_kernel",
        "test_refused_at_load",
    )
    assert run_kept.outcomes("test_failures.py") == dict.fromkeys(tests, "failed")
    # A program the runtime cannot load: the check's finding, at the user's line, in a few lines
    no_kernel = run_kept.section("test_no_kernel")
    assert 3 <= len(no_kernel) <= 20 and not [
        line for line in no_kernel if "During handling" in line or "Traceback" in line
    ], no_kernel
    run_kept.matcher("test_no_kernel").fnmatch_lines(
        [
            "export-guards: the written program would not load or run in executorch.runtime: 1 finding(s) at or above error:",
            "*test_failures.py:*: EG521 [[]error[]] method 'forward' calls aten::sort.values, for which executorch.runtime * has no kernel*",
            "    return torch.sort(x)[0].cumsum(-1)",
        ]
    )
    refused = run_kept.section("test_refused_at_load")
    assert not [line for line in refused if "During handling" in line or "0x:" in line or "dynamic_shapes" in line], (
        refused
    )
    assert any("Failed to load method forward, error: 0x14" in line for line in refused), refused
    # A step that fails: its name, the innermost cause, the user's line, the artifacts; a few
    # lines, not the libraries' traceback.
    failure = run_kept.section("test_lowering_fails")
    assert 3 <= len(failure) <= 20 and not [
        line for line in failure if "site-packages" in line or "Traceback" in line
    ], failure
    # ... and what the test captured holds none of the libraries' log lines or prints either
    captured = run_kept.section("test_lowering_fails", with_captured=True)
    assert not [
        line for line in captured if "site-packages" in line or "torch/" in line or "executorch" in line.split(":")[0]
    ], captured
    run_kept.matcher("test_lowering_fails").fnmatch_lines(
        [
            "export-guards: lowering (xnnpack) failed: *SpecViolationError: Operator torch._ops.aten.rand_like.default*",
            "  at *models.py:*: return x + torch.rand_like(x)",
            "artifacts saved in *kept*",
        ]
    )
    run_kept.matcher("test_training_mode").fnmatch_lines(
        [
            "*export-guards: 1 finding(s) at or above error (xnnpack):*",
            "*EG301 [[]error[]] dropout 'dropout' runs in training mode*",
            "*module: 1 (Dropout)*",
            "*fix: Call model.eval() before torch.export.*",
            "*artifacts saved in *kept*",
        ]
    )
    run_kept.matcher("test_branchy").fnmatch_lines(
        [
            "*the .pte's outputs differ from eager on the example inputs (atol=1e-05, rtol=1e-05, portable):*",
            "*output [[]0[]] (float32[[]3[]]) differs from eager by up to 3 at [[]*values beyond the tolerance (rtol 1e-05, atol 1e-05)",
            "*pass inputs that take the other paths as extra_inputs*",
        ]
    )
    run_kept.matcher("test_shape_branch").fnmatch_lines(
        [
            "*executorch.runtime could not run the program on the extra inputs #0: *error 0x*",
            "  input '*': exported as float32[[]1, 3[]], given float32[[]4, 3[]]",
            "*export with dynamic_shapes*",
        ]
    )
    kept = {p.name: p for p in _kept(run_kept, "test_failures.py")}
    (lint,) = [p for name, p in kept.items() if "training_mode" in name]
    assert {p.name for p in lint.iterdir()} == {"report.txt", "report.json"}
    (diverged,) = [p for name, p in kept.items() if "branchy" in name]
    assert (diverged / "model.pte").stat().st_size > 0
    (failed,) = [p for name, p in kept.items() if "lowering_fails" in name]
    assert {p.name for p in failed.iterdir()} == {"report.txt", "report.json"}
    assert "EG002 [error] lowering (xnnpack) failed: SpecViolationError" in (failed / "report.txt").read_text()


def _kept(run: Run, file: str) -> list[Path]:
    """The artifact folders that ``run`` kept for the tests of ``file``, by name."""
    return sorted(p for p in (run.path / "kept").iterdir() if p.name.startswith(f"{file}_"))


def _section(lines: list[str], test: str, *, with_captured: bool = False) -> list[str]:
    """The lines of one test's failure: after its ``___ test ___`` header, up to the next header
    (``with_captured``: the ``--- Captured ... ---`` sections too)."""
    start = next(i for i, line in enumerate(lines) if line.startswith("_") and f" {test} " in line) + 1
    ends = ("___", "===") if with_captured else ("___", "===", "---")
    end = next((i for i, line in enumerate(lines[start:], start) if line.startswith(ends)), len(lines))
    return lines[start:end]


def _warnings_summary(lines: list[str]) -> list[str]:
    """The run's ``warnings summary`` section."""
    start = next(i for i, line in enumerate(lines) if re.fullmatch(r"=+ warnings summary =+", line)) + 1
    end = next((i for i, line in enumerate(lines[start:], start) if line.startswith(("===", "-- Docs"))), len(lines))
    return lines[start:end]


def test_marker_and_options_set_backend_rules_and_fail_level(project: pytest.Pytester) -> None:
    project.makeini("[pytest]\nexport_guards_backend = portable\n")
    project.makepyfile(
        test_model="""
        import pytest
        import torch
        from torch import nn

        def model():
            return nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)).train(), (torch.randn(2, 4),)

        def test_ini_backend(guarded_export):
            assert guarded_export(nn.Linear(4, 3), (torch.randn(2, 4),)).delegation.backends == {}

        @pytest.mark.export_guards(ignore=["EG301"])
        def test_marker_ignores(check_export):
            m, x = model()
            check_export(m, x, atol=10)  # dropout is random: only the lint is under test

        class Double(nn.Module):
            def forward(self, x):
                return (x.double() * 2).float()  # float64 in the middle: EG304, a warning

        def test_default_fail_level(check_export):
            check_export(Double(), (torch.randn(2, 4),))  # EG304 is a warning: passes

        @pytest.mark.export_guards(fail_level="warning")
        def test_marker_fail_level(check_export):
            check_export(Double(), (torch.randn(2, 4),))

        @pytest.mark.export_guards(colour="red")
        def test_marker_typo(check_export):
            pass
        """
    )
    outcome = project.runpytest_subprocess("-q")
    outcome.assert_outcomes(passed=3, failed=1, errors=1)
    outcome.stdout.fnmatch_lines(["*unknown setting(s) colour*", "*EG304 [[]warning[]] *produces float64*"])
    with_option = project.runpytest_subprocess("-q", "--eg-backend", "xnnpack", "-k", "ini_backend")
    with_option.assert_outcomes(failed=1)


def test_eg_device_runs_on_cpu_and_on_trapdev_when_asked(run_blocked: Run) -> None:
    assert run_blocked.outcomes("test_device.py") == {"test_device[cpu]": "passed", "test_device[trapdev]": "passed"}


def test_assert_delegated_uses_exact_op_names_and_class_markers_merge(run_kept: Run) -> None:
    assert run_kept.outcomes("test_exact_names.py") == {
        "test_addmm_does_not_allow_mm": "failed",
        "TestPortable::test_settings_merge": "passed",
    }
    run_kept.matcher("test_addmm_does_not_allow_mm").fnmatch_lines(
        ["*left in the portable graph: mm x1 (not allowed: mm)*"]
    )


def test_long_test_ids_get_bounded_artifact_folders_and_a_failed_save_keeps_the_real_failure(
    run_kept: Run, run_blocked: Run, pytester: pytest.Pytester
) -> None:
    long_id = "test_long_id[" + "a-very-long-case-name/" * 16 + "]"
    assert run_kept.outcomes("test_long_id.py") == {long_id: "failed"}
    (kept,) = _kept(run_kept, "test_long_id.py")
    readable, digest = kept.name.rsplit("-", 1)
    assert readable.startswith("test_long_id.py_test_long_id_a-very-long-case-name_")
    assert len(readable) <= 100 and len(digest) == 8
    assert {p.name for p in kept.iterdir()} == {"report.txt", "report.json"}
    # Written as the command writes its outputs: a user's file there is never replaced (a run of
    # the same test file, in a folder of its own, where the first run's folder holds the notes).
    pytester.makepyfile(test_long_id=LONG_ID)
    notes = shutil.copytree(kept, pytester.path / "kept" / kept.name)
    (notes / "report.txt").write_text("my notes on this failure\n")
    again = pytester.runpytest_subprocess("-q", "--eg-artifacts", "kept")
    again.assert_outcomes(failed=1)
    again.stdout.fnmatch_lines(
        ["*the artifacts were not saved in *: report.txt there is not export-guards' to replace*"]
    )
    assert (notes / "report.txt").read_text() == "my notes on this failure\n"

    assert run_blocked.outcomes("test_blocked.py") == {long_id: "failed"}
    assert (run_blocked.path / "blocked").read_text() == "a file where the artifacts folder should be\n"
    run_blocked.matcher(long_id).fnmatch_lines(
        [
            "*export-guards: 1 finding(s) at or above error (xnnpack):*",
            "*EG301 [[]error[]] dropout 'dropout' runs in training mode*",
            "*export-guards: the artifacts could not be saved in *blocked*: *Error: *",
        ]
    )


def test_assert_delegated_failures_save_the_report_and_the_pte(run_kept: Run) -> None:
    assert run_kept.outcomes("test_saves.py") == {"test_guarded_export": "failed", "test_export_check": "failed"}
    for test in ("test_guarded_export", "test_export_check"):
        run_kept.matcher(test).fnmatch_lines(["*left in the portable graph: mm x1*", "artifacts saved in *kept*"])
    kept = _kept(run_kept, "test_saves.py")
    names = [p.name.split("-")[0] for p in kept]
    assert names == ["test_saves.py_test_export_check", "test_saves.py_test_guarded_export"]
    for folder in kept:
        assert {p.name for p in folder.iterdir()} == {"report.txt", "report.json", "model.pte"}
        assert (folder / "model.pte").read_bytes()[4:8] == b"ET12"


def test_failure_reports_carry_no_torch_trace_lines_but_keep_real_log_warnings(run_kept: Run) -> None:
    assert run_kept.outcomes("test_logged.py") == {"test_logged_training_mode": "failed"}
    run_kept.matcher("test_logged_training_mode").fnmatch_lines(
        ["*EG301*", "*Captured log call*", "WARNING  my.model:*a warning of the model's own"]
    )
    assert not [line for line in run_kept.outlines if "torch.__trace" in line]  # in no failure of the run


def test_the_fixtures_read_the_projects_pyproject_settings(project: pytest.Pytester) -> None:
    project.makefile(".toml", pyproject='[tool.export-guards]\nbackend = "portable"\nfold = false\nignore = ["EG4"]\n')
    project.makepyfile(
        test_model="""
        import pytest

        def test_pyproject(export_guards_settings):
            assert (export_guards_settings.backend, export_guards_settings.fold) == ("portable", False)
            assert export_guards_settings.ignore == ("EG4",)

        @pytest.mark.export_guards(backend="xnnpack")
        def test_marker_wins(export_guards_settings):
            assert (export_guards_settings.backend, export_guards_settings.fold) == ("xnnpack", False)
        """
    )
    project.runpytest_subprocess("-q").assert_outcomes(passed=2)
    project.makefile(".toml", pyproject='[tool.export-guards]\nbackend = "vulkan"\n')
    typo = project.runpytest_subprocess("-q", "-k", "pyproject")
    typo.assert_outcomes(errors=1)
    typo.stdout.fnmatch_lines(["*backend must be one of xnnpack, portable, cuda; not 'vulkan'*pyproject.toml*"])


def test_under_xdist_each_worker_gives_torch_its_share_of_the_cores(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    project.makepyfile(
        test_model="""
        import os
        import torch
        from torch import nn

        def test_threads():
            assert os.environ["PYTEST_XDIST_WORKER_COUNT"] == "2"
            assert torch.get_num_threads() == max(1, len(os.sched_getaffinity(0)) // 2)

        def test_check_export(check_export):
            torch.manual_seed(0)
            check_export(nn.Sequential(nn.Linear(4, 3), nn.ReLU()).eval(), (torch.randn(2, 4),))
        """
    )
    outcome = project.runpytest_subprocess("-q", "-n", "2")
    outcome.assert_outcomes(passed=2)
    # ExecuTorch's import-time ExperimentalWarning is not reported: under xdist the controller
    # imported ExecuTorch to rebuild it while the workers waited.
    assert not [line for line in outcome.outlines if "ExperimentalWarning" in line]


def test_a_runtime_built_for_a_newer_torch_skips_the_run_saying_which_torch_it_needs(run_kept: Run) -> None:
    """Everything before the run is checked; the run itself would fail in C++ on every program."""
    assert run_kept.outcomes("newer_torch/test_newer_torch.py") == {"test_small_on_a_newer_runtime": "skipped"}
    pytest.LineMatcher(run_kept.outlines).fnmatch_lines(
        ["SKIPPED *runtime (executorch.runtime) needs torch 9.0 or newer; torch * is installed*"]
    )
    assert run_kept.tally()["skipped"] == 1  # that line is this test's


def test_stateful_models_run_as_eager_runs_them_and_a_mismatch_points_at_state(run_kept: Run) -> None:
    """A model that keeps state in a buffer: each set of inputs starts both sides from the
    model's state (the caller's model is never run); steps run in order through one loaded
    method; a program that starts its state elsewhere than eager fails on the state, not on
    shapes. Fixture options are Python names, and a misspelt one is one clear line."""
    assert run_kept.outcomes("test_state.py") == {
        "test_extra_inputs_and_steps": "passed",
        "test_starts_elsewhere": "failed",
        "test_misspelt_option": "failed",
    }
    run_kept.matcher("test_starts_elsewhere").fnmatch_lines(
        [
            "*the .pte's outputs differ from eager on the step #0 *",
            "*output [[]0[]] (float32[[]3[]]) differs from eager by up to 1 at *",
            "The program keeps state between calls in 1 mutable buffer(s) (total).*through one loaded method*EG308*",
        ]
    )
    state = run_kept.section("test_starts_elsewhere")
    assert not [line for line in state if "dynamic_shapes" in line or "specialised" in line], state
    misspelt = run_kept.section("test_misspelt_option")
    assert not [line for line in misspelt if "Traceback" in line or "export_guards/" in line], misspelt
    run_kept.matcher("test_misspelt_option").fnmatch_lines(
        [
            "export-guards: unknown setting(s) fail_levle (did you mean fail_level?) in the check_export(...) call; accepted: *atol, backend, *extra_inputs, *fail_level*steps*"
        ]
    )
