"""Within one call: whether a kernel that writes its out over bytes of an input it reads for the
last time reads each of those bytes before it writes over them (EG518 calls the overlap only
where it may not). Follows the order ExecuTorch's kernels go through their tensors in."""

from __future__ import annotations

import math

from export_guards.pte.reader.dataflow import Access, arena_slot
from export_guards.pte.reader.operators import (
    DISJOINT_POOLS,
    ELEMENTWISE,
    INNER_REDUCTIONS,
    RIGHT_MATRIX,
    SCALAR_HOISTING,
    SELF_COPIED_FIRST,
)
from export_guards.pte.reader.tensors import element_bytes
from export_guards.pte.reader.wheel import Bool, DelegateCall, ExecutionPlan, Int, IntList, KernelCall, Tensor

__all__ = ["hoists_a_scalar", "reads_before_overwriting"]


def reads_before_overwriting(plan: ExecutionPlan, access: Access, a: int, b: int, at: int) -> bool:
    """Whether instruction ``at``, which reads one of ``a``, ``b`` for the last time and writes
    the other over it, reads each input byte before it writes over it: an element-wise kernel
    going through both in step, a reduction over the inner dims, or a pool of disjoint windows,
    writing each out element behind the input elements still to read; a one-row matrix product
    over its right-hand matrix from its first byte; an index_put exactly on its ``self``; a
    delegate, which takes its inputs before it writes. Any other call may read what it has
    overwritten (a matrix product reads every row for each column; a broadcast input is read
    again)."""
    pairs = [
        (r, w) for r, w in ((a, b), (b, a)) if r in access.reads | access.maybe and w in access.writes | access.maybe
    ]
    call = plan.chains[0].instructions[at].instr_args
    if not pairs or isinstance(call, DelegateCall):
        return bool(pairs)
    if not isinstance(call, KernelCall) or not 0 <= call.op_index < len(plan.operators):
        return False
    operator = plan.operators[call.op_index].name
    for read, written in pairs:
        r, w = plan.values[read].val, plan.values[written].val
        starts = arena_slot(plan, read)[1], arena_slot(plan, written)[1]  # type: ignore[index]
        if (
            operator in ELEMENTWISE
            and list(r.sizes) == list(w.sizes)
            and list(r.dim_order) == list(w.dim_order)
            and _writes_behind(r, w, *starts)
        ):
            return True
        if (
            operator in INNER_REDUCTIONS
            and call.args[0] == read
            and _reduces_inner_dims(r, w)
            and _writes_behind(r, w, *starts)
        ):
            return True
        if (
            operator in DISJOINT_POOLS
            and call.args[0] == read
            and _pools_behind(plan, call, DISJOINT_POOLS[operator], r, w, *starts)
        ):
            return True
        if starts[0] != starts[1]:
            continue  # a matrix product from another byte: the kernel's order decides, unknown here
        if operator in SELF_COPIED_FIRST and call.args[0] == read and _same_layout(r, w):
            return True
        right = RIGHT_MATRIX.get(operator)
        if right is not None and len(call.args) > right and call.args[right] == read and math.prod(w.sizes[:-1]) == 1:
            return True
    return False


def _same_layout(read: Tensor, written: Tensor) -> bool:
    return (read.scalar_type, list(read.sizes), list(read.dim_order)) == (
        written.scalar_type,
        list(written.sizes),
        list(written.dim_order),
    )


def _writes_behind(read: Tensor, written: Tensor, read_at: int, written_at: int) -> bool:
    """Whether a kernel that makes out element i from the i-th run of input elements (one
    element each for an element-wise kernel, a row for a reduction over the inner dims), in
    order, writes each element only over input bytes it has already read: element i's write
    ends at or before run i + 1 of the input starts (linear in i: checked at both ends)."""
    count = math.prod(written.sizes)
    run = math.prod(read.sizes) // count if count else 0
    read_bytes, written_bytes = element_bytes(read), element_bytes(written)
    if read_bytes is None or written_bytes is None or not run:
        return False
    return count <= 1 or all(
        written_at + (i + 1) * written_bytes <= read_at + (i + 1) * run * read_bytes for i in {0, count - 2}
    )


def _reduces_inner_dims(read: Tensor, written: Tensor) -> bool:
    """Whether ``written`` keeps the outer dims of ``read`` (contiguous, both) and reduces the
    rest: out element i is made from the i-th run of input elements."""
    contiguous = all(list(t.dim_order) == list(range(len(t.sizes))) for t in (read, written))
    kept = list(written.sizes)
    if len(kept) == len(read.sizes):  # keepdim: the reduced dims stay, as ones
        while kept and kept[-1] == 1 and read.sizes[len(kept) - 1] != 1:
            kept.pop()
    return contiguous and kept == list(read.sizes[: len(kept)]) and math.prod(written.sizes) < math.prod(read.sizes)


def _pools_behind(
    plan: ExecutionPlan,
    call: KernelCall,
    ceil_mode_at: int,
    read: Tensor,
    written: Tensor,
    read_at: int,
    written_at: int,
) -> bool:
    """Whether a 2-D pool of disjoint windows (kernel = stride, no padding, no dilation, no ceil
    mode) over contiguous tensors writes each out element behind every window still to read:
    out element i ends by byte ``(i + 1) * width`` past its start, and window i + 1 starts at
    least ``(i + 1) * kernel width`` input elements past the input's."""
    kernel, stride, padding = (_ints(plan, call.args[k]) for k in (1, 2, 3))
    dilation = _ints(plan, call.args[4]) if ceil_mode_at == 5 else [1, 1]
    ceil_mode = plan.values[call.args[ceil_mode_at]].val
    contiguous = all(list(t.dim_order) == list(range(len(t.sizes))) for t in (read, written))
    if not (
        contiguous
        and kernel
        and len(kernel) == 2
        and stride in ([], kernel)
        and padding == [0, 0]
        and dilation == [1, 1]
    ):
        return False
    if not isinstance(ceil_mode, Bool) or ceil_mode.bool_val:
        return False
    read_bytes, written_bytes = element_bytes(read), element_bytes(written)
    return (
        read_bytes is not None
        and written_bytes is not None
        and written_at <= read_at
        and written_bytes <= kernel[1] * read_bytes
    )


def _ints(plan: ExecutionPlan, index: int) -> list[int] | None:
    """An int-list argument's ints, or None."""
    value = plan.values[index].val
    if not isinstance(value, IntList):
        return None
    items = [plan.values[i].val for i in value.items]
    return [item.int_val for item in items] if all(isinstance(item, Int) for item in items) else None


def hoists_a_scalar(plan: ExecutionPlan, a: int, b: int, at: int) -> bool:
    """Whether instruction ``at`` is an arithmetic kernel and one of ``a``, ``b`` has one element:
    the optimized kernels read such an input once, as a scalar, before writing anything."""
    call = plan.chains[0].instructions[at].instr_args
    if not isinstance(call, KernelCall) or not 0 <= call.op_index < len(plan.operators):
        return False
    return plan.operators[call.op_index].name in SCALAR_HOISTING and any(
        math.prod(plan.values[v].val.sizes) == 1 for v in (a, b)
    )
