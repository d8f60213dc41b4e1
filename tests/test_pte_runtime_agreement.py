"""The program check agrees with the runtime: each rule's error is a program that
``executorch.runtime`` crashes on, rejects or misruns (proved here by running it in a child
process on the original program's inputs), and what the runtime ignores is at most a warning
that runs with the original's outputs."""

from __future__ import annotations

import copy
import math
import random
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from executorch.exir import to_edge_transform_and_lower
from executorch.exir._serialize._program import deserialize_pte_binary
from executorch.exir.schema import DelegateCall, KernelCall, Program, Tensor

import export_guards as eg
from export_guards.pte.reader.dataflow import method_accesses
from pte_structure import STRUCTURE_MUTATORS, Runner, edit_pte, edit_xnnpack_graphs, program_inputs

pytestmark = [pytest.mark.subprocess, pytest.mark.slow]  # every claim is run in the runtime, in a child process


@pytest.fixture(scope="session")
def seeds(written_programs) -> dict[str, bytes]:
    return {name: written.pte.read_bytes() for name, written in written_programs.items() if not written.data_files}


@pytest.fixture(scope="module")
def runner() -> Runner:
    runner = Runner(timeout=60)
    yield runner
    runner.close()


class Outcome:
    """How the runtime ran a mutant of ``original``: ``"crash"``, ``"hang"``, ``"error"``,
    ``"same output"`` or ``"wrong output"``."""

    def __init__(self, runner: Runner, folder: Path, original: bytes) -> None:
        self.runner, self.folder = runner, folder
        self.inputs = folder / "inputs.pt"
        torch.save(program_inputs(original), self.inputs)
        self.expected = self._run(original, "original")
        assert self.expected["outcome"] == "ok"

    def _run(self, data: bytes, name: str) -> dict[str, str]:
        path = self.folder / f"{name}.pte"
        path.write_bytes(data)
        return self.runner.run(path, None, self.inputs)

    def of(self, mutant: bytes) -> str:
        result = self._run(mutant, "mutant")
        if result["outcome"] != "ok":
            return result["outcome"]
        return "same output" if result["digest"] == self.expected["digest"] else "wrong output"


def errors(data: bytes) -> set[str]:
    return {f.code for f in eg.check_pte(data).errors}


def first(program: Program, kind: type) -> object:
    return next(
        i.instr_args for i in program.execution_plan[0].chains[0].instructions if isinstance(i.instr_args, kind)
    )


def test_a_delegate_call_with_too_few_arguments_is_an_error_and_crashes_the_runtime(seeds, runner, tmp_path) -> None:
    mutant = edit_pte(seeds["xnnpack"], lambda program: first(program, DelegateCall).args.pop())
    (finding,) = eg.check_pte(mutant).with_code("EG514")
    assert "passes 1 arguments; its graph binds 2" in finding.message
    assert Outcome(runner, tmp_path, seeds["xnnpack"]).of(mutant) == "crash"


def _node_with(graph: dict, field: str) -> dict:
    """The first node of an XNNPACK graph (as flatbuffer JSON) that has ``field``."""
    return next(n["xnode_union"] for n in graph["xnodes"] if field in n["xnode_union"])


def _value(graph: dict, **fields: int) -> dict:
    """The first value of an XNNPACK graph whose fields have these values (absent counts as 0)."""
    return next(
        v["xvalue_union"] for v in graph["xvalues"] if all(v["xvalue_union"].get(k, 0) == x for k, x in fields.items())
    )


def _internal_value(graph: dict) -> dict:
    return next(
        v["xvalue_union"]
        for v in graph["xvalues"]
        if not v["xvalue_union"].get("flags") and not v["xvalue_union"].get("constant_buffer_idx")
    )


def test_an_internal_xnnpack_value_flagged_as_an_output_is_an_error_and_crashes_the_runtime(
    seeds, runner, tmp_path
) -> None:
    mutant = edit_xnnpack_graphs(seeds["xnnpack"], lambda graph: _internal_value(graph).update(flags=2))
    (finding,) = eg.check_pte(mutant).with_code("EG515")
    assert "flagged external output but has no external id" in finding.message
    assert Outcome(runner, tmp_path, seeds["xnnpack"]).of(mutant) == "crash"


def test_a_fully_connected_bias_that_is_not_per_channel_is_an_error_and_crashes_the_runtime(
    seeds, runner, tmp_path
) -> None:
    def bias_on_the_input(graph: dict) -> None:
        node = next(
            n["xnode_union"]
            for n in graph["xnodes"]
            if "filter_id" in n["xnode_union"] and "input1_id" in n["xnode_union"]
        )
        node["bias_id"] = node["input1_id"]

    mutant = edit_xnnpack_graphs(seeds["xnnpack"], bias_on_the_input, which=1)  # the linear
    messages = [f.message for f in eg.check_pte(mutant).with_code("EG515")]
    assert any("has bias value" in m for m in messages) and any(
        "bias value 0, which is not a constant" in m for m in messages
    )
    assert Outcome(runner, tmp_path, seeds["xnnpack"]).of(mutant) == "crash"


def _arena_tensor(program: Program, rank: int) -> Tensor:
    plan = program.execution_plan[0]
    return next(
        v.val
        for v in plan.values
        if isinstance(v.val, Tensor) and len(v.val.sizes) == rank and v.val.allocation_info is not None
    )


def test_a_dim_order_that_is_not_a_permutation_is_an_error_the_runtime_refuses(seeds, runner, tmp_path) -> None:
    def duplicate(program: Program) -> None:
        _arena_tensor(program, 4).dim_order = [0, 1, 1, 3]

    mutant = edit_pte(seeds["portable"], duplicate)
    assert "EG516" in errors(mutant)
    assert Outcome(runner, tmp_path, seeds["portable"]).of(mutant) == "error"


def _accesses(data: bytes):
    from export_guards.pte.reader.file import PteFile

    plan = PteFile(data).program.execution_plan[0]
    return plan, method_accesses(plan, {})


def test_instructions_out_of_order_are_an_error_and_misrun(seeds, runner, tmp_path) -> None:
    _plan, accesses = _accesses(seeds["portable"])
    # two kernels where the second reads what the first writes
    a = next(i for i, x in enumerate(accesses) if any(x.writes & y.reads for y in accesses[i + 1 :]))
    b = next(j for j in range(a + 1, len(accesses)) if accesses[a].writes & accesses[j].reads)

    def swap(program: Program) -> None:
        chain = program.execution_plan[0].chains[0].instructions
        chain[a], chain[b] = chain[b], chain[a]

    mutant = edit_pte(seeds["portable"], swap)
    (finding, *_) = eg.check_pte(mutant).with_code("EG517")
    assert "before anything writes it" in finding.message
    assert Outcome(runner, tmp_path, seeds["portable"]).of(mutant) in ("wrong output", "error")


def test_a_dropped_instruction_is_an_error_and_misruns(seeds, runner, tmp_path) -> None:
    mutant = edit_pte(seeds["portable"], lambda program: program.execution_plan[0].chains[0].instructions.pop(1))
    assert "EG517" in errors(mutant)
    assert Outcome(runner, tmp_path, seeds["portable"]).of(mutant) in ("wrong output", "error")


def test_a_tensor_moved_onto_a_live_one_is_an_error_and_misruns(seeds, runner, tmp_path) -> None:
    plan, accesses = _accesses(seeds["portable"])
    # a tensor written at k and read at m > k + 1, and one written in between
    k, m, live = next(
        (k, m, v)
        for k, x in enumerate(accesses)
        for v in sorted(x.writes)
        for m in range(k + 2, len(accesses))
        if v in accesses[m].reads
    )
    other = next(
        v for j in range(k + 1, m) for v in sorted(accesses[j].writes) if plan.values[v].val.allocation_info is not None
    )

    def move(program: Program) -> None:
        values = program.execution_plan[0].values
        values[other].val.allocation_info.memory_offset_low = values[live].val.allocation_info.memory_offset_low

    mutant = edit_pte(seeds["portable"], move)
    assert "EG518" in errors(mutant)
    assert Outcome(runner, tmp_path, seeds["portable"]).of(mutant) in ("wrong output", "error")


def test_an_out_tensor_of_the_wrong_shape_is_an_error_the_kernel_rejects(seeds, runner, tmp_path) -> None:
    def reshape_an_out(program: Program) -> None:
        plan = program.execution_plan[0]
        call = next(
            c
            for c in (i.instr_args for i in plan.chains[0].instructions)
            if isinstance(c, KernelCall) and len(plan.values[c.args[-1]].val.sizes) == 4
        )
        sizes = plan.values[call.args[-1]].val.sizes
        sizes[1], sizes[2] = sizes[2], sizes[1]  # same element count, another shape

    mutant = edit_pte(seeds["portable"], reshape_an_out)
    (finding, *_) = eg.check_pte(mutant, replay=True).with_code("EG519")  # the shape the meta replay computes
    assert "resizes it to shape [1, 8, 6, 6]" in finding.message
    assert Outcome(runner, tmp_path, seeds["portable"]).of(mutant) in ("error", "wrong output")


@pytest.mark.parametrize(
    ("field", "edit"),
    [
        ("extended header length", lambda data: data[:12] + (40).to_bytes(4, "little") + data[16:]),
        (
            "extended header length past the program",
            lambda data: data[:12] + (2**32 - 96).to_bytes(4, "little") + data[16:],
        ),
        (
            "segment data size",
            lambda data: data[:32] + (int.from_bytes(data[32:40], "little") - 16).to_bytes(8, "little") + data[40:],
        ),
        ("XNNPACK header length", lambda data: _xnn_header_length(data, 31)),
    ],
)
def test_a_field_the_runtime_ignores_is_at_most_a_warning_and_runs_as_before(
    field: str, edit: Callable[[bytes], bytes], seeds, runner, tmp_path
) -> None:
    mutant = edit(seeds["xnnpack"])
    assert mutant != seeds["xnnpack"]
    report = eg.check_pte(mutant)
    assert not report.errors, f"{field}: {[f.message for f in report.errors]}"
    assert all("ignores" in f.message for f in report if f.severity is eg.Severity.WARNING)
    assert Outcome(runner, tmp_path, seeds["xnnpack"]).of(mutant) == "same output"


def _xnn_header_length(data: bytes, length: int) -> bytes:
    at = data.find(b"XH00")
    return data[: at + 4] + length.to_bytes(2, "little") + data[at + 6 :]


def test_a_campaign_of_structure_aware_mutants_has_no_checker_clean_crash_and_no_false_alarm(
    seeds, runner, tmp_path
) -> None:
    rng = random.Random(7)
    outcomes = {name: Outcome(runner, tmp_path, data) for name, data in seeds.items()}
    seen = {"flagged": 0, "clean": 0}
    for number in range(40):
        name = rng.choice(sorted(seeds))
        kind = rng.choice(sorted(STRUCTURE_MUTATORS))
        mutant = STRUCTURE_MUTATORS[kind](seeds[name], rng)
        if mutant is None or mutant == seeds[name]:
            continue
        flagged = bool(errors(mutant))
        outcome = outcomes[name].of(mutant)
        case = f"#{number}: {kind} of {name} is {'flagged' if flagged else 'clean'} and runs to '{outcome}'"
        assert flagged or outcome not in ("crash", "hang"), case
        assert not flagged or outcome != "same output", case
        seen["flagged" if flagged else "clean"] += 1
    assert seen["flagged"] >= 10 and seen["clean"] >= 5, seen


# Shapes: the runtime reshapes each XNNPACK graph to the program's tensors (EG514 follows it).


def _delegate_output(program: Program) -> Tensor:
    plan = program.execution_plan[0]
    call = first(program, DelegateCall)
    return next(plan.values[i].val for i in reversed(call.args) if len(set(plan.values[i].val.sizes)) > 1)


def test_a_delegate_output_of_another_fixed_shape_is_an_error_the_runtime_refuses(seeds, runner, tmp_path) -> None:
    def swap_sizes(program: Program) -> None:
        sizes = _delegate_output(program).sizes
        a = next(k for k in range(1, len(sizes)) if sizes[k] != sizes[0])
        sizes[0], sizes[a] = sizes[a], sizes[0]  # same element count, another shape

    mutant = edit_pte(seeds["xnnpack"], swap_sizes)
    (finding,) = eg.check_pte(mutant).with_code("EG514")
    assert "the runtime cannot resize it" in finding.message
    assert Outcome(runner, tmp_path, seeds["xnnpack"]).of(mutant) == "error"


def test_a_node_pointed_at_a_value_of_another_shape_is_an_error_the_runtime_refuses(seeds, runner, tmp_path) -> None:
    def add_the_bias(graph: dict) -> None:
        add, linear = _node_with(graph, "input2_id"), _node_with(graph, "filter_id")
        add["input1_id"] = linear["filter_id"]  # a [5, 8] weight added to the [5] offset, into a [1, 5] output

    mutant = edit_xnnpack_graphs(seeds["xnnpack"], add_the_bias, which=1)  # the linear and the add
    (finding,) = [f for f in eg.check_pte(mutant).errors if f.code == "EG514"]
    assert "do not broadcast" in finding.message or "cannot resize" in finding.message
    assert Outcome(runner, tmp_path, seeds["xnnpack"]).of(mutant) == "error"


def test_a_graph_shape_that_the_runtime_reshapes_away_is_no_error_and_runs_as_before(seeds, runner, tmp_path) -> None:
    def stale_input_dims(graph: dict) -> None:
        value = _value(graph, flags=1)
        value["dims"] = [d + 1 for d in value["dims"]]

    mutant = edit_xnnpack_graphs(seeds["xnnpack"], stale_input_dims, which=1)
    assert not eg.check_pte(mutant).errors
    assert Outcome(runner, tmp_path, seeds["xnnpack"]).of(mutant) == "same output"


def test_an_internal_xnnpack_value_with_an_external_id_is_an_error_the_runtime_refuses(seeds, runner, tmp_path) -> None:
    mutant = edit_xnnpack_graphs(seeds["xnnpack"], lambda graph: _internal_value(graph).update(external_id=0), which=1)
    (finding,) = eg.check_pte(mutant).with_code("EG515")
    assert "is internal but has external id 0" in finding.message
    assert Outcome(runner, tmp_path, seeds["xnnpack"]).of(mutant) == "error"


def test_an_xnnpack_value_that_no_node_writes_is_an_error_the_runtime_misruns(seeds, runner, tmp_path) -> None:
    def transpose_elsewhere(graph: dict) -> None:
        _node_with(graph, "perm")["output_id"] = _node_with(graph, "filter_id")[
            "output_id"
        ]  # the convolution reads value 1, now unwritten

    mutant = edit_xnnpack_graphs(seeds["xnnpack"], transpose_elsewhere, which=0)
    (finding,) = eg.check_pte(mutant).with_code("EG515")
    assert "reads value 1, which no node writes" in finding.message
    assert Outcome(runner, tmp_path, seeds["xnnpack"]).of(mutant) in ("wrong output", "error", "crash")


@pytest.mark.parametrize(
    ("delegate", "value", "external_id", "outcome"),
    [(0, 1, 1, "same output"), (1, 3, 2, "same output"), (1, 3, 1, "crash")],
    ids=[
        "transposed input in the output's slot",
        "linear output in the output's slot, add in place",
        "linear output in an input's slot",
    ],
)
def test_an_internal_xnnpack_value_listed_before_its_external_value_shares_the_slot(
    delegate, value, external_id, outcome, seeds, runner, tmp_path
) -> None:
    """Listed before the external value of its id, an internal value shares that value's slot:
    a warning where every node still finds the value it names there, an error where one does not."""
    mutant = edit_xnnpack_graphs(
        seeds["xnnpack"], lambda graph: _value(graph, id_out=value).update(external_id=external_id), which=delegate
    )
    (finding,) = eg.check_pte(mutant).with_code("EG515")
    assert f"value {value} is internal but has external id {external_id}" in finding.message
    if outcome == "same output":
        assert (
            finding.severity is eg.Severity.WARNING and "every node finds there the value it names" in finding.message
        )
    else:
        assert (
            finding.severity is eg.Severity.ERROR
            and "reads value 4 from that slot while it holds value 3" in finding.message
        )
    assert Outcome(runner, tmp_path, seeds["xnnpack"]).of(mutant) == outcome


@pytest.mark.parametrize(("delegate", "outcome"), [(0, "error"), (1, "crash")], ids=["convolution", "fully connected"])
def test_a_filter_that_is_not_a_constant_is_an_error_the_runtime_fails_on(
    delegate: int, outcome: str, seeds, runner, tmp_path
) -> None:
    def filter_on_the_input(graph: dict) -> None:
        node = _node_with(graph, "filter_id")
        node["filter_id"] = node["input1_id"]

    mutant = edit_xnnpack_graphs(seeds["xnnpack"], filter_on_the_input, which=delegate)
    assert any(
        "filter value" in f.message and "not a constant" in f.message for f in eg.check_pte(mutant).with_code("EG515")
    )
    assert Outcome(runner, tmp_path, seeds["xnnpack"]).of(mutant) == outcome


@pytest.mark.parametrize(
    ("flag", "swapped"),
    [(1, 2), (2, 1)],
    ids=["input flagged as an output a node reads", "output flagged as an input a node writes"],
)
def test_an_external_value_whose_role_flag_is_swapped_is_no_error_and_runs_as_before(
    flag: int, swapped: int, seeds, runner, tmp_path
) -> None:
    # the runtime binds the program's tensor to the value whatever its role: the nodes still use it
    mutant = edit_xnnpack_graphs(
        seeds["xnnpack"], lambda graph: _value(graph, flags=flag).update(flags=swapped), which=1
    )
    assert not eg.check_pte(mutant).errors
    assert Outcome(runner, tmp_path, seeds["xnnpack"]).of(mutant) == "same output"


@pytest.mark.parametrize(
    ("delegate", "dims"), [(1, lambda n: [n + 1]), (0, lambda n: [n, 1])], ids=["one more", "[N, 1]"]
)
def test_a_bias_read_by_its_channels_is_no_error_whatever_its_dims_say(
    delegate: int, dims: Callable[[int], list[int]], seeds, runner, tmp_path
) -> None:
    def reshaped_bias(graph: dict) -> None:
        bias = _value(graph, id_out=_node_with(graph, "bias_id")["bias_id"])
        bias["dims"] = dims(bias["dims"][0])

    mutant = edit_xnnpack_graphs(seeds["xnnpack"], reshaped_bias, which=delegate)
    assert not eg.check_pte(mutant).findings
    assert Outcome(runner, tmp_path, seeds["xnnpack"]).of(mutant) == "same output"


def test_the_size_field_of_a_named_xnnpack_constant_is_ignored_as_the_runtime_ignores_it(
    seeds, runner, tmp_path
) -> None:
    def grow_sizes(graph: dict) -> None:
        named = [entry for entry in graph["constant_data"] if entry.get("named_key")]
        assert named
        for entry in named:
            entry["size"] = int(entry.get("size", 0)) + 4096

    mutant = edit_xnnpack_graphs(seeds["xnnpack"], grow_sizes, which=0)
    assert not eg.check_pte(mutant).findings
    assert Outcome(runner, tmp_path, seeds["xnnpack"]).of(mutant) == "same output"


# Kernels: ExecuTorch's are stricter than torch's meta kernels about dtypes (EG519).


def test_a_convolution_weight_of_another_dtype_is_an_error_the_kernel_rejects(seeds, runner, tmp_path) -> None:
    def integer_weight(program: Program) -> None:
        plan = program.execution_plan[0]
        call = next(
            c
            for c in (i.instr_args for i in plan.chains[0].instructions)
            if isinstance(c, KernelCall) and plan.operators[c.op_index].name == "aten::convolution"
        )
        plan.values[call.args[1]].val.scalar_type = 3  # int32: the same bytes, read as integers

    mutant = edit_pte(seeds["portable"], integer_weight)
    (finding,) = eg.check_pte(mutant).with_code("EG519")
    assert "different dtypes" in finding.message
    assert Outcome(runner, tmp_path, seeds["portable"]).of(mutant) == "error"


def _mm_argument(program: Program, position: int) -> Tensor:
    plan = program.execution_plan[0]
    call = next(
        c
        for c in (i.instr_args for i in plan.chains[0].instructions)
        if isinstance(c, KernelCall) and plan.operators[c.op_index].name == "aten::mm"
    )
    return plan.values[call.args[position]].val


def test_an_unusual_dim_order_on_a_kernel_tensor_is_an_error_the_kernel_rejects(seeds, runner, tmp_path) -> None:
    mutant = edit_pte(
        seeds["mutable"], lambda program: setattr(_mm_argument(program, -1), "dim_order", [1, 0])
    )  # mm's out
    (finding,) = eg.check_pte(mutant).with_code("EG516")
    assert (
        finding.severity is eg.Severity.ERROR and "aten::add takes it" in finding.message
    )  # the add that reads mm's out
    assert Outcome(runner, tmp_path, seeds["mutable"]).of(mutant) == "error"


def test_an_unusual_dim_order_that_only_dim_order_blind_kernels_take_is_a_warning_and_runs_as_before(
    seeds, runner, tmp_path
) -> None:
    """The input x goes only to mm, whose optimized kernel (the one executorch.runtime links)
    reads the bytes as contiguous whatever the dim order says."""
    mutant = edit_pte(seeds["mutable"], lambda program: setattr(_mm_argument(program, 0), "dim_order", [1, 0]))
    report = eg.check_pte(mutant)
    assert not report.errors and "ignore dim orders" in report.with_code("EG516")[0].message
    assert Outcome(runner, tmp_path, seeds["mutable"]).of(mutant) == "same output"


class _Applies(torch.nn.Module):
    def __init__(self, function: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.function = function

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.function(x)


_MATRIX = torch.randn(4, 5)
_BATCHED = torch.randn(2, 4, 5)


@pytest.mark.parametrize(
    ("function", "shape", "outcome"),
    [
        (lambda x: x @ _MATRIX, (3, 4), "same output"),
        (lambda x: torch.bmm(x, _BATCHED), (2, 3, 4), "same output"),
        (torch.exp, (3, 4), "same output"),
        (torch.nn.functional.gelu, (3, 4), "same output"),
        (lambda x: torch.nn.functional.layer_norm(x, (4,)), (3, 4), "same output"),
        (torch.relu, (3, 4), "error"),
        (lambda x: torch.log_softmax(x, -1), (3, 4), "error"),
        (lambda x: x.sum(-1), (2, 3, 4), "error"),
    ],
    ids=["mm", "bmm", "exp", "gelu", "layer norm", "relu", "log softmax", "sum"],
)
def test_the_dim_order_blind_kernels_are_those_the_runtime_runs_as_contiguous(
    function, shape, outcome, runner, tmp_path
) -> None:
    """EG516's table of kernels that ignore dim orders, proved operator by operator: a reversed
    dim order on the input runs with the original output where the table says so (a warning),
    and is refused where it does not (an error)."""
    from export_guards.pte.reader.operators import DIM_ORDER_BLIND

    torch.manual_seed(0)
    exported = torch.export.export(_Applies(function), (torch.randn(*shape),))
    original = to_edge_transform_and_lower(exported).to_executorch().buffer

    def reverse_the_input(program: Program) -> None:
        plan = program.execution_plan[0]
        tensor = plan.values[plan.inputs[0]].val
        tensor.dim_order = list(reversed(tensor.dim_order))

    mutant = edit_pte(original, reverse_the_input)
    (finding,) = eg.check_pte(mutant).with_code("EG516")
    assert (finding.severity is eg.Severity.WARNING) == (outcome == "same output"), finding.message
    plan = deserialize_pte_binary(original).program.execution_plan[0]
    operators = {
        plan.operators[c.op_index].name
        for c in (i.instr_args for i in plan.chains[0].instructions)
        if isinstance(c, KernelCall)
    }
    assert (outcome == "same output") == (operators <= DIM_ORDER_BLIND)
    assert Outcome(runner, tmp_path, original).of(mutant) == outcome


def test_an_unusual_dim_order_on_a_method_input_is_an_error_when_a_checking_kernel_takes_it(
    seeds, runner, tmp_path
) -> None:
    """The runtime copies the caller's bytes into the method's input tensor, which keeps its dim
    order: the convolution kernel sees [1, 0, 2, 3] and refuses the call."""

    def transpose_the_input(program: Program) -> None:
        plan = program.execution_plan[0]
        plan.values[plan.inputs[0]].val.dim_order = [1, 0, 2, 3]

    mutant = edit_pte(seeds["portable"], transpose_the_input)
    (finding,) = eg.check_pte(mutant).with_code("EG516")
    assert finding.severity is eg.Severity.ERROR and "aten::convolution takes it" in finding.message
    assert Outcome(runner, tmp_path, seeds["portable"]).of(mutant) == "error"


@pytest.mark.parametrize(
    ("shift", "outcome"), [(0, "same output"), (4, "wrong output")], ids=["onto its own bytes", "four bytes on"]
)
def test_a_slice_copied_onto_its_source_is_no_error_and_runs_as_before(
    shift: int, outcome: str, runner, tmp_path
) -> None:
    """``position[:4]`` (a slice of leading elements) placed on ``position``'s own bytes writes
    them unchanged while both are alive: no overlap that matters. Four bytes on, it overwrites
    ``position`` before ``position`` is read again."""
    from executorch.exir import ExecutorchBackendConfig
    from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass

    from pte_models import InitializedState

    torch.manual_seed(0)
    exported = torch.export.export(InitializedState(), (torch.randn(2, 4),))
    config = ExecutorchBackendConfig(passes=[InitializedMutableBufferPass(["position", "scale"])])
    original = to_edge_transform_and_lower(exported).to_executorch(config).buffer

    def onto_the_source(program: Program) -> None:
        plan = program.execution_plan[0]
        call = next(
            c
            for c in (i.instr_args for i in plan.chains[0].instructions)
            if isinstance(c, KernelCall) and plan.operators[c.op_index].name == "aten::slice_copy"
        )
        source, out = (plan.values[call.args[k]].val.allocation_info for k in (0, -1))
        out.memory_id, out.memory_offset_low = source.memory_id, source.memory_offset_low + shift

    mutant = edit_pte(original, onto_the_source)
    assert ("EG518" in errors(mutant)) == (outcome != "same output")
    assert Outcome(runner, tmp_path, original).of(mutant) == outcome


def test_an_output_pointed_at_another_name_of_its_bytes_is_no_error_and_runs_as_before(
    runner, tmp_path, architecture_programs
) -> None:
    from export_guards.pte.context import PteContext
    from export_guards.pte.reader.file import PteFile

    original = architecture_programs["transformer block, xnnpack"]
    ((plan, accesses),) = PteContext(PteFile(original)).straight_methods
    written = {**dict.fromkeys(plan.inputs, -1), **{v: i for i, a in enumerate(accesses) for v in a.writes}}

    def layout(index: int) -> tuple:
        t = plan.values[index].val
        return (
            t.allocation_info.memory_id,
            t.allocation_info.memory_offset_low,
            t.scalar_type,
            tuple(t.sizes),
            tuple(t.dim_order),
        )

    output = plan.outputs[0]
    # an earlier tensor (the input, here) in the output's very bytes, of its dtype and shape,
    # later overwritten by the output's value: one tensor under two indices
    alias = min((v for v in written if v != output and layout(v) == layout(output)), key=written.__getitem__)
    mutant = edit_pte(original, lambda program: program.execution_plan[0].outputs.__setitem__(0, alias))
    assert not eg.check_pte(mutant).errors
    assert Outcome(runner, tmp_path, original).of(mutant) == "same output"


def test_a_program_size_cut_short_of_a_string_terminator_is_an_error_the_runtime_refuses(
    seeds, runner, tmp_path
) -> None:
    data = seeds["portable"]
    size = int.from_bytes(data[16:24], "little")
    mutant = data[:16] + (size - 1).to_bytes(8, "little") + data[24:]  # the last byte: a string's NUL
    (finding,) = eg.check_pte(mutant).with_code("EG502")
    assert "runs past the" in finding.message
    assert Outcome(runner, tmp_path, data).of(mutant) == "error"


@pytest.mark.parametrize("delegate", [0, 1], ids=["convolution", "fully connected"])
def test_a_filter_of_other_dims_than_its_node_parameters_is_an_error_the_runtime_refuses(
    delegate: int, seeds, runner, tmp_path
) -> None:
    def reshape_the_filter(graph: dict) -> None:
        weight = _value(graph, id_out=_node_with(graph, "filter_id")["filter_id"])
        weight["dims"] = weight["dims"][::-1] if delegate == 0 else [weight["dims"][0] * weight["dims"][1]]

    mutant = edit_xnnpack_graphs(seeds["xnnpack"], reshape_the_filter, which=delegate)
    assert any("has filter value" in f.message for f in eg.check_pte(mutant).with_code("EG515"))
    assert Outcome(runner, tmp_path, seeds["xnnpack"]).of(mutant) == "error"


def test_a_packed_weight_read_by_another_node_is_an_error_and_crashes_the_runtime(
    runner, tmp_path, architecture_programs
) -> None:
    """XNNPACK packs a fully connected layer's bias into its weights: an add that reads it too
    crashes the runtime."""
    original = architecture_programs["transformer block, xnnpack"]

    def add_reads_the_bias(graph: dict) -> None:
        add = next(n["xnode_union"] for n in graph["xnodes"] if n.get("xnode_union_type") == "XNNAdd")
        fully_connected = next(
            n["xnode_union"]
            for n in graph["xnodes"]
            if n.get("xnode_union_type") == "XNNFullyConnected" and n["xnode_union"]["output_id"] == add["input2_id"]
        )
        add["input2_id"] = fully_connected["bias_id"]

    mutant = edit_xnnpack_graphs(original, add_reads_the_bias, which=4)  # the MLP's second layer and the residual add
    assert any("that XNNPACK packs into node" in f.message for f in eg.check_pte(mutant).with_code("EG515"))
    assert Outcome(runner, tmp_path, original).of(mutant) == "crash"


def test_a_depthwise_filter_of_other_dims_of_the_same_size_is_no_error_and_runs_as_before(
    runner, tmp_path, architecture_programs
) -> None:
    """XNNPACK reads a depthwise filter by the node's parameters, whatever its dims say."""
    original = architecture_programs["conv net, xnnpack"]

    def permute_the_depthwise_filter(graph: dict) -> None:
        node = next(n["xnode_union"] for n in graph["xnodes"] if n.get("xnode_union_type") == "XNNDepthwiseConv2d")
        weight = _value(graph, id_out=node["filter_id"])
        weight["dims"] = weight["dims"][1:3] + weight["dims"][:1] + weight["dims"][3:]  # [1, h, w, c] as [h, w, 1, c]

    mutant = edit_xnnpack_graphs(original, permute_the_depthwise_filter, which=0)
    assert mutant != original and not eg.check_pte(mutant).findings
    assert Outcome(runner, tmp_path, original).of(mutant) == "same output"


def test_an_external_tensor_of_another_layout_than_its_data_file_states_is_an_error_the_runtime_refuses(
    runner, tmp_path, written_programs
) -> None:
    written = written_programs["external"]
    original = written.pte.read_bytes()

    def integer_offset(program: Program) -> None:
        tensor = next(
            v.val
            for v in program.execution_plan[0].values
            if isinstance(v.val, Tensor) and v.val.extra_tensor_info is not None
        )
        tensor.scalar_type = 3  # the .ptd says float32

    mutant = edit_pte(original, integer_offset)
    (finding,) = eg.check_pte(mutant, data_files=written.data_files).with_code("EG508")
    assert "InvalidExternalData" in finding.message
    inputs, path = tmp_path / "inputs.pt", tmp_path / "mutant.pte"
    torch.save(program_inputs(original), inputs)
    path.write_bytes(mutant)
    assert runner.run(written.pte, written.data_files[0], inputs)["outcome"] == "ok"
    assert runner.run(path, written.data_files[0], inputs)["outcome"] == "error"


def test_a_one_channel_channels_last_conv_fails_in_xnnpack_and_eg514_says_the_cause_is_its_layout(
    runner, tmp_path
) -> None:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.runtime import Runtime

    def lowered(model: torch.nn.Module, x: torch.Tensor) -> bytes:
        program = torch.export.export(model, (x,))
        return to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()]).to_executorch().buffer

    torch.manual_seed(0)
    model, x = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU()).eval(), torch.randn(1, 1, 8, 8)
    channels_last = torch.channels_last
    refused = lowered(copy.deepcopy(model).to(memory_format=channels_last), x.to(memory_format=channels_last))
    (finding,) = eg.check_pte(refused).with_code("EG514")
    assert finding.fix.startswith("A layout, not damage") and "x.contiguous()" in finding.fix
    (tmp_path / "refused.pte").write_bytes(refused)
    torch.save(program_inputs(refused), tmp_path / "inputs.pt")
    assert runner.run(tmp_path / "refused.pte", None, tmp_path / "inputs.pt")["outcome"] == "error"  # the call fails
    fixed = lowered(model, x)  # the fix: contiguous model and inputs
    assert not eg.check_pte(fixed).errors
    (out,) = Runtime.get().load_program(fixed).load_method("forward").execute([x])
    torch.testing.assert_close(out, model(x))


# Round 3: where the runtime reads segments, what ExecuTorch's kernels resize to, overlaps within
# one call, the return slot, and the runtime at hand.


@pytest.mark.parametrize("back", [128, 16])
def test_a_segment_base_moved_back_is_an_error_the_runtime_reads_wrong_constants_from(
    back: int, seeds, runner, tmp_path
) -> None:
    data = seeds["portable"]
    base = int.from_bytes(data[24:32], "little")
    mutant = data[:24] + (base - back).to_bytes(8, "little") + data[32:]
    assert "EG501" in errors(mutant)
    assert Outcome(runner, tmp_path, data).of(mutant) in ("wrong output", "error")


def _calls(program: Program, operator: str) -> list[KernelCall]:
    plan = program.execution_plan[0]
    instructions = (i.instr_args for i in plan.chains[0].instructions)
    return [c for c in instructions if isinstance(c, KernelCall) and plan.operators[c.op_index].name == operator]


def _batch_norm_weight_as_a_matrix(program: Program) -> None:
    weight = (
        program.execution_plan[0].values[_calls(program, "aten::_native_batch_norm_legit_no_training")[0].args[1]].val
    )
    weight.sizes, weight.dim_order = [2, weight.sizes[0] // 2], [0, 1]


def _batch_norm_stats_per_channel(program: Program) -> None:
    plan = program.execution_plan[0]
    call = _calls(program, "aten::_native_batch_norm_legit_no_training")[0]
    for out in call.args[8:10]:  # (input, weight, bias, mean, var, momentum, eps, out, mean out, invstd out)
        assert list(plan.values[out].val.sizes) == [0]
        plan.values[out].val.sizes = list(plan.values[call.args[1]].val.sizes)


@pytest.mark.parametrize(
    "edit", [_batch_norm_weight_as_a_matrix, _batch_norm_stats_per_channel], ids=["weight [2, C/2]", "stats sized [C]"]
)
def test_a_batch_norm_that_torch_meta_accepts_and_executorch_refuses_is_an_error(
    edit, runner, tmp_path, architecture_programs
) -> None:
    original = architecture_programs["conv net, portable"]
    mutant = edit_pte(original, edit)
    (finding, *_) = eg.check_pte(mutant, replay=True).with_code("EG519")
    assert "_native_batch_norm_legit_no_training" in finding.message
    assert Outcome(runner, tmp_path, original).of(mutant) == "error"


def _dim_order_copy_out_transposed(program: Program) -> None:
    plan = program.execution_plan[0]
    out = next(
        plan.values[c.args[3]].val
        for c in _calls(program, "dim_order_ops::_to_dim_order_copy")
        if len(set(plan.values[c.args[3]].val.sizes)) > 1
    )
    out.sizes = list(reversed(out.sizes))


def _copy_source_longer(program: Program) -> None:
    source = program.execution_plan[0].values[_calls(program, "aten::copy_")[0].args[1]].val
    source.sizes[0] += 1


@pytest.mark.parametrize(
    "edit", [_dim_order_copy_out_transposed, _copy_source_longer], ids=["_to_dim_order_copy", "copy_"]
)
def test_a_copy_of_another_shape_is_replayed_and_an_error_the_kernel_refuses(
    edit, runner, tmp_path, valid_program_bytes
) -> None:
    original = valid_program_bytes["initialised state" if edit is _copy_source_longer else "bool and int64 inputs"]
    mutant = edit_pte(original, edit)
    operator = "aten::copy_" if edit is _copy_source_longer else "dim_order_ops::_to_dim_order_copy"
    assert any(operator in f.message for f in eg.check_pte(mutant, replay=True).with_code("EG519"))
    assert Outcome(runner, tmp_path, original).of(mutant) == "error"


def _out_onto(program: Program, operator: str, source: int, which: int = 0) -> None:
    """Place the out of the ``which``-th ``operator`` call exactly on its ``source``-th argument."""
    plan = program.execution_plan[0]
    call = _calls(program, operator)[which]
    given, out = (plan.values[call.args[k]].val.allocation_info for k in (source, -2))
    out.memory_id, out.memory_offset_low, out.memory_offset_high = (
        given.memory_id,
        given.memory_offset_low,
        given.memory_offset_high,
    )


def test_a_matrix_product_writing_over_its_own_input_is_an_error_and_misruns(
    runner, tmp_path, architecture_programs
) -> None:
    original = architecture_programs["transformer block, portable"]
    mutant = edit_pte(original, lambda program: _out_onto(program, "aten::bmm", 0))
    (finding, *_) = eg.check_pte(mutant).with_code("EG518")
    assert "(instructions" in finding.message
    assert Outcome(runner, tmp_path, original).of(mutant) == "wrong output"


def test_an_element_wise_kernel_writing_exactly_over_its_input_is_no_error_and_runs_as_before(
    runner, tmp_path, architecture_programs
) -> None:
    original = architecture_programs["transformer block, portable"]
    mutant = edit_pte(original, lambda program: _out_onto(program, "aten::add", 0, which=-1))  # the residual add
    assert mutant != original
    assert not eg.check_pte(mutant).errors
    assert Outcome(runner, tmp_path, original).of(mutant) == "same output"


@pytest.mark.parametrize(
    ("program", "operator"),
    [("xnnpack", "aten::mean"), ("conv net, portable", "aten::max_pool2d_with_indices")],
    ids=["mean", "pool indices"],
)
def test_a_reduction_writing_over_its_input_from_its_first_byte_is_no_error_and_runs_as_before(
    program: str, operator: str, seeds, runner, tmp_path, architecture_programs
) -> None:
    """A mean over the inner dims, or a pool of disjoint windows, writes out element i after
    reading its inputs, and over input bytes it has read already."""
    original = {**seeds, **architecture_programs}[program]
    mutant = edit_pte(original, lambda program: _out_onto(program, operator, 0))
    assert mutant != original
    assert not eg.check_pte(mutant).errors
    assert Outcome(runner, tmp_path, original).of(mutant) == "same output"


def _source_onto_out(program: Program, operator: str, source: int) -> None:
    """Place the ``source``-th argument of the first ``operator`` call exactly on its out."""
    plan = program.execution_plan[0]
    call = _calls(program, operator)[0]
    out, given = (plan.values[call.args[k]].val.allocation_info for k in (-2, source))
    given.memory_id, given.memory_offset_low, given.memory_offset_high = (
        out.memory_id,
        out.memory_offset_low,
        out.memory_offset_high,
    )


def test_a_reduction_over_its_input_whose_out_a_reshape_views_is_no_error_and_runs_as_before(
    runner, tmp_path, valid_program_bytes
) -> None:
    """Issue 61's false alarm: the conv net's pooled mean, whose out the emitter's static reshape
    (a view, written by no instruction) lies on, with its input moved onto that out. The mean
    reads each byte before it writes over it; the view shares the out's bytes, so the call's order
    holds for it too (EG518 excused the out and flagged the view)."""
    original = valid_program_bytes["conv net, portable"]
    mutant = edit_pte(original, lambda program: _source_onto_out(program, "aten::mean", 0))
    program = deserialize_pte_binary(mutant).program
    plan, mean = program.execution_plan[0], _calls(program, "aten::mean")[0]
    outs = {c.args[-2] for c in (i.instr_args for i in plan.chains[0].instructions) if isinstance(c, KernelCall)}
    place = _place(plan, mean.args[-2])
    assert [v for v in range(len(plan.values)) if v not in outs and _place(plan, v) == place], (
        "no reshape lies on the mean's out"
    )
    assert _place(plan, mean.args[0])[:2] == place[:2]
    assert mutant != original and not eg.check_pte(mutant).errors
    assert Outcome(runner, tmp_path, original).of(mutant) == "same output"


def _place(plan: object, index: int) -> tuple[int, int, int] | None:
    """(arena, offset, element count) of a planned tensor."""
    value = plan.values[index].val
    info = value.allocation_info if isinstance(value, Tensor) else None
    return (info.memory_id, info.memory_offset_low, math.prod(value.sizes)) if info is not None else None


def test_a_reduction_written_over_an_input_that_a_later_call_reads_is_an_error_the_third_run_shows(
    runner, tmp_path, valid_program_bytes
) -> None:
    """The KV cache's sum over the updated cache, its out moved onto that cache, which copy_ then
    writes back as the state: the sum reads each byte before it writes over it, but copy_ reads
    the damaged row. The second run's index overwrites that row before anything reads it; the
    third run (the first's inputs again) reads it, so the runner's three runs show it."""
    original = valid_program_bytes["kv cache, xnnpack"]
    mutant = edit_pte(original, lambda program: _out_onto(program, "aten::sum", 0))
    (finding,) = eg.check_pte(mutant).with_code("EG518")
    assert "aten::sum.IntList_out" in finding.message and finding.severity == eg.Severity.ERROR
    assert Outcome(runner, tmp_path, original).of(mutant) == "wrong output"


def test_two_outs_of_one_call_that_nothing_reads_may_share_bytes(runner, tmp_path, architecture_programs) -> None:
    """A layer norm's mean and rstd, which the program never reads: whichever the bytes end up
    holding, nothing reads it."""
    original = architecture_programs["transformer block, xnnpack"]

    def stats_on_one_slot(program: Program) -> None:
        plan = program.execution_plan[0]
        *_, mean, rstd, _ = _calls(program, "aten::native_layer_norm")[0].args
        given, moved = plan.values[mean].val.allocation_info, plan.values[rstd].val.allocation_info
        moved.memory_id, moved.memory_offset_low, moved.memory_offset_high = (
            given.memory_id,
            given.memory_offset_low,
            given.memory_offset_high,
        )

    mutant = edit_pte(original, stats_on_one_slot)
    assert mutant != original and not eg.check_pte(mutant).findings
    assert Outcome(runner, tmp_path, original).of(mutant) == "same output"


def test_the_return_slot_of_an_out_variant_is_neither_read_nor_written(runner, tmp_path, architecture_programs) -> None:
    """ExecuTorch's generated wrapper leaves an out variant's return slot alone: any value there runs."""
    original = architecture_programs["transformer block, portable"]

    def return_slot_on_an_int(program: Program) -> None:
        plan = program.execution_plan[0]
        _calls(program, "aten::bmm")[0].args[-1] = next(
            i for i, v in enumerate(plan.values) if type(v.val).__name__ == "Int"
        )

    mutant = edit_pte(original, return_slot_on_an_int)
    assert not eg.check_pte(mutant).errors
    assert Outcome(runner, tmp_path, original).of(mutant) == "same output"


@pytest.mark.parametrize(("pointed_at", "outcome"), [("the weight", "error"), ("its source", "same output")])
def test_the_return_slot_of_an_in_place_kernel_rebinds_its_value(
    pointed_at: str, outcome: str, seeds, runner, tmp_path
) -> None:
    """``copy_``'s wrapper stores its result in the return slot. Pointed at the weight, the weight
    becomes the state buffer and the next run's matrix product fails (EG512); pointed at its
    source, an arena tensor of the same shape, the add that writes it writes the state in place
    and the program runs as before (no finding)."""

    def return_slot_elsewhere(program: Program) -> None:
        call = _calls(program, "aten::copy_")[0]
        call.args[-1] = _calls(program, "aten::mm")[0].args[1] if pointed_at == "the weight" else call.args[1]

    mutant = edit_pte(seeds["mutable"], return_slot_elsewhere)
    findings = eg.check_pte(mutant).with_code("EG512")
    assert (
        [f for f in findings if "returns what aten::copy_ writes in place" in f.message]
        if outcome == "error"
        else not findings
    )
    assert Outcome(runner, tmp_path, seeds["mutable"]).of(mutant) == outcome


def _renamed_backend(program: Program) -> None:
    program.execution_plan[0].delegates[0].id += "V2"


def _renamed_overload(program: Program) -> None:
    program.execution_plan[0].operators[0].overload += "_v2"


@pytest.mark.parametrize(
    ("edit", "lacking"),
    [(_renamed_backend, "backend 'XnnpackBackendV2'"), (_renamed_overload, "_v2, for which")],
    ids=["backend", "kernel"],
)
def test_what_the_runtime_at_hand_lacks_is_an_error_against_it_and_nothing_without(
    edit, lacking: str, seeds, runner, tmp_path
) -> None:
    """A kernel the runtime lacks, or a backend id that no ExecuTorch build registers (a
    misspelling): loading fails there, and the file alone cannot say so."""
    original = seeds["xnnpack"]
    mutant = edit_pte(original, edit)
    installed = eg.program.RuntimeInventory.installed()
    assert not eg.check_pte(mutant).findings  # the file alone is sound
    (finding,) = eg.check_pte(mutant, against=installed).findings
    assert finding.code == "EG521" and finding.severity is eg.Severity.ERROR and lacking in finding.message
    assert not eg.check_pte(original, against=installed).findings
    assert Outcome(runner, tmp_path, original).of(mutant) == "error"


# Round 4: backend ids, a method's inputs and outputs, XNNPACK headers, index dtypes.


def _backend_id(backend_id: str, data: bytes | None = None) -> Callable[[Program], None]:
    def rename(program: Program) -> None:
        program.execution_plan[0].delegates[0].id = backend_id
        if data is not None:
            program.backend_delegate_data[program.execution_plan[0].delegates[0].processed.index].data = data

    return rename


@pytest.mark.parametrize(
    ("backend_id", "code", "says"),
    [
        ("", "EG506", "has an empty backend id"),
        ("xnnpackbackend", "EG521", "which no ExecuTorch build registers"),
        ("XnnpackBackendV2", "EG521", "did you mean 'XnnpackBackend'?"),
    ],
    ids=["empty", "lower case", "renamed"],
)
def test_a_backend_id_that_no_executorch_build_registers_is_an_error_the_runtime_refuses(
    backend_id: str, code: str, says: str, seeds, runner, tmp_path
) -> None:
    mutant = edit_pte(seeds["xnnpack"], _backend_id(backend_id))
    report = eg.check_pte(mutant, against=eg.program.RuntimeInventory.installed())
    (finding,) = report.errors
    assert finding.code == code and says in finding.message and "method 'forward'" in finding.message
    assert bool(eg.check_pte(mutant).errors) == (code == "EG506")  # an empty id needs no runtime to be wrong
    assert Outcome(runner, tmp_path, seeds["xnnpack"]).of(mutant) == "error"  # NotFound


def test_a_backend_another_executorch_build_has_is_a_warning_that_names_its_build_option(
    seeds, runner, tmp_path
) -> None:
    """Vulkan's payload (any bytes here: no runtime at hand reads them) under its own id: the
    runtime at hand lacks the backend, a build with EXECUTORCH_BUILD_VULKAN has it."""
    mutant = edit_pte(seeds["xnnpack"], _backend_id("VulkanBackend", b"\0" * 64))
    (finding,) = eg.check_pte(mutant, against=eg.program.RuntimeInventory.installed()).with_code("EG521")
    assert finding.severity is eg.Severity.WARNING
    assert "executorch.runtime" in finding.message and "EXECUTORCH_BUILD_VULKAN=ON" in finding.message
    assert not eg.check_pte(mutant).findings
    assert Outcome(runner, tmp_path, seeds["xnnpack"]).of(mutant) == "error"


def test_an_xnnpack_payload_under_another_backends_id_is_an_error_and_crashes_that_backend(
    seeds, runner, tmp_path
) -> None:
    """QnnBackend, which executorch.runtime registers, is handed XNNPACK's bytes."""
    mutant = edit_pte(seeds["xnnpack"], _backend_id("QnnBackend"))
    (finding,) = eg.check_pte(mutant).with_code("EG506")
    assert "is an XNNPACK payload (header 'XH00'), which backend 'QnnBackend' cannot read" in finding.message
    assert Outcome(runner, tmp_path, seeds["xnnpack"]).of(mutant) == "crash"


def test_an_input_listed_twice_is_an_error_the_runtime_refuses(seeds, runner, tmp_path) -> None:
    def twice(program: Program) -> None:
        plan = program.execution_plan[0]
        plan.inputs.append(plan.inputs[0])

    mutant = edit_pte(seeds["portable"], twice)
    (finding,) = eg.check_pte(mutant).with_code("EG512")
    assert "lists value 5 as input 0 and again as input 1" in finding.message
    assert Outcome(runner, tmp_path, seeds["portable"]).of(mutant) == "error"  # set_inputs: the inputs do not fit


class _Twice(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        y = torch.relu(x)
        return x, y, y


def test_an_output_listed_twice_is_what_the_emitter_writes_for_a_tensor_returned_twice_and_runs() -> None:
    from executorch.runtime import Runtime

    x = torch.randn(2, 3)
    data = to_edge_transform_and_lower(torch.export.export(_Twice(), (x,))).to_executorch().buffer
    plan = deserialize_pte_binary(data).program.execution_plan[0]
    assert len(set(plan.outputs)) < len(plan.outputs)  # [input, y, y]
    assert not eg.check_pte(data).findings
    outputs = Runtime.get().load_program(data).load_method("forward").execute([x])
    for out, expected in zip(outputs, _Twice()(x), strict=True):
        torch.testing.assert_close(out, expected)


def _returns(make: Callable[[int], object]) -> Callable[[Program], None]:
    """An edit that appends a value made from the method's first output (its index) to its outputs."""
    from executorch.exir.schema import EValue

    def append(program: Program) -> None:
        plan = program.execution_plan[0]
        plan.values.append(EValue(make(plan.outputs[0])))
        plan.outputs.append(len(plan.values) - 1)

    return append


def _list_outputs() -> list:
    from executorch.exir.schema import BoolList, DoubleList, IntList, OptionalTensorList, TensorList

    return [
        pytest.param(lambda t: TensorList([t]), id="TensorList"),
        pytest.param(lambda t: OptionalTensorList([t, -1]), id="OptionalTensorList"),
        pytest.param(lambda t: IntList([]), id="IntList"),
        pytest.param(lambda t: DoubleList([0.5]), id="DoubleList"),
        pytest.param(lambda t: BoolList([True]), id="BoolList"),
    ]


@pytest.mark.parametrize("make", _list_outputs())
def test_a_list_as_a_method_output_is_an_error_the_runtime_refuses(make, seeds, runner, tmp_path) -> None:
    mutant = edit_pte(seeds["portable"], _returns(make))
    (finding,) = eg.check_pte(mutant).with_code("EG512")
    assert "as its output 1" in finding.message and "cannot state a list" in finding.message
    assert (
        Outcome(runner, tmp_path, seeds["portable"]).of(mutant) == "error"
    )  # 'Failed to get output type for output 1'


def _scalar_outputs() -> list:
    from executorch.exir.schema import Bool, Double, Int, Null, String

    return [
        pytest.param(lambda t: Int(3), id="Int"),
        pytest.param(lambda t: Double(0.5), id="Double"),
        pytest.param(lambda t: Bool(True), id="Bool"),
        pytest.param(lambda t: String("abc"), id="String"),
        pytest.param(lambda t: Null(), id="None"),
    ]


@pytest.mark.parametrize("make", _scalar_outputs())
def test_a_scalar_or_none_as_a_method_output_is_no_error_and_runs(make, seeds, runner, tmp_path) -> None:
    mutant = edit_pte(seeds["portable"], _returns(make))
    assert not eg.check_pte(mutant).errors
    assert (
        Outcome(runner, tmp_path, seeds["portable"]).of(mutant) == "wrong output"
    )  # it runs, and returns one value more


def _xnn_header_field(field: slice, change: Callable[[int], int]) -> Callable[[Program], None]:
    def edit(program: Program) -> None:
        blob = program.backend_delegate_data[0]
        data = bytearray(blob.data)
        data[field] = change(int.from_bytes(data[field], "little")).to_bytes(field.stop - field.start, "little")
        blob.data = bytes(data)

    return edit


def _graph_identifier(identifier: bytes) -> Callable[[Program], None]:
    def edit(program: Program) -> None:
        blob = program.backend_delegate_data[0]
        data = bytearray(blob.data)
        at = int.from_bytes(data[10:14], "little")  # the graph's offset in the payload
        data[at + 4 : at + 8] = identifier
        blob.data = bytes(data)

    return edit


@pytest.mark.parametrize(
    ("edit", "outcome"),
    [
        (_xnn_header_field(slice(14, 18), lambda size: size - 2), "same output"),
        (_xnn_header_field(slice(14, 18), lambda size: size - 4), "error"),
        (_xnn_header_field(slice(14, 18), lambda size: size - 8), "error"),
        (_graph_identifier(b"XN00"), "same output"),
        (_graph_identifier(b"XN02"), "error"),
    ],
    ids=[
        "graph size 2 short: padding",
        "graph size 4 short",
        "graph size 8 short",
        "identifier XN00",
        "identifier XN02",
    ],
)
def test_an_xnnpack_header_that_cuts_its_graph_short_is_an_error_the_runtime_refuses(
    edit, outcome: str, seeds, runner, tmp_path
) -> None:
    """The runtime verifies the graph within the size the header states: ExecuTorch's serializer
    writes the graph's version string last, so a size a few bytes short cuts it (two bytes short
    cuts only the padding after its NUL). It takes the identifiers XN00 and XN01."""
    mutant = edit_pte(seeds["xnnpack"], edit)
    findings = eg.check_pte(mutant).with_code("EG506")
    if outcome == "same output":
        assert not eg.check_pte(mutant).findings
    else:
        (finding,) = findings
        assert "delegate 0 (XnnpackBackend) of method 'forward'" in finding.message
        assert "(its header states" in finding.message or "not XN00 or XN01" in finding.message
    assert Outcome(runner, tmp_path, seeds["xnnpack"]).of(mutant) == outcome


def test_a_max_pool_with_indices_of_another_dtype_is_an_error_the_kernel_refuses(
    runner, tmp_path, architecture_programs
) -> None:
    original = architecture_programs["conv net, portable"]

    def double_indices(program: Program) -> None:
        plan = program.execution_plan[0]
        plan.values[
            _calls(program, "aten::max_pool2d_with_indices")[0].args[-2]
        ].val.scalar_type = 7  # double, as int64's 8 bytes

    mutant = edit_pte(original, double_indices)
    (finding,) = eg.check_pte(mutant).with_code("EG519")
    assert "indices out of dtype float64" in finding.message
    assert Outcome(runner, tmp_path, original).of(mutant) == "error"


def test_an_index_of_a_float_dtype_is_an_error_the_kernel_refuses(runner, tmp_path, valid_program_bytes) -> None:
    """The KV cache's position, an input, as a double: the caller's int64 no longer fits, and
    a double that does is refused by index_put."""
    original = valid_program_bytes["kv cache, xnnpack"]

    def double_position(program: Program) -> None:
        plan = program.execution_plan[0]
        plan.values[plan.inputs[1]].val.scalar_type = 7

    mutant = edit_pte(original, double_position)
    (finding,) = eg.check_pte(mutant).with_code("EG519")
    assert "aten::index_put.out with index tensor value 3 of dtype float64" in finding.message
    assert Outcome(runner, tmp_path, original).of(mutant) == "error"  # set_inputs
    (tmp_path / "own.pte").write_bytes(mutant)
    torch.save(program_inputs(mutant), tmp_path / "own.inputs")
    assert runner.run(tmp_path / "own.pte", None, tmp_path / "own.inputs")["outcome"] == "error"  # the kernel


@pytest.mark.parametrize(("program", "operator", "position"), [
    ("bool and int64 inputs", "aten::index", -2), ("kv cache, xnnpack", "aten::index_put", 2),
], ids=["index out", "index_put values"])  # fmt: skip
def test_an_indexed_tensor_of_another_dtype_than_self_is_an_error_the_kernel_refuses(
    program: str, operator: str, position: int, runner, tmp_path, valid_program_bytes
) -> None:
    """Issue 61: index's out, or index_put's values, retyped int32 (the same bytes as the
    float32 self): the kernel takes self, values and out in one dtype (check_index_args,
    tensors_have_same_dtype) and refuses the call; torch-free check names it."""
    original = valid_program_bytes[program]

    def retyped(program: Program) -> None:
        plan = program.execution_plan[0]
        tensor = plan.values[_calls(program, operator)[0].args[position]].val
        assert tensor.scalar_type == 6  # float32
        tensor.scalar_type = 3  # int32

    mutant = edit_pte(original, retyped)
    found = [f for f in eg.check_pte(mutant).with_code("EG519") if f"calls {operator}." in f.message]
    assert found and "tensors of different dtypes" in found[0].message, eg.check_pte(mutant).findings
    assert Outcome(runner, tmp_path, original).of(mutant) == "error"


def test_an_index_put_writing_exactly_over_its_self_is_no_error_and_runs_as_before(
    runner, tmp_path, valid_program_bytes
) -> None:
    """index_put copies its ``self`` into its out first: placed on ``self``'s own bytes, that
    copy changes nothing, and the KV cache is updated in place."""
    original = valid_program_bytes["kv cache, xnnpack"]
    mutant = edit_pte(original, lambda program: _out_onto(program, "aten::index_put", 0))
    assert mutant != original and not eg.check_pte(mutant).errors
    assert Outcome(runner, tmp_path, original).of(mutant) == "same output"


def test_a_state_that_is_never_updated_is_an_error_and_the_second_run_shows_it(
    runner, tmp_path, valid_program_bytes
) -> None:
    """The KV cache without its copy_ back into the state: the runner's second run, on other
    inputs (another position), returns what the first run should have left in the cache."""
    original = valid_program_bytes["kv cache, xnnpack"]
    mutant = edit_pte(original, lambda program: program.execution_plan[0].chains[0].instructions.pop())
    (finding,) = eg.check_pte(mutant).with_code("EG517")
    assert "(no instruction writes it)" in finding.message
    assert Outcome(runner, tmp_path, original).of(mutant) == "wrong output"
