"""Weight math outside core ATen (``orthogonal``'s three maps, hand-written ``linalg``), which
``to_edge`` rejects: folded on the torch.export program first, by every guarded flow."""

from __future__ import annotations

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from executorch.export import export
from torch import nn

import export_guards as eg
from export_guards.recipes import recipe_named
from export_guards.verify import run_pte

MAPS = ("matrix_exp", "householder", "cayley")
INPUT = torch.randn(2, 8, generator=torch.Generator().manual_seed(0))


class Orthogonal(nn.Module):
    def __init__(self, orthogonal_map: str) -> None:
        super().__init__()
        self.linear = nn.utils.parametrizations.orthogonal(nn.Linear(8, 8), orthogonal_map=orthogonal_map)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


class InverseWeight(nn.Module):
    """A weight written by hand with ``linalg.inv`` of a parameter."""

    def __init__(self) -> None:
        super().__init__()
        self.basis = nn.Parameter(torch.eye(8) + 0.1 * torch.randn(8, 8))
        self.bias = nn.Parameter(torch.zeros(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(x, torch.linalg.inv(self.basis), self.bias)


class InputDependent(nn.Module):
    """``matrix_exp`` of something computed from the input: never folded."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(8, 8) * 0.01)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ torch.linalg.matrix_exp(self.scale * x.mean())


def exported(model: nn.Module) -> torch.export.ExportedProgram:
    return torch.export.export(model.eval(), (INPUT,))


def eager(model: nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(INPUT)


def seeded(factory, *args):
    torch.manual_seed(0)
    return factory(*args).eval()


@pytest.mark.parametrize("orthogonal_map", MAPS)
def test_lower_with_guards_exports_every_orthogonal_map(orthogonal_map: str) -> None:
    model = seeded(Orthogonal, orthogonal_map)
    with pytest.raises(Exception, match="not in Core ATen opset"):
        to_edge_transform_and_lower(exported(model), partitioner=[XnnpackPartitioner()])  # stock

    guarded = eg.lower_with_guards(exported(model))
    assert guarded.edge is not None
    assert guarded.delegation.count("linear") == (1, 1)
    assert [f.constant for f in guarded.report.with_code("EG201")] == ["linear.weight"]
    torch.testing.assert_close(run_pte(guarded.to_pte(), (INPUT,))[0], eager(model), atol=1e-5, rtol=1e-5)


def test_the_pass_list_form_needs_one_line_before_to_edge() -> None:
    model = seeded(Orthogonal, "matrix_exp")
    program, report = eg.fold_non_core_constants(exported(model))  # the one extra line
    edge = to_edge_transform_and_lower(program, transform_passes=eg.guard_passes(), partitioner=[XnnpackPartitioner()])
    assert eg.delegation_summary(edge).count("linear") == (1, 1)
    assert [f.constant for f in report] == ["linear.weight"]


def test_hand_written_non_core_weight_math_is_folded_too() -> None:
    model = seeded(InverseWeight)
    guarded = eg.lower_with_guards(exported(model))
    assert guarded.edge is not None and guarded.delegation.count("linear") == (1, 1)
    torch.testing.assert_close(run_pte(guarded.to_pte(), (INPUT,))[0], eager(model), atol=1e-4, rtol=1e-4)


def test_nothing_that_depends_on_the_input_is_folded() -> None:
    program = exported(seeded(InputDependent))
    same, report = eg.fold_non_core_constants(program)
    assert same is program and not report
    with pytest.raises(eg.LoweringFailed, match="not in Core ATen opset"):
        eg.lower_with_guards(program)


def test_a_program_whose_weight_math_is_core_aten_is_left_to_the_transform_pass() -> None:
    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(8, 8)
            self.log_scale = nn.Parameter(torch.zeros(8, 1))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return nn.functional.linear(x, self.linear.weight * self.log_scale.exp(), self.linear.bias)

    program = exported(seeded(Scaled))
    same, report = eg.fold_non_core_constants(program)
    assert same is program and not report
    assert eg.lower_with_guards(program).report.with_code("EG201"), "the transform pass folds it"


def delegated_matmuls(session) -> int:
    return eg.delegation_summary(session.get_edge_program_manager()).count("linear", "mm", "addmm")[0]


@pytest.mark.parametrize("orthogonal_map", MAPS)
def test_a_guarded_recipe_exports_orthogonal_and_reports_the_fold(orthogonal_map: str) -> None:
    model = seeded(Orthogonal, orthogonal_map)
    # The recipe lowers with ExecuTorch's verifier off: the stock recipe either fails (cayley's
    # linalg_solve) or keeps the weight math and leaves the linear on portable kernels.
    try:
        stock = export(model, [(INPUT,)], recipe_named("xnnpack_fp32"))
    except Exception:  # noqa: BLE001 - any failure of the stock recipe
        stock = None
    assert stock is None or delegated_matmuls(stock) == 0
    session = export(model, [(INPUT,)], eg.guard_recipe(recipe_named("xnnpack_fp32")))
    assert delegated_matmuls(session) == 1
    torch.testing.assert_close(run_pte(session.get_pte_buffer(), (INPUT,))[0], eager(model), atol=1e-5, rtol=1e-5)
    folds = eg.recipes.recipe_report(session).with_code("EG201")
    assert [(f.method, f.constant) for f in folds] == [("forward", "linear.weight")]


def test_the_fixture_exports_orthogonal(check_export, assert_delegated) -> None:
    assert_delegated(check_export(seeded(Orthogonal, "cayley"), (INPUT,)))
