"""A written program whose duplicate bytes are stored once: a delegate's named data that holds
the same bytes as one of the program's constants (a tied embedding and output head: the head's
weight in XNNPACK's named data, the embedding's in the constant segment) is pointed at the
constant's bytes, and its own copy leaves the file.

Why the runtime allows it: a named-data entry names a segment, and a segment is only an offset
and a size from the segment base (``runtime/executor/pte_data_map.cpp``); the runtime never
checks that two segments do not overlap. So a ``DataSegment`` that lies inside the constant
segment, at a constant's offset, hands a delegate the very bytes the runtime's kernels read.
The flatbuffer keeps its layout: only the numbers of its ``DataSegment`` table change, in place
(every segment keeps its index, so every named-data entry and delegate still names the same
one), and the segments after a dropped copy move up, each at an offset as aligned as before.
The rewrite is done in place, in the one buffer the program is written into, so that a
100M-parameter program is never held twice; what each reader reads (each segment, each
named-data entry) is checked against what it read before, where the rewrite moved it or
wrote before it. A program this cannot rewrite exactly is returned unchanged. Data is compared
whole only where its size and first bytes match another's, and compared, not hashed.
"""

from __future__ import annotations

import io
import mmap
import zlib
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, final

from export_guards.compat import named_data_alignments
from export_guards.pte.reader.file import MIN_ALIGNMENT, PteFile
from export_guards.pte.reader.headers import ExtendedHeader
from export_guards.pte.reader.named_regions import named_data_regions, segment_offset_fields
from export_guards.pte.reader.tensors import tensor_nbytes
from export_guards.pte.reader.wheel import DataLocation, Tensor

__all__ = ["SharedCopy", "shared_copies", "store_once"]

# A moved segment keeps the alignment its offset had (the writer's segment alignment, or more
# where a backend asked for it), up to this: beyond it no loader asks, and more would be padding.
_MAX_ALIGNMENT = 1 << 16
_COMPARED = 64  # the first bytes compared before two pieces of data are compared whole
_PIECE = 1 << 16  # compared a piece at a time, each copied once: in the cache, not a second program


@final
@dataclass(frozen=True)
class SharedCopy:
    """One segment whose bytes the program already holds elsewhere.

    Attributes:
        segment: its index in the program's ``segments``.
        keys: the named-data keys that read it.
        size: its bytes, which the file no longer holds twice.
        target: what holds the same bytes: ``"constant buffer 2"`` or ``"segment 18"``.
        offset: where those bytes are, from the segment base.
    """

    segment: int
    keys: tuple[str, ...]
    size: int
    target: str
    offset: int


def store_once(program: bytes | mmap.mmap | Any, *, alignments: Mapping[str, int] | None = None) -> bytes:
    """The ``.pte`` bytes with every named-data segment that repeats bytes the program already
    holds (a constant buffer, or an earlier named-data segment) pointed at those bytes, and
    its own copy dropped: the program the runtime loads and runs as before, smaller.

    Args:
        program: the ``.pte`` bytes, or ExecuTorch's ``ExecutorchProgramManager`` (what
            ``to_executorch()`` returns), whose named data says the alignment each key asked for.
        alignments: the alignment each named-data key needs (a manager's are read from it);
            a key not given needs 16 bytes, the runtime's minimum and what XNNPACK asks for.

    Returns:
        The rewritten bytes, or ``program``'s own bytes where nothing repeats or the program
        cannot be rewritten exactly (no extended header, a damaged table).
    """
    if not isinstance(program, (bytes, bytearray, memoryview, mmap.mmap)):
        alignments = {**named_data_alignments(program), **(alignments or {})}
    stream = _written_into(program)
    try:
        with stream.getbuffer() as view:
            size = _stored_once(view, alignments or {})
    except _ReadsChanged:  # the rewrite's own bug, caught: the program as written
        size, stream = None, _written_into(program)
    if size is None:
        return program if isinstance(program, bytes) else stream.getvalue()
    stream.truncate(size)
    return stream.getvalue()  # the buffer itself, not a copy of it


def _written_into(program: bytes | mmap.mmap | Any) -> io.BytesIO:
    """A buffer holding the program's bytes: a manager's pieces are written into it once, not
    joined into bytes first."""
    stream = io.BytesIO()
    if isinstance(program, (bytes, bytearray, memoryview, mmap.mmap)):
        stream.write(program)
    else:
        program.write_to_file(stream)
    return stream


class _ReadsChanged(Exception):
    """A reader of the rewritten program would read other bytes than before."""


def _stored_once(view: memoryview, alignments: Mapping[str, int]) -> int | None:
    """Rewrite the program in ``view`` in place, each copy pointed at its target; the size it
    now has, or ``None`` where nothing repeats (``view`` unchanged).

    Raises:
        _ReadsChanged: a reader would read other bytes than before (``view`` is then spoilt).
    """
    if not named_data_regions(view):  # no named data (read without parsing the whole table): nothing repeats
        return None
    pte = PteFile(view)
    copies = _plan(pte, alignments)
    layout = _layout(pte, copies) if copies else None
    if layout is None:
        return None
    writes, end = _writes(pte, layout)
    # A segment that stays where it is, before the first byte written, reads as it did: only the
    # others are read again (a tied head's copy is the last segment: nothing else moves).
    first = min((start for start, _, _ in writes), default=len(view))
    base = pte.segment_base
    checked = {i for i, region in enumerate(pte.segments) if base + layout[i] != region.start or region.end > first}
    before = _reads(pte, checked)
    if before is None:
        return None
    _move(view, pte, layout, writes, end)
    if _reads(PteFile(view[: base + end]), checked) != before:
        raise _ReadsChanged
    return base + end


def shared_copies(program: bytes, *, alignments: Mapping[str, int] | None = None) -> tuple[SharedCopy, ...]:
    """What :func:`store_once` would store once in ``program`` (nothing in one it wrote)."""
    return tuple(_plan(PteFile(bytes(program)), alignments or {}))


def _plan(pte: PteFile, alignments: Mapping[str, int]) -> list[SharedCopy]:
    program = pte.program
    if program is None or pte.header is None or not program.named_data:
        return []
    keys: dict[int, list[str]] = {}
    for entry in program.named_data:
        keys.setdefault(entry.segment_index, []).append(entry.key)
    # A segment can be another's copy only when named data alone reads it: never the constant
    # or a mutable segment, never a delegate's processed data (named by its index, not read).
    others = {table.table.segment_index for table in pte.subsegment_tables}
    others |= {
        d.processed.index
        for plan in program.execution_plan
        for d in plan.delegates
        if d.processed.location == DataLocation.SEGMENT
    }
    named = [
        (index, region)
        for index, region in enumerate(pte.segments)
        if index in keys and index not in others and region.size and pte.in_file(region)
    ]
    # Only bytes of the same size and the same first bytes can be the same: a segment that no
    # other segment or constant begins as is not compared (a decoder's layers differ at once).
    starts = Counter(_start(pte, region.start, region.size) for _, region in named)
    targets = _constant_targets(pte, set(starts))
    base = pte.segment_base
    kept: dict[tuple[int, bytes], list[tuple[str, int]]] = {}  # the first named-data segment of each content
    copies: list[SharedCopy] = []
    for index, region in named:
        start = _start(pte, region.start, region.size)
        if starts[start] < 2 and start not in targets:
            continue
        at = region.start - base
        equal = [
            (what, where)
            for what, where in targets.get(start, ())
            if _same(pte.data, region.start, base + where, region.size)
        ]
        earlier = next(
            (
                (what, where)
                for what, where in kept.get(start, ())
                if _same(pte.data, region.start, base + where, region.size)
            ),
            None,
        )
        needs = max(MIN_ALIGNMENT, *(alignments.get(key, MIN_ALIGNMENT) for key in keys[index]))
        found = next(
            ((what, where) for what, where in (*equal, *([earlier] if earlier else [])) if (base + where) % needs == 0),
            None,
        )
        if found is None or found[1] == at:  # unique, or stored once already
            if earlier is None:
                kept.setdefault(start, []).append((f"segment {index}", at))
            continue
        copies.append(SharedCopy(index, tuple(keys[index]), region.size, found[0], found[1]))
    return copies


def _start(pte: PteFile, offset: int, size: int) -> tuple[int, bytes]:
    """What tells bytes apart before they are compared: their size and their first bytes."""
    return size, bytes(pte.data[offset : offset + min(size, _COMPARED)])


def _same(data: bytes | memoryview, first: int, second: int, size: int) -> bool:
    """Whether the ``size`` bytes at ``first`` and at ``second`` are the same: compared a piece
    at a time where they lie (memcmp's speed, where a memoryview compares byte by byte)."""
    view = memoryview(data)
    return all(
        bytes(view[first + i : first + min(i + _PIECE, size)])
        == bytes(view[second + i : second + min(i + _PIECE, size)])
        for i in range(0, size, _PIECE)
    )


def _constant_targets(pte: PteFile, starts: set[tuple[int, bytes]]) -> dict[tuple[int, bytes], list[tuple[str, int]]]:
    """Each constant buffer that begins as a named-data segment does (one of ``starts``: the
    size of its tensor's bytes, its padding left out, and the first of them), with where it is
    from the segment base."""
    table, program = pte.constant_table, pte.program
    if table is None or table.segment is None or program is None:
        return {}
    nbytes: dict[int, int] = {}
    for plan in program.execution_plan:
        for value in plan.values:
            tensor = value.val
            if isinstance(tensor, Tensor) and tensor.allocation_info is None and tensor.data_buffer_idx > 0:
                size = tensor_nbytes(tensor)
                if size:
                    nbytes[tensor.data_buffer_idx] = max(size, nbytes.get(tensor.data_buffer_idx, 0))
    found: dict[tuple[int, bytes], list[tuple[str, int]]] = {}
    for index, size in sorted(nbytes.items()):
        buffer = table.buffer(index)
        if (
            buffer is None
            or buffer.size < size
            or not pte.in_file(buffer)
            or (start := _start(pte, buffer.start, size)) not in starts
        ):
            continue
        found.setdefault(start, []).append((f"constant buffer {index}", buffer.start - pte.segment_base))
    return found


def _layout(pte: PteFile, copies: list[SharedCopy]) -> dict[int, int] | None:
    """Each segment's new offset from the segment base: each copy at its target, the others
    laid out again; ``None`` where an offset cannot be rewritten in place."""
    fields = segment_offset_fields(pte.data)
    header = pte.header
    if (
        fields is None
        or header is None
        or len(fields) != len(pte.segments)
        or header.length < ExtendedHeader.EXPECTED_LENGTH
    ):
        return None
    aliased = {copy.segment: copy for copy in copies}
    base = pte.segment_base
    offsets: dict[int, int] = {}
    end = 0
    for index, region in sorted(enumerate(pte.segments), key=lambda item: (item[1].start, item[0])):
        if index in aliased:
            continue
        old = region.start - base
        step = min(old & -old, _MAX_ALIGNMENT) if old else _MAX_ALIGNMENT
        # as aligned as it was, and never later (ExecuTorch lays the segments out in order)
        offsets[index] = old if old <= end else -(-end // step) * step
        end = max(end, offsets[index] + region.size)
    for index, copy in aliased.items():
        offsets[index] = offsets[int(copy.target.split()[1])] if copy.target.startswith("segment ") else copy.offset
    if any(offset != pte.segments[index].start - base and fields[index] is None for index, offset in offsets.items()):
        return None  # an offset the flatbuffer leaves out (0) has no bytes to rewrite
    return offsets


def _writes(pte: PteFile, offsets: dict[int, int]) -> tuple[list[tuple[int, int, int | None]], int]:
    """What the rewrite writes, in order: each segment's bytes moved up to its new offset (never
    later than its old one, so nothing is overwritten before it moves) and the padding between
    them zeros, as ``(start, end, where the bytes come from or None for zeros)`` in the file (a
    segment that stays where it is, or padding that is zeros already, is not written); and the
    end of the segments, from the segment base."""
    base = pte.segment_base
    regions = pte.segments
    writes: list[tuple[int, int, int | None]] = []
    at = 0  # from the segment base: the bytes laid so far
    for index, offset in sorted(offsets.items(), key=lambda item: (item[1], item[0])):
        region = regions[index]
        if offset + region.size <= at:  # a copy, or a segment stored once before: inside bytes laid already
            continue
        if at < offset and pte.data[base + at : base + offset] != bytes(
            offset - at
        ):  # padding zeros already is not written
            writes.append((base + at, base + offset, None))
        if base + offset != region.start:
            writes.append((base + offset, base + offset + region.size, region.start))
        at = offset + region.size
    return writes, at


def _move(
    view: memoryview, pte: PteFile, offsets: dict[int, int], writes: list[tuple[int, int, int | None]], end: int
) -> None:
    """Rewrite ``view`` in place: ``writes`` (:func:`_writes`) done, the offsets and the header's
    segment data size (``end``) written."""
    fields = segment_offset_fields(view)
    assert fields is not None
    for start, stop, source in writes:
        view[start:stop] = bytes(stop - start) if source is None else view[source : source + stop - start]
    for index, offset in offsets.items():
        if fields[index] is not None:
            view[fields[index] : fields[index] + 8] = offset.to_bytes(8, "little")
    view[8 + 24 : 8 + 32] = end.to_bytes(8, "little")  # the extended header's segment data size


def _reads(pte: PteFile, checked: set[int]) -> tuple[int, dict[int, int], dict[str, tuple[int, int]]] | None:
    """What the program's readers read of the segments ``checked``: how many segments it has,
    the CRC of each checked one's bytes, by index, and the segment and CRC of each named-data
    entry that reads one, by key (a check of the rewrite's own moves: CRC-32 reads a gigabyte
    a second)."""
    program = pte.program
    if program is None or not all(pte.in_file(region) for region in pte.segments):
        return None
    view = memoryview(pte.data)
    segments = {i: zlib.crc32(view[region.start : region.end]) for i, region in enumerate(pte.segments) if i in checked}
    first = {}  # the entry of a repeated key that a reader finds: its first
    for entry in program.named_data or []:
        first.setdefault(entry.key, entry.segment_index)
    named = {key: (index, segments[index]) for key, index in first.items() if index in segments}
    return len(pte.segments), segments, named
