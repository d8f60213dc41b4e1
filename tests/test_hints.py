"""Each hint tested by following it: a test makes the failure, reads what export-guards says
(torch's own explanation kept, on the user's line, and the hint), applies the hint's fix and
sees it pass."""

from __future__ import annotations

import textwrap
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import export_guards as eg
from conftest import Ran
from export_guards.analysis.delegation import DelegationSummary
from export_guards.render.text import render_text, summary_line

MODELS = """
import torch
from torch import nn
from torch.export import Dim
import export_guards


class Linear(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(x)


class SizeBranch(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        if x.shape[0] == 3:  # specializes batch
            return self.fc(x) * 2
        return self.fc(x)


def branch_on_batch():
    return export_guards.Exportable(SizeBranch().eval(), (torch.randn(3, 8),), dynamic_shapes=({0: Dim("batch")},))


def branch_on_batch_static():  # torch's suggested fix, as the hint says it
    return export_guards.Exportable(SizeBranch().eval(), (torch.randn(3, 8),), dynamic_shapes=({0: Dim.STATIC},))


def example_of_one():
    return export_guards.Exportable(Linear().eval(), (torch.randn(1, 8),), dynamic_shapes=({0: Dim("batch")},))


def example_of_two():  # the hint's fix: an example of 2, the Dim's min 1 and a max
    return export_guards.Exportable(Linear().eval(), (torch.randn(2, 8),), dynamic_shapes=({0: Dim("batch", min=1, max=16)},))


class Unbounded(nn.Module):
    def forward(self, x):
        n = x.sum().int().item()  # a size read from the data
        return torch.zeros(n)


class Bounded(nn.Module):
    def forward(self, x):
        n = x.sum().int().item()
        torch._check(n >= 0)
        torch._check(n <= 16)
        return torch.zeros(n)


def unbounded():
    return Unbounded(), (torch.ones(3),)


def bounded():
    return Bounded(), (torch.ones(3),)


def on_meta():
    with torch.device("meta"):
        model = Linear()
    return model.eval(), (torch.randn(2, 8),)


def weights_loaded():  # the hint's fix
    with torch.device("meta"):
        model = Linear()
    model.load_state_dict(Linear().state_dict(), assign=True)
    return model.eval(), (torch.randn(2, 8),)


def own_partitioners():
    return export_guards.Exportable(Linear().eval(), (torch.randn(2, 8),), partitioners=[])
"""


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("hints") / "hinted.py"
    path.write_text(MODELS)
    return path


def _line_of(path: Path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_a_dynamic_dimension_the_code_fixes_keeps_torchs_explanation_on_the_users_line(
    cli: Callable[..., Ran], models: Path
) -> None:
    done = cli("lint", f"{models}:branch_on_batch", "--format", "json")
    assert done.returncode == 2, done.stderr
    # torch's own why and suggested fix, in the error and in the EG002 finding; the line is the user's
    assert "torch says: You marked batch as dynamic but your code specialized it to be a constant (3)" in done.stderr
    assert "Suggested fixes: batch = 3" in done.stderr
    assert f"at {models}:{_line_of(models, 'if x.shape[0] == 3')}: if x.shape[0] == 3:" in done.stderr
    assert "site-packages" not in done.stderr and "caused by" not in done.stderr  # torch's raise, said once
    assert "hint: the code fixes batch to the example's size here (batch = 3" in done.stderr
    import json

    (found,) = json.loads(done.stdout)["findings"]
    assert (
        found["code"] == "EG002" and "You marked batch as dynamic" in found["message"] and "batch = 3" in found["fix"]
    )
    assert found["location"]["line"] == _line_of(models, "if x.shape[0] == 3")
    followed = cli("lint", f"{models}:branch_on_batch_static")
    assert followed.returncode == 0, followed.stderr


@pytest.mark.runs_program
def test_an_example_of_size_one_on_a_dynamic_dimension_is_said_so_and_an_example_of_two_runs_at_both_bounds(
    cli: Callable[..., Ran], models: Path
) -> None:
    done = cli("lint", f"{models}:example_of_one")
    assert done.returncode == 2 and "specialized it to be a constant (1)" in done.stderr
    assert "hint: an example input of size 1 on batch" in done.stderr and "max=" in done.stderr
    assert "site-packages" not in done.stderr  # no line of torch's for a line of the user's
    followed = cli("lint", f"{models}:example_of_two")
    assert followed.returncode == 0, followed.stderr
    assert "matched eager on the example inputs and at the dynamic bounds batch=1 and batch=16" in followed.stdout


def test_a_size_with_no_upper_bound_is_bounded_as_the_hint_says(cli: Callable[..., Ran], models: Path) -> None:
    done = cli("lint", f"{models}:unbounded")
    assert done.returncode == 2 and "Cannot evaluate a finite upper bound" in done.stderr
    assert "hint: a size with no upper bound" in done.stderr and "torch._check(n <= N)" in done.stderr
    followed = cli("lint", f"{models}:bounded")
    assert followed.returncode == 0, followed.stderr


def test_a_weight_on_meta_is_told_to_load_its_weights_not_to_move_devices(
    cli: Callable[..., Ran], models: Path
) -> None:
    done = cli("lint", f"{models}:on_meta")
    assert done.returncode == 2 and "meta" in done.stderr
    assert (
        "hint: a weight on the meta device" in done.stderr and "load_state_dict(state_dict, assign=True)" in done.stderr
    )
    assert "move the model" not in done.stderr
    followed = cli("lint", f"{models}:weights_loaded")
    assert followed.returncode == 0, followed.stderr


def test_the_factorys_partitioners_are_named_where_the_header_named_the_backend(
    cli: Callable[..., Ran], models: Path
) -> None:
    done = cli("lint", f"{models}:own_partitioners")
    assert done.returncode == 0, done.stderr
    assert "lowering with the factory's partitioners (none: the portable kernels), not xnnpack's default" in done.stderr


def test_the_delegation_counts_say_they_count_different_things() -> None:
    summary = DelegationSummary(Counter(linear=35), Counter(), Counter(XnnpackBackend=1), Counter(add=60, mul=40))
    assert summary.stated() == (
        "35 of 35 compute ops delegated (100%) to XnnpackBackend (conv / linear / matmul); 100 other ops on the runtime's kernels"
    )
    alone = DelegationSummary(Counter(linear=2), Counter(), Counter(XnnpackBackend=1))
    assert alone.stated() == "2 of 2 compute ops delegated (100%) to XnnpackBackend"  # nothing else to tell it from


def test_a_declined_fold_says_what_it_is_and_where_to_see_why() -> None:
    declined = eg.Finding(
        "EG203", eg.Severity.INFO, "left 'w * 2' in the program: folding it would grow it", method="forward"
    )
    line = summary_line(eg.Report.of([declined]), show_info=False)
    assert line == "All checks passed: 1 fold declined as not worth it (EG203) (1 info not shown: --show-info)."
    shown = render_text(eg.Report.of([declined]), show_info=True)  # the hint followed: which, and why
    assert "EG203 [info] left 'w * 2' in the program" in shown


def test_the_hint_for_torchs_specialization_is_general(tmp_path: Path) -> None:
    from export_guards.targets import StepFailed, step

    class Reshaped(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.reshape(4, 5, -1)  # fixes both dimensions' product

    dims = {0: torch.export.Dim("rows"), 1: torch.export.Dim("cols")}
    with pytest.raises(StepFailed) as failed, step("torch.export"):
        torch.export.export(Reshaped(), (torch.randn(4, 10),), dynamic_shapes=(dims,))
    (found,) = failed.value.report.findings
    assert "You marked" in found.message and "Suggested fixes" in found.message
    assert found.fix is not None and "x.view(x.shape[0], -1)" in found.fix and "Dim.STATIC" in found.fix


QUANTIZED_TESTS = textwrap.dedent(
    """
    import torch
    from torch import nn


    def quantized():
        from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
        from torchao.quantization.granularity import PerGroup

        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 8)).eval()
        quantize_(model, Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(32)))
        return model


    def test_float_tolerance(check_export):  # a float model's tolerance, given (without it, the lint's for a quantized program)
        check_export(quantized(), (torch.randn(2, 64),), atol=1e-5, rtol=1e-5)


    def test_the_hints_tolerance(check_export):
        check_export(quantized(), (torch.randn(2, 64),), atol=0.1, rtol=0.1)


    class Fc(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 4)

        def forward(self, x):
            return self.fc(x)


    def test_wrong_shape(check_export):
        model = Fc().eval()
        model.fc.weight.data = torch.randn(4, 6)
        check_export(model, (torch.randn(2, 8),))
    """
)

pytest_plugins = ["pytester"]


@pytest.mark.subprocess
def test_fixture_failures_say_the_quantization_error_and_torchs_error_once(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_hinted=QUANTIZED_TESTS)
    outcome = pytester.runpytest_subprocess("-q")
    outcome.assert_outcomes(passed=1, failed=2)
    # the failures' own sections, not pytest's summary lines (whose length follows the terminal's width)
    text = outcome.stdout.str().split("short test summary info")[0]
    # an 8da4w program differs from eager by the quantization's error: said so, and the hint's tolerance passes
    assert "The program quantizes" in text and "atol=0.1, rtol=0.1" in text
    assert "specialised a branch or a shape" not in text
    # a weight of the wrong shape: torch's error once, on the user's line; torch's ERROR log of it not at all
    assert text.count("a and b must have same reduction dim") == 1, text
    assert "Traceback (most recent call last)" not in text and "failed while attempting to run meta" not in text
    assert "return self.fc(x)" in text
