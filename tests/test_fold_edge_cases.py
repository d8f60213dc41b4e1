"""Cases the fold must get right beyond the zoo: aliasing and in-place writes, layouts,
names, device and meta constants, control flow. Each came from a review of the fold."""

from __future__ import annotations

import torch
from executorch.exir import to_edge, to_edge_transform_and_lower
from executorch.runtime import Runtime
from torch import nn

import export_guards as eg
from export_guards.analysis.programs import mutated_constants


def run_pte(program: torch.export.ExportedProgram, *inputs: torch.Tensor) -> list[torch.Tensor]:
    buffer = to_edge(program).to_executorch().buffer
    return Runtime.get().load_program(buffer).load_method("forward").execute(list(inputs))


def test_a_value_written_in_place_later_is_not_folded() -> None:
    class WrittenLater(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.ones(3))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            t = self.w.clone()  # computed from a constant only...
            t.add_(x)  # ...then changed by the input
            return t * 2

    model = WrittenLater().eval()
    program = torch.export.export(model, (torch.ones(3),))
    folded, report = eg.fold.fold_constants(program)
    assert len(report) == 0 and folded is program
    (out,) = run_pte(program, torch.ones(3))
    assert torch.equal(out, torch.full((3,), 4.0))


def test_a_buffer_written_through_a_split_is_mutated() -> None:
    class SplitWrite(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("buf", torch.ones(4))
            self.buf: torch.Tensor

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            first, _ = self.buf.split(2)
            first.add_(1)
            return x + self.buf * 2

    program = torch.export.export(SplitWrite(), (torch.zeros(4),))
    assert mutated_constants(program) == {"buf"}
    assert len(eg.fold.fold_constants(program)[1]) == 0


def test_a_parameter_mutated_in_a_functional_program_is_mutated() -> None:
    class Accumulates(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.ones(3), requires_grad=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = x + self.w * 2
            self.w.add_(1)
            return y

    functional = torch.export.export(Accumulates(), (torch.zeros(3),)).run_decompositions({})
    assert mutated_constants(functional) == {"w"}
    assert len(eg.fold.fold_constants(functional)[1]) == 0


def test_a_channels_last_result_keeps_its_layout() -> None:
    class ChannelsLast(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(1, 3, 4, 4).to(memory_format=torch.channels_last))
            self.s = nn.Parameter(torch.randn(1, 3, 4, 4).to(memory_format=torch.channels_last))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.w * self.s

    model = ChannelsLast().eval()
    x = torch.randn(1, 3, 4, 4).to(memory_format=torch.channels_last)
    folded, report = eg.fold.fold_constants(torch.export.export(model, (x,)))
    assert [f.constant for f in report] == ["w_folded"]
    assert folded.state_dict["w_folded"].is_contiguous(memory_format=torch.channels_last)
    (out,) = run_pte(folded, x)
    assert torch.allclose(out, model(x))


def test_new_names_never_collide_with_existing_placeholders() -> None:
    class Collides(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.ones(3))

        def forward(self, p_w_folded: torch.Tensor) -> torch.Tensor:
            return p_w_folded + self.w * 2

    folded, _report = eg.fold.fold_constants(torch.export.export(Collides(), (torch.ones(3),)))
    names = [n.name for n in folded.graph.nodes if n.op == "placeholder"]
    assert len(names) == len(set(names)) == 2 and "p_w_folded" in names
    assert torch.equal(folded.module()(torch.ones(3)), torch.full((3,), 3.0))


def test_constants_without_data_are_left_to_the_placement_guard() -> None:
    with torch.device("meta"):
        model = nn.Linear(4, 3)
    model.weight = nn.Parameter(model.weight * 1)  # a meta parameter
    program = torch.export.export(model, (torch.randn(2, 4, device="meta"),))
    folded, report = eg.fold.fold_constants(program)
    assert len(report) == 0 and folded is program


def test_control_flow_branches_are_counted_in_the_delegation_summary() -> None:
    class Branches(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(4, 4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cond(x.sum() > 0, lambda x, w: x @ w, lambda x, w: x @ w.t(), (x, self.w))

    model = Branches().eval()
    edge = to_edge_transform_and_lower(
        torch.export.export(model, (torch.randn(2, 4),)), transform_passes=eg.guard_passes()
    )
    summary = eg.delegation_summary(edge)
    assert summary.count("mm") == (0, 2) and summary.fraction_delegated == 0.0


def test_quantized_wrapper_weights_are_readable() -> None:
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    model = nn.Sequential(nn.Linear(64, 64)).eval()
    quantize_(model, Int8WeightOnlyConfig())
    program = torch.export.export(model, (torch.randn(2, 64),))
    assert len(eg.placement.check_constant_placement(program)) == 0
    assert eg.placement.guard_constant_placement(program) is program


def test_names_that_end_like_a_reparametrization_are_not_one() -> None:
    """``attn_v``, ``scale_g``, ``w_orig``: a suffix alone is no hook-based state (issue 39).
    The fold names what it folds after them, and the lint sees nothing still reparametrized;
    real state counts only with its companions, as the hooks register them."""
    from export_guards.analysis.reparametrization import reparametrized

    class Named(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn_v = nn.Parameter(torch.randn(4, 4))
            self.scale_g = nn.Parameter(torch.randn(4))
            self.w_orig = nn.Parameter(torch.randn(4, 4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return (
                nn.functional.linear(x, self.attn_v * 2) + nn.functional.linear(x, self.w_orig.t()) * self.scale_g.abs()
            )

    program = torch.export.export(Named().eval(), (torch.randn(2, 4),))
    folded, _ = eg.fold.fold_constants(program, max_growth=float("inf"))  # scale_g.abs() too, which saves no bytes
    assert sorted(folded.state_dict) == ["attn_v_folded", "scale_g_folded", "w_orig_folded"]  # not 'attn', 'scale', 'w'
    assert not eg.lint(program).with_code("EG212")
    assert reparametrized(
        ["attn_v", "scale_g", "w_orig", "c.weight_orig", "c.weight_u", "c.weight_v", "n.weight_g", "n.weight_v"]
    ) == {
        "c.weight": ["c.weight_orig", "c.weight_u", "c.weight_v"],
        "n.weight": ["n.weight_g", "n.weight_v"],
    }
