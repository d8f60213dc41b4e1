"""EG516-EG518: what a method's values must satisfy that the runtime does not check: dim
orders that are permutations, values written before they are read, and no two tensors alive
at once in the same arena bytes, on every path through a method's control flow (``torch.cond``)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

from export_guards.analysis.dim_orders import is_channels_last, is_contiguous
from export_guards.pte.context import PteContext
from export_guards.pte.reader.dataflow import Access, arena_slot, read_before_written, tensor_arguments, views
from export_guards.pte.reader.in_call import hoists_a_scalar, reads_before_overwriting
from export_guards.pte.reader.operators import BYTE_COPIES, DIM_ORDER_BLIND, is_aten
from export_guards.pte.reader.tensors import describe_tensor, tensor_nbytes
from export_guards.pte.reader.wheel import DelegateCall, ExecutionPlan, Int, KernelCall, MoveCall, Tensor
from export_guards.report import Severity
from export_guards.ruleset import Hit, rule


@rule("EG516")
def dim_order_invalid(context: PteContext) -> Iterator[Hit]:
    program = context.pte.program
    if program is None:
        return
    for plan in program.execution_plan:
        takers = _takers(plan)
        for index, value in enumerate(plan.values):
            tensor = value.val
            if not isinstance(tensor, Tensor):
                continue
            order, rank = list(tensor.dim_order), len(tensor.sizes)
            if sorted(order) != list(range(rank)):
                yield Hit(
                    f"tensor value {index} of method '{plan.name}' ({describe_tensor(tensor)}) has dim order "
                    f"{order}, not a permutation of its {rank} dimensions: the runtime "
                    f"rejects it at load (1.2 and later) or computes wrong strides (earlier)",
                    method=plan.name,
                )
            elif index in takers and not is_contiguous(order) and not is_channels_last(order):
                yield _unusual_dim_order(plan, index, takers[index])


def _unusual_dim_order(plan: ExecutionPlan, index: int, takers: list[str]) -> Hit:
    """A dim order that is a permutation but neither contiguous nor channels-last, on a tensor
    that ATen kernels take (``takers``: what takes it, as ``_takers`` names them)."""
    tensor = plan.values[index].val
    what = f"tensor value {index} of method '{plan.name}' ({describe_tensor(tensor)}) has dim order {list(tensor.dim_order)}"
    refusing = next((t for t in takers if is_aten(t) and t not in DIM_ORDER_BLIND), None)
    if refusing is not None and _constant(plan, index):
        # A parameter exported in a memory format whose size-1 dimension makes its strides name
        # another permutation (a depthwise weight [C, 1, kh, kw] in channels-last): the model's cause.
        return Hit(
            f"{what}, and {refusing} takes it: this constant (a parameter or buffer) was in a memory format other "
            f"than contiguous when the model was exported, and a size-1 dimension made its strides another "
            f"permutation; ExecuTorch's kernels take only contiguous and channels-last dim orders and refuse the call",
            method=plan.name,
            fix=_CONSTANT_DIM_ORDER_FIX,
            node=refusing,  # placed on the user's line where the caller knows the graph
        )
    if refusing is not None:
        return Hit(
            f"{what}, and {refusing} takes it: ExecuTorch's kernels take only contiguous and channels-last dim "
            f"orders and refuse the call",
            method=plan.name,
        )
    blind = ", ".join(sorted({t for t in takers if is_aten(t)}))
    # XNNPACK permutes dims by the dim order, dim_order_ops copy by it, and the caller gets strides from it
    ordered = next(
        (t for t in takers if t == "a delegate" or t.startswith("dim_order_ops::")),
        "the caller" if index in plan.outputs else None,
    )
    if ordered is not None:
        return Hit(
            f"{what}: {blind} read and write its bytes as contiguous, while {ordered} takes them in this dim order "
            f"(the values arrive permuted)",
            method=plan.name,
        )
    return Hit(
        f"{what}, and {', '.join(sorted(set(takers)))} take it: the optimized kernels executorch.runtime links for "
        f"{blind} ignore dim orders and read the bytes as contiguous, so it runs there; ExecuTorch's portable kernels "
        f"refuse the call (a runtime built with them fails)",
        method=plan.name,
        severity=Severity.WARNING,
    )


_CONSTANT_DIM_ORDER_FIX = (
    "Export the parameters contiguous: model.to(memory_format=torch.contiguous_format) before torch.export (a "
    "model moved to torch.channels_last keeps its parameters so), or .contiguous() that weight; keep channels-last "
    "for the inputs, if anywhere."
)


def _constant(plan: ExecutionPlan, index: int) -> bool:
    """A tensor whose data the program holds (a parameter, buffer or lifted constant)."""
    tensor = plan.values[index].val
    return tensor.data_buffer_idx > 0 or (
        tensor.extra_tensor_info is not None and bool(tensor.extra_tensor_info.fully_qualified_name)
    )


def _takers(plan: ExecutionPlan) -> dict[int, list[str]]:
    """Each tensor that an ATen kernel call reads or writes -> what takes it: the operator name
    of every kernel call, and "a delegate" for each delegate call."""
    takers: dict[int, list[str]] = {}
    for chain in plan.chains:
        for instruction in chain.instructions:
            call = instruction.instr_args
            if isinstance(call, DelegateCall):
                name = "a delegate"
            elif isinstance(call, KernelCall) and 0 <= call.op_index < len(plan.operators):
                name = plan.operators[call.op_index].name
            else:
                continue
            for index in tensor_arguments(plan, call.args):
                takers.setdefault(index, []).append(name)
    return {index: names for index, names in takers.items() if any(map(is_aten, names))}


@rule("EG517")
def value_read_before_written(context: PteContext) -> Iterator[Hit]:
    for plan, accesses in context.straight_methods:
        ready = _ready(plan)
        view_bases = views(plan, accesses)
        for instruction, value, written_at in read_before_written(accesses, ready, view_bases):
            later = (
                f"instruction {written_at} writes it later" if written_at is not None else "no instruction writes it"
            )
            yield Hit(
                f"instruction {instruction} of method '{plan.name}' reads tensor value {value} "
                f"({describe_tensor(plan.values[value].val)}) before anything writes it ({later}): it reads "
                f"whatever the arena holds",
                method=plan.name,
            )
        touched = set().union(*(a.writes | a.maybe for a in accesses)) if accesses else set()
        for value in plan.outputs:
            if _planned(plan, value) and value not in ready and value not in touched and value not in view_bases:
                yield Hit(
                    f"method '{plan.name}' returns tensor value {value}, which no instruction writes: "
                    f"it returns whatever the arena holds",
                    method=plan.name,
                )


@rule("EG518")
def arena_overlap(context: PteContext) -> Iterator[Hit]:
    for plan, accesses in context.straight_methods:
        yield from _overlap_hits(plan, accesses, range(len(accesses)))
    for plan, paths in context.branching_methods:
        reported: set[frozenset[int]] = set()
        for path, accesses in paths:  # one finding per pair of values, on the first path that shows it
            for pair, hit in _branch_overlap_hits(plan, accesses, path):
                if pair not in reported:
                    reported.add(pair)
                    yield hit


def _overlap_hits(plan: ExecutionPlan, accesses: list[Access], at: Sequence[int]) -> Iterator[Hit]:
    """The overlaps of a method run straight through (``at``: each instruction's chain index,
    its position; -1 and the count are before the first and after the last)."""
    for a, b, first, last, warning in _live_overlaps(plan, accesses, at):
        if warning:
            yield Hit(
                f"instruction {at[first]} of method '{plan.name}' writes tensor value {a} or {b} over the other, a one-element "
                f"input: the optimized kernel executorch.runtime links reads that element once, before it writes, and "
                f"computes right; ExecuTorch's portable kernel reads it again for each element and computes wrong values",
                method=plan.name,
                severity=Severity.WARNING,
            )
            continue
        yield Hit(
            f"tensor values {a} ({_writer(plan, accesses, at, a)}) and {b} ({_writer(plan, accesses, at, b)}) of method "
            f"'{plan.name}' share bytes of arena {plan.values[a].val.allocation_info.memory_id} while both are alive "
            f"(instructions {first} to {last}): one overwrites the other",
            method=plan.name,
        )


def _branch_overlap_hits(
    plan: ExecutionPlan, accesses: list[Access], path: Sequence[int]
) -> Iterator[tuple[frozenset[int], Hit]]:
    """The overlaps on one path of a method with control flow, each with the pair of values the
    method sees (a branch's output by the value it is moved into)."""
    moved_into = {a.view[1]: a.view[0] for a, i in zip(accesses, path) if a.view is not None and _is_move(plan, i)}
    for a, b, first, last, warning in _live_overlaps(plan, accesses, path):
        if warning:
            continue  # a kernel's own reading order: the straight methods' warning, not control flow's
        seen = frozenset(moved_into.get(v, v) for v in (a, b))
        what = " and ".join(_branch_value(plan, accesses, path, v, moved_into) for v in (a, b))
        yield (
            seen,
            Hit(
                f"{what} of method '{plan.name}' share bytes of arena {plan.values[a].val.allocation_info.memory_id} "
                f"while both are alive (instructions {_instruction(path, first)} to {_instruction(path, last)}, when the branches of its "
                f"control flow run instructions {_runs(path)}): one overwrites the other. A MoveCall moves a branch's "
                f"output tensor, not its bytes, and the memory plan lets later code reuse the bytes of a branch's outputs",
                method=plan.name,
                fix=_CONTROL_FLOW_FIX,
            ),
        )


_CONTROL_FLOW_FIX = (
    "Export with the guards (export-guards lint, lower_with_guards, a guarded recipe, or "
    "to_executorch(ExecutorchBackendConfig(passes=emit_passes()))), which give each control-flow output bytes of its "
    "own; or copy each torch.cond result in the model, right where it is made: out = torch.cond(...).clone()."
)


def _branch_value(
    plan: ExecutionPlan, accesses: list[Access], path: Sequence[int], value: int, moved_into: dict[int, int]
) -> str:
    writer = _writer(plan, accesses, path, value)
    if value not in moved_into:
        return f"tensor value {value} ({writer})"
    return f"tensor value {moved_into[value]} (a control-flow output: the tensor value {value} moved into it, {writer})"


def _live_overlaps(
    plan: ExecutionPlan, accesses: list[Access], at: Sequence[int]
) -> Iterator[tuple[int, int, int, int, bool]]:
    """(a, b, first, last, warning) for each pair of tensors alive at once in the same arena
    bytes, less those that never disagree; ``first`` and ``last`` are positions in
    ``accesses``, ``at`` maps them to chain indices. ``warning``: a one-element input that the
    optimized kernel reads once, before it writes (see ``hoists_a_scalar``)."""
    lifetimes, roots = _lifetimes(plan, accesses)
    for a, b, first, last in _overlaps(plan, lifetimes):
        if roots[a] == roots[b] or _copied_onto_itself(plan, accesses, at, a, b, first, last):
            continue  # views on their base's memory; a copy of its own bytes
        if first == last and first < len(at):
            # a view placed on a call's out (a static reshape) shares its bytes: the call's order decides for it too
            if any(
                reads_before_overwriting(plan, accesses[first], x, y, at[first])
                for x, y in {(a, b), (roots[a], roots[b])}
            ):
                continue  # one call reads each byte before it writes over it
            if {a, b} <= accesses[first].writes and lifetimes[a] == lifetimes[b] == [(first, first)]:
                continue  # two outs of one call that nothing reads (a layer norm's stats): either may win
            if hoists_a_scalar(plan, a, b, at[first]):
                yield a, b, first, last, True
                continue
        yield a, b, first, last, False


def _instruction(at: Sequence[int], position: int) -> int | str:
    """The chain index at a position; before the first instruction, the method's inputs; past
    the last, the method's return."""
    if position < 0:
        return "the method's inputs"
    return at[position] if position < len(at) else "the method's return"


def _runs(path: Sequence[int]) -> str:
    """A path as ranges of chain indices: ``0-3, 8-11``."""
    ranges: list[list[int]] = []
    for i in path:
        if ranges and ranges[-1][1] == i - 1:
            ranges[-1][1] = i
        else:
            ranges.append([i, i])
    return ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in ranges)


def _is_move(plan: ExecutionPlan, index: int) -> bool:
    return isinstance(plan.chains[0].instructions[index].instr_args, MoveCall)


def _writer(plan: ExecutionPlan, accesses: list[Access], at: Sequence[int], value: int) -> str:
    """What writes a value first: ``written by aten::add.out at instruction 2``."""
    position = next((p for p, a in enumerate(accesses) if value in a.writes | a.maybe), None)
    if position is None:
        return "a method input" if value in plan.inputs else "written by no instruction"
    call = plan.chains[0].instructions[at[position]].instr_args
    if isinstance(call, KernelCall) and 0 <= call.op_index < len(plan.operators):
        operator = plan.operators[call.op_index]
        name = f"{operator.name}.{operator.overload}" if operator.overload else operator.name
    else:
        name = "a delegate call" if isinstance(call, DelegateCall) else type(call).__name__
    return f"written by {name} at instruction {at[position]}"


def _copied_onto_itself(
    plan: ExecutionPlan, accesses: list[Access], at: Sequence[int], a: int, b: int, first: int, last: int
) -> bool:
    """Whether instruction ``first`` writes one of ``a``, ``b`` as a byte copy of the other onto
    the other's own bytes, and neither is written again while both are alive: the bytes they
    share never disagree (memory planning may place them so)."""
    if first >= len(at):
        return False
    call = plan.chains[0].instructions[at[first]].instr_args
    if not isinstance(call, KernelCall) or not call.args or not 0 <= call.op_index < len(plan.operators):
        return False
    if plan.operators[call.op_index].name not in BYTE_COPIES:
        return False
    for target, source in ((a, b), (b, a)):
        if (
            call.args[0] == source
            and target in accesses[first].writes
            and _same_leading_bytes(plan, call, source, target)
        ):
            later = accesses[first + 1 : last + 1]
            return not any({a, b} & (access.writes | access.maybe | access.in_place) for access in later)
    return False


def _same_leading_bytes(plan: ExecutionPlan, call: KernelCall, source: int, target: int) -> bool:
    s, t = plan.values[source].val, plan.values[target].val
    slots = arena_slot(plan, source), arena_slot(plan, target)
    if None in slots or slots[0][:2] != slots[1][:2] or s.scalar_type != t.scalar_type:  # type: ignore[index]
        return False
    if list(s.dim_order) != list(range(len(s.sizes))) or list(t.dim_order) != list(range(len(t.sizes))):
        return False
    if plan.operators[call.op_index].name != "aten::slice_copy":
        return True
    if len(call.args) < 6:
        return False  # slice_copy(self, dim, start, end, step, out); fewer is EG512's
    dim, start, _, step = (_int(plan, i) for i in call.args[1:5])
    rank = len(s.sizes)
    return (
        dim is not None
        and step == 1
        and start in (0, None)
        and all(size == 1 for size in s.sizes[: dim % rank if rank else 0])
    )


def _int(plan: ExecutionPlan, index: int) -> int | None:
    value = plan.values[index].val if 0 <= index < len(plan.values) else None
    return value.int_val if isinstance(value, Int) else None


def _planned(plan: ExecutionPlan, index: int) -> bool:
    """A tensor whose memory the plan gives (in an arena) and the program does not initialise."""
    tensor = plan.values[index].val if 0 <= index < len(plan.values) else None
    return isinstance(tensor, Tensor) and tensor.allocation_info is not None and tensor.data_buffer_idx == 0


def _ready(plan: ExecutionPlan) -> frozenset[int]:
    """Values that hold data before the first instruction: inputs, constants, initial state,
    and tensors whose memory the caller provides."""
    ready = set(plan.inputs)
    ready.update(i for i, v in enumerate(plan.values) if isinstance(v.val, Tensor) and not _planned(plan, i))
    return frozenset(ready)


Span = tuple[int, int]  # the first and last instruction that uses a tensor's bytes


def _lifetimes(plan: ExecutionPlan, accesses: list[Access]) -> tuple[dict[int, list[Span]], dict[int, int]]:
    """When each arena tensor's bytes hold a value still needed: from the instruction that
    writes it to the last that reads it (inputs from before the first instruction, -1; outputs
    until after the last). State written in place (a mutable buffer) holds its old value until
    its last read before that write, and its new one from the write to the end. A view and its
    base share their spans (and memory): the second result maps each tensor to its base."""
    end = len(accesses)
    base_of = views(plan, accesses)

    def base(value: int) -> int:
        seen = set()
        while value in base_of and value not in seen:
            seen.add(value)
            value = base_of[value]
        return value

    uses: dict[int, list[int]] = {}
    exists = range(len(plan.values)).__contains__  # an index out of range is EG512's
    for value in filter(exists, plan.inputs):
        uses.setdefault(base(value), []).append(-1)
    read = {v for a in accesses for v in a.reads | a.maybe} | set(plan.outputs)
    holder = _Holders(plan, read)
    for i, access in enumerate(accesses):
        for value in access.reads | access.maybe:
            uses.setdefault(base(holder.of(value)), []).append(i)
        for value in access.writes | access.maybe:
            uses.setdefault(base(value), []).append(i)
            holder.wrote(value, i)
    for value in filter(exists, plan.outputs):
        uses.setdefault(base(holder.of(value)), []).append(end)
    rewritten = {}  # state -> the first instruction that writes it in place
    for i, access in enumerate(accesses):
        for value in access.in_place:
            rewritten.setdefault(base(value), i)
    spans: dict[int, list[Span]] = {}
    for root, at in uses.items():
        if root in rewritten:
            write = rewritten[root]
            before = [i for i in at if i < write]
            spans[root] = ([(-1, max(before))] if before else []) + [(write, end)]
        else:
            spans[root] = [(min(at), max(at))]
    planned = (
        v
        for v in {*uses, *base_of}
        if isinstance(plan.values[v].val, Tensor) and plan.values[v].val.allocation_info is not None
    )
    lifetimes = {v: spans[base(v)] for v in planned if base(v) in spans}
    return lifetimes, {v: base(v) for v in lifetimes}


class _Holders:
    """Which value a read gets: a tensor whose exact arena bytes were last written as another
    value of the same dtype and layout (the same sizes and dim order, or both contiguous: a
    reshape reads the same elements in order), which nothing reads under its own index, reads
    that value (one tensor under two indices; the runtime cannot tell them apart)."""

    def __init__(self, plan: ExecutionPlan, read: set[int]) -> None:
        self.plan, self.read = plan, read
        self.last: dict[tuple, int] = {}  # the bytes -> the value last written there
        self.written_at = dict.fromkeys(plan.inputs, -1)  # a value -> the instruction that last wrote it

    def _key(self, value: int) -> tuple | None:
        slot = arena_slot(self.plan, value)
        if slot is None:
            return None
        tensor = self.plan.values[value].val
        if list(tensor.dim_order) == list(
            range(len(tensor.sizes))
        ):  # contiguous: a reshape reads the same elements in order
            return (slot, tensor.scalar_type, "contiguous")  # the slot holds the byte count
        return (slot, tensor.scalar_type, tuple(tensor.sizes), tuple(tensor.dim_order))

    def wrote(self, value: int, instruction: int) -> None:
        key = self._key(value)
        if key is not None:
            self.last[key] = value
            self.written_at[value] = instruction

    def of(self, value: int) -> int:
        key = self._key(value)
        other = self.last.get(key, value) if key is not None else value
        # Only an input or a value some instruction wrote (one never written is a view:
        # EG517's ``views``), and not two names that one call writes.
        later = value in self.written_at and self.written_at.get(other, -1) > self.written_at[value]
        return other if later and other not in self.read else value


def _overlaps(plan: ExecutionPlan, lifetimes: dict[int, list[Span]]) -> Iterator[tuple[int, int, int, int]]:
    """Pairs of tensors in the same arena bytes whose lifetimes overlap, with the instructions
    they share; spans that only touch (one tensor last used by the instruction that first writes
    the other) share that one instruction."""
    slots = []
    for value, spans in lifetimes.items():
        tensor = plan.values[value].val
        nbytes = tensor_nbytes(tensor)
        if not nbytes:
            continue
        info = tensor.allocation_info
        start = info.memory_offset_low + (info.memory_offset_high << 32)
        # with the first and last instruction of all its spans: most pairs in the same bytes are alive apart
        bounds = (min(a for a, _ in spans), max(b for _, b in spans)) if spans else (math.inf, -math.inf)
        slots.append((info.memory_id, start, start + nbytes, value, spans, *bounds))
    slots.sort(key=lambda slot: slot[:4])
    open_slots: list[tuple[int, int, int, int, list[Span], float, float]] = []
    for slot in slots:
        arena, start, first, last = slot[0], slot[1], slot[5], slot[6]
        open_slots = [s for s in open_slots if s[0] == arena and s[2] > start]
        for other in open_slots:
            if other[5] > last or other[6] < first:
                continue  # no span of one meets a span of the other
            shared = next((_shared(a, b) for a in other[4] for b in slot[4] if _shared(a, b)), None)
            if shared:
                yield other[3], slot[3], *shared
        open_slots.append(slot)


def _shared(a: Span, b: Span) -> Span | None:
    first, last = max(a[0], b[0]), min(a[1], b[1])
    return (first, last) if first <= last else None
