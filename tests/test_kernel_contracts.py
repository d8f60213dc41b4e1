"""The portable kernels' contracts that users hit, proved against ``executorch.runtime``: each
entry of EG519's tables (``reader/kernel_contracts.py``: the ranks a kernel takes, the operators
that take all their tensors in one dim order) is a program that ``check`` refuses before any run
and that the runtime, in a child process, refuses for the reason the contract names; the fix
runs and is clean. EG519 never blames a call the runtime runs, and EG516 names a constant's
memory format at export as its cause."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from torch import nn
from torch.nn import functional as F

import export_guards as eg
from export_guards.pte.reader.kernel_contracts import ONE_DIM_ORDER, RANKS

pytestmark = [pytest.mark.subprocess, pytest.mark.slow]  # each claim is run in the runtime, in a child process

# The child: runs each program's forward on its inputs, with the runtime's log (stderr) caught
# per program, and prints whether it ran and the log's failed checks.
_CHILD = r"""
import json, os, sys, tempfile
import torch
from executorch.runtime import Runtime
runtime = Runtime.get()
for line in sys.stdin:
    job = json.loads(line)
    log, saved = tempfile.TemporaryFile(), os.dup(2)
    os.dup2(log.fileno(), 2)
    try:
        runtime.load_program(job["pte"]).load_method("forward").execute(torch.load(job["inputs"]))
        outcome = "ran"
    except Exception:
        outcome = "refused"
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
    log.seek(0)
    checks = [l for l in log.read().decode(errors="replace").splitlines() if "Check failed" in l]
    print(json.dumps({"outcome": outcome, "checks": checks}), flush=True)
"""


class Lambda(nn.Module):
    def __init__(self, body: Callable[..., torch.Tensor]) -> None:
        super().__init__()
        self.body = body

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.body(*inputs)


def written(model: nn.Module, inputs: tuple[torch.Tensor, ...]) -> bytes:
    """``model``'s program on portable kernels (no partitioner)."""
    return to_edge_transform_and_lower(torch.export.export(model, inputs)).to_executorch().buffer


class Runtime:
    """One child process for the module that runs programs as they come (the runtime's import,
    seconds, once)."""

    def __init__(self) -> None:
        self.child = subprocess.Popen(
            [sys.executable, "-c", _CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )

    def run(self, folder: Path, programs: dict[str, tuple[bytes, tuple[torch.Tensor, ...]]]) -> dict[str, dict]:
        """Each program run once: ``{"outcome": "ran" | "refused", "checks"}``."""
        answers = {}
        for name, (data, inputs) in programs.items():
            (folder / f"{name}.pte").write_bytes(data)
            torch.save(list(inputs), folder / f"{name}.pt")
            self.child.stdin.write(
                json.dumps({"pte": str(folder / f"{name}.pte"), "inputs": str(folder / f"{name}.pt")}) + "\n"
            )
            self.child.stdin.flush()
            line = self.child.stdout.readline()
            assert line, f"the runtime's child died on {name}"
            answers[name] = json.loads(line)
        return answers


@pytest.fixture(scope="module")
def runtime() -> Runtime:
    started = Runtime()
    yield started
    started.child.kill()
    started.child.wait()


def refusals(data: bytes) -> list[eg.Finding]:
    return [f for f in eg.check_pte(data).with_code("EG519") if "its portable kernel refuses" in f.message]


def _conv(x: torch.Tensor) -> torch.Tensor:
    spatial = x.dim() - 2
    return {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[spatial](x, torch.ones(3, 2, *[3] * spatial))


# A program for each ranked operator at a rank: what calls the operator, and its input.
RANKED: dict[str, Callable[[int], tuple[Callable[..., torch.Tensor], torch.Tensor]]] = {
    "aten::convolution": lambda rank: (_conv, torch.randn(1, 2, *[5] * (rank - 2))),
}


def test_each_rank_contract_is_what_the_runtime_takes(runtime: Runtime, tmp_path: Path) -> None:
    """Each ranked operator at the ranks its kernel takes (it runs, and check is clean) and at one
    it refuses (check names the rank before the run, with the fix of its cause; the runtime refuses
    the call, naming the rank)."""
    assert set(RANKED) == set(RANKS)  # every table entry has its proof here
    programs, claims = {}, {}
    for operator, build in RANKED.items():
        for rank in sorted(RANKS[operator].ranks | {max(RANKS[operator].ranks) + 1}):
            body, x = build(rank)
            data = written(Lambda(body), (x,))
            name = f"{operator.split('::')[1]}_{rank}"
            programs[name], claims[name] = (data, (x,)), (operator, rank in RANKS[operator].ranks)
    for name, ran in runtime.run(tmp_path, programs).items():
        operator, taken = claims[name]
        found = refusals(programs[name][0])
        if taken:
            assert ran["outcome"] == "ran" and not found, (name, ran, found)
        else:
            assert ran["outcome"] == "refused" and any("-D" in check for check in ran["checks"]), (name, ran)
            (refused,) = found
            assert (
                f"calls {operator}." in refused.message
                and "of rank" in refused.message
                and refused.fix == RANKS[operator].fix
            )


# A call of each one-dim-order operator on ``x`` (channels-last) and ``y`` (contiguous).
MIXED: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "aten::add": torch.add,
    "aten::sub": torch.sub,
    "aten::mul": torch.mul,
    "aten::div": torch.div,
    "aten::pow": torch.pow,
    "aten::fmod": torch.fmod,
    "aten::remainder": torch.remainder,
    "aten::maximum": torch.maximum,
    "aten::minimum": torch.minimum,
    "aten::atan2": torch.atan2,
    "aten::eq": torch.eq,
    "aten::ne": torch.ne,
    "aten::lt": torch.lt,
    "aten::le": torch.le,
    "aten::gt": torch.gt,
    "aten::ge": torch.ge,
    "aten::logical_and": torch.logical_and,
    "aten::logical_or": torch.logical_or,
    "aten::logical_xor": torch.logical_xor,
    "aten::bitwise_and": lambda x, y: (x > 0) & (y > 0),
    "aten::bitwise_or": lambda x, y: (x > 0) | (y > 0),
    "aten::bitwise_xor": lambda x, y: (x > 0) ^ (y > 0),
    "aten::where": lambda x, y: torch.where(x > 0, x, y),
    "aten::clamp": lambda x, y: torch.clamp(x, min=y),
    "aten::cat": lambda x, y: torch.cat([x, y], 1),
}


def test_each_one_dim_order_contract_is_what_the_runtime_takes(runtime: Runtime, tmp_path: Path) -> None:
    """Each operator of ONE_DIM_ORDER called on a channels-last and a contiguous tensor: check
    names it before the run (with the fix: one memory format), and the runtime refuses the call
    ("different dim orders"). The same calls on contiguous tensors, in one program, run and are
    clean, as is a scalar times a contiguous input; a channels-last input times a scalar (0-d,
    contiguous only) is refused by both."""
    assert set(MIXED) == ONE_DIM_ORDER  # every table entry has its proof here
    x, y = torch.randn(1, 3, 4, 4).to(memory_format=torch.channels_last), torch.randn(1, 3, 4, 4)
    programs = {op.split("::")[1]: (written(Lambda(body), (x, y)), (x, y)) for op, body in MIXED.items()}
    programs["scalar"] = (written(Lambda(lambda x: x * 2.0), (x,)), (x,))
    fixed = Lambda(lambda x, y: [body(x.contiguous(), y) for body in MIXED.values()] + [x.contiguous() * 2.0])
    programs["fixed"] = (written(fixed, (x, y)), (x, y))
    ran = runtime.run(tmp_path, programs)
    for operator in MIXED:
        name = operator.split("::")[1]
        found = [f for f in refusals(programs[name][0]) if f"calls {operator}." in f.message]
        assert (
            found
            and "different dim orders" in found[0].message
            and found[0].fix.startswith("Give the op's tensors one memory format")
        ), name
        assert ran[name]["outcome"] == "refused" and any("different dim orders" in c for c in ran[name]["checks"]), (
            name,
            ran[name],
        )
    (scalar,) = refusals(programs["scalar"][0])
    assert "other [] contiguous" in scalar.message and ran["scalar"]["outcome"] == "refused"
    assert any("different dim orders" in c for c in ran["scalar"]["checks"])
    assert ran["fixed"]["outcome"] == "ran" and not refusals(programs["fixed"][0])


class CircularConv(nn.Module):
    def __init__(self, conv: type[nn.Module]) -> None:
        super().__init__()
        self.conv = conv(2, 3, 3, padding=1, padding_mode="circular")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def test_the_replay_never_blames_a_call_the_runtime_runs(runtime: Runtime, tmp_path: Path) -> None:
    """Issue 47: a circular pad writes its result with _empty_dim_order.out, whose Python form
    passes torch's empty.out a memory format, which torch refuses beside an out; ExecuTorch's
    kernel takes it, and wins. Replayed, the call is clean, and the runtime runs it: the 2-D
    program runs whole; the 3-D one past it, to the convolution that its kernel refuses (3-D or
    4-D input), which check names before any run, at that instruction, with the fix of its cause."""
    torch.manual_seed(0)
    flat, deep = (torch.randn(1, 2, 6, 6),), (torch.randn(1, 2, 4, 6, 6),)
    programs = {
        "conv2d": (written(CircularConv(nn.Conv2d).eval(), flat), flat),
        "conv3d": (written(CircularConv(nn.Conv3d).eval(), deep), deep),
    }
    assert all(b"_empty_dim_order" in data for data, _ in programs.values())
    ran = runtime.run(tmp_path, programs)
    assert ran["conv2d"]["outcome"] == "ran" and not eg.check_pte(programs["conv2d"][0], replay=True).with_code("EG519")
    (refused,) = eg.check_pte(programs["conv3d"][0], replay=True).with_code("EG519")
    assert (
        "calls aten::convolution.out" in refused.message
        and "input of rank 5" in refused.message
        and "XNNPACK declines Conv3d" in (refused.fix or "")
    )
    assert ran["conv3d"]["outcome"] == "refused" and any(
        "Expect input tensor to be 3-D or 4-D, but got, 5" in c for c in ran["conv3d"]["checks"]
    )


def test_xnnpack_declines_a_3d_convolution_as_the_fix_says() -> None:
    """The rank contract's fix says XNNPACK declines Conv3d: the real partitioner leaves it out."""
    model, inputs = CircularConv(nn.Conv3d).eval(), (torch.randn(1, 2, 4, 6, 6),)
    edge = to_edge_transform_and_lower(torch.export.export(model, inputs), partitioner=[XnnpackPartitioner()])
    left = [str(n.target) for n in edge.exported_program().graph.nodes if n.op == "call_function"]
    assert any("convolution" in target for target in left)  # left on the portable kernel


class Depthwise(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, groups=4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def test_a_weight_exported_channels_last_names_its_memory_format(runtime: Runtime, tmp_path: Path) -> None:
    """Issue 47: a depthwise weight [4, 1, 3, 3] in channels-last has strides that name another
    permutation (its size-1 dimension); the portable convolution refuses it. EG516 says so with
    the fix of that cause (export the parameters contiguous), not a re-export; the fix runs."""
    torch.manual_seed(0)
    inputs = (torch.randn(1, 4, 8, 8),)
    channels_last = Depthwise().eval().to(memory_format=torch.channels_last)
    contiguous = Depthwise().eval()
    contiguous.load_state_dict(channels_last.state_dict())
    programs = {
        "cl": (written(channels_last, inputs), inputs),
        "fixed": (written(contiguous.to(memory_format=torch.contiguous_format), inputs), inputs),
    }
    ran = runtime.run(tmp_path, programs)
    (finding,) = eg.check_pte(programs["cl"][0]).with_code("EG516")
    assert "float32[4, 1, 3, 3]" in finding.message and "memory format" in finding.message
    assert finding.fix is not None and "model.to(memory_format=torch.contiguous_format)" in finding.fix
    assert ran["cl"]["outcome"] == "refused" and any(
        "tensor_is_default_or_channels_last_dim_order(weight)" in c for c in ran["cl"]["checks"]
    )
    assert ran["fixed"]["outcome"] == "ran" and not eg.check_pte(programs["fixed"][0]).with_code("EG516")


def test_no_delegate_is_advised_for_a_3d_convolution() -> None:
    """EG520 advises XNNPACK for the compute left on portable kernels: a 2-D convolution, which it
    takes, and not a 3-D one, which it declines (the test above)."""
    assert eg.check_pte(written(nn.Conv2d(2, 3, 3).eval(), (torch.randn(1, 2, 6, 6),))).with_code("EG520")
    assert not eg.check_pte(written(nn.Conv3d(2, 3, 3).eval(), (torch.randn(1, 2, 4, 6, 6),))).with_code("EG520")


class Quantized(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = torch.ops.quantized_decomposed.quantize_per_tensor(x, 0.1, 0, -128, 127, torch.int8)
        return torch.ops.quantized_decomposed.dequantize_per_tensor(q, 0.1, 0, -128, 127, torch.int8)


def test_a_program_that_needs_the_quantized_kernels_names_their_library(runtime: Runtime, tmp_path: Path) -> None:
    """A program of quantized_decomposed kernels fails to load in a runtime without ExecuTorch's
    quantized kernel library (the child, which never imports it); EG521 against such a runtime
    names the library and how to register it, and the runtime with it loads and runs the program."""
    import executorch.kernels.quantized  # noqa: F401 - registers the quantized kernels (to_executorch needs their out variants)

    inputs = (torch.randn(2, 4),)
    data = written(Quantized(), inputs)
    installed = eg.program.RuntimeInventory.installed()
    without = eg.program.RuntimeInventory(
        "a runtime without them", frozenset(k for k in installed.kernels if not k.startswith("quantized_decomposed::"))
    )
    found = eg.check_pte(data, against=without).with_code("EG521")
    assert found and all("ExecuTorch's quantized kernel library provides it" in f.message for f in found)
    assert all(f.fix is not None and "import executorch.kernels.quantized" in f.fix for f in found)
    assert not eg.check_pte(data, against=installed).with_code("EG521")  # this process imported them
    assert runtime.run(tmp_path, {"quantized": (data, inputs)})["quantized"]["outcome"] == "refused"
    from executorch.runtime import Runtime as Loaded

    (out,) = Loaded.get().load_program(data).load_method("forward").execute(list(inputs))
    torch.testing.assert_close(out, Quantized()(*inputs))


def _stats_sized_for_training(program: object) -> None:
    """The inference batch norm's mean and invstd outs sized [C], as the training kernel sizes its
    stats (a graph traced for another kernel), each in bytes of its own past the arena's end."""
    from executorch.exir.schema import KernelCall

    plan = program.execution_plan[0]
    call = next(
        i.instr_args
        for i in plan.chains[0].instructions
        if isinstance(i.instr_args, KernelCall)
        and plan.operators[i.instr_args.op_index].name == "aten::_native_batch_norm_legit_no_training"
    )
    for index in call.args[8:10]:  # out1, out2: the mean and invstd
        tensor = plan.values[index].val
        tensor.sizes = [8]
        tensor.allocation_info.memory_id, tensor.allocation_info.memory_offset_low = 1, plan.non_const_buffer_sizes[1]
        plan.non_const_buffer_sizes[1] += 32


def test_batch_norm_stats_sized_for_another_kernel_are_refused_without_torch(runtime: Runtime, tmp_path: Path) -> None:
    """Issue 52: the portable batch norm's inference form resizes its mean and invstd outs to [0]
    (``resize_tensor(mean_out, {0})``), so outs planned [C] fail the run. ``check`` names the
    operator and the out before any run, without loading torch (EG519 is its only error), in the
    words of ``--replay``; the program as ExecuTorch planned it runs and is clean."""
    from pte_structure import edit_pte
    from test_pte_without_torch import CLI_CHILD, heavy_of, python

    torch.manual_seed(0)
    net, x = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU()).eval(), torch.randn(1, 3, 8, 8)
    planned = written(net, (x,))
    sized = edit_pte(planned, _stats_sized_for_training)
    ran = runtime.run(tmp_path, {"planned": (planned, (x,)), "sized": (sized, (x,))})
    assert ran["planned"]["outcome"] == "ran" and not eg.check_pte(planned).errors
    assert ran["sized"]["outcome"] == "refused" and any(
        "resize_tensor(mean_out, {0})" in c for c in ran["sized"]["checks"]
    )
    path = tmp_path / "sized.pte"
    path.write_bytes(sized)
    done = python(CLI_CHILD, "check", str(path), "--format", "json")
    assert done.returncode == 1 and heavy_of(done) == [], done.stderr[-2000:]
    errors = [f for f in json.loads(done.stdout)["findings"] if f["severity"] == "error"]
    assert [f["code"] for f in errors] == ["EG519"], errors
    message = errors[0]["message"]
    assert "calls aten::_native_batch_norm_legit_no_training.out with out tensor value" in message
    assert "('out1', float32[8]), but ExecuTorch's kernel resizes it to shape [0]" in message
    replayed = eg.check_pte(path, replay=True).with_code("EG519")
    assert [f.message for f in replayed] == [message] and replayed == eg.check_pte(path).with_code("EG519")


def test_a_half_precision_batch_norm_with_float_parameters_names_the_mixed_dtypes_and_the_fix_runs(
    runtime: Runtime, tmp_path: Path
) -> None:
    """Issue 61: a float16 input into a batch norm whose parameters are float32 (torch computes
    it; ExecuTorch's kernel refuses it). EG519's fix is the model's dtypes, not a re-export, and
    following it (``model.half()``) gives a program that is clean and runs."""
    torch.manual_seed(0)
    inputs = (torch.randn(1, 4, 8, 8, dtype=torch.float16),)
    mixed, fixed = nn.BatchNorm2d(4).eval(), nn.BatchNorm2d(4).eval().half()
    programs = {"mixed": (written(mixed, inputs), inputs), "fixed": (written(fixed, inputs), inputs)}
    ran = runtime.run(tmp_path, programs)
    (finding,) = refusals(programs["mixed"][0])
    assert "different dtypes (input float16, weight float32" in finding.message
    assert finding.fix is not None and "model.half()" in finding.fix and not finding.fix.startswith("Re-export")
    assert ran["mixed"]["outcome"] == "refused"
    assert ran["fixed"]["outcome"] == "ran" and not eg.check_pte(programs["fixed"][0]).findings


def _argument(program: object, operator: str, name: str, value: object) -> None:
    """Point argument ``name`` of the first call of ``operator`` at a new value ``value`` (an
    int, or a list of ints), appended to the method's values: no other call shares it."""
    from executorch.exir.schema import EValue, Int, IntList

    from export_guards.pte.reader.schemas import operator_schema

    plan = program.execution_plan[0]
    for instruction in plan.chains[0].instructions:
        call = instruction.instr_args
        op = plan.operators[call.op_index] if hasattr(call, "op_index") else None
        if op is None or op.name != operator:
            continue
        position = [a.name for a in operator_schema(op.name, op.overload).arguments].index(name)
        if isinstance(value, list):
            items = []
            for item in value:
                plan.values.append(EValue(Int(item)))
                items.append(len(plan.values) - 1)
            plan.values.append(EValue(IntList(items)))
        else:
            plan.values.append(EValue(Int(value)))
        call.args[position] = len(plan.values) - 1
        return
    raise AssertionError(f"no call of {operator}")


# For each family whose kernel checks its dims (tensor_has_dim, dim_is_valid, each dim once): a
# program calling it on a 2-D or 4-D input, and its dim argument damaged to one the kernel refuses.
DIMS: dict[str, tuple[Callable[..., torch.Tensor], str, object]] = {
    "permute out of range": (lambda x: x.permute(0, 1, 3, 2) + 1, "dims", [0, 1, 4, 2]),
    "permute twice": (lambda x: x.permute(0, 1, 3, 2) + 1, "dims", [0, 1, 2, 2]),
    "permute too few": (lambda x: x.permute(0, 1, 3, 2) + 1, "dims", [0, 1, 2]),
    "mean": (lambda x: x.mean([2, 3]), "dim", [2, 4]),
    "sum twice": (lambda x: x.sum([2, 3]), "dim", [3, -1]),
    "amax": (lambda x: x.amax(1), "dim", [-5]),
    "slice": (lambda x: x[:, :, 1:3] + 1, "dim", 4),
    "slice step": (lambda x: x[:, :, 1:3] + 1, "step", 0),
    "select dim": (lambda x: x[:, 1] + 1, "dim", -5),
    "select index": (lambda x: x[:, 1] + 1, "index", 3),
    "squeeze": (lambda x: x[:, :1].squeeze(1) + 1, "dim", [4]),
    "unsqueeze": (lambda x: x.unsqueeze(2) + 1, "dim", 6),
    "cat": (lambda x: torch.cat([x, x + 1], 1), "dim", 4),
    "split": (lambda x: [t + 1 for t in x.split([1, 2], 1)], "dim", 4),
}
_DIM_OPERATORS = {
    "permute": "aten::permute_copy", "mean": "aten::mean", "sum": "aten::sum", "amax": "aten::amax",
    "slice": "aten::slice_copy", "select": "aten::select_copy", "squeeze": "aten::squeeze_copy",
    "unsqueeze": "aten::unsqueeze_copy", "cat": "aten::cat", "split": "aten::split_with_sizes_copy",
}  # fmt: skip


def test_a_dim_the_kernel_has_not_is_refused_without_torch_as_the_runtime_refuses_it(
    runtime: Runtime, tmp_path: Path
) -> None:
    """Issue 61: a dim argument out of the input's range, named twice, or a permutation of
    another rank (and a slice step of zero, a selected index past its dim) fails the portable
    kernel's argument check, which torch-free ``check`` names at the call, in the replay's
    finding (EG519); the programs as written run and are clean."""
    from pte_structure import edit_pte

    x = torch.randn(2, 3, 4, 5)
    programs = {}
    for case, (body, name, value) in DIMS.items():
        data = written(Lambda(body), (x,))
        operator = _DIM_OPERATORS[case.split()[0]]
        programs[f"{case} as written"] = (data, (x,))
        programs[case] = (
            edit_pte(data, lambda program, o=operator, n=name, v=value: _argument(program, o, n, v)),
            (x,),
        )
    ran = runtime.run(tmp_path, programs)
    for case in DIMS:
        operator = _DIM_OPERATORS[case.split()[0]]
        assert (
            ran[f"{case} as written"]["outcome"] == "ran" and not eg.check_pte(programs[f"{case} as written"][0]).errors
        ), case
        assert ran[case]["outcome"] == "refused" and ran[case]["checks"], (case, ran[case])
        found = [f for f in eg.check_pte(programs[case][0]).with_code("EG519") if f"calls {operator}." in f.message]
        assert found and "with tensors it refuses: " in found[0].message, (
            case,
            eg.check_pte(programs[case][0]).findings,
        )


# Each operator whose kernel casts its operands' common dtype to its out's (canCast): a call on
# two float (or int, for the bitwise operators) inputs, and the out's dtype of a kind that the
# common one does not cast to (floating point to int32, of the same size; int to bool).
COMMON: dict[str, tuple[Callable[..., torch.Tensor], str]] = {
    "aten::add": (torch.add, "INT"),
    "aten::sub": (torch.sub, "INT"),
    "aten::mul": (torch.mul, "INT"),
    "aten::maximum": (torch.maximum, "INT"),
    "aten::minimum": (torch.minimum, "INT"),
    "aten::fmod": (torch.fmod, "INT"),
    "aten::remainder": (torch.remainder, "INT"),
    "aten::div": (lambda x, y: torch.div(x, y, rounding_mode="floor"), "INT"),
    "aten::pow": (torch.pow, "INT"),
    "aten::bitwise_and": (lambda x, y: x.int() & y.int(), "BOOL"),
    "aten::bitwise_or": (lambda x, y: x.int() | y.int(), "BOOL"),
    "aten::bitwise_xor": (lambda x, y: x.int() ^ y.int(), "BOOL"),
}


def _out_dtype(program: object, operator: str, dtype: str) -> None:
    from executorch.exir.scalar_type import ScalarType

    plan = program.execution_plan[0]
    call = next(
        i.instr_args
        for i in plan.chains[0].instructions
        if hasattr(i.instr_args, "op_index") and plan.operators[i.instr_args.op_index].name == operator
    )
    plan.values[call.args[-1]].val.scalar_type = getattr(ScalarType, dtype)


def test_an_out_that_the_common_dtype_does_not_cast_to_is_refused_without_torch_as_the_runtime_refuses_it(
    runtime: Runtime, tmp_path: Path
) -> None:
    """Issue 61: an element-wise kernel computes in its operands' common dtype and refuses an out
    that dtype does not cast to (op_add.cpp's canCast, "Check Common Dtype"): a float sum into an
    int32 out (the same bytes) is a refusal torch-free ``check`` names (EG519), as is an alpha
    that does not cast to the common dtype (a float alpha for int32 operands); as written, each
    runs and is clean."""
    from executorch.exir.schema import Double

    from export_guards.pte.reader.kernel_contracts import _CONTRACTS
    from pte_structure import edit_pte

    # each entry proved (floor_divide is written as div with a rounding mode)
    assert {o for o in _CONTRACTS if _CONTRACTS[o].__qualname__.startswith("_common_dtype")} == set(COMMON)
    x, y = torch.rand(2, 4) + 1, torch.rand(2, 4) + 1
    programs = {}
    for operator, (body, dtype) in COMMON.items():
        data = written(Lambda(body), (x, y))
        programs[f"{operator} as written"] = (data, (x, y))
        programs[operator] = (edit_pte(data, lambda program, o=operator, d=dtype: _out_dtype(program, o, d)), (x, y))
    i, j = torch.ones(2, 4, dtype=torch.int32), torch.ones(2, 4, dtype=torch.int32)
    alpha = written(Lambda(lambda a, b: torch.add(a, b, alpha=2)), (i, j))
    programs["alpha as written"] = (alpha, (i, j))
    programs["alpha"] = (edit_pte(alpha, lambda program: _alpha(program, Double(2.5))), (i, j))
    ran = runtime.run(tmp_path, programs)
    for case in [*COMMON, "alpha"]:
        operator = case if case in COMMON else "aten::add"
        assert (
            ran[f"{case} as written"]["outcome"] == "ran" and not eg.check_pte(programs[f"{case} as written"][0]).errors
        ), case
        assert ran[case]["outcome"] == "refused" and ran[case]["checks"], (case, ran[case])
        found = [f for f in eg.check_pte(programs[case][0]).with_code("EG519") if f"calls {operator}." in f.message]
        assert found and "common dtype" in found[0].message, (case, eg.check_pte(programs[case][0]).findings)


def _alpha(program: object, value: object) -> None:
    from executorch.exir.schema import EValue

    plan = program.execution_plan[0]
    call = next(i.instr_args for i in plan.chains[0].instructions if hasattr(i.instr_args, "op_index"))
    plan.values.append(EValue(value))
    call.args[2] = len(plan.values) - 1
