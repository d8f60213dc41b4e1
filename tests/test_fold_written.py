"""The fold judged on the program it writes: the estimate's verdict against written programs, the
operator suite's padding modes and hardsigmoid, a fold of no gain, and each finding printed once."""

from __future__ import annotations

import math

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge, to_edge_transform_and_lower
from torch import nn

import export_guards as eg
from export_guards.analysis.fold_plan import plan_fold
from export_guards.report import Finding, Report
from export_guards.ruleset import once
from fold_written_models import Gemma2Like, RopeModel, gemma2_like, rope


class PaddedConv(nn.Module):
    """ExecuTorch's operator suite's ``test_conv{1,2}d_padding_modes`` model."""

    def __init__(self, dims: int, mode: str) -> None:
        super().__init__()
        self.conv = getattr(nn, f"Conv{dims}d")(3, 6, 3, padding=1, padding_mode=mode)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


class Hardsigmoid(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.hardsigmoid(x)


class Broadcast(nn.Module):
    """A small constant broadcast to a big one and computed on: folded, 16 KiB more."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("row", torch.randn(1, 64))
        self.row: torch.Tensor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.row.expand(64, 64) * 2


class Scaled(nn.Module):
    """``w * 2`` where ``w`` is read elsewhere too: 12 bytes more of constants, one instruction less."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.w + self.w * 2


SIGNAL = {1: (4, 3, 50), 2: (4, 3, 16, 16)}
CASES = {
    **{
        f"conv{d}d {mode}": (lambda d=d, mode=mode: (PaddedConv(d, mode), torch.randn(*SIGNAL[d])))
        for d in (1, 2)
        for mode in ("reflect", "replicate", "circular")
    },
    "hardsigmoid": lambda: (Hardsigmoid(), torch.randn(2, 3, 4, 5)),
    "broadcast": lambda: (Broadcast(), torch.randn(64, 64)),
    "scaled": lambda: (Scaled(), torch.randn(3)),
}


def written(program: torch.export.ExportedProgram, passes: list | None, partitioned: bool) -> int:
    partitioner = [XnnpackPartitioner()] if partitioned else None
    return len(
        to_edge_transform_and_lower(program, transform_passes=passes, partitioner=partitioner).to_executorch().buffer
    )


@pytest.mark.parametrize(
    "partitioned", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["portable", "xnnpack"]
)
@pytest.mark.parametrize("case", list(CASES))
def test_the_estimate_agrees_with_the_written_programs(case: str, partitioned: bool) -> None:
    """Folding everything (``max_growth=inf``) against folding nothing, written: the default
    fold folds exactly where the written program is smaller, and is never larger than either."""
    torch.manual_seed(0)
    model, x = CASES[case]()
    program = torch.export.export(model.eval(), (x,))
    stock = written(program, None, partitioned)
    everything = written(program, eg.guard_passes(config=eg.Settings(fold_max_growth=math.inf)), partitioned)
    guarded = written(program, eg.guard_passes(), partitioned)
    plan = plan_fold(to_edge(program).exported_program())  # the plan the fold in transform_passes makes
    folds = bool(plan.roots)
    assert folds == (everything < stock), (case, stock, everything, [d.growth for d in plan.declined])
    assert guarded == min(stock, everything)
    assert all(d.growth > 0 for d in plan.declined)


@pytest.mark.parametrize("dims", [1, 2])
def test_a_reflect_padded_conv_writes_its_index_as_a_constant(dims: int) -> None:
    """Stock ExecuTorch recomputes the reflected index (arange, abs, sub) at every call; its
    constant is smaller than those instructions: 12% (1-D) and 28% (2-D) fewer bytes."""
    torch.manual_seed(0)
    model, x = CASES[f"conv{dims}d reflect"]()
    program = torch.export.export(model.eval(), (x,))
    result = eg.lower_with_guards(program)
    (folded,) = result.report.with_code("EG201")
    assert "arange" in folded.message and "smaller" in folded.message
    assert not result.report.with_code("EG203")
    assert len(result.to_pte()) < 0.9 * written(program, None, True)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["replicate", "circular"])
def test_replicate_and_circular_padding_are_left_as_stock_writes_them(mode: str) -> None:
    """Their index or buffer is computed from literals alone (arange, empty): folded, as
    ``constant_prop_pass`` does, circular padding's program is half again as big."""
    torch.manual_seed(0)
    model, x = CASES[f"conv2d {mode}"]()
    program = torch.export.export(model.eval(), (x,))
    result = eg.lower_with_guards(program)
    assert not result.report.with_code("EG201", "EG203")
    assert len(result.to_pte()) == written(program, None, True)


def test_hardsigmoid_folds_its_int64_scalars_into_float_ones() -> None:
    """``hardsigmoid`` adds 3 and divides by 6, int64 scalars converted to float32 at every call:
    no quantized weight (an integer as wide as the float), folded, 15% fewer bytes."""
    model, x = CASES["hardsigmoid"]()
    program = torch.export.export(model.eval(), (x,))
    result = eg.lower_with_guards(program)
    assert result.report.with_code("EG201")
    assert len(result.to_pte()) < 0.9 * written(program, None, True)


def test_a_fold_that_grows_the_written_program_is_declined_with_its_growth() -> None:
    model, x = CASES["broadcast"]()
    program = torch.export.export(model.eval(), (x,))
    folded, report = eg.fold.fold_constants(program)
    assert folded is program and not report.with_code("EG201")
    (declined,) = report.with_code("EG203")
    assert "would not be smaller" in declined.message
    growth = int(declined.message.split("about ")[1].split(" bytes")[0].replace(",", ""))
    assert 64 * 64 * 4 - 1024 < growth < 64 * 64 * 4  # the constant, less two instructions and the row


def test_a_rope_inv_freq_is_folded_only_for_a_gain_and_reported_with_it() -> None:
    """The HF rotary embedding's ``inv_freq[None, :, None].float().expand(...)``: folded before
    ``to_edge`` (``to`` is not core ATen), then what ``to_edge`` makes of the matmul that reads it
    (``expand_copy``, ``view_copy``): the written program is smaller each time. The second fold
    keeps the first's name, and the weight is reported once, with what the written program gains."""
    model, inputs = rope()
    program = torch.export.export(model, inputs)
    result = eg.lower_with_guards(program)
    (folded,) = result.report.with_code("EG201")  # one weight, one finding: the second fold keeps its name
    assert folded.constant == "rotary.inv_freq_folded" and "smaller" in folded.message
    assert " 32 -> 32 bytes" not in folded.message
    assert len(result.to_pte()) < written(program, None, True)


def test_a_fold_of_no_gain_is_neither_done_nor_reported() -> None:
    """A copy of a constant (no computation) that the rest of the program reads too and that
    feeds no static weight: folded, 4 KiB more for one instruction less. Nothing changes, and
    nothing is said (a view or a copy is no computation to report as left)."""

    class Copied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("row", torch.randn(1, 64))
            self.row: torch.Tensor

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.row.expand(16, 64).clone() + self.row

    program = torch.export.export(Copied().eval(), (torch.randn(16, 64),))
    folded, report = eg.fold.fold_constants(program)
    assert folded is program and not report.with_code("EG201", "EG203")
    edge = eg.fold.fold_constants(to_edge(program).exported_program())
    assert not edge[1].with_code("EG201", "EG203")


@pytest.mark.slow
def test_gemma2_style_model_prints_each_finding_once() -> None:
    """Sliding-window and global layers, soft-capped logits ``tanh(x / cap) * cap`` with the caps
    as tensors (two constants lifted from one line), ``(1 + weight)`` RMSNorm, a tied embedding
    scaled by sqrt(dim): the caps' copies were declined as two EG203 that read the same."""
    model, inputs = gemma2_like()
    result = eg.export_with_guards(model, inputs)
    printed = [str(f) for f in result.report]
    assert len(printed) == len(set(printed)), [p for p in printed if printed.count(p) > 1]
    assert not result.report.with_code("EG203")  # every copy of a constant here writes fewer bytes folded
    assert isinstance(model, Gemma2Like) and isinstance(rope()[0], RopeModel)


def test_computations_that_read_alike_are_declined_in_one_finding() -> None:
    class TwoBroadcasts(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("a", torch.randn(1, 64))
            self.a: torch.Tensor
            self.register_buffer("b", torch.randn(1, 64))
            self.b: torch.Tensor

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.a.expand(64, 64) * 2 + self.b.expand(64, 64) * 2

    program = torch.export.export(TwoBroadcasts().eval(), (torch.randn(64, 64),))
    _, report = eg.fold.fold_constants(program)
    (declined,) = report.with_code("EG203")
    assert declined.message.startswith("left 2 computations on constants")
    assert len(declined.subjects) == 2


def _finding(message: str, *subjects: str, code: str = "EG203") -> Finding:
    from export_guards.report import Severity

    return Finding(code, Severity.INFO, message, subjects=subjects)


def test_merged_reports_keep_each_finding_once_and_distinct_ones_all() -> None:
    first = _finding("left the computation (clone)", "clone")
    again = _finding("left the computation (clone)", "clone")
    after_to_edge = _finding("left the computation (_clone_dim_order)", "clone")  # the same computation, later stage
    other = _finding("left the computation (_clone_dim_order)", "clone_1")
    same_step_twice = [
        _finding("conv reads a computed weight", "conv", code="EG210"),
        _finding("conv's bias is computed", "conv", code="EG210"),
    ]
    merged = once([Report.of([first, again, *same_step_twice]), Report.of([after_to_edge, other])])
    assert list(merged) == [first, *same_step_twice, other]


def test_a_step_that_does_not_know_its_method_matches_any() -> None:
    before_the_quantizer = _finding("left the computation (expand, mul)", "mul")
    in_transform_passes = Finding(
        "EG203",
        before_the_quantizer.severity,
        "left the computation (expand_copy, mul)",
        method="forward",
        subjects=("mul",),
    )
    in_another_method = Finding(
        "EG203",
        before_the_quantizer.severity,
        "left the computation (expand_copy, mul)",
        method="other",
        subjects=("mul",),
    )
    merged = once([Report.of([before_the_quantizer]), Report.of([in_transform_passes, in_another_method])])
    assert list(merged) == [before_the_quantizer]
    by_method = once([Report.of([in_transform_passes]), Report.of([in_another_method])])
    assert list(by_method) == [in_transform_passes, in_another_method]  # two methods, two findings
