"""What each instruction of a method reads and writes, in order: the static dataflow that the
runtime trusts (it checks neither that a value is written before it is read, nor that two
tensors alive at once do not share arena bytes).

Operators are read from their schemas (an argument marked ``(a!)`` is written, ``out`` or in
place, and so is the slot the emitter adds for the return); an operator torch does not know
here follows ExecuTorch's out-variant convention (its last argument is what it writes), and
its other tensor arguments are counted as possibly written too, so that nothing is claimed
about them. A delegate call writes the external values of its XNNPACK graph that a node writes
and reads the others (an output no node writes keeps what it held);
a call of another delegate may read and write any of its arguments.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import final

from export_guards.pte.reader.operators import VIEWS
from export_guards.pte.reader.schemas import operator_schema
from export_guards.pte.reader.tensors import tensor_nbytes
from export_guards.pte.reader.wheel import (
    DelegateCall,
    ExecutionPlan,
    FreeCall,
    JumpFalseCall,
    KernelCall,
    MoveCall,
    OptionalTensorList,
    Tensor,
    TensorList,
)
from export_guards.pte.reader.xnnpack import EXTERNAL_INPUT, EXTERNAL_OUTPUT, XnnPayload

__all__ = [
    "Access",
    "arena_slot",
    "method_accesses",
    "path_accesses",
    "read_before_written",
    "tensor_arguments",
    "views",
]


@final
@dataclass(frozen=True)
class Access:
    """What one instruction does with values (indices into the method's values).

    Attributes:
        reads: the tensors it reads before writing anything.
        writes: the tensors it certainly writes.
        maybe: tensors it may read or write (an unknown operator's, another delegate's).
        in_place: the tensors it writes in place (``copy_``'s ``self``): state carried over.
        view: ``(view, base)`` when it makes a tensor that shares its base's memory
            (``executorch_prim::et_view``, which memory planning places on its base; a
            ``MoveCall``'s target, which becomes its source's tensor).
    """

    reads: frozenset[int] = field(default_factory=frozenset)
    writes: frozenset[int] = field(default_factory=frozenset)
    maybe: frozenset[int] = field(default_factory=frozenset)
    in_place: frozenset[int] = field(default_factory=frozenset)
    view: tuple[int, int] | None = None


def method_accesses(plan: ExecutionPlan, payloads: Mapping[int, XnnPayload]) -> list[Access] | None:
    """Each instruction's access, in execution order, for a method that runs one chain
    straight through; None for control flow (jumps, several chains), whose order is not static.
    ``payloads`` are the method's decoded XNNPACK payloads, by delegate index."""
    if len(plan.chains) != 1:
        return None
    instructions = [i.instr_args for i in plan.chains[0].instructions]
    if any(isinstance(i, JumpFalseCall) for i in instructions):
        return None
    return [_access(plan, i, payloads) for i in instructions]


def path_accesses(plan: ExecutionPlan, path: Sequence[int], payloads: Mapping[int, XnnPayload]) -> list[Access]:
    """Each instruction's access along one path of a method with jumps (``paths.forward_paths``:
    the chain indices of the instructions it runs), in order."""
    instructions = plan.chains[0].instructions
    return [_access(plan, instructions[i].instr_args, payloads) for i in path]


def _access(plan: ExecutionPlan, instruction: object, payloads: Mapping[int, XnnPayload]) -> Access:
    if isinstance(instruction, KernelCall):
        return _kernel_access(plan, instruction)
    if isinstance(instruction, DelegateCall):
        payload = payloads.get(instruction.delegate_index)
        if payload is None:
            return Access(maybe=tensor_arguments(plan, instruction.args))
        reads, writes = set(), set()
        written = {value for node in payload.nodes for value in node.writes}
        for value in payload.values:
            if value.flags & (EXTERNAL_INPUT | EXTERNAL_OUTPUT) and value.external_id < len(instruction.args):
                tensors = tensor_arguments(plan, [instruction.args[value.external_id]])
                # What a node writes is written, whatever its flag says (the runtime binds the
                # tensor's memory either way); an external value no node writes is read.
                (writes if value.value_id in written else reads).update(tensors)
        return Access(reads=frozenset(reads), writes=frozenset(writes))
    if isinstance(instruction, MoveCall):
        # The runtime moves the value, not its bytes: the target becomes the source's tensor,
        # in the source's memory (a view of it, as far as memory is concerned).
        source, target = tensor_arguments(plan, [instruction.move_from]), tensor_arguments(plan, [instruction.move_to])
        view = (next(iter(target)), next(iter(source))) if source and target else None
        return Access(reads=source, writes=target, view=view)
    if isinstance(instruction, FreeCall):
        return Access()
    return Access(maybe=frozenset())


def _kernel_access(plan: ExecutionPlan, call: KernelCall) -> Access:
    operator = plan.operators[call.op_index] if 0 <= call.op_index < len(plan.operators) else None
    if operator is not None and operator.name in VIEWS and len(call.args) >= 2:
        base, view = tensor_arguments(plan, call.args[:1]), tensor_arguments(plan, call.args[-1:])
        if base and view:
            return Access(reads=base, writes=view, view=(next(iter(view)), next(iter(base))))
    schema = _written_arguments(operator.name, operator.overload) if operator is not None else None
    arguments, returns = schema if schema is not None else ((), 0)
    # The emitter appends one slot for what the call returns, or one per returned tensor.
    if schema is None or len(call.args) - len(arguments) not in (1, max(returns, 1)):
        last = tensor_arguments(plan, call.args[-1:])  # unknown: the out-variant convention
        return Access(
            reads=tensor_arguments(plan, call.args[:-1]) - last, writes=last, maybe=tensor_arguments(plan, call.args)
        )
    # An out variant's generated wrapper never touches the return slot (ExecuTorch's codegen
    # leaves its return assignment empty); a functional operator writes its result there.
    returned = [] if any(w and out for w, out in arguments) else [(True, True)] * (len(call.args) - len(arguments))
    written = [*arguments, *returned]
    reads, writes, in_place = set(), set(), set()
    for index, (is_written, is_out) in zip(call.args, written):
        tensors = tensor_arguments(plan, [index])
        if is_written:
            writes |= tensors
            if not is_out:
                in_place |= tensors
        else:
            reads |= tensors
    return Access(reads=frozenset(reads - writes), writes=frozenset(writes), in_place=frozenset(in_place))


def tensor_arguments(plan: ExecutionPlan, indices: list[int]) -> frozenset[int]:
    """The tensor values among ``indices``, with the items of tensor lists."""
    found: set[int] = set()
    for index in indices:
        if not 0 <= index < len(plan.values):
            continue
        value = plan.values[index].val
        if isinstance(value, Tensor):
            found.add(index)
        elif isinstance(value, (TensorList, OptionalTensorList)):
            found.update(i for i in value.items if 0 <= i < len(plan.values) and isinstance(plan.values[i].val, Tensor))
    return frozenset(found)


@functools.cache
def _written_arguments(name: str, overload: str) -> tuple[tuple[tuple[bool, bool], ...], int] | None:
    """Per schema argument: (written, written as an ``out`` argument rather than in place);
    and how many tensors the op returns."""
    schema = operator_schema(name, overload)
    if schema is None:
        return None
    arguments = tuple((a.written, a.kwarg_only or a.name.startswith("out")) for a in schema.arguments)
    return arguments, len(schema.returns)


def views(plan: ExecutionPlan, accesses: list[Access]) -> dict[int, int]:
    """Each view -> its base: made by an instruction (``et_view``), or placed by the emitter,
    with no instruction, on the same arena bytes as the tensor last written there before it is
    first used (a static reshape: same arena, offset and size), or as a method input there."""
    found = {a.view[0]: a.view[1] for a in accesses if a.view is not None}
    # Inputs hold the caller's data from the start: never views, and written before anything.
    touched = set(plan.inputs).union(*(a.writes | a.maybe for a in accesses))
    last_written: dict[tuple[int, int, int], int] = {}
    for value in plan.inputs:
        slot = arena_slot(plan, value) if 0 <= value < len(plan.values) else None
        if slot is not None:
            last_written[slot] = value
    for access in accesses:
        for value in sorted(access.reads | access.maybe):
            slot = arena_slot(plan, value)
            if value not in touched and value not in found and slot in last_written:
                found[value] = last_written[slot]
        for value in access.writes | access.maybe:
            slot = arena_slot(plan, value)
            if slot is not None:
                last_written[slot] = value
    for value in plan.outputs:  # an output that is a view of what was last written there
        slot = arena_slot(plan, value) if 0 <= value < len(plan.values) else None
        if value not in touched and value not in found and slot in last_written:
            found[value] = last_written[slot]
    return found


def arena_slot(plan: ExecutionPlan, index: int) -> tuple[int, int, int] | None:
    """(arena, offset, bytes) of a memory-planned tensor; None for any other value."""
    tensor = plan.values[index].val
    info = tensor.allocation_info if isinstance(tensor, Tensor) else None
    if info is None or tensor.data_buffer_idx != 0:
        return None
    nbytes = tensor_nbytes(tensor)
    return (info.memory_id, info.memory_offset_low + (info.memory_offset_high << 32), nbytes or 0)


def read_before_written(
    accesses: list[Access], ready: frozenset[int], view_bases: Mapping[int, int]
) -> Iterator[tuple[int, int, int | None]]:
    """(instruction, value, the instruction that first writes it or None) for each tensor read
    before anything writes it, other than ``ready`` ones (inputs, constants, initial state),
    views of a written base (``view_bases``), and state that an instruction writes in place
    later (a mutable buffer)."""
    first_write: dict[int, int] = {}
    touched: set[int] = set()
    in_place: set[int] = set()
    for i, access in enumerate(accesses):
        for value in access.writes:
            first_write.setdefault(value, i)
        touched |= access.writes | access.maybe
        in_place |= access.in_place | access.maybe
    seen: set[int] = set(ready)
    for i, access in enumerate(accesses):
        for value in sorted(access.reads - seen):
            if value in in_place or view_bases.get(value) in seen:
                continue
            if value not in touched or first_write.get(value, -1) > i:
                yield i, value, first_write.get(value)
        seen |= access.reads | access.writes | access.maybe
