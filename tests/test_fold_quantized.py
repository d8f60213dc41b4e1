"""Quantized reparametrized weights: a quantize op whose input is constant is folded into an
integer constant, the dequantize that the delegate matches stays, and XNNPACK delegates the
layer as int8 (PT2E) or as 4-bit groupwise (torchao's affine ops)."""

from __future__ import annotations

import copy

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from torch import nn
from torch.nn.utils import parametrizations

import export_guards as eg
from export_guards.analysis.fold_plan import plan_fold
from export_guards.analysis.ops import aten_name
from export_guards.verify import run_pte

pytestmark = [pytest.mark.slow]  # models quantized, folded, lowered and run


SIGNAL = (torch.randn(1, 4, 32, generator=torch.Generator().manual_seed(0)),)
COMPUTE = ("convolution", "linear", "addmm", "mm")


class Vocoder(nn.Module):
    """Three reparametrized convs (weight norm both ways, spectral norm) and a weight-normed linear."""

    def __init__(self) -> None:
        super().__init__()
        self.pre = parametrizations.weight_norm(nn.Conv1d(4, 8, 3, padding=1))
        self.mid = parametrizations.spectral_norm(nn.Conv1d(8, 8, 3, padding=1))
        self.post = nn.utils.weight_norm(nn.Conv1d(8, 4, 3, padding=1))
        self.head = parametrizations.weight_norm(nn.Linear(32, 16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.post(torch.relu(self.mid(torch.relu(self.pre(x))))))


def pt2e_prepared() -> nn.Module:
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

    torch.manual_seed(0)
    model = Vocoder().eval()
    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    prepared = prepare_pt2e(torch.export.export(model, SIGNAL).module(), quantizer)
    prepared(*SIGNAL)
    return prepared


def converted(prepared: nn.Module, *, fold_quantize: bool) -> nn.Module:
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e

    return convert_pt2e(copy.deepcopy(prepared), fold_quantize=fold_quantize)


def quantize_ops(program: torch.export.ExportedProgram) -> list[str]:
    return [aten_name(n.target) for n in program.graph.nodes if (aten_name(n.target) or "").startswith("quantize_")]


def max_error(pte: bytes, reference: torch.Tensor, inputs: tuple[torch.Tensor, ...]) -> float:
    return (run_pte(pte, inputs)[0] - reference).abs().max().item()


def test_a_pt2e_quantized_reparametrized_model_is_delegated_as_int8() -> None:
    prepared = pt2e_prepared()
    in_graph = converted(prepared, fold_quantize=False)  # float weights quantized by ops in the graph
    program = torch.export.export(in_graph, SIGNAL)
    assert quantize_ops(program).count("quantize_per_channel") == 4

    stock = to_edge_transform_and_lower(torch.export.export(in_graph, SIGNAL), partitioner=[XnnpackPartitioner()])
    assert eg.delegation_summary(stock).count(*COMPUTE) == (0, 4)  # the problem: XNNPACK refuses all four

    guarded = eg.lower_with_guards(program)
    assert guarded.edge is not None and guarded.delegation.count(*COMPUTE) == (4, 4)
    folds = guarded.report.with_code("EG201")
    assert sorted(f.constant for f in folds) == ["head.weight", "mid.weight", "post.weight", "pre.weight"]
    assert all("quantize_per_channel" in f.message and "stay, read elsewhere" in f.message for f in folds)
    folded, _ = eg.fold.fold_constants(program)
    assert all(folded.state_dict[f.constant].dtype == torch.int8 for f in folds)
    assert quantize_ops(folded) == ["quantize_per_tensor"] * 5  # the activations' stay

    # The quantized model's own tolerance: convert_pt2e's default (fold_quantize=True) stores
    # the same int8 weights at export, and stock XNNPACK delegates that program whole.
    reference = in_graph(*SIGNAL)
    stored = to_edge_transform_and_lower(
        torch.export.export(converted(prepared, fold_quantize=True), SIGNAL), partitioner=[XnnpackPartitioner()]
    )
    assert eg.delegation_summary(stored).count(*COMPUTE) == (4, 4)
    stored_pte, guarded_pte = stored.to_executorch().buffer, guarded.to_pte()
    assert max_error(guarded_pte, reference, SIGNAL) <= max_error(stored_pte, reference, SIGNAL)
    assert len(guarded_pte) <= len(stored_pte)
    assert not eg.check_pte(guarded_pte).errors


def test_the_pass_list_form_delegates_the_convs_and_the_one_line_the_linear() -> None:
    in_graph = converted(pt2e_prepared(), fold_quantize=False)

    edge = to_edge_transform_and_lower(
        torch.export.export(in_graph, SIGNAL), transform_passes=eg.guard_passes(), partitioner=[XnnpackPartitioner()]
    )
    summary = eg.delegation_summary(edge)
    assert summary.count("convolution") == (3, 3)
    # to_edge decomposed the linear before the fold made its weight a constant
    assert summary.count("linear", "addmm") == (0, 1)

    program, report = eg.fold_non_core_constants(torch.export.export(in_graph, SIGNAL))  # the one extra line
    assert len(report.with_code("EG201")) == 4
    edge = to_edge_transform_and_lower(program, transform_passes=eg.guard_passes(), partitioner=[XnnpackPartitioner()])
    assert eg.delegation_summary(edge).count(*COMPUTE) == (4, 4)


class Int4Linear(nn.Module):
    """A weight-normed linear quantized the way torchao's int8-dynamic-activation / int4-weight
    config exports, but with the weight quantized in the graph by ``torchao::quantize_affine``
    (``frozen=False``), or stored as the integer values it computes (``frozen=True``)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = parametrizations.weight_norm(nn.Linear(64, 32))
        weight = self.linear.weight.detach()
        self.register_buffer("scale", weight.abs().reshape(32, 2, 32).amax(-1) / 7)
        self.scale: torch.Tensor
        self.register_buffer("zero_point", torch.zeros(32, 2, dtype=torch.int8))
        self.zero_point: torch.Tensor
        self.stored: torch.Tensor | None = None

    def int4_weight(self) -> torch.Tensor:
        if self.stored is not None:
            return self.stored
        return torch.ops.torchao.quantize_affine(
            self.linear.weight, [1, 32], self.scale, self.zero_point, torch.int8, -8, 7
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ao = torch.ops.torchao
        scale, zero_point = ao.choose_qparams_affine(
            x, "ASYMMETRIC", [1, 64], torch.int8, -128, 127, None, None, torch.int8
        )
        x = ao.quantize_affine(x, [1, 64], scale, zero_point, torch.int8, -128, 127)
        x = ao.dequantize_affine(x, [1, 64], scale, zero_point, torch.int8, -128, 127)
        weight = ao.dequantize_affine(self.int4_weight(), [1, 32], self.scale, self.zero_point, torch.int8, -8, 7)
        return nn.functional.linear(x, weight, self.linear.bias)


def test_a_torchao_affine_quantize_of_a_weight_is_folded_and_delegated() -> None:
    import torchao  # noqa: F401 - registers the torchao ops

    torch.manual_seed(0)
    model = Int4Linear().eval()
    features = (torch.randn(2, 64, generator=torch.Generator().manual_seed(1)),)
    program = torch.export.export(model, features)

    plan = plan_fold(program)  # the weight's quantize is folded; the activation's is not
    folded_quantizes = [n for n in plan.foldable if aten_name(n.target) == "quantize_affine"]
    assert len(folded_quantizes) == 1 and len(quantize_ops(program)) == 2

    guarded = eg.lower_with_guards(program)
    assert guarded.edge is not None and guarded.delegation.count(*COMPUTE) == (1, 1)
    left = [n for n in guarded.edge.exported_program().graph.nodes if n.op == "call_function" and aten_name(n.target)]
    assert left == [], "everything, the activation's quantization too, runs in the delegate"

    twin = copy.deepcopy(model)  # the integer weight stored up front: what stock XNNPACK delegates
    twin.stored = model.int4_weight().detach()
    stock = to_edge_transform_and_lower(torch.export.export(twin, features), partitioner=[XnnpackPartitioner()])
    assert eg.delegation_summary(stock).count(*COMPUTE) == (1, 1)
    expected = run_pte(stock.to_executorch().buffer, features)[0]
    torch.testing.assert_close(run_pte(guarded.to_pte(), features)[0], expected, atol=0, rtol=0)
