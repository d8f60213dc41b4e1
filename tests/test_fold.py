"""Folding run-time weights: module-level and graph-level, checked on the real XNNPACK
partitioner and the ExecuTorch runtime against eager."""

from __future__ import annotations

import functools
from collections.abc import Callable

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import EdgeProgramManager, to_edge_transform_and_lower
from executorch.runtime import Runtime
from torch import nn
from torch.nn.utils import parametrize

import export_guards as eg
import fold_models as zoo

pytestmark = [pytest.mark.slow]  # real models folded, lowered and run


MIXED = [zoo.APIS[name] for name in zoo.APIS]
COMPUTE = ("convolution", "linear", "addmm", "mm")

FOLDABLE: dict[str, Callable[[], nn.Module]] = {
    **{f"conv-{name}": (lambda wrap=wrap: zoo.ConvStack([wrap] * 4)) for name, wrap in zoo.APIS.items()},
    "conv-mixed": lambda: zoo.ConvStack(MIXED),
    "linear-mixed": lambda: zoo.Linears([zoo.APIS["parametrizations.weight_norm"], zoo.APIS["spectral_norm"]]),
    "tied": zoo.Tied,
    "user-code": zoo.UserCode,
}

NOT_FOLDABLE: dict[str, Callable[[], nn.Module]] = {
    "input-dependent": zoo.InputDependent,
    "mutated-buffer": zoo.MutatedBuffer,
    "random-op": zoo.RandomWeight,
    "broadcast": zoo.Broadcast,
}


def lower(program, passes=None) -> EdgeProgramManager:
    return to_edge_transform_and_lower(program, transform_passes=passes, partitioner=[XnnpackPartitioner()])


def runtime_outputs(edge: EdgeProgramManager, inputs, method: str = "forward") -> list[torch.Tensor]:
    program = Runtime.get().load_program(edge.to_executorch().buffer)
    return program.load_method(method).execute(list(inputs))


def assert_matches_eager(model: nn.Module, edge: EdgeProgramManager) -> None:
    inputs = zoo.example_inputs(model)
    with torch.no_grad():
        expected = model(*inputs)
    (actual,) = runtime_outputs(edge, inputs)
    assert actual.shape == expected.shape
    assert torch.allclose(actual, expected, atol=1e-5, rtol=1e-5), (actual - expected).abs().max()


@functools.cache
def delegated_unfolded(name: str) -> int:
    """The compute ops XNNPACK takes from ``name``'s model through the guards without the fold
    (one lowering a process, shared by both pipelines' tests)."""
    model = zoo.built(FOLDABLE[name])
    program = torch.export.export(model, zoo.example_inputs(model))
    return eg.delegation_summary(lower(program, eg.guard_passes(config=eg.Settings(fold=False)))).count(*COMPUTE)[0]


@pytest.mark.parametrize("pipeline", ["transform_passes", "torch.export program"])
@pytest.mark.parametrize("name", FOLDABLE)
def test_graph_fold_makes_every_weight_static_so_xnnpack_takes_every_conv(name: str, pipeline: str) -> None:
    model = zoo.built(FOLDABLE[name])
    program = torch.export.export(model, zoo.example_inputs(model))

    edge = (
        lower(program, eg.guard_passes())
        if pipeline == "transform_passes"
        else lower(eg.fold.fold_constants(program)[0])
    )
    summary = eg.delegation_summary(edge)

    delegated, total = summary.count(*COMPUTE)
    assert total > 0 and delegated == total, summary
    assert delegated_unfolded(name) < total  # without the fold XNNPACK refuses some
    assert_matches_eager(model, edge)


def test_folding_the_torch_export_program_removes_ops_that_to_edge_rejects() -> None:
    model = zoo.built(lambda: zoo.Linears([nn.utils.parametrizations.orthogonal, zoo.APIS["weight_norm"]]))
    program = torch.export.export(model, zoo.example_inputs(model))
    with pytest.raises(Exception, match="linalg_householder_product"):
        lower(program, eg.guard_passes())  # to_edge runs before any transform pass
    folded, report = eg.fold.fold_constants(program)
    assert [f.constant for f in report] == ["a.weight", "b.weight"]
    edge = lower(folded)
    assert eg.delegation_summary(edge).count(*COMPUTE) == (2, 2)
    assert_matches_eager(model, edge)


@pytest.mark.parametrize("name", FOLDABLE)
def test_module_fold_is_bit_identical_and_delegates(name: str) -> None:
    model = zoo.built(FOLDABLE[name])
    state_before = {k: v.clone() for k, v in model.state_dict().items()}
    inputs = zoo.example_inputs(model)
    with torch.no_grad():
        expected = model(*inputs)

    folded, report = eg.fold.fold_parametrizations(model.train())  # no power iteration, even in train mode

    with torch.no_grad():
        assert torch.equal(folded.eval()(*inputs), expected)
    assert not any(parametrize.is_parametrized(m) or m._forward_pre_hooks for m in folded.modules())
    # The caller's model is untouched: still reparametrized, same state, same outputs.
    model.eval()
    assert all(torch.equal(v, state_before[k]) for k, v in model.state_dict().items())
    with torch.no_grad():
        assert torch.equal(model(*inputs), expected)
    if name != "user-code":
        assert len(report) > 0 and {f.code for f in report} == {"EG202"}

    edge = lower(torch.export.export(folded, inputs))
    if name != "user-code":  # its weights are computed in forward: only the graph fold sees them
        delegated, total = eg.delegation_summary(edge).count(*COMPUTE)
        assert delegated == total
    assert_matches_eager(model, edge)


def test_module_fold_in_place_and_its_report() -> None:
    model = zoo.built(lambda: zoo.ConvStack(MIXED))
    same, report = eg.fold.fold_parametrizations(model, inplace=True)
    assert same is model
    assert not any(parametrize.is_parametrized(m) for m in model.modules())
    assert [f.constant for f in report] == ["convs.0.weight", "convs.1.weight", "convs.2.weight", "up.weight"]
    messages = [f.message for f in report]
    assert "folded torch.nn.utils.spectral_norm of 'convs.0.weight' into a plain parameter" in messages[0]
    assert "folded torch.nn.utils.weight_norm of 'convs.1.weight'" in messages[1]
    assert "parametrization (_SpectralNorm) of 'convs.2.weight'" in messages[2]
    assert "parametrization (_WeightNorm) of 'up.weight'" in messages[3]
    assert sorted(model.state_dict()) == sorted(
        f"{m}.{p}" for m in ("convs.0", "convs.1", "convs.2", "up") for p in ("weight", "bias")
    )


@pytest.mark.parametrize("name", NOT_FOLDABLE)
def test_never_folds_what_an_input_a_mutation_or_a_random_op_reaches(name: str) -> None:
    model = zoo.built(NOT_FOLDABLE[name])
    program = torch.export.export(model, zoo.example_inputs(model))
    folded, report = eg.fold.fold_constants(program)

    assert folded is program
    if name == "broadcast":  # computed from constants alone, but declined: it says why (issue 45)
        (declined,) = report
        assert declined.code == "EG203" and "over what is left of the fold's budget" in declined.message
        assert "(repeat)" in declined.message and "fold-max-growth" in (declined.fix or "")
    else:
        assert len(report) == 0
    if name == "random-op":
        return  # rand_like is not a core ATen op: to_edge refuses it, the fold left it alone
    edge = lower(program, eg.guard_passes())
    delegated, total = eg.delegation_summary(edge).count(*COMPUTE)
    assert (delegated, total) == (0, 1)
    assert_matches_eager(model, edge)


def test_size_limit_is_configurable() -> None:
    model = zoo.built(zoo.Broadcast)
    program = torch.export.export(model, zoo.example_inputs(model))
    folded, report = eg.fold.fold_constants(program, max_growth=64)
    assert [f.constant for f in report] == ["row_folded"]
    assert folded.state_dict["row_folded"].shape == (64, 3, 3, 3)
    edge = lower(folded)
    assert eg.delegation_summary(edge).count(*COMPUTE) == (1, 1)
    assert_matches_eager(model, edge)
    with pytest.raises(ValueError, match="max_growth"):
        eg.fold.FoldConstantsPass(max_growth=0)
    # The budget as a setting: [tool.export-guards] fold-max-growth, --fold-max-growth.
    assert eg.Settings.from_mapping({"fold-max-growth": 64}).fold_max_growth == 64
    with pytest.raises(ValueError, match=r"fold-max-growth must be .* at least 1, not 0.5"):
        eg.Settings(fold_max_growth=0.5)
    guarded = eg.export_with_guards(model, zoo.example_inputs(model), config=eg.Settings(fold_max_growth=64))
    assert [f.constant for f in guarded.report.with_code("EG201")] == ["row_folded"] and not guarded.report.with_code(
        "EG203"
    )


def test_folded_program_keeps_names_drops_unused_inputs_and_stores_identical_results_once() -> None:
    model = zoo.built(zoo.Tied)
    program = torch.export.export(model, zoo.example_inputs(model))
    signature_before = str(program.graph_signature)

    folded, report = eg.fold.fold_constants(program)

    assert sorted(folded.state_dict) == ["conv.bias", "conv.weight", "twin.bias"]
    assert torch.equal(folded.state_dict["conv.bias"], folded.state_dict["twin.bias"])  # kept: not folded
    assert str(program.graph_signature) == signature_before  # the caller's program is untouched
    (message,) = [f.message for f in report]  # one finding per new parameter
    # each call of a parametrized module recomputes its weight: four computations, one value
    assert "into parameter 'conv.weight' (one value for 4 computations):" in message
    assert "'conv.parametrizations.weight.original'" in message
    assert all(f.code == "EG201" and f.location is not None for f in report)
    conv_nodes = [n for n in folded.graph.nodes if "conv2d" in str(n.target)]
    assert {n.args[1].name for n in conv_nodes} == {"p_conv_weight"}
    edge = lower(folded)
    assert eg.delegation_summary(edge).count(*COMPUTE) == (4, 4)
    assert_matches_eager(model, edge)


def test_user_code_weights_are_named_after_the_parameter_they_come_from() -> None:
    model = zoo.built(zoo.UserCode)
    folded, report = eg.fold.fold_constants(torch.export.export(model, zoo.example_inputs(model)))
    assert sorted(folded.state_dict) == ["blur.weight_folded", "w_folded"]
    assert "(exp, mul)" in report.findings[0].message


def test_an_output_computed_from_constants_stays_computed() -> None:
    class ReturnsWeight(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(3))

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return x + self.w * 2, self.w.exp()

    model = ReturnsWeight().eval()
    inputs = (torch.randn(3),)
    program = torch.export.export(model, inputs)
    # w * 2 stores 12 bytes more but removes an instruction: the written program is smaller.
    folded, report = eg.fold.fold_constants(program)
    assert [(f.code, f.constant) for f in report] == [("EG201", "w_folded")]  # w * 2; w.exp() is an output
    assert "smaller" in report.findings[0].message
    edge = to_edge_transform_and_lower(folded)
    outputs = runtime_outputs(edge, inputs)
    for actual, expected in zip(outputs, model(*inputs)):
        assert torch.allclose(actual, expected)


def test_multi_method_program_folds_every_method() -> None:
    model = zoo.built(lambda: zoo.ConvStack(MIXED))
    inputs = zoo.example_inputs(model)
    small = zoo.image(size=4)
    methods = {
        "forward": torch.export.export(model, inputs),
        "small": torch.export.export(zoo.built(lambda: zoo.ConvStack(MIXED)), small),
    }
    edge = lower(methods, eg.guard_passes())
    delegated, total = eg.delegation_summary(edge).count(*COMPUTE)
    assert total == 8 and delegated == total
    program = Runtime.get().load_program(edge.to_executorch().buffer)
    with torch.no_grad():
        for method, args in (("forward", inputs), ("small", small)):
            (actual,) = program.load_method(method).execute(list(args))
            assert torch.allclose(actual, model(*args), atol=1e-5, rtol=1e-5)
