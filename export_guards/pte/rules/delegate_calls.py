"""EG514, EG515: each XNNPACK delegate call against the graph it runs, and that graph's own
consistency, as ExecuTorch's XNNPACK runtime relies on them without checking.

The runtime binds argument ``external_id`` of the call to each value flagged external
(``XNNExecutor::prepare_args`` indexes the argument list unchecked), reads the tensor's data as
the value's datatype without comparing dtypes, reshapes the graph's inputs to the program's
tensors and resizes the program's outputs to what XNNPACK computes from them. So a call with
too few arguments reads past its argument list (a crash, or another tensor silently used), a
dtype that disagrees reads or writes the wrong bytes, and shapes are checked by following the
graph as XNNPACK does (``reader/xnnpack_shapes.py``): a node that cannot take them, or an
output of a fixed shape that the graph computes otherwise, fails the call.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import NamedTuple

from export_guards.pte.context import PteContext
from export_guards.pte.reader.tensors import describe_tensor, element_bytes
from export_guards.pte.reader.wheel import (
    DelegateCall,
    ExecutionPlan,
    KernelCall,
    OptionalTensorList,
    ScalarType,
    Tensor,
    TensorList,
    TensorShapeDynamism,
)
from export_guards.pte.reader.xnnpack import (
    ELEMENT_BYTES,
    EXTERNAL_INPUT,
    EXTERNAL_OUTPUT,
    INVALID_ID,
    XnnNode,
    XnnPayload,
    XnnValue,
)
from export_guards.pte.reader.xnnpack_shapes import infer_shapes
from export_guards.pte.reader.xnnpack_slots import shared_slots
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
_STATIC_WEIGHTS = frozenset({"XNNFullyConnected", "XNNConv2d", "XNNDepthwiseConv2d", "XNNConvTranspose2d"})


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
                    yield Hit(f"{where} {problem.text}", method=plan.name, severity=problem.severity, fix=problem.fix)


class Problem(NamedTuple):
    text: str
    severity: Severity | None = None  # the rule's (an error) unless a warning
    fix: str | None = None  # the rule's (re-export) unless the cause is known


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
                    typed.update(
                        getattr(value, "items", ()) if isinstance(value, (TensorList, OptionalTensorList)) else ()
                    )
    return typed


def _call_problems(
    plan: ExecutionPlan, call: DelegateCall, payload: XnnPayload, host_typed: set[int]
) -> Iterator[Problem]:
    externals = sorted(
        (v for v in payload.values if v.flags & (EXTERNAL_INPUT | EXTERNAL_OUTPUT)), key=lambda v: v.external_id
    )
    bound = [v for v in externals if v.external_id != INVALID_ID and v.external_id < payload.num_externs]
    needed = max((v.external_id for v in bound), default=-1) + 1
    if len(call.args) < needed:
        yield Problem(
            f"passes {len(call.args)} arguments; its graph binds {needed} ({_roles(bound)}): the runtime "
            f"reads past the argument list (a crash, or another tensor used in silence)"
        )
        return
    tensors: dict[int, tuple[int, Tensor]] = {}  # graph value id -> (program value, its tensor)
    for value in bound:
        index = call.args[value.external_id]
        if not 0 <= index < len(plan.values):
            continue  # EG512's
        role = "output" if value.flags & EXTERNAL_OUTPUT else "input"
        tensor = plan.values[index].val
        what = (
            f"binds program value {index} (argument {value.external_id}) to the graph's {role} value {value.value_id}"
        )
        if not isinstance(tensor, Tensor):
            yield Problem(
                f"binds program value {index} (a {type(tensor).__name__}) to the graph's {role} value {value.value_id}, a tensor"
            )
            continue
        tensors[value.value_id] = (index, tensor)
        problem = _dtype_problem(tensor, value, role)
        if problem is None:
            continue
        if index in host_typed or element_bytes(tensor) != ELEMENT_BYTES.get(value.datatype):
            yield Problem(f"{what}: {problem}")
        else:  # only delegates touch it, in elements of one size: its bytes are what they write
            yield Problem(
                f"{what}: {problem}. Only delegates read and write this tensor, in elements of the same size, "
                f"so it runs as built; its dtype is wrong",
                Severity.WARNING,
            )
    yield from _shape_problems(payload, bound, tensors)


def _shape_problems(
    payload: XnnPayload, bound: list[XnnValue], tensors: dict[int, tuple[int, Tensor]]
) -> Iterator[Problem]:
    """The runtime reshapes the graph's inputs to the program's tensors and resizes the
    program's outputs to what XNNPACK computes from them: a node that cannot take the shapes,
    or an output the program holds in a fixed shape of another size, fails the call. Where the
    graph cannot be followed (a node kind not modelled, sizes that are only bounds), shapes that
    differ from the graph's are warnings."""
    inputs = {
        v.value_id: _physical(tensors[v.value_id][1])
        for v in bound
        if v.flags & EXTERNAL_INPUT and v.value_id in tensors
    }
    static = all(t.shape_dynamism == TensorShapeDynamism.STATIC for _, t in tensors.values())
    inferred = infer_shapes(payload, inputs) if static and None not in inputs.values() else None
    if inferred is not None and inferred.refused is not None:
        node, why = inferred.refused
        kind = payload.nodes[node].kind
        text = f"runs its graph on the program's tensors, and node {node} ({kind}) cannot take them: {why} (the runtime fails the call)"
        yield Problem(text, fix=_layout_fix(bound, tensors))
        return
    outputs = {
        v.value_id
        for v in bound
        if v.flags & EXTERNAL_OUTPUT and not v.flags & EXTERNAL_INPUT and v.value_id in tensors
    }
    followed = inferred is not None and outputs <= inferred.shapes.keys()
    for value in bound:
        if value.value_id not in tensors:
            continue
        index, tensor = tensors[value.value_id]
        physical = _physical(tensor)
        what = f"binds program value {index} (argument {value.external_id}) to the graph's {'output' if value.value_id in outputs else 'input'} value {value.value_id}"
        computed = inferred.shapes.get(value.value_id) if inferred is not None and value.value_id in outputs else None
        if computed is not None and physical is not None and computed != physical:
            yield Problem(
                f"{what}: the graph computes shape {list(computed)} for it from the program's inputs, and the "
                f"tensor's shape is fixed at {list(physical)} (in memory order): the runtime cannot resize it and fails the call"
            )
        elif (
            not followed
            and physical is not None
            and tensor.shape_dynamism == TensorShapeDynamism.STATIC
            and physical != tuple(value.dims)
            and not (value.value_id not in outputs and _scalar_alike(physical, value.dims))
        ):
            yield Problem(
                f"{what}: the tensor's shape {list(physical)} (in memory order) is not the graph's {list(value.dims)}. "
                f"The runtime reshapes the graph to the program's tensors, so this runs as built only if the graph's shape is the damaged one",
                Severity.WARNING,
            )


def _scalar_alike(physical: tuple[int, ...], dims: tuple[int, ...]) -> bool:
    """A 0-d tensor bound to a graph input of one element (``[1]``), or the other way round: the
    runtime reshapes the input to the tensor's own dims, and XNNPACK takes a 0-d value and a
    one-element one alike (the XNNPACK backend writes a 0-d value as ``[1]``; the dynamic
    programs that slice a position to a scalar run and match eager at every size)."""
    return (not physical or not dims) and math.prod(physical) == math.prod(dims) == 1


def _layout_fix(bound: list[XnnValue], tensors: dict[int, tuple[int, Tensor]]) -> str | None:
    """The fix when the cause is a layout, not damage: an input the graph takes with the same
    sizes in another order (a channels-last model whose layout ExecuTorch could not tell from
    contiguous, as with one channel)."""
    for value in bound:
        if value.flags & EXTERNAL_INPUT and value.value_id in tensors:
            _index, tensor = tensors[value.value_id]
            physical = _physical(tensor)
            if physical is not None and physical != tuple(value.dims) and sorted(physical) == sorted(value.dims):
                return (
                    f"A layout, not damage: the graph takes its input value {value.value_id} as {list(value.dims)} and the "
                    f"program hands it {list(physical)} (dim order {list(tensor.dim_order)}). Export the model and its example "
                    "inputs contiguous (model.to(memory_format=torch.contiguous_format), x.contiguous()); ExecuTorch cannot "
                    "tell channels-last from contiguous where a dimension has size 1"
                )
    return None


def _physical(tensor: Tensor) -> tuple[int, ...] | None:
    """The tensor's sizes in memory order, as the runtime hands them to XNNPACK (None for a
    dim order that is not a permutation: EG516's)."""
    sizes, dim_order = list(tensor.sizes), list(tensor.dim_order)
    if sorted(dim_order) != list(range(len(sizes))):
        return None
    return tuple(sizes[d] for d in dim_order)


def _dtype_problem(tensor: Tensor, value: XnnValue, role: str) -> str | None:
    allowed = _DTYPES.get(value.datatype)
    widened = _WIDENED_OUTPUTS.get(value.datatype) if role == "output" else None
    if allowed is not None and tensor.scalar_type not in allowed and tensor.scalar_type != widened:
        return (
            f"the tensor is {describe_tensor(tensor)}, the graph's value is "
            f"{value.datatype.removeprefix('xnn_datatype_')} (the runtime reads its bytes as that, unchecked)"
        )
    return None


def _roles(values: list[XnnValue]) -> str:
    inputs = sum(1 for v in values if v.flags & EXTERNAL_INPUT)
    return f"{inputs} input{'s' if inputs != 1 else ''}, {len(values) - inputs} output{'s' if len(values) - inputs != 1 else ''}"


@rule("EG515")
def xnnpack_graph_invalid(context: PteContext) -> Iterator[Hit]:
    for delegate, payload in context.xnnpack_payloads:
        if isinstance(payload, XnnPayload):
            inline = {c.value_id: c.size for c in payload.constants if not c.named_key}  # named data is EG508's
            for problem in _graph_problems(payload, inline):
                yield Hit(f"{delegate}: {problem}", method=delegate.method)
            for shared in shared_slots(payload):
                where = f"{delegate}: value {shared.value_id} is internal but has external id {shared.external_id}"
                if shared.problem is not None:
                    yield Hit(f"{where}: {shared.problem}", method=delegate.method)
                else:
                    yield Hit(
                        f"{where}: XNNPACK defines it in the slot of that external value, and every node finds there the value "
                        f"it names{shared.caveat}, so the runtime runs the graph as written (though XNNPACK may refuse some node "
                        f"kinds on an external value); ExecuTorch gives no internal value an external id",
                        method=delegate.method,
                        severity=Severity.WARNING,
                    )


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
            continue  # an external id on an internal value: reader/xnnpack_slots.py
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
    # An external value of either role holds the program tensor bound to it.
    ready = {v.value_id for v in payload.values if v.constant or v.flags & (EXTERNAL_INPUT | EXTERNAL_OUTPUT)}
    written = {value_id for node in payload.nodes for value_id in node.writes}
    ready |= written
    for n, node in enumerate(payload.nodes):
        for value_id in node.reads:
            if value_id not in defined:
                yield f"node {n} ({node.kind}) reads value {value_id}, which the graph does not define"
            elif value_id not in ready:
                yield (
                    f"node {n} ({node.kind}) reads value {value_id}, which no node writes and is neither an input nor a constant: "
                    f"it reads whatever XNNPACK's memory planner left where it places that value"
                )
        for value_id in node.writes:
            if value_id not in defined:
                yield f"node {n} ({node.kind}) writes value {value_id}, which the graph does not define"
    read = {value_id for node in payload.nodes for value_id in node.reads}
    outputs = {v.value_id for v in payload.values if v.flags & EXTERNAL_OUTPUT}
    yield from (f"external output {i} is neither written nor read by a node" for i in sorted(outputs - written - read))
    constants = {v.value_id for v in payload.values if v.constant}
    for n, node in enumerate(payload.nodes):
        for field in ("FilterId", "BiasId"):
            weight = node.operand(field)
            if node.kind in _STATIC_WEIGHTS and weight is not None and weight in defined and weight not in constants:
                yield (
                    f"node {n} ({node.kind}) has {field.removesuffix('Id').lower()} value {weight}, which is not a constant: "
                    f"ExecuTorch writes these nodes with constant weights only, and the runtime fails or crashes on another"
                )
    inputs = {v.value_id for v in payload.values if v.flags & EXTERNAL_INPUT and not v.flags & EXTERNAL_OUTPUT}
    yield from (
        f"external input {i} is read by no node (the runtime refuses to run it)"
        for i in sorted(inputs - read - written)
    )
    yield from _packed_weights_read_elsewhere(payload, constants)


def _packed_weights_read_elsewhere(payload: XnnPayload, constants: set[int]) -> Iterator[str]:
    """A constant that XNNPACK packs into a fully connected or convolution node's weights is that
    node's alone: another node that reads it as an operand crashes the runtime (SIGSEGV, proved
    for an add reading a fully connected layer's bias). ExecuTorch never writes one."""
    packed = {}
    for m, node in enumerate(payload.nodes):
        for field in ("FilterId", "BiasId"):
            weight = node.operand(field)
            if node.kind in _STATIC_WEIGHTS and weight in constants:
                packed.setdefault(weight, (m, node.kind, field.removesuffix("Id").lower()))
    for n, node in enumerate(payload.nodes):
        weights = {node.operand(f) for f in ("FilterId", "BiasId")} if node.kind in _STATIC_WEIGHTS else set()
        for value_id in sorted(set(node.reads) - weights):
            if value_id in packed:
                m, kind, role = packed[value_id]
                yield (
                    f"node {n} ({node.kind}) reads value {value_id}, the {role} that XNNPACK packs into node {m} ({kind}): "
                    f"the runtime crashes (SIGSEGV) on a packed weight read as an operand"
                )


def _weight_problems(payload: XnnPayload, stored: Mapping[int, int]) -> Iterator[str]:
    """A convolution's or fully connected layer's bias holds one value per output channel, as
    the filter and the node's parameters give them: XNNPACK reads that many from it (a
    non-constant bias, or one stored in fewer bytes, crashes it). ``stored``: constant value id -> the bytes
    the payload holds inline for it (the serialized shape of a bias is not what XNNPACK reads
    by; a bias held as named data is EG508's)."""
    values = {v.value_id: v for v in payload.values}
    for n, node in enumerate(payload.nodes):
        filter_, bias = (values.get(node.operand(f)) for f in ("FilterId", "BiasId"))  # type: ignore[arg-type]
        expected = _filter_dims(node)
        # XNNPACK reads a depthwise filter by the node's parameters: other dims of the same size run
        same_size = (
            node.kind == "XNNDepthwiseConv2d"
            and filter_ is not None
            and expected is not None
            and math.prod(filter_.dims) == math.prod(expected)
        )
        if filter_ is not None and expected is not None and filter_.dims != expected and not same_size:
            yield (
                f"node {n} ({node.kind}) has filter value {filter_.value_id} of dims {list(filter_.dims)}; its parameters "
                f"make it {list(expected)} (the runtime fails to load or run the graph)"
            )
            continue
        if filter_ is not None and node.kind == "XNNFullyConnected" and len(filter_.dims) != 2:
            yield f"node {n} ({node.kind}) has filter value {filter_.value_id} of dims {list(filter_.dims)}, not a matrix (the runtime fails to run the graph)"
            continue
        if filter_ is None or bias is None or len(filter_.dims) < 2:
            continue
        channels = node.output_channels(filter_.dims)
        element = ELEMENT_BYTES.get(bias.datatype)
        where = f"node {n} ({node.kind}) with filter value {filter_.value_id} {list(filter_.dims)}"
        # XNNPACK reads a bias by the node's channels, whatever its dims say ([N, 1], [N + 1]):
        # only the bytes stored for it can fall short.
        if channels is not None and element and bias.value_id in stored and stored[bias.value_id] < channels * element:
            yield f"{where} has bias value {bias.value_id} stored in {stored[bias.value_id]} bytes, fewer than its {channels} output channels need"


def _filter_dims(node: XnnNode) -> tuple[int, ...] | None:
    """The filter dims a convolution's parameters give (XNNPACK's layouts: ``[out, height,
    width, in per group]``, depthwise ``[1, height, width, out]``)."""
    if node.kind not in ("XNNConv2d", "XNNDepthwiseConv2d", "XNNConvTranspose2d"):
        return None
    groups, per_in, per_out, height, width = fields = [
        node.param(f) for f in ("Groups", "GroupInputChannels", "GroupOutputChannels", "KernelHeight", "KernelWidth")
    ]
    if None in fields:
        return None
    if node.kind == "XNNDepthwiseConv2d":
        return (1, height, width, groups * per_out)
    return (groups * per_out, height, width, per_in)
