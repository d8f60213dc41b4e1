"""Internal XNNPACK values that carry an external id, and what the runtime makes of them.

``xnn_define_tensor_value`` defines a value with an external id in the slot of that external
value, whatever its flags say, and a later definition of the same slot replaces an earlier one
(ExecuTorch defines the values in the order the graph lists them). So an internal value listed
after the external value of its id takes the slot over, and the external value is gone (the
runtime fails to bind it); one listed before it shares the slot, and the graph runs as written as
long as every node finds there the value it names (each verdict is checked against
``executorch.runtime`` in tests/test_pte_runtime_agreement.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

from export_guards.pte.reader.xnnpack import (
    ELEMENT_BYTES,
    EXTERNAL_INPUT,
    EXTERNAL_OUTPUT,
    INVALID_ID,
    XnnPayload,
    XnnValue,
)

__all__ = ["SharedSlot", "shared_slots"]

_EXTERNAL = EXTERNAL_INPUT | EXTERNAL_OUTPUT

# Nodes that compute each element from the same element of their inputs, and so may write over
# an input of their own size.
_ELEMENTWISE = frozenset(
    f"XNN{kind}"
    for kind in (
        "Add", "Div", "Minimum", "Maximum", "Multiply", "Subtract", "Clamp", "Floor", "Ceiling", "SquareRoot",
        "ReciprocalSquareRoot", "Hardswish", "LeakyReLU", "Negate", "Square", "ELU", "Abs", "Log", "Gelu", "Tanh",
        "Exp", "Sigmoid", "Sin", "Cos", "Copy", "StaticReshape",
    )
)  # fmt: skip


@dataclass(frozen=True)
class SharedSlot:
    """An internal value with an external id.

    Attributes:
        value_id: the internal value.
        external_id: the external id it carries.
        problem: why the runtime fails or misruns the graph, or None where it runs it as written
            (the graph is done with the value before it needs the external value in the slot).
        caveat: where it runs, what in that is fragile (" (...)", or "").
    """

    value_id: int
    external_id: int
    problem: str | None
    caveat: str = ""


def shared_slots(payload: XnnPayload) -> Iterator[SharedSlot]:
    """Each internal value of ``payload`` that carries an external id, with its verdict."""
    values = list(payload.values)
    for position, value in enumerate(values):
        if value.flags & _EXTERNAL or value.external_id == INVALID_ID:
            continue
        slot = value.external_id
        problem, caveat = _verdict(payload, values, position, slot)
        yield SharedSlot(value.value_id, slot, problem, caveat)


def _verdict(payload: XnnPayload, values: list[XnnValue], position: int, slot: int) -> tuple[str | None, str]:
    value = values[position]
    if slot >= payload.num_externs:
        return f"the graph has {payload.num_externs} external values (the runtime fails to load it)", ""
    later = [v for v in values[position + 1 :] if v.external_id == slot and v.flags & _EXTERNAL]
    if not later:
        return (
            f"XNNPACK defines it in the place of external value {slot}, which then is no external value (the runtime fails to run the graph)",
            "",
        )
    external = later[-1]
    sharing = [v for v in values if v.external_id == slot and not v.flags & _EXTERNAL]
    if len(sharing) > 1:
        return f"values {', '.join(str(v.value_id) for v in sharing)} all take the slot of external value {slot}", ""
    if value.constant:
        return f"its constant data is replaced by external value {slot}'s tensor", ""
    return _order_problem(payload, value, external)


def _order_problem(payload: XnnPayload, value: XnnValue, external: XnnValue) -> tuple[str | None, str]:
    """Follows the one slot through the nodes in order: every read must find there the value it
    names, and an external output must hold its own value at the end. A node that reads one of
    the two and writes the other computes in place: safe for elementwise nodes of one size, and
    otherwise up to the node (a caveat, not a verdict: the runtime ran such graphs as written)."""
    holder = external.value_id if external.flags & EXTERNAL_INPUT else None
    names = {value.value_id, external.value_id}
    caveats = []
    for n, node in enumerate(payload.nodes):
        reads = [r for r in node.reads if r in names]
        writes = [w for w in node.writes if w in names]
        for read in reads:
            if holder != read:
                held = f"value {holder}" if holder is not None else "nothing yet"
                return f"node {n} ({node.kind}) reads value {read} from that slot while it holds {held}", ""
            if writes and (
                node.kind not in _ELEMENTWISE or _nbytes(_value(payload, read)) != _nbytes(_value(payload, writes[0]))
            ):
                caveats.append(f"node {n} ({node.kind}) reads value {read} and writes value {writes[0]} in place")
        if writes:
            holder = writes[-1]
    if external.flags & EXTERNAL_OUTPUT and holder != external.value_id:
        return (
            f"external output {external.value_id} ends holding {'nothing' if holder is None else f'value {holder}'}",
            "",
        )
    return None, f" ({'; '.join(caveats)})" if caveats else ""


def _value(payload: XnnPayload, value_id: int) -> XnnValue:
    return next(v for v in payload.values if v.value_id == value_id)


def _nbytes(value: XnnValue) -> float:
    return math.prod(value.dims) * ELEMENT_BYTES.get(value.datatype, 1)
