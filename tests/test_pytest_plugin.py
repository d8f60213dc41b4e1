"""The pytest plugin, tested as a user runs it: pytester writes a test file and runs pytest."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = [pytest.mark.subprocess, pytest.mark.slow]  # each test is a pytest run in a child process

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


def test_a_model_that_exports_runs_and_matches_eager_passes(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_model="""
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
    )
    outcome = project.runpytest_subprocess("-q")
    outcome.assert_outcomes(passed=3)
    # The fixtures' own steps' warnings (torch's and ExecuTorch's deprecations) are not reported;
    # the test's and the model's are (the model's twice: the export traces it, then eager runs it).
    outcome.stdout.fnmatch_lines(
        ["*test_model.py:*: UserWarning: the test's own warning", "*models.py:*: UserWarning: the model's own warning"]
    )
    assert outcome.parseoutcomes()["warnings"] == 3, outcome.outlines[-20:]
    assert not [line for line in outcome.outlines if "site-packages" in line or "DeprecationWarning" in line]


def test_each_failure_says_why_in_the_users_terms(project: pytest.Pytester) -> None:
    """The ways a check fails, in one pytest run: lint findings (with the rule, module and
    line), outputs that diverge from eager (per output), extra inputs that a specialised
    export cannot run (naming the input), a step that fails, a program whose operator the
    runtime has no kernel for (the check's finding, on the user's line), and a runtime refusal
    on inputs of the exported shapes (no advice about shapes)."""
    project.makepyfile(
        test_model="""
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
    )
    outcome = project.runpytest_subprocess("-q", "--eg-artifacts", "kept")
    outcome.assert_outcomes(failed=6)
    # A program the runtime cannot load: the check's finding, at the user's line, in a few lines
    no_kernel = _section(outcome.outlines, "test_no_kernel")
    assert 3 <= len(no_kernel) <= 20 and not [
        line for line in no_kernel if "During handling" in line or "Traceback" in line
    ], no_kernel
    outcome.stdout.fnmatch_lines(
        [
            "export-guards: the written program would not load or run in executorch.runtime: 1 finding(s) at or above error:",
            "*test_model.py:*: EG521 [[]error[]] method 'forward' calls aten::sort.values, for which executorch.runtime * has no kernel*",
            "    return torch.sort(x)[0].cumsum(-1)",
        ]
    )
    refused = _section(outcome.outlines, "test_refused_at_load")
    assert not [line for line in refused if "During handling" in line or "0x:" in line or "dynamic_shapes" in line], (
        refused
    )
    assert any("Failed to load method forward, error: 0x14" in line for line in refused), refused
    # A step that fails: its name, the innermost cause, the user's line, the artifacts; a few
    # lines, not the libraries' traceback.
    failure = _section(outcome.outlines, "test_lowering_fails")
    assert 3 <= len(failure) <= 20 and not [
        line for line in failure if "site-packages" in line or "Traceback" in line
    ], failure
    # ... and what the test captured holds none of the libraries' log lines or prints either
    captured = _section(outcome.outlines, "test_lowering_fails", with_captured=True)
    assert not [
        line for line in captured if "site-packages" in line or "torch/" in line or "executorch" in line.split(":")[0]
    ], captured
    outcome.stdout.fnmatch_lines(
        [
            "export-guards: lowering (xnnpack) failed: *SpecViolationError: Operator torch._ops.aten.rand_like.default*",
            "  at *models.py:*: return x + torch.rand_like(x)",
            "artifacts saved in *kept*",
        ]
    )
    outcome.stdout.fnmatch_lines(
        [
            "*export-guards: 1 finding(s) at or above error (xnnpack):*",
            "*EG301 [[]error[]] dropout 'dropout' runs in training mode*",
            "*module: 1 (Dropout)*",
            "*fix: Call model.eval() before torch.export.*",
            "*artifacts saved in *kept*",
        ]
    )
    outcome.stdout.fnmatch_lines(
        [
            "*the .pte's outputs differ from eager on the example inputs (atol=1e-05, rtol=1e-05, portable):*",
            "*output [[]0[]] (float32[[]3[]]) differs from eager by up to 3 at [[]*values beyond the tolerance (rtol 1e-05, atol 1e-05)",
            "*pass inputs that take the other paths as extra_inputs*",
        ]
    )
    outcome.stdout.fnmatch_lines(
        [
            "*executorch.runtime could not run the program on the extra inputs #0: *error 0x*",
            "  input '*': exported as float32[[]1, 3[]], given float32[[]4, 3[]]",
            "*export with dynamic_shapes*",
        ]
    )
    kept = {p.name: p for p in Path(project.path, "kept").iterdir()}
    (lint,) = [p for name, p in kept.items() if "training_mode" in name]
    assert {p.name for p in lint.iterdir()} == {"report.txt", "report.json"}
    (diverged,) = [p for name, p in kept.items() if "branchy" in name]
    assert (diverged / "model.pte").stat().st_size > 0
    (failed,) = [p for name, p in kept.items() if "lowering_fails" in name]
    assert {p.name for p in failed.iterdir()} == {"report.txt", "report.json"}
    assert "EG002 [error] lowering (xnnpack) failed: SpecViolationError" in (failed / "report.txt").read_text()


def _section(lines: list[str], test: str, *, with_captured: bool = False) -> list[str]:
    """The lines of one test's failure: after its ``___ test ___`` header, up to the next header
    (``with_captured``: the ``--- Captured ... ---`` sections too)."""
    start = next(i for i, line in enumerate(lines) if line.startswith("_") and f" {test} " in line) + 1
    ends = ("___", "===") if with_captured else ("___", "===", "---")
    end = next((i for i, line in enumerate(lines[start:], start) if line.startswith(ends)), len(lines))
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


def test_eg_device_runs_on_cpu_and_on_trapdev_when_asked(project: pytest.Pytester, trapdev: object) -> None:
    project.makepyfile(
        test_model="""
        import torch
        from torch import nn

        def test_device(eg_device, check_export):
            torch.manual_seed(0)
            model = nn.Sequential(nn.Linear(4, 3), nn.ReLU()).to(eg_device)
            check_export(model, (torch.randn(2, 4).to(eg_device),), placement="copy")
        """
    )
    outcome = project.runpytest_subprocess("--eg-trapdev", "-v")
    outcome.assert_outcomes(passed=2)
    outcome.stdout.fnmatch_lines(["*test_device?cpu? PASSED*", "*test_device?trapdev? PASSED*"])


def test_assert_delegated_uses_exact_op_names_and_class_markers_merge(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_model="""
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
    )
    outcome = project.runpytest_subprocess("-q")
    outcome.assert_outcomes(passed=1, failed=1)
    outcome.stdout.fnmatch_lines(["*left in the portable graph: mm x1 (not allowed: mm)*"])


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


def test_long_test_ids_get_bounded_artifact_folders_and_a_failed_save_keeps_the_real_failure(
    project: pytest.Pytester,
) -> None:
    project.makepyfile(
        test_model="""
        import pytest
        import torch
        from torch import nn

        @pytest.mark.parametrize("case", ["long"], ids=["a-very-long-case-name/" * 16])
        def test_training_mode(check_export, case):
            check_export(nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)).train(), (torch.randn(2, 4),))
        """
    )
    outcome = project.runpytest_subprocess("-q", "--eg-artifacts", "kept")
    outcome.assert_outcomes(failed=1)
    (kept,) = Path(project.path, "kept").iterdir()
    readable, digest = kept.name.rsplit("-", 1)
    assert readable.startswith("test_model.py_test_training_mode_a-very-long-case-name_")
    assert len(readable) <= 100 and len(digest) == 8
    assert {p.name for p in kept.iterdir()} == {"report.txt", "report.json"}
    # Written as the command writes its outputs: a user's file there is never replaced.
    (kept / "report.txt").write_text("my notes on this failure\n")
    again = project.runpytest_subprocess("-q", "--eg-artifacts", "kept")
    again.assert_outcomes(failed=1)
    again.stdout.fnmatch_lines(
        ["*the artifacts were not saved in *: report.txt there is not export-guards' to replace*"]
    )
    assert (kept / "report.txt").read_text() == "my notes on this failure\n"

    Path(project.path, "blocked").write_text("a file where the artifacts folder should be\n")
    blocked = project.runpytest_subprocess("-q", "--eg-artifacts", "blocked")
    blocked.assert_outcomes(failed=1)
    blocked.stdout.fnmatch_lines(
        [
            "*export-guards: 1 finding(s) at or above error (xnnpack):*",
            "*EG301 [[]error[]] dropout 'dropout' runs in training mode*",
            "*export-guards: the artifacts could not be saved in *blocked*: *Error: *",
        ]
    )


def test_assert_delegated_failures_save_the_report_and_the_pte(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_model="""
        import torch
        from torch import nn

        from models import Modulated

        def test_guarded_export(guarded_export, assert_delegated):
            assert_delegated(guarded_export(Modulated(), (torch.randn(2, 4),)))

        def test_export_check(check_export, assert_delegated):
            assert_delegated(check_export(Modulated(), (torch.randn(2, 4),)))
        """
    )
    outcome = project.runpytest_subprocess("-q", "--eg-artifacts", "kept")
    outcome.assert_outcomes(failed=2)
    outcome.stdout.fnmatch_lines(["*left in the portable graph: mm x1*", "artifacts saved in *kept*"])
    kept = sorted(Path(project.path, "kept").iterdir())
    names = [p.name.split("-")[0] for p in kept]
    assert names == ["test_model.py_test_export_check", "test_model.py_test_guarded_export"]
    for folder in kept:
        assert {p.name for p in folder.iterdir()} == {"report.txt", "report.json", "model.pte"}
        assert (folder / "model.pte").read_bytes()[4:8] == b"ET12"


def test_failure_reports_carry_no_torch_trace_lines_but_keep_real_log_warnings(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_model="""
        import logging
        import torch
        from torch import nn

        def test_training_mode(check_export):
            logging.getLogger("my.model").warning("a warning of the model's own")
            check_export(nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)).train(), (torch.randn(2, 4),))
        """
    )
    outcome = project.runpytest_subprocess("-q")
    outcome.assert_outcomes(failed=1)
    outcome.stdout.fnmatch_lines(["*EG301*", "*Captured log call*", "WARNING  my.model:*a warning of the model's own"])
    assert not [line for line in outcome.outlines if "torch.__trace" in line]


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


def test_a_runtime_built_for_a_newer_torch_skips_the_run_saying_which_torch_it_needs(project: pytest.Pytester) -> None:
    """Everything before the run is checked; the run itself would fail in C++ on every program."""
    project.makeconftest(
        """
        from importlib import metadata
        from export_guards import compat

        compat.RUNTIME_BUILT_FOR[compat._minor(metadata.version("executorch"))] = "9.0"  # as if built for a newer torch
        """
    )
    project.makepyfile(
        test_model="""
        import torch
        from models import Small, image

        def test_small(check_export):
            torch.manual_seed(0)
            check_export(Small().eval(), image())
        """
    )
    result = project.runpytest_subprocess("-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*runtime (executorch.runtime) needs torch 9.0 or newer; torch * is installed*"])


def test_stateful_models_run_as_eager_runs_them_and_a_mismatch_points_at_state(project: pytest.Pytester) -> None:
    """A model that keeps state in a buffer: each set of inputs starts both sides from the
    model's state (the caller's model is never run); steps run in order through one loaded
    method; a program that starts its state elsewhere than eager fails on the state, not on
    shapes. Fixture options are Python names, and a misspelt one is one clear line."""
    project.makepyfile(
        test_state="""
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
    )
    outcome = project.runpytest_subprocess("-q")
    outcome.assert_outcomes(passed=1, failed=2)
    outcome.stdout.fnmatch_lines(
        [
            "*the .pte's outputs differ from eager on the step #0 *",
            "*output [[]0[]] (float32[[]3[]]) differs from eager by up to 1 at *",
            "The program keeps state between calls in 1 mutable buffer(s) (total).*through one loaded method*EG308*",
        ]
    )
    state = _section(outcome.outlines, "test_starts_elsewhere")
    assert not [line for line in state if "dynamic_shapes" in line or "specialised" in line], state
    misspelt = _section(outcome.outlines, "test_misspelt_option")
    assert not [line for line in misspelt if "Traceback" in line or "export_guards/" in line], misspelt
    outcome.stdout.fnmatch_lines(
        [
            "export-guards: unknown setting(s) fail_levle (did you mean fail_level?) in the check_export(...) call; accepted: *atol, backend, *extra_inputs, *fail_level*steps*"
        ]
    )
