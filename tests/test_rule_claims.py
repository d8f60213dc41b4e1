"""What each rule's message claims is true of what ExecuTorch writes and runs: for each, a model
that triggers it shows the claimed cost in a real export (what XNNPACK takes, what the runtime
computes), and the rule's fix applied to it clears both the finding and the cost."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from executorch.exir import to_edge_transform_and_lower
from executorch.runtime import Runtime
from torch import nn

import export_guards as eg
from export_guards.pte.smoke import SmokeRun, smoke_test

pytestmark = [pytest.mark.slow]  # each claim is proved in a real export and run


def run_pte(model: nn.Module, inputs: tuple[torch.Tensor, ...], times: int = 1) -> list[list[torch.Tensor]]:
    """Export ``model`` (portable kernels) and run its program ``times`` times in one loaded method."""
    pte = to_edge_transform_and_lower(torch.export.export(model, inputs)).to_executorch().buffer
    method = Runtime.get().load_program(pte).load_method("forward")
    return [list(method.execute(list(inputs))) for _ in range(times)]


def codes(model: nn.Module, *inputs: torch.Tensor) -> set[str]:
    return {f.code for f in eg.lint(torch.export.export(model, inputs))}


def test_eg211_an_input_dependent_weight_is_not_delegated_and_the_fix_is() -> None:
    class Modulated(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(3, 4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return nn.functional.linear(x, self.w * x.mean())

    class Fixed(Modulated):  # the fix: the same result with a static weight
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return nn.functional.linear(x, self.w) * x.mean()

    torch.manual_seed(0)
    inputs = (torch.randn(2, 4),)
    trigger, fixed = Modulated(), Fixed()
    fixed.load_state_dict(trigger.state_dict())
    assert "EG211" in codes(trigger, *inputs)
    assert eg.export_with_guards(trigger, inputs).delegation.count("linear", "mm", "addmm") == (0, 1)
    assert "EG211" not in codes(fixed, *inputs)
    assert eg.export_with_guards(fixed, inputs).delegation.count("linear", "mm", "addmm") == (1, 1)
    torch.testing.assert_close(fixed(*inputs), trigger(*inputs))


def test_eg301_train_mode_dropout_drops_at_random_in_the_program() -> None:
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5)), torch.randn(4, 8)
    assert "EG301" in codes(model.train(), x)
    first, second = (out[0] for out in run_pte(model.train(), (x,), times=2))
    assert not torch.equal(first, second)  # the claim: the program drops activations at random
    assert "EG301" not in codes(model.eval(), x)  # the fix: model.eval()
    first, second = (out[0] for out in run_pte(model.eval(), (x,), times=2))
    assert torch.equal(first, second) and torch.allclose(first, model.eval()(x), atol=1e-6)


def test_eg302_train_mode_batch_norm_cannot_be_lowered_and_the_fix_can() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))
    image = (torch.randn(2, 3, 8, 8),)
    assert "EG302" in codes(model.train(), *image)
    with pytest.raises(eg.LoweringFailed, match="not in Core ATen") as raised:  # the claim
        eg.export_with_guards(model.train(), image)
    assert [f.code for f in raised.value.report.errors] == ["EG302", "EG002"]  # and the lint said why, first
    assert "EG302" not in codes(model.eval(), *image)  # the fix: model.eval()
    (evaluated,) = run_pte(model.eval(), image)[0]
    torch.testing.assert_close(evaluated, model.eval()(*image), atol=1e-5, rtol=1e-5)


def test_eg303_a_random_op_makes_outputs_differ_from_run_to_run() -> None:
    class Noisy(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + 0.01 * torch.randn(x.shape)

    class Fixed(nn.Module):  # the fix: the caller passes the noise in
        def forward(self, x: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
            return x + 0.01 * noise

    x, noise = torch.randn(2, 4), torch.randn(2, 4)
    assert "EG303" in codes(Noisy(), x)
    first, second = (out[0] for out in run_pte(Noisy(), (x,), times=2))
    assert not torch.equal(first, second)
    assert "EG303" not in codes(Fixed(), x, noise)
    first, second = (out[0] for out in run_pte(Fixed(), (x, noise), times=2))
    assert torch.equal(first, second)


def test_eg304_float64_is_not_delegated_and_float32_is() -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    double = (torch.randn(2, 4, dtype=torch.float64),)
    assert "EG304" in codes(model.double(), *double)
    assert eg.export_with_guards(model.double(), double).delegation.count("linear", "mm", "addmm") == (0, 1)
    assert "EG304" not in codes(model.float(), double[0].float())  # the fix: model.float()
    assert eg.export_with_guards(model.float(), (double[0].float(),)).delegation.count("linear", "mm", "addmm") == (
        1,
        1,
    )


def test_eg305_a_parameter_written_in_place_loses_its_writes_in_the_program() -> None:
    class Counter(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.count = nn.Parameter(torch.zeros(1), requires_grad=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.count.add_(1)
            return x + self.count

    class Fixed(nn.Module):  # the fix: state is a buffer
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("count", torch.zeros(1))
            self.count: torch.Tensor

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.count.add_(1)
            return x + self.count

    x = torch.zeros(3)
    assert "EG305" in codes(Counter(), x)
    eager = Counter()
    expected = [eager(x) for _ in range(3)]  # 1, 2, 3
    runs = [out[0] for out in run_pte(Counter(), (x,), times=3)]
    assert not all(torch.equal(a, b) for a, b in zip(runs, expected))  # the claim: the writes are lost
    assert "EG305" not in codes(Fixed(), x)
    runs = [out[0] for out in run_pte(Fixed(), (x,), times=3)]
    assert all(torch.equal(a, b) for a, b in zip(runs, expected))


class Running(nn.Module):
    """State updated in place, as a running total or a cache is, starting from ``start``."""

    def __init__(self, start: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("total", start.clone())
        self.total: torch.Tensor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.total.add_(x)
        return self.total * 2


class Nested(nn.Module):
    """``Running`` one module down: the buffer's name in the model is ``inner.total``."""

    def __init__(self, start: torch.Tensor) -> None:
        super().__init__()
        self.inner = Running(start)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)


def test_eg308_a_written_buffer_starts_from_zeros_in_the_program_and_the_fix_keeps_its_value() -> None:
    from executorch.exir import ExecutorchBackendConfig

    torch.manual_seed(0)
    x, start = torch.randn(2, 4), torch.ones(2, 4)
    with torch.no_grad():
        program = torch.export.export(Nested(start), (x,))
    (finding,) = eg.lint(program).with_code("EG308")
    assert (
        finding.constant == "inner.total"
        and finding.location is not None
        and "self.total.add_(x)" in finding.location.code
    )
    assert "buffer 'inner.total'" in finding.message and "by up to 2" in finding.message  # 2 * the ones it drops
    stock = to_edge_transform_and_lower(program).to_executorch().buffer
    (first,) = Runtime.get().load_program(stock).load_method("forward").execute([x])
    torch.testing.assert_close(first, Nested(torch.zeros(2, 4))(x))  # the claim: it starts from zeros
    assert not torch.allclose(first, Nested(start)(x))
    kept = ExecutorchBackendConfig(
        passes=[eg.passes.keep_initial_values("inner.total")]
    )  # the fix, as the finding names it
    assert (
        "keep_initial_values('inner.total')" in (finding.fix or "")
        and "inner_total" not in (finding.fix or "") + finding.message
    )
    fixed = to_edge_transform_and_lower(program).to_executorch(kept).buffer
    (first,) = Runtime.get().load_program(fixed).load_method("forward").execute([x])
    torch.testing.assert_close(first, Nested(start)(x))
    with torch.no_grad():  # a cache that starts at zeros is clean, and right
        assert "EG308" not in {f.code for f in eg.lint(torch.export.export(Running(torch.zeros(2, 4)), (x,)))}


class StaleRows(nn.Module):
    """A cache whose first row each call writes (``copy_``), then read whole, unmasked: the
    finding sits on the read, not on the write."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("cache", torch.ones(3, 4))
        self.cache: torch.Tensor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.cache[0].copy_(x)
        return self.cache.sum(0)


def test_eg308_sits_on_the_unmasked_read_and_offers_keep_initial_values_last_with_its_risk() -> None:
    x = torch.randn(4)
    with torch.no_grad():
        nested = eg.lint(torch.export.export(Nested(torch.ones(2, 4)), (torch.randn(2, 4),))).with_code("EG308")
        stale = eg.lint(torch.export.export(StaleRows(), (x,))).with_code("EG308")
    for (finding,), read, line in ((nested, "add", "self.total.add_(x)"), (stale, "sum", "self.cache.sum(0)")):
        assert finding.node is not None and read in finding.node and line in finding.location.code
        assert "through this read of it, which no mask covers" in finding.message
        fix = finding.fix
        assert fix.startswith("mask the read") and fix.index("start the buffer at zeros") < fix.index(
            "keep_initial_values("
        )
        assert "bakes the value into the program" in fix[fix.index("keep_initial_values(") :]
    from export_guards.ruleset.catalog import CATALOG

    catalog = CATALOG["EG308"].fix  # what `explain` and SARIF say: the same order
    assert catalog.startswith("Mask the read") and catalog.index("zeros") < catalog.index("keep_initial_values")


class Overwritten(nn.Module):
    """A buffer whose first op is a full overwrite: its value before the call never matters."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("last", torch.ones(2, 4))
        self.last: torch.Tensor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.last.copy_(x)
        return self.last * 2


def test_eg308_a_value_the_program_overwrites_is_no_finding_and_the_program_matches_eager() -> None:
    x = torch.randn(2, 4)
    with torch.no_grad():
        program = torch.export.export(Overwritten(), (x,))
    assert "EG308" not in {f.code for f in eg.lint(program)}
    pte = to_edge_transform_and_lower(program).to_executorch().buffer
    (first,) = Runtime.get().load_program(pte).load_method("forward").execute([x])
    torch.testing.assert_close(first, Overwritten()(x))  # from zeros, as from its ones


class AddsInPlace(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x.add_(1)
        return torch.relu(x) * y, y - 1


class ReluInPlace(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.relu(x, inplace=True) + 1


@pytest.mark.parametrize("model", [AddsInPlace(), ReluInPlace()], ids=["add_", "relu inplace"])
def test_eg309_an_input_written_in_place_comes_first_among_the_methods_outputs(model: nn.Module) -> None:
    torch.manual_seed(0)
    inputs = (torch.randn(2, 4), torch.randn(2, 4))[: 2 if isinstance(model, AddsInPlace) else 1]
    with torch.no_grad():
        program = torch.export.export(model, tuple(t.clone() for t in inputs))
    (finding,) = eg.lint(program).with_code("EG309")
    written = [t.clone() for t in inputs]
    eager = model(*written)
    eager = list(eager) if isinstance(eager, tuple) else [eager]
    outputs = run_pte(model, tuple(t.clone() for t in inputs))[0]
    assert f"output 0: it has {len(outputs)} outputs" in finding.message  # the claim: one more output, first
    torch.testing.assert_close(outputs[0], written[0])  # output 0 is the written input
    first = len(outputs) - len(eager)
    assert (f"output {first}" if len(eager) == 1 else f"outputs {first} to {len(outputs) - 1}") in finding.message
    for got, expected in zip(outputs[len(outputs) - len(eager) :], eager):
        torch.testing.assert_close(got, expected)


def _run_in_a_child(pte: bytes, inputs: list[torch.Tensor], folder: Path) -> tuple[SmokeRun, list[torch.Tensor]]:
    """``forward`` of ``pte`` on ``inputs`` in executorch.runtime, in a child process: a call
    the runtime refuses may also crash it (a wrong shape has, now and then)."""
    (folder / "program.pte").write_bytes(pte)
    torch.save(inputs, folder / "inputs.pt")
    ran = smoke_test(folder / "program.pte", inputs=str(folder / "inputs.pt"), outputs=str(folder / "outputs.pt"))
    done = "ran forward" in ran.steps and (folder / "outputs.pt").is_file()
    return ran, torch.load(folder / "outputs.pt", weights_only=True) if done else []


def test_eg310_the_stated_shape_and_dim_order_are_what_the_runtime_takes(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model, x = nn.Conv2d(3, 4, 3).eval(), torch.randn(1, 3, 8, 8)
    (finding,) = eg.lint(torch.export.export(model, (x,))).with_code("EG310")
    assert "input: float32[1, 3, 8, 8] (contiguous)" in finding.message
    pte = to_edge_transform_and_lower(torch.export.export(model, (x,))).to_executorch().buffer
    refused, _ = _run_in_a_child(pte, [torch.randn(2, 3, 8, 8)], tmp_path)  # another shape: refused
    assert "ran forward" not in refused.steps and (refused.failure or refused.signal), refused
    _, (wrong,) = _run_in_a_child(
        pte, [x.to(memory_format=torch.channels_last)], tmp_path
    )  # another dim order: read as this one
    assert not torch.allclose(wrong, model(x), atol=1e-4)
    channels_last = x.to(memory_format=torch.channels_last)
    (finding,) = eg.lint(torch.export.export(model, (channels_last,))).with_code("EG310")
    assert "(channels-last, dim order [0, 2, 3, 1])" in finding.message
    method = (
        Runtime.get()
        .load_program(to_edge_transform_and_lower(torch.export.export(model, (channels_last,))).to_executorch().buffer)
        .load_method("forward")
    )
    (right,) = method.execute([channels_last])
    torch.testing.assert_close(right, model(x))
    batch = torch.export.Dim("batch", max=8)  # the fix where the batch should vary
    two = torch.randn(2, 3, 8, 8)  # (a batch of 1 would be specialised)
    assert not eg.lint(torch.export.export(model, (two,), dynamic_shapes=({0: batch},))).with_code("EG310")


def test_eg520_a_program_without_a_delegate_runs_its_compute_on_portable_kernels() -> None:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(144, 2)).eval()
    program = torch.export.export(model, (torch.randn(1, 3, 8, 8),))
    portable = to_edge_transform_and_lower(program).to_executorch().buffer
    (finding,) = eg.check_pte(portable).with_code("EG520")
    kernels = {op.name for op in eg_program(portable).execution_plan[0].operators}
    assert {"aten::convolution", "aten::addmm"} <= kernels  # the claim: they run on portable kernels
    assert "1 aten::addmm, 1 aten::convolution" in finding.message
    lowered = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()]).to_executorch().buffer
    assert not eg.check_pte(lowered).with_code("EG520")  # the fix
    assert not {"aten::convolution", "aten::addmm"} & {
        op.name for op in eg_program(lowered).execution_plan[0].operators
    }


def test_eg525_a_kernel_call_in_a_dtype_the_kernel_has_no_path_for_fails_in_the_runtime_and_the_cast_runs() -> None:
    class LogSoftmax(nn.Module):
        def __init__(self, fixed: bool) -> None:
            super().__init__()
            self.fixed = fixed

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if self.fixed:  # the fix: compute in a dtype the kernel takes, cast back after
                return torch.log_softmax(x.float(), dim=-1).double()
            return torch.log_softmax(x, dim=-1)

    x = torch.randn(3, 7, dtype=torch.float64)
    program = to_edge_transform_and_lower(torch.export.export(LogSoftmax(False), (x,))).to_executorch().buffer
    (finding,) = eg.check_pte(program).with_code("EG525")
    assert "fails the call (0x12" in finding.message and "cast to float32" in (finding.fix or "")
    with pytest.raises(RuntimeError, match="0x12"):  # the claim: the runtime fails the call
        Runtime.get().load_program(program).load_method("forward").execute([x])
    fixed = to_edge_transform_and_lower(torch.export.export(LogSoftmax(True), (x,))).to_executorch().buffer
    assert not eg.check_pte(fixed).with_code("EG525")
    (out,) = Runtime.get().load_program(fixed).load_method("forward").execute([x])
    torch.testing.assert_close(out, torch.log_softmax(x, dim=-1), atol=1e-5, rtol=1e-5)


def eg_program(pte: bytes) -> object:
    from executorch.exir._serialize._program import deserialize_pte_binary

    return deserialize_pte_binary(pte).program


def test_eg201_a_tied_head_says_what_its_second_copy_costs_and_the_fix_keeps_one() -> None:
    class TiedHead(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(500, 32)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.embed(ids) @ self.embed.weight.t()

    torch.manual_seed(0)
    model, ids = TiedHead().eval(), (torch.randint(0, 500, (1, 8)),)
    folded = eg.export_with_guards(model, ids)
    (finding,) = folded.report.with_code("EG201")
    table = model.embed.weight.nbytes
    assert f"holds that data twice ({table:,} bytes more)" in finding.message and "fold=False" in (finding.fix or "")
    one_copy = eg.export_with_guards(model, ids, config=eg.Settings(fold=False))  # the fix
    assert abs(len(folded.to_pte()) - len(one_copy.to_pte()) - table) < 4096  # the claim: one table's bytes
    assert folded.delegation.count("linear", "mm", "addmm") == (1, 1)  # the price's reason: a delegated head
    assert one_copy.delegation.count("linear", "mm", "addmm")[0] == 0


def _quantized(model: nn.Module, image: tuple[torch.Tensor, ...], *, fold_quantize: bool) -> nn.Module:
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    prepared = prepare_pt2e(torch.export.export(model, image).module(), quantizer)
    prepared(*image)
    return convert_pt2e(prepared, fold_quantize=fold_quantize)


def test_eg401_a_weight_quantized_in_the_graph_is_explained_and_its_fix_works() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU()).eval()
    image = (torch.randn(1, 3, 16, 16),)
    in_graph = _quantized(model, image, fold_quantize=False)  # a float weight, quantized by an op
    result = eg.export_with_guards(in_graph, image, config=eg.Settings(fold=False))
    (left_out,) = result.report.with_code("EG401")
    assert "quantized by an op in the graph" in left_out.message and "fold_quantize=True" in (left_out.fix or "")
    assert result.delegation.count("convolution") == (0, 1)  # the claim: XNNPACK refuses it
    for fixed, fold in (  # the fix, each way it names
        (in_graph, True),  # export-guards' fold
        (_quantized(model, image, fold_quantize=True), False),  # convert_pt2e's
    ):
        result = eg.export_with_guards(fixed, image, config=eg.Settings(fold=fold))
        assert not result.report.with_code("EG401") and result.delegation.count("convolution") == (1, 1)


def test_eg401_a_quantized_linear_decomposed_before_the_fold_is_explained_and_its_fix_works() -> None:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    from export_guards.analysis.partitioner_reasons import capture_partitioner_reasons

    torch.manual_seed(0)
    model = nn.Sequential(nn.utils.parametrizations.weight_norm(nn.Linear(8, 4))).eval()
    features = (torch.randn(2, 8),)
    program = torch.export.export(_quantized(model, features, fold_quantize=False), features)
    with capture_partitioner_reasons() as reasons:  # the pass-list form, without the line before to_edge
        edge = to_edge_transform_and_lower(
            program, transform_passes=eg.guard_passes(), partitioner=[XnnpackPartitioner()]
        )
    (left_out,) = eg.lint(edge, stage="partitioned", reasons={"forward": reasons}).with_code("EG401")
    assert "Expected weight to be a static param" in left_out.message and "fold_non_core_constants" in (
        left_out.fix or ""
    )
    assert eg.delegation_summary(edge).count("addmm") == (0, 1)  # the claim

    folded, _ = eg.fold_non_core_constants(program)  # the fix
    edge = to_edge_transform_and_lower(folded, transform_passes=eg.guard_passes(), partitioner=[XnnpackPartitioner()])
    assert not eg.lint(edge, stage="partitioned").with_code("EG401")
    assert eg.delegation_summary(edge).count("linear", "addmm") == (1, 1)
