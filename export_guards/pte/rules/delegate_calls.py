"""EG514, EG515: each XNNPACK delegate call against the graph it runs, and that graph's own
consistency, as ExecuTorch's XNNPACK runtime relies on them without checking.

The runtime binds argument ``external_id`` of the call to each value flagged external
(``XNNExecutor::prepare_args`` indexes the argument list unchecked), reads the tensor's data as
the value's datatype without comparing dtypes, and resizes inputs to whatever shape the
program's tensor has. So a call with too few arguments reads past its argument list (a crash,
or another tensor silently used), and a dtype that disagrees reads or writes the wrong number
of bytes. A shape that disagrees is a warning: the runtime reshapes the graph to the program's
tensor, which is right when the graph's serialized shape is the damaged one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from typing import NamedTuple

from executorch.exir.scalar_type import ScalarType
from executorch.exir.schema import DelegateCall, ExecutionPlan, KernelCall, OptionalTensorList, Tensor, TensorList, TensorShapeDynamism

from export_guards.pte.context import PteContext
from export_guards.pte.reader.tensors import describe_tensor
from export_guards.pte.reader.xnnpack import (
    ELEMENT_BYTES,
    EXTERNAL_INPUT,
    EXTERNAL_OUTPUT,
    INVALID_ID,
    TRANSPOSE_WEIGHTS,
    XnnConstant,
    XnnNode,
    XnnPayload,
    XnnValue,
)
from export_guards.report import Severity
from export_guards.ruleset import Hit, rule

# The ExecuTorch dtypes a tensor bound to an external XNNPACK value of each datatype may have.
_DTYPES: Mapping[str, frozenset[ScalarType]] = {
    "xnn_datatype_fp32": frozenset({ScalarType.FLOAT}),
    "xnn_datatype_fp16": frozenset({ScalarType.HALF}),
    "xnn_datatype_bf16": frozenset({ScalarType.BFLOAT16}),
    "xnn_datatype_qint8": frozenset({ScalarType.CHAR}),
    "xnn_datatype_qcint8": frozenset({ScalarType.CHAR}),
    "xnn_datatype_quint8": frozenset({ScalarType.BYTE}),
    "xnn_datatype_int32": frozenset({ScalarType.INT}),
}
_WIDENED_OUTPUTS = {"xnn_datatype_int32": ScalarType.LONG}  # convert_outputs widens int32 to an int64 output
_MAX_EXTERNS = 4096  # XNNCompiler rejects more (ExecuTorch 1.3 and later)


@rule("EG514")
def delegate_call_mismatch(context: PteContext) -> Iterator[Hit]:
    program = context.pte.program
    if program is None:
        return
    payloads = context.xnnpack_graphs
    for plan in program.execution_plan:
        host_typed = _host_typed(plan)
        for c, chain in enumerate(plan.chains):
            for i, instruction in enumerate(chain.instructions):
                call = instruction.instr_args
                if not isinstance(call, DelegateCall) or (plan.name, call.delegate_index) not in payloads:
                    continue
                where = f"instruction {i} of chain {c} of method '{plan.name}' (XNNPACK delegate {call.delegate_index})"
                for problem in _call_problems(plan, call, payloads[(plan.name, call.delegate_index)], host_typed):
                    yield Hit(f"{where} {problem.text}", method=plan.name, severity=problem.severity)


class Problem(NamedTuple):
    text: str
    severity: Severity | None = None  # the rule's (an error) unless a warning


def _host_typed(plan: ExecutionPlan) -> set[int]:
    """The values something other than a delegate reads or writes by their dtype: the method's
    inputs and outputs (the caller), and every kernel call's arguments."""
    typed = set(plan.inputs) | set(plan.outputs)
    for chain in plan.chains:
        for instruction in chain.instructions:
            if isinstance(instruction.instr_args, KernelCall):
                for index in instruction.instr_args.args:
                    typed.add(index)
                    value = plan.values[index].val if 0 <= index < len(plan.values) else None
                    typed.update(getattr(value, "items", ()) if isinstance(value, (TensorList, OptionalTensorList)) else ())
    return typed


def _call_problems(plan: ExecutionPlan, call: DelegateCall, payload: XnnPayload, host_typed: set[int]) -> Iterator[Problem]:
    externals = sorted((v for v in payload.values if v.flags & (EXTERNAL_INPUT | EXTERNAL_OUTPUT)), key=lambda v: v.external_id)
    bound = [v for v in externals if v.external_id != INVALID_ID and v.external_id < payload.num_externs]
    needed = max((v.external_id for v in bound), default=-1) + 1
    if len(call.args) < needed:
        yield Problem(
            f"passes {len(call.args)} arguments; its graph binds {needed} ({_roles(bound)}): the runtime "
            f"reads past the argument list (a crash, or another tensor used in silence)"
        )
        return
    for value in bound:
        index = call.args[value.external_id]
        if not 0 <= index < len(plan.values):
            continue  # EG512's
        role = "output" if value.flags & EXTERNAL_OUTPUT else "input"
        tensor = plan.values[index].val
        if not isinstance(tensor, Tensor):
            yield Problem(f"binds program value {index} (a {type(tensor).__name__}) to the graph's {role} value {value.value_id}, a tensor")
            continue
        problem = _tensor_problem(tensor, value, role)
        if problem and index in host_typed:
            yield Problem(f"binds program value {index} (argument {value.external_id}) to the graph's {role} value {value.value_id}: {problem}")
        elif problem:  # only delegates touch it: its bytes are what they write, whatever its label says
            yield Problem(
                f"binds program value {index} (argument {value.external_id}) to the graph's {role} value {value.value_id}: "
                f"{problem}. Only delegates read and write this tensor, so it runs as built; its dtype is wrong",
                Severity.WARNING,
            )
        shape = _shape_problem(tensor, value)
        if shape:
            yield Problem(
                f"binds program value {index} (argument {value.external_id}) to the graph's {role} value "
                f"{value.value_id}: {shape}. The runtime reshapes the graph to the program's tensor, so this "
                f"runs as built only if the graph's shape is the damaged one",
                Severity.WARNING,
            )


def _tensor_problem(tensor: Tensor, value: XnnValue, role: str) -> str | None:
    allowed = _DTYPES.get(value.datatype)
    widened = _WIDENED_OUTPUTS.get(value.datatype) if role == "output" else None
    if allowed is not None and tensor.scalar_type not in allowed and tensor.scalar_type != widened:
        return (
            f"the tensor is {describe_tensor(tensor)}, the graph's value is "
            f"{value.datatype.removeprefix('xnn_datatype_')} (the runtime reads its bytes as that, unchecked)"
        )
    return None


def _shape_problem(tensor: Tensor, value: XnnValue) -> str | None:
    sizes = list(tensor.sizes) or [1]  # XNNPACK holds a scalar as one element
    dim_order = list(tensor.dim_order) or [0]
    if len(sizes) != len(value.dims):
        return f"the tensor has {len(tensor.sizes)} dimensions {list(tensor.sizes)}, the graph's value {len(value.dims)} {list(value.dims)}"
    if sorted(dim_order) != list(range(len(sizes))):
        return None  # EG516's
    physical = [sizes[d] for d in dim_order]  # the runtime hands XNNPACK the sizes in memory order
    if tensor.shape_dynamism == TensorShapeDynamism.STATIC and physical != list(value.dims):
        return f"the tensor's shape {physical} (in memory order) is not the graph's {list(value.dims)}"
    return None


def _roles(values: list[XnnValue]) -> str:
    inputs = sum(1 for v in values if v.flags & EXTERNAL_INPUT)
    return f"{inputs} input{'s' if inputs != 1 else ''}, {len(values) - inputs} output{'s' if len(values) - inputs != 1 else ''}"


@rule("EG515")
def xnnpack_graph_invalid(context: PteContext) -> Iterator[Hit]:
    for delegate, payload in context.xnnpack_payloads:
        if isinstance(payload, XnnPayload):
            stored = {c.value_id: _stored_bytes(context, c) for c in payload.constants}
            for problem in _graph_problems(payload, {k: v for k, v in stored.items() if v is not None}):
                yield Hit(f"{delegate}: {problem}", method=delegate.method)


def _stored_bytes(context: PteContext, constant: XnnConstant) -> int | None:
    if not constant.named_key:
        return constant.size
    found = context.named_data.get(constant.named_key)
    return found[1].size if found else None


def _graph_problems(payload: XnnPayload, stored: Mapping[int, int]) -> Iterator[str]:
    if payload.num_externs > _MAX_EXTERNS:
        yield f"it declares {payload.num_externs} external values; the runtime takes at most {_MAX_EXTERNS}"
    ids = Counter(v.value_id for v in payload.values)
    yield from (f"value id {i} is defined {n} times (the runtime keeps the first)" for i, n in ids.items() if n > 1)
    external_ids = Counter(v.external_id for v in payload.values if v.flags & (EXTERNAL_INPUT | EXTERNAL_OUTPUT))
    for value in payload.values:
        if value.flags & ~(EXTERNAL_INPUT | EXTERNAL_OUTPUT):
            yield f"value {value.value_id} has flags {value.flags:#x}; the runtime takes only external input (1) and output (2)"
        if not value.flags & (EXTERNAL_INPUT | EXTERNAL_OUTPUT):
            continue
        if value.external_id == INVALID_ID:
            yield (
                f"value {value.value_id} is flagged external {'output' if value.flags & EXTERNAL_OUTPUT else 'input'} "
                f"but has no external id: the runtime binds it to argument {INVALID_ID} (a wild read)"
            )
        elif value.external_id >= payload.num_externs:
            yield f"value {value.value_id} has external id {value.external_id}, of {payload.num_externs} external values"
        elif external_ids[value.external_id] > 1:
            yield f"value {value.value_id} shares external id {value.external_id} with another value"
    yield from _dataflow_problems(payload)
    yield from _weight_problems(payload, stored)


def _dataflow_problems(payload: XnnPayload) -> Iterator[str]:
    """Every node reads values that exist and hold data: an external input, a constant, or
    what some node writes (the runtime orders the nodes by their values, not as listed)."""
    defined = {v.value_id for v in payload.values}
    ready = {v.value_id for v in payload.values if v.constant or v.flags & EXTERNAL_INPUT}
    ready.update(value_id for node in payload.nodes for value_id in node.writes)
    for n, node in enumerate(payload.nodes):
        for value_id in node.reads:
            if value_id not in defined:
                yield f"node {n} ({node.kind}) reads value {value_id}, which the graph does not define"
            elif value_id not in ready:
                yield f"node {n} ({node.kind}) reads value {value_id}, which no node writes and is neither an input nor a constant"
        for value_id in node.writes:
            if value_id not in defined:
                yield f"node {n} ({node.kind}) writes value {value_id}, which the graph does not define"
    outputs = {v.value_id for v in payload.values if v.flags & EXTERNAL_OUTPUT}
    yield from (f"external output {i} is never written by a node" for i in sorted(outputs - ready))
    read = {value_id for node in payload.nodes for value_id in node.reads}
    inputs = {v.value_id for v in payload.values if v.flags & EXTERNAL_INPUT and not v.flags & EXTERNAL_OUTPUT}
    yield from (f"external input {i} is read by no node (the runtime refuses to run it)" for i in sorted(inputs - read))


def _weight_problems(payload: XnnPayload, stored: Mapping[int, int]) -> Iterator[str]:
    """A convolution's or fully connected layer's bias holds one value per output channel, as
    the filter and the node's parameters give them: XNNPACK reads that many from it (a
    non-constant or wrongly shaped bias crashes it). ``stored``: constant value id -> the bytes
    the program holds for it (the serialized shape of a bias is not what XNNPACK reads by)."""
    values = {v.value_id: v for v in payload.values}
    for n, node in enumerate(payload.nodes):
        filter_, bias = (values.get(node.operand(f)) for f in ("FilterId", "BiasId"))  # type: ignore[arg-type]
        if filter_ is None or bias is None or len(filter_.dims) < 2:
            continue
        expected = _channels(node, filter_.dims)
        element = ELEMENT_BYTES.get(bias.datatype)
        where = f"node {n} ({node.kind}) with filter value {filter_.value_id} {list(filter_.dims)}"
        if len(bias.dims) != 1:
            yield f"{where} has bias value {bias.value_id} of shape {list(bias.dims)}, not one value per output channel"
        elif expected is not None and element and bias.value_id in stored and stored[bias.value_id] < expected[1] * element:
            yield f"{where} has bias value {bias.value_id} stored in {stored[bias.value_id]} bytes, fewer than its {expected[1]} output channels need"


def _channels(node: XnnNode, dims: tuple[int, ...]) -> tuple[int, int] | None:
    """(input channels, output channels) that the node's filter and parameters give."""
    if node.kind == "XNNFullyConnected":
        transposed = (node.param("Flags") or 0) & TRANSPOSE_WEIGHTS
        return (dims[0], dims[1]) if transposed else (dims[-1], dims[0])
    groups, group_in, group_out = (node.param(f) for f in ("Groups", "GroupInputChannels", "GroupOutputChannels"))
    if node.kind in ("XNNConv2d", "XNNDepthwiseConv2d") and groups and group_in and group_out:
        return groups * group_in, groups * group_out
    return None
