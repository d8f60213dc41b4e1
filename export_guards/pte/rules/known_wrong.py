"""EG524: what a delegate is known to compute wrong (``analysis/known_wrong_entries.py``, the
list the graph side's EG405 keeps off the delegate), recognised in a written program. Each
entry's recogniser (``RECOGNISERS``) reads a delegate's decoded graph, its weights' bytes and
the call that runs it, as the delegate's runtime reads them, without torch."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, final

from export_guards.analysis.known_wrong_entries import KNOWN_WRONG, XNNPACK_LINEAR_WEIGHT_MATH, KnownWrong, release_text
from export_guards.pte.context import PteContext
from export_guards.pte.reader.file import Delegate
from export_guards.pte.reader.tensors import describe_tensor
from export_guards.pte.reader.wheel import DelegateCall, ExecutionPlan, Tensor
from export_guards.pte.reader.xnnpack import (
    EXTERNAL_INPUT,
    EXTERNAL_OUTPUT,
    INVALID_ID,
    NO_OFFSET,
    XnnConstant,
    XnnNode,
    XnnPayload,
)
from export_guards.ruleset import Hit, rule

__all__ = ["RECOGNISERS", "WrongOp"]

# The float datatypes a fully connected filter may be declared in, as numpy reads their bytes
# (bfloat16, which numpy lacks, as the high half of a float32).
_FLOAT_FILTERS = {"xnn_datatype_fp32": "<f4", "xnn_datatype_fp16": "<f2", "xnn_datatype_bf16": "<u2"}
# The integers of every quantized type of 8 bits or fewer (int8 -128..127, uint8 0..255, and the
# narrower ones inside them): what a weight-only quantized linear's weight holds.
_CODES = (-128, 255)
_HEAD = 64  # values read first: a float weight shows a fraction within them, and the rest is not read


@final
@dataclass(frozen=True)
class WrongOp:
    """One op of a written program that a delegate computes wrong: its delegate, what the op
    is and why it is wrong (a clause), and the named-data key of the constant concerned."""

    delegate: Delegate
    what: str
    constant: str | None = None


@rule("EG524")
def known_wrong_delegation(context: PteContext) -> Iterator[Hit]:
    if context.pte.program is None:
        return
    backends = tuple({d.backend for d in context.pte.delegates})
    for entry in KNOWN_WRONG:
        if not entry.applies_to(backends):
            continue
        delegates = ", ".join(b.removesuffix("Backend") for b in entry.backend_ids)
        for op in RECOGNISERS[entry](context):
            yield Hit(
                f"{op.delegate}: {op.what}; {delegates} in executorch {release_text()} computes it wrong: "
                f"{entry.summary} ({entry.report})",
                method=op.delegate.method,
                constant=op.constant,
            )


def _integer_weights(context: PteContext) -> Iterator[WrongOp]:
    """XNNPACK's partitioner reads past a weight-only quantized linear's dequantization, so its
    serializer writes the integer weight as the float filter of a fully connected node, and the
    dequantization's scales (and zero points, and int8 weight-only's bias) become arguments of
    the delegate call that no value of the graph binds: the runtime binds argument ``i`` to the
    value whose external id is ``i`` (``XNNExecutor::prepare_args``) and never reads the others.
    XNNPACK then multiplies by the integers. Recognised by both: a float filter that holds only
    8-bit integers, and constants of its output channels passed to the call and never read."""
    plans = {plan.name: plan for plan in context.pte.program.execution_plan}  # type: ignore[union-attr]
    for delegate, payload in context.xnnpack_payloads:
        plan = plans.get(delegate.method)
        if plan is None or not isinstance(payload, XnnPayload):
            continue
        unread = _unread_constants(plan, delegate.index, payload)
        if not unread:
            continue  # the common case: nothing below reads a weight's bytes
        constants = {c.value_id: c for c in payload.constants}
        for n, node in enumerate(payload.nodes):
            filter_ = constants.get(node.operand("FilterId") if node.kind == "XNNFullyConnected" else None)  # type: ignore[arg-type]
            if filter_ is not None and filter_.datatype in _FLOAT_FILTERS and len(filter_.dims) == 2:
                found = _dropped_dequantization(context, delegate, payload, n, node, filter_, unread)
                if found is not None:
                    yield found


def _unread_constants(plan: ExecutionPlan, index: int, payload: XnnPayload) -> list[tuple[int, Tensor]]:
    """The program's constants that a call of delegate ``index`` passes where its graph binds
    no value (by program value index)."""
    bound = {
        v.external_id
        for v in payload.values
        if v.flags & (EXTERNAL_INPUT | EXTERNAL_OUTPUT) and v.external_id != INVALID_ID
    }
    unread: dict[int, Tensor] = {}
    for chain in plan.chains:
        for instruction in chain.instructions:
            call = instruction.instr_args
            if isinstance(call, DelegateCall) and call.delegate_index == index:
                for position, value in enumerate(call.args):
                    tensor = plan.values[value].val if position not in bound and 0 <= value < len(plan.values) else None
                    if isinstance(tensor, Tensor) and _is_constant(tensor):
                        unread[value] = tensor
    return sorted(unread.items())


def _is_constant(tensor: Tensor) -> bool:
    """A tensor whose data the program (or its data file) holds."""
    info = tensor.extra_tensor_info
    return tensor.data_buffer_idx > 0 or (info is not None and bool(info.fully_qualified_name))


def _dropped_dequantization(
    context: PteContext,
    delegate: Delegate,
    payload: XnnPayload,
    n: int,
    node: XnnNode,
    filter_: XnnConstant,
    unread: list[tuple[int, Tensor]],
) -> WrongOp | None:
    """The finding for fully connected node ``n`` if its float filter holds integer codes and
    the call passes constants of its output channels (scales: one per channel, or per group of
    its input channels) that the graph never reads."""
    outputs = node.output_channels(filter_.dims)
    if not outputs:
        return None
    inputs = math.prod(filter_.dims) // outputs
    scales = [
        (i, t)
        for i, t in unread
        if t.sizes and t.sizes[0] == outputs and inputs % max(1, math.prod(t.sizes) // outputs) == 0
    ]
    codes = _integer_codes(_constant_bytes(context, delegate, payload, filter_), filter_) if scales else None
    if codes is None:
        return None
    passed = " and ".join(f"{i} ({describe_tensor(t)})" for i, t in scales)
    what = (
        f"fully connected node {n} ({inputs} to {outputs} channels) multiplies by filter value {filter_.value_id} "
        f"({filter_.datatype.removeprefix('xnn_datatype_')}{list(filter_.dims)}), which holds only integers "
        f"({codes[0]} to {codes[1]}): a quantized weight's codes, while the delegate call passes constants of its "
        f"{outputs} output channels that the graph never reads (program value{'s' if len(scales) > 1 else ''} {passed}: "
        f"the scales, zero points or bias), so XNNPACK multiplies by the codes, not the weight"
    )
    return WrongOp(delegate, what, filter_.named_key or None)


def _constant_bytes(
    context: PteContext, delegate: Delegate, payload: XnnPayload, constant: XnnConstant
) -> memoryview | None:
    """A constant's bytes as XNNPACK reads them: its named data (in the program or a data file
    given), or the payload's inline constant data; None where they are not there (EG506, EG508)."""
    if constant.named_key:
        found = context.named_data.get(constant.named_key)
        files = {context.pte.name: context.pte.data, **{ptd.name: ptd.data for ptd in context.data_files}}
        data, start = (files.get(found[0]), found[1].start) if found is not None else (None, 0)
    else:
        data, start = delegate.data, payload.constant_data_offset + constant.offset
    inline_without_offset = not constant.named_key and constant.offset == NO_OFFSET
    end = start + (constant.nbytes or 0)
    if data is None or inline_without_offset or not constant.nbytes or end > len(data):
        return None
    return memoryview(data)[start:end]


def _integer_codes(data: memoryview | None, constant: XnnConstant) -> tuple[int, int] | None:
    """The least and greatest of a float constant's values if every one is an integer of
    ``_CODES``, else None. Its first values are read first: a float weight has a fraction there."""
    if data is None:
        return None
    import numpy as np  # flatbuffers' AsNumpy readers need it already

    kind = _FLOAT_FILTERS[constant.datatype]
    values: Any = np.frombuffer(data, dtype=kind)
    if kind == "<u2":  # bfloat16: the high half of a float32
        values = (values.astype(np.uint32) << 16).view(np.float32)
    for part in (values[:_HEAD], values):
        if not part.size or not np.all(np.isfinite(part)) or not np.all(part == np.rint(part)):
            return None
    least, greatest = int(values.min()), int(values.max())
    return (least, greatest) if _CODES[0] <= least and greatest <= _CODES[1] else None


RECOGNISERS: dict[KnownWrong, Callable[[PteContext], Iterator[WrongOp]]] = {
    XNNPACK_LINEAR_WEIGHT_MATH: _integer_weights,
}
"""Each entry of ``KNOWN_WRONG``'s ops in a written program."""
