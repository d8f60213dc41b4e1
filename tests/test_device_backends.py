"""Placement that knows who reads a constant: guarded partitioners, the emit pass, and a
backend that holds device constants on purpose (``device_backend.HostCopyBackend``)."""

from __future__ import annotations

import copy

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import ExecutorchBackendConfig, to_edge, to_edge_transform_and_lower
from executorch.exir.error import InternalError
from executorch.runtime import Runtime
from torch import nn

import export_guards as eg
import models
from device_backend import BACKEND_ID, HostCopyPartitioner, runnable

TRUSTING_HOST_COPY = (*eg.placement.DEVICE_BACKENDS, BACKEND_ID)


class Remainder(nn.Module):
    """A linear layer that XNNPACK takes, then ``remainder`` by a buffer, which it does not:
    the buffer stays in the top-level program, for the emitter to read."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 3)
        self.register_buffer("divisor", torch.tensor([0.7, 1.1, 1.3]))
        self.divisor: torch.Tensor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.remainder(self.linear(x), self.divisor)


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.hidden = nn.Linear(4, 8)
        self.out = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.hidden(x)))


INPUT = torch.randn(2, 4, generator=torch.Generator().manual_seed(3))


def on(device: torch.device, factory=MLP) -> tuple[nn.Module, torch.export.ExportedProgram]:
    model = models.seeded(factory).to(device)
    return model, torch.export.export(model, (INPUT.to(device),))


def run(pte: bytes, method: str = "forward") -> torch.Tensor:
    return Runtime.get().load_program(pte).load_method(method).execute([INPUT])[0]


def eager(model: nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(INPUT.to(next(model.parameters()).device)).cpu()


def lower_guarded(program, partitioners, **options):
    partitioner = eg.guard_partitioners(partitioners, **options)
    return to_edge_transform_and_lower(
        program, transform_passes=eg.guard_passes(partitioner=partitioner), partitioner=partitioner
    )


def test_a_backend_that_reads_device_memory_itself_is_not_blocked_and_its_pte_runs(device: torch.device) -> None:
    model, program = on(device)
    edge = lower_guarded(program, [HostCopyPartitioner()], device_backends=TRUSTING_HOST_COPY)

    assert not edge.exported_program().state_dict, "every constant went to the device backend"
    pte = runnable(edge).to_executorch(ExecutorchBackendConfig(passes=eg.emit_passes())).buffer
    torch.testing.assert_close(run(pte), eager(model))
    assert program.state_dict["hidden.weight"].device.type == device.type  # the caller's program is untouched


def test_the_same_model_with_xnnpack_names_every_constant_xnnpack_would_read(device: torch.device) -> None:
    _, program = on(device)
    with pytest.raises(eg.ConstantPlacementError) as raised:
        lower_guarded(program, [XnnpackPartitioner()])

    error = raised.value
    assert isinstance(error, InternalError)
    assert {f.constant for f in error.report.errors} == {"hidden.weight", "hidden.bias", "out.weight", "out.bias"}
    assert all(f.code == "EG101" for f in error.report.errors)
    message = str(error)
    assert "XnnpackBackend's preprocess will read it from host memory" in message
    assert f"is on {device.type}" in message
    assert "test_device_backends.py" in message, "the user's source line is named"
    assert "device_backends=DEVICE_BACKENDS + ('XnnpackBackend',)" in message


def test_an_undeclared_backend_is_a_host_reader(trapdev: torch.device) -> None:
    _, program = on(trapdev)
    with pytest.raises(eg.ConstantPlacementError, match=f"{BACKEND_ID}'s preprocess will read it"):
        lower_guarded(program, [HostCopyPartitioner()])  # HostCopyBackend not declared


def test_a_device_constant_that_no_partition_takes_is_stopped_before_the_emitter(device: torch.device) -> None:
    _, program = on(device, Remainder)
    with pytest.raises(eg.ConstantPlacementError) as raised:
        lower_guarded(program, [HostCopyPartitioner()], device_backends=TRUSTING_HOST_COPY)

    assert [f.constant for f in raised.value.report.errors] == ["divisor"]
    assert "no partition takes it, so the emitter will copy it from host memory" in str(raised.value)
    assert "emit_passes('copy')" in str(raised.value)


def test_only_the_last_partitioner_of_a_list_checks_what_is_left() -> None:
    first, second = eg.guard_partitioners([HostCopyPartitioner(), XnnpackPartitioner()])
    assert (first.last, second.last) == (False, True)
    per_method = eg.guard_partitioners(
        {"forward": [XnnpackPartitioner()], "encode": [HostCopyPartitioner(), XnnpackPartitioner()]}
    )
    assert [p.last for p in per_method["encode"]] == [False, True]
    assert per_method["forward"][0].last


def test_emit_passes_catch_a_constant_that_only_reaches_the_emitter(device: torch.device) -> None:
    _, program = on(device, Remainder)
    edge = to_edge(program)  # no transform passes, no partitioner: only the emitter reads

    with pytest.raises(eg.ConstantPlacementError) as raised:
        edge.to_executorch(ExecutorchBackendConfig(passes=eg.emit_passes()))
    assert {f.constant for f in raised.value.report.errors} == {"linear.weight", "linear.bias", "divisor"}


def test_emit_passes_copy_runs_and_matches_eager(device: torch.device) -> None:
    model, program = on(device, Remainder)
    edge = to_edge(program)

    pte = edge.to_executorch(ExecutorchBackendConfig(passes=eg.emit_passes("copy"))).buffer
    torch.testing.assert_close(run(pte), eager(model))
    assert program.state_dict["linear.weight"].device.type == device.type  # the torch.export program is untouched
    assert model.linear.weight.device.type == device.type


def test_emit_copy_reports_each_copy_and_refuses_constants_without_data(trapdev: torch.device) -> None:
    _, program = on(trapdev, Remainder)
    edge = to_edge(program)
    copies = []

    class Keep(eg.placement.EmitPlacementPass):
        def call(self, graph_module):
            result = super().call(graph_module)
            copies.extend(result.report)
            return result

    keep = Keep("copy")
    edge.to_executorch(ExecutorchBackendConfig(passes=[keep.emitted, keep]))
    assert {(f.code, f.constant) for f in copies} == {("EG103", n) for n in ("linear.weight", "linear.bias", "divisor")}

    with torch.device("meta"):
        meta = nn.Linear(4, 3)
    meta_edge = to_edge(torch.export.export(meta, (torch.randn(2, 4, device="meta"),)))
    with pytest.raises(eg.ConstantPlacementError, match="meta"):
        meta_edge.to_executorch(ExecutorchBackendConfig(passes=eg.emit_passes("copy")))


def test_multi_method_programs_are_checked_per_method(device: torch.device) -> None:
    model, forward = on(device)
    _, other = on(device, Remainder)
    methods = {"forward": forward, "other": other}

    partitioner = eg.guard_partitioners(
        {name: [HostCopyPartitioner()] for name in methods}, device_backends=TRUSTING_HOST_COPY
    )
    with pytest.raises(eg.ConstantPlacementError, match="divisor"):
        to_edge_transform_and_lower(
            methods, transform_passes=eg.guard_passes(partitioner=partitioner), partitioner=partitioner
        )

    for name, constants in {
        "forward": ("hidden.weight", "hidden.bias", "out.weight", "out.bias"),
        "other": ("linear.weight", "linear.bias", "divisor"),
    }.items():
        with pytest.raises(
            eg.ConstantPlacementError
        ) as raised:  # each method is checked with the program emitted for it
            to_edge({name: methods[name]}).to_executorch(ExecutorchBackendConfig(passes=eg.emit_passes()))
        assert {f.constant for f in raised.value.report.errors} == set(constants)
    pte = to_edge(methods).to_executorch(ExecutorchBackendConfig(passes=eg.emit_passes("copy"))).buffer
    torch.testing.assert_close(run(pte, "forward"), eager(model))


def test_plain_guard_passes_still_stop_device_constants_before_any_partitioner(device: torch.device) -> None:
    _, program = on(device)
    with pytest.raises(eg.ConstantPlacementError) as raised:
        to_edge_transform_and_lower(program, transform_passes=eg.guard_passes(), partitioner=[HostCopyPartitioner()])
    assert "guard_partitioners" in str(raised.value), "the fix names the device-backend form"


def test_lower_with_guards_stops_a_host_reading_backend_without_raising(device: torch.device) -> None:
    _, program = on(device)
    guarded = eg.lower_with_guards(program, config=eg.Settings(backend="xnnpack"))
    assert guarded.edge is None
    assert {f.constant for f in guarded.report.errors} == {"hidden.weight", "hidden.bias", "out.weight", "out.bias"}


def test_bad_arguments_are_explained() -> None:
    with pytest.raises(TypeError, match="wrap them with guard_partitioners"):
        eg.guard_passes(partitioner=[XnnpackPartitioner()])
    with pytest.raises(ValueError, match="empty partitioner list"):
        eg.guard_passes(partitioner=[])
    with pytest.raises(TypeError, match="Partitioner instances"):
        eg.guard_partitioners([XnnpackPartitioner, "xnnpack"])
    with pytest.raises(TypeError, match="backend id strings"):
        eg.guard_partitioners([XnnpackPartitioner()], device_backends="CudaBackend")
    with pytest.raises(ValueError, match="'error' or 'copy'"):
        eg.emit_passes("move")  # type: ignore[arg-type]
    with pytest.raises(eg.GuardError, match="runs only inside to_executorch"):
        eg.placement.EmitPlacementPass()(torch.fx.symbolic_trace(MLP()))
    with pytest.raises(eg.GuardError, match="after the pass that emit_passes"):  # alone, ExecuTorch hands it no program
        to_edge(torch.export.export(MLP(), (torch.randn(2, 4),))).to_executorch(
            ExecutorchBackendConfig(passes=[eg.placement.EmitPlacementPass()])
        )


def test_a_guarded_partitioner_is_the_wrapped_one_in_everything_else() -> None:
    inner = XnnpackPartitioner()
    (guarded,) = eg.guard_partitioners([inner])
    assert guarded.partitioner is inner
    assert guarded.delegation_spec is inner.delegation_spec
    assert guarded.ops_to_not_decompose is not None
    assert eg.placement.GuardedPartitioner(guarded).partitioner is inner, "wrapping twice wraps once"
    assert copy.copy(guarded).partitioner is inner, "a copy (which builds the object before its fields) works"
