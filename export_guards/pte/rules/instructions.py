"""EG512: instructions that point at values, operators or delegates that are not there, or pass
an operator a value of the wrong kind (the runtime asserts, or reads out of bounds).

The kinds come from torch's schema of each operator called, read from the table of
``reader/schemas.py``: without torch."""

from __future__ import annotations

import functools
from collections.abc import Iterator

from export_guards.pte.context import PteContext
from export_guards.pte.reader.operators import spelled
from export_guards.pte.reader.schemas import Argument, operator_schema
from export_guards.pte.reader.wheel import (
    DelegateCall,
    ExecutionPlan,
    FreeCall,
    IntList,
    JumpFalseCall,
    KernelCall,
    MoveCall,
    OptionalTensorList,
    Tensor,
    TensorList,
)
from export_guards.ruleset import Hit, rule

# The value kinds the runtime accepts for each kind of schema type.
_KINDS = {
    "Tensor": {"Tensor"},
    "int": {"Int"},
    "SymInt": {"Int"},
    "bool": {"Bool"},
    "float": {"Double"},
    "number": {"Int", "Double", "Bool"},
    "Scalar": {"Int", "Double", "Bool"},
    "str": {"String"},
    "ScalarType": {"Int"},
    "Layout": {"Int"},
    "MemoryFormat": {"Int"},
    "List[int]": {"IntList"},
    "List[SymInt]": {"IntList"},
    "List[bool]": {"BoolList"},
    "List[float]": {"DoubleList"},
    "List[Tensor]": {"TensorList"},
    "List[Optional[Tensor]]": {"OptionalTensorList"},
}


@rule("EG512")
def instruction_invalid(context: PteContext) -> Iterator[Hit]:
    program = context.pte.program
    if program is None:
        return
    for plan in program.execution_plan:
        count = len(plan.values)
        for name, indices in (("inputs", plan.inputs), ("outputs", plan.outputs)):
            for position, index in enumerate(indices):
                if not 0 <= index < count:
                    yield Hit(
                        f"method '{plan.name}' lists value {index} among its {name}, of {count} values",
                        method=plan.name,
                    )
                elif (kind := _kind(plan, index)) not in _SIGNATURE_KINDS:
                    yield Hit(
                        f"method '{plan.name}' lists value {index} (kind {kind}) as its {name[:-1]} {position}: the runtime "
                        f"passes and returns only tensors and scalars (Tensor, Int, Double, Bool, String, None), and its "
                        f"method metadata cannot state a list, so loading or running the method fails (executorch.runtime: "
                        f"'Failed to get {name[:-1]} type')",
                        method=plan.name,
                    )
        yield from _inputs_listed_twice(plan)
        for index, value in enumerate(plan.values):
            yield from _list_items(plan, index, value.val)
        for c, chain in enumerate(plan.chains):
            for i, instruction in enumerate(chain.instructions):
                where = f"instruction {i} of chain {c} of method '{plan.name}'"
                yield from (
                    Hit(f"{where} {problem}", method=plan.name)
                    for problem in _problems(plan, chain.instructions, instruction.instr_args)
                )


# What a method's inputs and outputs may be: what ``MethodMeta`` can state (method_meta.cpp,
# get_tag) and ``Method::set_input`` takes. A list is not among them: the runtime fails on it.
_SIGNATURE_KINDS = frozenset({"Tensor", "Int", "Double", "Bool", "String", "Null"})


def _inputs_listed_twice(plan: ExecutionPlan) -> Iterator[Hit]:
    """ExecuTorch's emitter gives each input its own value (a model that takes one tensor twice
    has two inputs); an output may be listed twice (a model that returns one tensor twice)."""
    first: dict[int, int] = {}
    for position, index in enumerate(plan.inputs):
        if index in first:
            yield Hit(
                f"method '{plan.name}' lists value {index} as input {first[index]} and again as input {position}: the "
                f"runtime copies both of the caller's tensors into that one value, the later over the earlier, so the "
                f"method never sees its input {first[index]} (and a caller's inputs for the exported model do not fit it)",
                method=plan.name,
            )
        else:
            first[index] = position


def _list_items(plan: ExecutionPlan, index: int, value: object) -> Iterator[Hit]:
    wanted = {IntList: {"Int"}, TensorList: {"Tensor"}, OptionalTensorList: {"Tensor", "Null"}}.get(type(value))
    if wanted is None:
        return
    for item in value.items:  # type: ignore[attr-defined]
        kind = "Null" if item == -1 and isinstance(value, OptionalTensorList) else _kind(plan, item)  # -1: None
        if kind not in wanted:
            yield Hit(
                f"value {index} of method '{plan.name}' ({type(value).__name__}) lists value {item}, "
                f"which is {'missing' if kind is None else 'of kind ' + kind}",
                method=plan.name,
            )
            return


def _problems(plan: ExecutionPlan, instructions: list, args: object) -> Iterator[str]:
    count = len(plan.values)
    if isinstance(args, KernelCall):
        if not 0 <= args.op_index < len(plan.operators):
            yield f"calls operator {args.op_index}, of {len(plan.operators)}"
            return
        yield from _out_of_range(args.args, count)
        operator = plan.operators[args.op_index]
        expected = _schema_kinds(operator.name, operator.overload)
        if expected is None:
            return  # an operator torch does not know here: indices checked, kinds cannot be
        name = spelled(operator.name, operator.overload)
        if len(args.args) != len(expected):
            yield f"passes {name} {len(args.args)} values; its schema takes {len(expected)}"
            return
        for position, (index, (argument, kinds)) in enumerate(zip(args.args, expected)):
            kind = _kind(plan, index)
            if kinds and kind is not None and kind not in kinds:
                yield (
                    f"passes {name} value {index} (kind {kind}) as argument {position} '{argument}', "
                    f"which takes {' or '.join(sorted(kinds))}"
                )
        written = [args.args[k] for k in _in_place_positions(operator.name, operator.overload)]
        slot = args.args[-1]
        if (
            written
            and slot not in written
            and _used_elsewhere(plan, instructions, args, slot)
            and not _interchangeable(plan, slot, written[0])
        ):
            yield (
                f"returns what {name} writes in place (value {written[0]}) into value {slot}: the runtime makes value "
                f"{slot} that tensor from then on (this run and the next), so every other use of it reads another tensor"
            )
    elif isinstance(args, DelegateCall):
        if not 0 <= args.delegate_index < len(plan.delegates):
            yield f"calls delegate {args.delegate_index}, of {len(plan.delegates)}"
        yield from _out_of_range(args.args, count)
    elif isinstance(args, MoveCall):
        yield from _out_of_range([args.move_from, args.move_to], count)
    elif isinstance(args, JumpFalseCall):
        yield from _out_of_range([args.cond_value_index], count)
        if not 0 <= args.destination_instruction <= len(instructions):
            yield f"jumps to instruction {args.destination_instruction}, of {len(instructions)}"
    elif isinstance(args, FreeCall):
        yield from _out_of_range([args.value_index], count)


def _out_of_range(indices: list[int], count: int) -> Iterator[str]:
    for index in indices:
        if not 0 <= index < count:
            yield f"uses value {index}, of {count}"


def _kind(plan: ExecutionPlan, index: int) -> str | None:
    return type(plan.values[index].val).__name__ if 0 <= index < len(plan.values) else None


@functools.cache
def _schema_kinds(name: str, overload: str) -> tuple[tuple[str, frozenset[str]], ...] | None:
    """Per argument then per return: its name and the value kinds it takes (empty: any)."""
    schema = operator_schema(name, overload)
    if schema is None:
        return None
    kinds = [(a.name, _accepted(a)) for a in schema.arguments]
    # The emitter adds one slot for what the call returns: the value itself when there is one,
    # else a list or nothing, whose kind the schema does not say. An out variant's wrapper never
    # reads or writes it (ExecuTorch's codegen), so any value will do there.
    out_variant = any(a.kwarg_only and a.written for a in schema.arguments)
    single = len(schema.returns) == 1 and not out_variant
    kinds.append(("return", _accepted(schema.returns[0]) if single else frozenset()))
    return tuple(kinds)


def _used_elsewhere(plan: ExecutionPlan, instructions: list, call: KernelCall, value: int) -> bool:
    """Whether ``value`` is a method input or output, or an argument of another instruction."""
    if value in plan.inputs or value in plan.outputs:
        return True
    others = (i.instr_args for i in instructions if i.instr_args is not call)
    return any(value in getattr(other, "args", ()) for other in others)


def _interchangeable(plan: ExecutionPlan, slot: int, written: int) -> bool:
    """Whether value ``slot`` is an arena tensor of the dtype and shape of ``written``: made that
    tensor, its later uses still get what they take (what they then compute, the file cannot
    say); a constant, an input, or a value of another kind or shape they do not."""
    a, b = (plan.values[i].val if 0 <= i < len(plan.values) else None for i in (slot, written))
    if not isinstance(a, Tensor) or not isinstance(b, Tensor):
        return False
    planned = a.allocation_info is not None and a.data_buffer_idx == 0 and slot not in plan.inputs
    return planned and a.scalar_type == b.scalar_type and list(a.sizes) == list(b.sizes)


@functools.cache
def _in_place_positions(name: str, overload: str) -> tuple[int, ...]:
    """The arguments an operator writes in place and returns (``copy_``'s ``self``): its
    generated wrapper stores the result in the return slot, as an alias of that argument."""
    schema = operator_schema(name, overload)
    if schema is None or not schema.returns:
        return ()
    written = tuple(k for k, a in enumerate(schema.arguments) if a.written)
    return () if any(schema.arguments[k].kwarg_only for k in written) else written


def _accepted(argument: Argument) -> frozenset[str]:
    inner = argument.element if argument.optional else argument.type
    kinds = _KINDS.get((inner or "").replace("int[]", "List[int]"))
    if kinds is None:
        return frozenset()
    return frozenset(kinds | ({"Null"} if argument.optional else set()))
