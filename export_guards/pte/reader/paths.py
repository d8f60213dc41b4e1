"""The instruction sequences a method with forward jumps can run (``torch.cond``'s branches):
each one straight-line code, which the dataflow rules read as they read a method without jumps.

ExecuTorch emits a ``cond`` inline: a ``JumpFalseCall`` on the predicate over the true branch,
the true branch, an unconditional jump (a ``JumpFalseCall`` on a constant ``False``) over the
false branch, and the false branch; each branch ends with ``MoveCall``s of its outputs onto the
values the parent reads. A method whose jumps all go forward runs one of finitely many paths;
a backward jump (``map``'s loop) has no static bound and is left alone.
"""

from __future__ import annotations

from export_guards.pte.reader.wheel import Bool, ExecutionPlan, JumpFalseCall

__all__ = ["MAX_PATHS", "forward_paths"]

MAX_PATHS = 256  # 8 conds in a row; past that the method is left alone, as before


def forward_paths(plan: ExecutionPlan, limit: int = MAX_PATHS) -> list[tuple[int, ...]] | None:
    """Each path through a one-chain method with jumps, as the chain indices of the
    instructions it runs, in order; None for a method without jumps (it has one path, read
    straight), several chains, a jump backward or out of the chain, or more than ``limit`` paths."""
    if len(plan.chains) != 1:
        return None
    instructions = [i.instr_args for i in plan.chains[0].instructions]
    jumps = {i: call for i, call in enumerate(instructions) if isinstance(call, JumpFalseCall)}
    if not jumps or any(not i < call.destination_instruction <= len(instructions) for i, call in jumps.items()):
        return None
    paths: list[tuple[int, ...]] = []
    pending: list[tuple[int, tuple[int, ...]]] = [(0, ())]
    while pending:
        at, path = pending.pop()
        while at < len(instructions):
            path += (at,)
            call = jumps.get(at)
            if call is None:
                at += 1
                continue
            taken = _constant_condition(plan, call.cond_value_index, instructions)
            if taken is None:  # a value known only at run time: both ways
                pending.append((call.destination_instruction, path))
                at += 1
            else:  # a constant: jump when it is False
                at = at + 1 if taken else call.destination_instruction
        paths.append(path)
        if len(paths) > limit:
            return None
    return paths


def _constant_condition(plan: ExecutionPlan, index: int, instructions: list[object]) -> bool | None:
    """A ``Bool`` that no input brings and no call writes (a loop's ``done`` flag is one
    that a call writes)."""
    value = plan.values[index].val if 0 <= index < len(plan.values) else None
    if not isinstance(value, Bool) or index in plan.inputs:
        return None
    if any(index in getattr(call, "args", ()) for call in instructions):
        return None
    return value.bool_val
