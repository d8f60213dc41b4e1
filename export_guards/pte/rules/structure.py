"""EG501-EG505: a ``.pte`` file's header, flatbuffer, segments, alignment and tensor data."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

from export_guards.pte.context import PteContext
from export_guards.pte.reader.file import FILE_IDENTIFIER, MIN_ALIGNMENT, PteFile, Region
from export_guards.pte.reader.headers import ExtendedHeader
from export_guards.pte.reader.tensors import describe_tensor, tensor_nbytes
from export_guards.pte.reader.wheel import (
    AllocationDetails,
    ExecutionPlan,
    Tensor,
    TensorDataLocation,
    TensorShapeDynamism,
)
from export_guards.report import Severity
from export_guards.ruleset import Hit, rule

# A field that ExecuTorch's runtime never acts on is reported as a warning that says so.
_IGNORED = " (the runtime ignores this; other loaders may not)"


@rule("EG501")
def pte_header(context: PteContext) -> Iterator[Hit]:
    pte = context.pte
    if pte.size < 8:
        yield Hit(f"{pte.name} is {pte.size} bytes long: too short to be an ExecuTorch program")
        return
    if pte.identifier != FILE_IDENTIFIER:
        identifier = (4, 4)  # the flatbuffer's file identifier
        if pte.identifier[:2] == b"ET" and pte.identifier[2:].isdigit():
            yield Hit(
                f"{pte.name} has schema version {pte.identifier.decode()}; this ExecuTorch reads "
                f"{FILE_IDENTIFIER.decode()}",
                fix="Export and run with the same ExecuTorch version.",
                region=identifier,
            )
        else:
            yield Hit(
                f"{pte.name} is not an ExecuTorch program: bytes 4-8 are {pte.identifier!r}, expected {FILE_IDENTIFIER!r}",
                region=identifier,
            )
        return
    header = pte.header
    if header is None:
        return  # a program without segments: the flatbuffer is the whole file
    fields = (8, ExtendedHeader.EXPECTED_LENGTH)  # the extended header, whose fields are wrong
    if not header.is_valid():
        yield Hit(
            f"the extended header's length is {header.length}; it must be at least {ExtendedHeader.MINIMUM_LENGTH}",
            region=fields,
        )
    if (
        not 8 + ExtendedHeader.MINIMUM_LENGTH <= header.program_size <= pte.size
    ):  # the runtime reads no further than the length it needs
        yield Hit(
            f"the header's program size {header.program_size} is outside the file ({pte.size} bytes)", region=fields
        )
    base, data_size = header.segment_base_offset, header.segment_data_size
    if base > pte.size or base + data_size > pte.size:
        yield Hit(
            f"the header says the segment data ends at byte {base + data_size}, but the file has {pte.size} bytes: it is truncated",
            region=fields,
        )
        return
    placed = [region for region in pte.segments if region.size]
    if not base or not placed:
        return
    # ExecuTorch writes the segments, in order, up to the last byte of the file: where they end
    # is the one witness of whether the base offset the runtime reads them from is right.
    short = pte.size - max(region.end for region in placed)
    if short > 0:
        yield Hit(
            f"the segments end {short} bytes before the file does, but ExecuTorch writes them up to its end: the "
            f"header's segment base offset ({base}) is {short} bytes short (or a segment's size is wrong), so the "
            f"runtime reads segment data from bytes that are not its own (wrong constants, a delegate that fails)",
            region=fields,
        )
    elif base < header.program_size:
        yield Hit(
            f"the header's program size ({header.program_size}) runs past the segment base offset ({base}); the "
            f"segments end where the file does, so the base is right and the runtime, which reads the segments "
            f"from it, is not misled{_IGNORED}",
            region=fields,
            severity=Severity.WARNING,
        )


@rule("EG502")
def pte_unparsable(context: PteContext) -> Iterator[Hit]:
    pte = context.pte
    if pte.size < 8 or pte.identifier != FILE_IDENTIFIER or not 8 <= pte.program_size <= pte.size:
        return  # EG501 says why
    flatbuffer = (0, pte.program_size)
    if pte.program is None:
        yield from (Hit(problem, region=flatbuffer) for problem in pte.problems)
    elif not pte.program.execution_plan:
        yield Hit("the program has no method", region=flatbuffer)


@rule("EG503")
def segment_out_of_bounds(context: PteContext) -> Iterator[Hit]:
    pte, program = context.pte, context.pte.program
    if program is None:
        return
    if any(s.size for s in program.segments) and pte.header is None:
        yield Hit(
            f"the program lists {len(program.segments)} segment(s) but the file has no extended header to place them"
        )
        return
    holds = pte.contents
    declared_end = pte.segment_base + (pte.header.segment_data_size if pte.header else 0)
    for region in pte.segments:
        what = f"{region.what} ({holds.get(region.what, 'unused')})"
        if not pte.in_file(region):
            yield Hit(
                f"{what} spans bytes {region.start}-{region.end}, past the end of the file ({pte.size} bytes)",
                region=_bytes(region),
            )
        elif pte.header and pte.header.segment_data_size and region.end > declared_end:
            yield Hit(
                f"{what} ends at byte {region.end}, past the segment data the header declares (to {declared_end}){_IGNORED}",
                region=_bytes(region),
                severity=Severity.WARNING,
            )
    yield from _overlapping_segments(pte, holds)
    for table in pte.subsegment_tables:
        if table.segment is None:
            yield Hit(f"the {table.name} is in segment {table.table.segment_index}, of {len(pte.segments)}")
            continue
        offsets = list(table.table.offsets)
        if any(b < a for a, b in itertools.pairwise(offsets)):
            yield Hit(f"the {table.name}'s offsets are not increasing: {offsets[:8]}", region=_bytes(table.segment))
        beyond = [(i, o) for i, o in enumerate(offsets) if not 0 <= o <= table.segment.size]
        for i, offset in beyond[:5]:
            yield Hit(
                f"buffer {i} of the {table.name} starts at {offset}, outside its {table.segment.size}-byte {table.segment.what}",
                region=_bytes(table.segment),
            )


def _overlapping_segments(pte: PteFile, holds: dict[str, str]) -> Iterator[Hit]:
    """Segments that share bytes. ExecuTorch writes each segment apart from the others; one
    overlap is deliberate (``pte/store_once.py``): a segment that only named data reads, at the
    exact start of a constant buffer and no longer than it, or exactly where another such
    segment is (the same bytes, stored once). Any other overlap is a damaged offset or size:
    one reader gets bytes written for another."""
    program = pte.program
    if program is None:
        return
    named_only = {entry.segment_index for entry in program.named_data or []}
    named_only -= {table.table.segment_index for table in pte.subsegment_tables}
    named_only -= {int(d.where.split()[1]) for d in pte.delegates if d.where.startswith("segment")}
    constant = pte.constant_table
    buffers: dict[int, int] = {}
    if constant is not None and constant.segment is not None:
        for index in range(len(constant.table.offsets)):
            buffer = constant.buffer(index)
            if buffer is not None and buffer.size:
                buffers[buffer.start] = max(buffer.size, buffers.get(buffer.start, 0))
    constant_index = constant.table.segment_index if constant is not None else None

    def anchor(index: int, region: Region) -> tuple[object, ...] | None:
        """What a named-data segment is an exact alias of: a constant buffer, or its own bytes."""
        if index not in named_only:
            return None
        if region.start in buffers and region.size <= buffers[region.start]:
            return ("constant", region.start)
        return ("segment", region.start, region.size)

    def allowed(a: tuple[int, Region], b: tuple[int, Region]) -> bool:
        for (index, region), (other, _) in ((a, b), (b, a)):
            if other == constant_index and (anchor(index, region) or ("",))[0] == "constant":
                return True
        return anchor(*a) is not None and anchor(*a) == anchor(*b)

    placed = sorted(
        ((i, r) for i, r in enumerate(pte.segments) if r.size and pte.in_file(r)),
        key=lambda item: (item[1].start, item[0]),
    )
    open_: list[tuple[int, Region]] = []
    reported = 0
    for item in placed:
        open_ = [o for o in open_ if o[1].end > item[1].start]
        for other in open_:
            if not allowed(other, item) and reported < 5:
                reported += 1
                (_, a), (_, b) = other, item
                yield Hit(
                    f"{b.what} ({holds.get(b.what, 'unused')}) spans bytes {b.start}-{b.end}, overlapping {a.what} "
                    f"({holds.get(a.what, 'unused')}) at bytes {a.start}-{a.end}: one of them reads bytes written "
                    f"for the other (only a named-data segment that starts exactly at a constant, and is no longer "
                    f"than it, may share its bytes)",
                    region=_bytes(b),
                )
        open_.append(item)


@rule("EG504")
def misaligned_data(context: PteContext) -> Iterator[Hit]:
    pte = context.pte
    if pte.program is None:
        return
    holds = pte.contents
    for region in pte.segments:
        if region.size and region.start % MIN_ALIGNMENT:
            yield Hit(
                f"{region.what} ({holds.get(region.what, 'unused')}) starts at byte {region.start}, not a multiple of {MIN_ALIGNMENT}",
                region=_bytes(region),
            )
    if pte.constant_table is not None:  # mutable data is copied out, so only constants are read in place
        misaligned = [(i, o) for i, o in enumerate(pte.constant_table.table.offsets) if o % MIN_ALIGNMENT]
        for i, offset in misaligned[:5]:
            yield Hit(
                f"buffer {i} of the constant segment is at offset {offset} of its segment, not a multiple of {MIN_ALIGNMENT}",
                region=_bytes(pte.constant_table.buffer(i)),
            )


@rule("EG505")
def tensor_data_invalid(context: PteContext) -> Iterator[Hit]:
    pte, program = context.pte, context.pte.program
    if program is None:
        return
    offsets = [o for o in pte.constant_table.table.offsets if o] if pte.constant_table else []
    alignment = max(math.gcd(*offsets), MIN_ALIGNMENT) if offsets else MIN_ALIGNMENT  # the writer's padding
    for plan in program.execution_plan:
        arenas = list(plan.non_const_buffer_sizes or [])
        inputs_and_outputs = set(plan.inputs) | set(plan.outputs)
        for index, value in enumerate(plan.values):
            tensor = value.val
            if not isinstance(tensor, Tensor):
                continue
            where = f"tensor value {index} of method '{plan.name}' ({describe_tensor(tensor)})"
            nbytes = tensor_nbytes(tensor)
            info = tensor.extra_tensor_info
            if nbytes is None:
                problems: list[tuple[str, Severity | None, tuple[int, int] | None]] = [
                    ("has an unknown dtype or a negative size", None, None)
                ]
            elif info is not None and info.location == TensorDataLocation.EXTERNAL:
                continue  # its data is named data in a .ptd file: EG508 checks it
            elif tensor.allocation_info is not None:
                problems = [
                    (p, s, None) for p, s in _slot_problems(tensor, nbytes, arenas)
                ]  # an arena: memory, not file bytes
                if tensor.data_buffer_idx > 0:  # a mutable buffer's initial value, copied in at load
                    initial = _bytes(_initial_value(pte, tensor))
                    problems += [(p, s, initial) for p, s in _initial_value_problems(pte, tensor, nbytes)]
            elif tensor.data_buffer_idx > 0:
                buffer = _bytes(pte.constant_table.buffer(tensor.data_buffer_idx)) if pte.constant_table else None
                problems = [(p, s, buffer) for p, s in _constant_problems(pte, tensor, nbytes, alignment)]
            elif (
                nbytes
                and index not in inputs_and_outputs
                and tensor.shape_dynamism != TensorShapeDynamism.DYNAMIC_UNBOUND
            ):
                problems = [(
                    "has no data: no constant buffer, no memory plan slot, no external data, and it is "
                    "not an input or output: the runtime would use a null pointer",
                    None,
                    None,
                )]  # fmt: skip
            else:
                continue
            yield from (
                Hit(f"{where} {problem}", method=plan.name, severity=severity, region=region)
                for problem, severity, region in problems
            )
        yield from _oversized_arenas(plan)


def _oversized_arenas(plan: ExecutionPlan) -> Iterator[Hit]:
    """An arena far larger than its tensors reach: the runtime allocates all of it at load (a
    damaged size asks for gigabytes, and the load stalls or is killed for memory)."""
    reach: dict[int, int] = {}
    for value in plan.values:
        tensor = value.val
        if isinstance(tensor, Tensor) and tensor.allocation_info is not None:
            slot = tensor.allocation_info
            end = _offset(slot) + (tensor_nbytes(tensor) or 0)
            reach[slot.memory_id] = max(reach.get(slot.memory_id, 0), end)
    for memory_id, size in enumerate(plan.non_const_buffer_sizes or []):
        used = reach.get(memory_id, 0)
        if size > 2 * used + ARENA_SLACK:
            yield Hit(
                f"memory arena {memory_id} of method '{plan.name}' is {size:,} bytes, but its tensors "
                f"reach only {used:,}: the runtime allocates all of it when it loads the method",
                method=plan.name,
            )


ARENA_SLACK = 1 << 20  # planners align and may round up; a megabyte more is never a damaged size


def _constant_problems(
    pte: PteFile, tensor: Tensor, nbytes: int, alignment: int
) -> Iterator[tuple[str, Severity | None]]:
    sizes, index = pte.constant_buffer_sizes, tensor.data_buffer_idx
    if index >= len(sizes):
        yield f"uses constant buffer {index}, of {len(sizes)}", None
    elif (held := sizes[index]) is not None and held < nbytes:
        yield f"needs {nbytes} bytes but constant buffer {index} holds {held}: the runtime would read past it", None
    elif held is not None and held > _padded(nbytes, alignment):
        yield (
            f"needs {nbytes} bytes but constant buffer {index} holds {held}: its shape or dtype does not "
            "match the data written",
            Severity.WARNING,
        )


def _initial_value(pte: PteFile, tensor: Tensor) -> Region | None:
    """Where a mutable buffer's initial value is in the file, when its table and index exist."""
    info = tensor.extra_tensor_info
    segment = info.mutable_data_segments_idx if info is not None else 0
    return (
        pte.mutable_tables[segment].buffer(tensor.data_buffer_idx) if 0 <= segment < len(pte.mutable_tables) else None
    )


def _bytes(region: Region | None) -> tuple[int, int] | None:
    """A region as a finding's ``(offset, length)``."""
    return (region.start, region.size) if region is not None else None


def _initial_value_problems(pte: PteFile, tensor: Tensor, nbytes: int) -> Iterator[tuple[str, Severity | None]]:
    info = tensor.extra_tensor_info
    segment = info.mutable_data_segments_idx if info is not None else 0
    sizes = pte.mutable_tables[segment].buffer_sizes if 0 <= segment < len(pte.mutable_tables) else []
    index = tensor.data_buffer_idx
    if index >= len(sizes):
        yield (
            f"takes its initial value from buffer {index} of mutable data segment {segment}, which has {len(sizes)}",
            None,
        )
    elif (held := sizes[index]) is not None and held < nbytes:
        yield f"needs {nbytes} bytes but its initial value holds {held}: the runtime would read past it", None


def _slot_problems(tensor: Tensor, nbytes: int, arenas: list[int]) -> Iterator[tuple[str, Severity | None]]:
    slot = tensor.allocation_info
    assert slot is not None
    offset = _offset(slot)
    if not 0 <= slot.memory_id < len(arenas):
        yield f"is planned in memory arena {slot.memory_id}, of {len(arenas)}", None
    elif offset + nbytes > arenas[slot.memory_id]:
        yield (
            f"is planned at bytes {offset}-{offset + nbytes} of memory arena {slot.memory_id}, which has "
            f"{arenas[slot.memory_id]}: the runtime would write past it",
            None,
        )


def _offset(slot: AllocationDetails) -> int:
    """A memory-plan slot's offset in its arena (stored as two 32-bit halves)."""
    return slot.memory_offset_low + (slot.memory_offset_high << 32)


def _padded(nbytes: int, alignment: int) -> int:
    return -(-nbytes // alignment) * alignment
