"""EG526: a call whose result's size depends on the data, into an out planned too small for it.

``masked_select``, ``nonzero`` and ``index`` with a boolean mask count what they select and
resize their out to the count; the out's planned capacity (its sizes, a dynamic tensor's upper
bounds, and the arena bytes planned for them) is all the runtime has, and a count past it fails
the run (``resize_tensor``: ``InvalidArgument``, 0x12). ``reader/out_bounds.py`` holds the most
each kernel can write, from its inputs' sizes; no torch.
"""

from __future__ import annotations

from collections.abc import Iterator
from math import prod

from export_guards.pte.context import PteContext
from export_guards.pte.reader.operators import spelled
from export_guards.pte.reader.out_bounds import BOUNDS, Largest, largest_result
from export_guards.pte.reader.schemas import operator_schema
from export_guards.pte.reader.tensors import describe_tensor, tensor_nbytes
from export_guards.pte.reader.wheel import ExecutionPlan, KernelCall, Tensor, TensorShapeDynamism
from export_guards.ruleset import Hit, rule


@rule("EG526")
def out_too_small_for_result(context: PteContext) -> Iterator[Hit]:
    program = context.pte.program
    for plan in program.execution_plan if program is not None else ():
        counting = {k for k, operator in enumerate(plan.operators) if operator.name in BOUNDS}
        for c, chain in enumerate(plan.chains if counting else ()):  # most methods call none: left at once
            for i, instruction in enumerate(chain.instructions):
                call = instruction.instr_args
                if not isinstance(call, KernelCall) or call.op_index not in counting:
                    continue
                found = _short_out(plan, call)
                if found is None:
                    continue
                operator = spelled(plan.operators[call.op_index].name, plan.operators[call.op_index].overload)
                index, largest = found
                yield Hit(
                    f"instruction {i} of chain {c} of method '{plan.name}' calls {operator}, which can write "
                    f"{largest.elements:,} elements ({largest.why}), into out tensor value {index} planned for "
                    f"{_capacity(plan.values[index].val)}: the kernel resizes its out to the count it finds and fails "
                    f"the run (InvalidArgument) when the count exceeds it",
                    method=plan.name,
                    node=operator,  # placed on the user's line where the caller knows the graph
                    fix=_FIXES.get(plan.operators[call.op_index].name),
                    subjects=(f"instruction {c}:{i} of '{plan.name}'",),
                )


def _short_out(plan: ExecutionPlan, call: KernelCall) -> tuple[int, Largest] | None:
    """The out value index and the call's largest result, where the out cannot hold it."""
    operator = plan.operators[call.op_index]
    schema = operator_schema(operator.name, operator.overload)
    if (
        schema is None
        or len(call.args) < len(schema.arguments)
        or not all(0 <= a < len(plan.values) for a in call.args)
    ):
        return None  # EG512's
    arguments = {a.name: call.args[k] for k, a in enumerate(schema.arguments)}
    largest = largest_result(plan, operator.name, arguments)
    index = arguments.get(largest.out) if largest is not None else None
    out = plan.values[index].val if index is not None else None
    if largest is None or not isinstance(out, Tensor) or out.shape_dynamism == TensorShapeDynamism.DYNAMIC_UNBOUND:
        return None  # an unbound out is reallocated to what the kernel asks
    return (index, largest) if prod(out.sizes) < largest.elements else None


def _capacity(out: Tensor) -> str:
    """``48 elements (float32[48], 192 bytes of memory arena 0)``."""
    info, nbytes = out.allocation_info, tensor_nbytes(out)
    where = f", {nbytes:,} bytes of memory arena {info.memory_id}" if info is not None and nbytes is not None else ""
    return f"{prod(out.sizes):,} elements ({describe_tensor(out)}{where})"


_FIXES = {
    "aten::masked_select": (
        "Broadcast the input and the mask before selecting, so that the planned size is the broadcast's: "
        "x, mask = torch.broadcast_tensors(x, mask), then torch.masked_select(x, mask). torch.export bounds "
        "masked_select's result by its input's elements alone (pytorch/executorch#13585), and the memory plan "
        "sizes the out by that bound."
    ),
}
"""A fix per operator where the cause is known; the rule's general fix otherwise."""
