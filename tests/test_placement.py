"""The placement guard in process: what it reports, raises and copies, on every program form."""

from __future__ import annotations

import copy
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import ExecutorchBackendConfig, to_edge, to_edge_transform_and_lower
from executorch.exir.error import InternalError
from executorch.export import export as export_with_recipe_api
from executorch.runtime import Runtime

import export_guards as eg
import models
from export_guards.recipes import recipe_named

EVERY_CONSTANT = {
    "conv.weight": "parameter",
    "conv.bias": "parameter",
    "bn.weight": "parameter",
    "bn.bias": "parameter",
    "head.weight": "parameter",
    "head.bias": "parameter",
    "bn.running_mean": "buffer",
    "bn.running_var": "buffer",
    "bn.num_batches_tracked": "buffer",
    "scale": "buffer",
    "calls": "mutable buffer",
    "offset": "lifted tensor constant",
}


def export_on(device: torch.device) -> tuple[torch.nn.Module, torch.export.ExportedProgram]:
    model = models.to_device(models.seeded(models.EveryConstantKind), device)
    return model, torch.export.export(model, model.example_inputs(device))


def export_cpu(factory=models.EveryConstantKind) -> torch.export.ExportedProgram:
    model = models.seeded(factory)
    inputs = model.example_inputs() if hasattr(model, "example_inputs") else (torch.randn(2, 4),)
    return torch.export.export(model, inputs)


def placement(ep: torch.export.ExportedProgram) -> dict[str, str]:
    tensors = {**ep.state_dict, **ep.constants}
    return {name: tensors[name].device.type for name in EVERY_CONSTANT}


def test_check_names_every_constant_with_kind_shape_device_and_source(device: torch.device) -> None:
    _, ep = export_on(device)
    report = eg.placement.check_constant_placement(ep)

    assert {f.constant for f in report} == set(EVERY_CONSTANT)
    assert all(f.code == "EG101" and f.severity is eg.Severity.ERROR for f in report)
    by_name = {f.constant: f for f in report}
    for name, kind in EVERY_CONSTANT.items():
        assert by_name[name].message.startswith(f"{kind} '{name}' ("), by_name[name].message
        assert str(device.type) in by_name[name].message
    head = by_name["head.weight"]
    assert "float32[4, 8], 128 bytes" in head.message
    assert head.method == "forward" and head.node == "linear"
    assert head.location is not None
    assert Path(head.location.file).name == "models.py"
    assert head.location.code == "return self.head(features) * self.scale + self.offset"
    assert "model.to('cpu')" in (head.fix or "") and "policy='copy'" in (head.fix or "")


def test_cpu_program_passes_untouched() -> None:
    ep = export_cpu()
    assert len(eg.placement.check_constant_placement(ep)) == 0
    assert eg.placement.guard_constant_placement(ep) is ep
    assert eg.placement.guard_constant_placement(ep, policy="copy") is ep
    result = eg.placement.ConstantPlacementPass()(ep)
    assert result.exported_program is ep and not result.modified


def test_error_policy_raises_internal_error_listing_every_constant(trapdev: torch.device) -> None:
    _, ep = export_on(trapdev)
    with pytest.raises(eg.ConstantPlacementError) as raised:
        eg.placement.guard_constant_placement(ep)
    error = raised.value
    assert isinstance(error, InternalError)
    assert {f.constant for f in error.report.errors} == set(EVERY_CONSTANT)
    text = str(error)
    assert text.startswith("12 constants cannot be read from host memory")
    for name in EVERY_CONSTANT:
        assert f"'{name}'" in text
    assert "is on trapdev:0" in text
    assert "models.py:" in text
    assert "Fix: move the model and its example inputs to the CPU" in text


def test_copy_policy_moves_a_copy_and_leaves_the_caller_untouched(trapdev: torch.device) -> None:
    model, ep = export_on(trapdev)
    weights = {k: v.cpu().clone() for k, v in model.state_dict().items()}
    graph_before = str(ep.graph)

    moved = eg.placement.guard_constant_placement(ep, policy="copy")

    assert moved is not ep
    assert set(placement(moved).values()) == {"cpu"}
    assert all(t.device.type == "cpu" for t in moved.example_inputs[0])
    assert all(n.meta["val"].device.type == "cpu" for n in moved.graph.nodes if n.op == "placeholder")
    # The caller's program, model and tensors: same device, same data, same graph.
    assert set(placement(ep).values()) == {"trapdev"}
    assert all(t.device.type == "trapdev" for t in ep.example_inputs[0])
    assert str(ep.graph) == graph_before
    for name, value in model.state_dict().items():
        assert value.device.type == "trapdev"
        assert torch.equal(value.cpu(), weights[name])
    for name, value in moved.state_dict.items():
        assert torch.equal(value, weights[name])


def test_copy_keeps_placeholder_names_that_a_deepcopy_would_rename(trapdev: torch.device) -> None:
    model = models.to_device(models.seeded(models.linear_relu), trapdev)  # forward(self, input)
    ep = torch.export.export(model, (torch.randn(2, 4).to(trapdev),))
    moved = eg.placement.guard_constant_placement(ep, policy="copy")
    assert [s.arg.name for s in moved.graph_signature.input_specs] == ["p_0_weight", "p_0_bias", "input"]
    assert [n.name for n in moved.graph.nodes if n.op == "placeholder"][-1] == "input"
    assert len(to_edge_transform_and_lower(moved).to_executorch().buffer) > 0


def test_copy_pass_reports_each_copy(trapdev: torch.device) -> None:
    _, ep = export_on(trapdev)
    guard = eg.placement.ConstantPlacementPass("copy", method="forward")
    result = guard(ep)
    assert result.modified
    assert {f.constant for f in result.report} == set(EVERY_CONSTANT)
    assert {f.code for f in result.report} == {"EG103"}
    assert all(f.severity is eg.Severity.INFO for f in result.report)
    assert "copied parameter 'conv.weight'" in str(result.report)
    again = guard(ep)  # each call's report is its own: nothing accumulates on the pass
    assert len(again.report) == len(result.report)


def test_copy_at_every_stage_writes_the_cpu_twin(trapdev: torch.device) -> None:
    """The batch norm's stats outs are traced ``[8]`` on the device and ``[0]`` on the CPU,
    which ExecuTorch's kernel insists on: each stage's copy recomputes them on the host."""
    _, ep = export_on(trapdev)
    twin = to_edge(export_cpu()).to_executorch().buffer

    by_stage = {
        "torch.export program": to_edge(eg.placement.guard_constant_placement(ep, policy="copy"))
        .to_executorch()
        .buffer,
        "edge manager": eg.placement.guard_constant_placement(to_edge(ep), policy="copy").to_executorch().buffer,
        "transform passes": to_edge_transform_and_lower(
            ep, transform_passes=eg.guard_passes(config=eg.Settings(placement="copy"))
        )
        .to_executorch()
        .buffer,
        "emitter": to_edge(ep).to_executorch(ExecutorchBackendConfig(passes=eg.emit_passes("copy"))).buffer,
    }
    assert [stage for stage, pte in by_stage.items() if pte != twin] == []
    assert ep.state_dict["conv.weight"].device.type == "trapdev"  # the caller's program is untouched


def test_guard_in_transform_passes_stops_before_the_partitioner(trapdev: torch.device) -> None:
    _, ep = export_on(trapdev)
    with pytest.raises(eg.ConstantPlacementError) as raised:
        to_edge_transform_and_lower(ep, transform_passes=eg.guard_passes())
    assert len(raised.value.report.errors) == len(EVERY_CONSTANT)


def _linear_on(device: torch.device) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...], torch.export.ExportedProgram]:
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()).eval().to(device)
    inputs = (torch.randn(2, 4).to(device),)
    return model, inputs, torch.export.export(model, inputs)


def _guarded_xnnpack(ep: torch.export.ExportedProgram) -> object:
    partitioner = eg.guard_partitioners([XnnpackPartitioner()])
    return to_edge_transform_and_lower(
        ep, transform_passes=eg.guard_passes(partitioner=partitioner), partitioner=partitioner
    )


DOCUMENTED_FLOWS: dict[
    str, tuple[Callable[[torch.nn.Module, tuple[torch.Tensor, ...], torch.export.ExportedProgram], object], str | None]
] = {
    "guard_passes()": (lambda m, x, ep: to_edge_transform_and_lower(ep, transform_passes=eg.guard_passes()), None),
    "guard_passes() with XNNPACK": (
        lambda m, x, ep: to_edge_transform_and_lower(
            ep, transform_passes=eg.guard_passes(), partitioner=[XnnpackPartitioner()]
        ),
        None,
    ),
    "guard_passes() + own passes": (
        lambda m, x, ep: to_edge_transform_and_lower(
            ep,
            transform_passes=eg.guard_passes(config=eg.Settings(fold=False)) + [eg.fold.FoldConstantsPass()],  # noqa: RUF005 - GuardPasses' own +
        ),
        None,
    ),
    "guarded partitioners": (lambda m, x, ep: _guarded_xnnpack(ep), "XnnpackBackend's preprocess will read it"),
    "emit_passes()": (
        lambda m, x, ep: to_edge(ep).to_executorch(ExecutorchBackendConfig(passes=eg.emit_passes())),
        "the emitter will copy it",
    ),
    "guard_recipe": (
        lambda m, x, ep: export_with_recipe_api(m, [x], eg.guard_recipe(recipe_named("xnnpack_fp32"))),
        "XnnpackBackend's preprocess will read it",
    ),
    "export_with_guards(recipe)": (
        lambda m, x, ep: eg.export_with_guards(m, x, config=eg.Settings(recipe="xnnpack_fp32")).to_pte(),
        "XnnpackBackend's preprocess will read it",
    ),
    "lower_with_guards": (lambda m, x, ep: eg.lower_with_guards(ep).to_pte(), None),
}
"""Each way in that the docs show (placement.md, the how-to), with the reader its error names
once a partitioner or the emitter has decided (``None``: before partitioning, a host reader
is assumed)."""


@pytest.mark.parametrize("flow", DOCUMENTED_FLOWS)
def test_every_documented_flow_raises_an_internal_error_naming_each_constant(device: torch.device, flow: str) -> None:
    """What the docs tell a caller to catch is what reaches them: ``InternalError`` (a
    ``ConstantPlacementError``), never ExecuTorch's bare ``Exception`` around it."""
    model, inputs, ep = _linear_on(device)
    lower, reader = DOCUMENTED_FLOWS[flow]
    with pytest.raises(InternalError) as raised:
        lower(model, inputs, ep)
    error = raised.value
    assert isinstance(error, eg.ConstantPlacementError), type(error)
    assert {f.constant for f in error.report.errors} == {"0.weight", "0.bias"}
    for name, shape in {"0.weight": "[3, 4]", "0.bias": "[3]"}.items():
        line = next(line for line in str(error).splitlines() if f"parameter '{name}' (float32{shape}" in line)
        assert f"is on {device.type}:0" in line, line
        assert reader is None or reader in line, line


def test_in_a_plain_list_executorchs_wrapper_names_every_constant_and_its_device(device: torch.device) -> None:
    """Your own list runs in ExecuTorch's pass manager, which re-raises a bare ``Exception``
    naming the pass: its last line still names each constant and device, the
    ``ConstantPlacementError`` is its ``__cause__``, and the pass is itself again after."""
    _, _, ep = _linear_on(device)
    guard = eg.placement.ConstantPlacementPass()
    with pytest.raises(Exception) as raised:  # noqa: PT011 - whatever ExecuTorch wraps it in: the test reads its chain
        to_edge_transform_and_lower(ep, transform_passes=[guard, eg.fold.FoldConstantsPass()])
    wrapper = raised.value
    assert not isinstance(wrapper, InternalError) and isinstance(wrapper.__cause__, eg.ConstantPlacementError)
    last_line = traceback.format_exception(wrapper)[-1]
    assert last_line.startswith(
        "Exception: An error occurred when running the 'ConstantPlacementPass, which stopped 2 constants"
    )
    for name, shape in {"0.weight": "[3, 4]", "0.bias": "[3]"}.items():
        assert f"parameter '{name}' (float32{shape}" in last_line and f"is on {device.type}:0" in last_line, last_line
    on_host = export_cpu(lambda: torch.nn.Linear(4, 3))
    assert guard(on_host).exported_program is on_host and type(guard) is eg.placement.ConstantPlacementPass


def test_edge_manager_guard_before_to_executorch() -> None:
    edge = to_edge(export_cpu())
    assert eg.placement.guard_constant_placement(edge) is edge
    assert len(edge.to_executorch().buffer) > 0


@pytest.mark.parametrize("policy", ["error", "copy"])
def test_meta_constants_are_errors_under_both_policies(policy: str) -> None:
    with torch.device("meta"):
        model = models.linear_relu()
    ep = torch.export.export(model, (torch.randn(2, 4, device="meta"),))
    with pytest.raises(eg.ConstantPlacementError, match="on the meta device and has no data") as raised:
        eg.placement.guard_constant_placement(ep, policy=policy)
    assert {f.code for f in raised.value.report} == {"EG102"}
    assert {f.constant for f in raised.value.report} == {"0.weight", "0.bias"}
    assert "Fix: give the constant real data before export" in str(raised.value)


def test_fake_constants_have_no_data() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True):
        ep = torch.export.export(torch.nn.Linear(4, 3), (torch.randn(2, 4),))
    report = eg.placement.check_constant_placement(ep)
    assert [(f.constant, f.code) for f in report] == [
        ("weight", "EG102"),
        ("bias", "EG102"),
    ]
    assert "fake tensor" in report.findings[0].message


def test_null_data_pointer_with_elements_is_an_error() -> None:
    ep = torch.export.export(torch.nn.Linear(4, 3), (torch.randn(2, 4),))
    ep.state_dict["weight"].untyped_storage().resize_(0)  # frees the bytes, keeps the shape
    report = eg.placement.check_constant_placement(ep)
    assert [(f.constant, f.code) for f in report] == [("weight", "EG102")]
    assert "null data pointer" in report.findings[0].message
    with pytest.raises(eg.ConstantPlacementError):
        eg.placement.guard_constant_placement(ep, policy="copy")


def test_zero_size_constants_are_fine(trapdev: torch.device) -> None:
    class WithEmpty(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("empty", torch.zeros(0))
            self.empty: torch.Tensor

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.empty.sum()

    ep = torch.export.export(WithEmpty(), (torch.randn(3),))
    for empty in (torch.zeros(0, device=trapdev), torch.zeros(0, device="meta")):
        ep.state_dict["empty"] = empty
        assert len(eg.placement.check_constant_placement(ep)) == 0


def test_multi_method_program_reports_and_copies_per_method(trapdev: torch.device) -> None:
    _, on_device = export_on(trapdev)
    on_cpu = export_cpu()
    methods = {"forward": on_device, "encode": on_cpu}

    report = eg.placement.check_constant_placement(methods)
    assert {f.method for f in report} == {"forward"}
    with pytest.raises(eg.ConstantPlacementError, match="of method 'forward'"):
        eg.placement.guard_constant_placement(methods)
    both = {"forward": on_device, "encode": export_on(trapdev)[1]}
    assert {f.method for f in eg.placement.check_constant_placement(both)} == {"forward", "encode"}

    moved = eg.placement.guard_constant_placement(methods, policy="copy")
    assert moved["encode"] is on_cpu and moved["forward"] is not on_device
    program = to_edge_transform_and_lower(moved).to_executorch()
    loaded = Runtime.get().load_program(program.buffer)
    assert set(loaded.method_names) == {"forward", "encode"}
    inputs = list(models.seeded(models.EveryConstantKind).example_inputs())
    forward, encode = (loaded.load_method(name).execute(inputs)[0] for name in ("forward", "encode"))
    assert torch.allclose(forward, encode, atol=1e-6)


def test_bad_input_is_explained() -> None:
    with pytest.raises(TypeError, match=r"takes a torch.export ExportedProgram"):
        eg.placement.check_constant_placement(models.linear_relu())
    with pytest.raises(ValueError, match="'error' or 'copy', not 'move'"):
        eg.placement.guard_constant_placement(export_cpu(), policy="move")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'error' or 'copy', not 'cpu'"):
        eg.placement.ConstantPlacementPass("cpu")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'error' or 'copy', not 'host'"):
        eg.guard_partitioners([XnnpackPartitioner()], placement="host")  # type: ignore[call-overload]


def test_guard_passes_hands_the_copy_to_the_partitioners_it_is_given() -> None:
    """They copy before ExecuTorch decomposes, which only they are handed the program for."""
    parts = eg.guard_partitioners({"forward": [XnnpackPartitioner(), XnnpackPartitioner()]})
    assert {p.placement for p in parts["forward"]} == {"error"}
    eg.guard_passes(partitioner=parts)
    assert {p.placement for p in parts["forward"]} == {"error"}
    eg.guard_passes(partitioner=parts, config=eg.Settings(placement="copy"))
    assert {p.placement for p in parts["forward"]} == {"copy"}


def test_guard_passes_changes_nothing_else_of_the_callers_partitioners() -> None:
    """Their ``placement``, under ``"copy"``, is all it hands them: the same objects, each
    wrapped partitioner as it was, every other attribute as it was."""
    parts = eg.guard_partitioners([XnnpackPartitioner(), XnnpackPartitioner()])
    wrapped = [p.partitioner for p in parts]
    before = [(dict(vars(p)), copy.copy(vars(p.partitioner))) for p in parts]
    eg.guard_passes(partitioner=parts)
    assert [(dict(vars(p)), vars(p.partitioner)) for p in parts] == before
    eg.guard_passes(partitioner=parts, config=eg.Settings(placement="copy"))
    assert [p.partitioner for p in parts] == wrapped
    assert [({**vars(p), "placement": "error"}, vars(p.partitioner)) for p in parts] == before


def test_report_renders_ruff_style_lines(trapdev: torch.device) -> None:
    _, ep = export_on(trapdev)
    first = str(eg.placement.check_constant_placement(ep)).splitlines()[0]
    assert first.endswith(
        "EG101 [error] parameter 'conv.weight' (float32[8, 3, 3, 3], 864 bytes) "
        "is on trapdev:0, not in host (CPU) memory"
    )
    assert "models.py:" in first
    assert str(eg.Report()) == "no findings"
    copy.deepcopy(eg.placement.check_constant_placement(ep))  # findings are plain values


def test_every_way_in_carries_out_the_one_plan(trapdev: torch.device) -> None:
    """The check, the guard, its pass and the guarded export ask the placement plan, and so
    say the same: every device constant, stopped under "error", copied under "copy"."""
    from export_guards.passes.placement import plan_placement

    _, ep = export_on(trapdev)
    plan = plan_placement("forward", ep)
    assert {(p.constant.fqn, p.action) for p in plan.placed} == {(name, "stop") for name in EVERY_CONSTANT}
    assert eg.placement.check_constant_placement(ep) == plan.findings() == plan.stops
    with pytest.raises(eg.ConstantPlacementError) as raised:
        eg.placement.guard_constant_placement(ep)
    assert raised.value.report == plan.stops
    stopped = eg.lower_with_guards(ep, config=eg.Settings(select=("EG101",)))
    assert stopped.edge is None and stopped.report.errors == plan.stops.errors

    copying = plan_placement("forward", ep, "copy")
    assert {p.action for p in copying.placed} == {"copy"} and not copying.stops
    assert eg.placement.ConstantPlacementPass("copy", method="forward")(ep).report == copying.copies()
    deferred = plan_placement("forward", ep, defer_device_constants=True)  # a CUDA export's partitioners decide
    assert {p.action for p in deferred.placed} == {"defer"} and not deferred.stops


def test_a_guarded_export_walks_its_constants_for_placement_once(
    trapdev: torch.device, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``lower_with_guards`` decides placement once, on the torch.export program: its copy is
    the plan's (the host twin is handed the copies) and no pass after it asks again."""
    from export_guards.passes.placement import plan

    walks: list[int] = []
    unreadable = plan.unreadable_constants

    def counted(method: str | None, ep: torch.export.ExportedProgram) -> list:
        walks.append(len(ep.graph_signature.input_specs))
        return unreadable(method, ep)

    monkeypatch.setattr(plan, "unreadable_constants", counted)
    _, ep = export_on(trapdev)
    result = eg.lower_with_guards(ep, config=eg.Settings(placement="copy"))
    assert len(walks) == 1
    assert {f.constant for f in result.report.with_code("EG103")} == set(EVERY_CONSTANT)
    assert placement(result.program) == dict.fromkeys(EVERY_CONSTANT, "cpu")


class _Silenced(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)  # noqa: EG101


def test_a_noqa_suppresses_the_lints_finding_never_the_guard(trapdev: torch.device) -> None:
    """Reading device memory would crash: a comment on the line can quiet the lint, not the guard."""
    model = _Silenced().to(trapdev)
    ep = torch.export.export(model, (torch.randn(2, 4).to(trapdev),))
    linted = eg.lint(ep)
    assert not linted.with_code("EG101") and {f.code for f in linted.suppressed} >= {"EG101"}
    assert {f.constant for f in eg.placement.check_constant_placement(ep).with_code("EG101")} == {
        "linear.weight",
        "linear.bias",
    }
    with pytest.raises(eg.ConstantPlacementError):
        eg.placement.guard_constant_placement(ep)
    with pytest.raises(eg.ConstantPlacementError):
        to_edge_transform_and_lower(ep, transform_passes=eg.guard_passes())
