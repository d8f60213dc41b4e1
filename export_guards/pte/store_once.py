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
The result is read back and compared with the input, entry by entry, before it is returned: a
program this cannot rewrite exactly is returned unchanged.
"""

from __future__ import annotations

import hashlib
import mmap
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, final

from export_guards.compat import named_data_alignments
from export_guards.pte.reader.file import MIN_ALIGNMENT, PteFile
from export_guards.pte.reader.headers import ExtendedHeader
from export_guards.pte.reader.named_regions import named_data_regions, segment_offset_fields
from export_guards.pte.reader.tensors import tensor_nbytes
from export_guards.pte.reader.wheel import Tensor

__all__ = ["SharedCopy", "shared_copies", "store_once"]

# A moved segment keeps the alignment its offset had (the writer's segment alignment, or more
# where a backend asked for it), up to this: beyond it no loader asks, and more would be padding.
_MAX_ALIGNMENT = 1 << 16


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
        program = program.buffer
    data = bytes(program)
    if not named_data_regions(data):  # no named data (read without parsing the whole table): nothing repeats
        return data
    pte = PteFile(data)
    copies = _plan(pte, alignments or {})
    if not copies:
        return data
    rewritten = _rewrite(pte, copies)
    return rewritten if rewritten is not None and _same_reads(pte, PteFile(rewritten)) else data


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
    # or a mutable segment, never a delegate's processed data.
    others = {table.table.segment_index for table in pte.subsegment_tables}
    others |= {int(d.where.split()[1]) for d in pte.delegates if d.where.startswith("segment")}
    targets = _constant_targets(pte)
    kept: dict[bytes, tuple[str, int]] = {}  # a named-data segment's digest: where it is
    copies: list[SharedCopy] = []
    for index, region in enumerate(pte.segments):
        if index not in keys or index in others or not region.size or not pte.in_file(region):
            continue
        content = pte.read(region)
        digest = hashlib.sha256(content).digest()
        needs = max(MIN_ALIGNMENT, *(alignments.get(key, MIN_ALIGNMENT) for key in keys[index]))
        found = next(
            (
                (what, at)
                for what, at in (*targets.get((region.size, digest), ()), *([kept[digest]] if digest in kept else []))
                if (pte.segment_base + at) % needs == 0
            ),
            None,
        )
        if found is None or found[1] == region.start - pte.segment_base:  # unique, or stored once already
            kept.setdefault(digest, (f"segment {index}", region.start - pte.segment_base))
            continue
        copies.append(SharedCopy(index, tuple(keys[index]), region.size, found[0], found[1]))
    return copies


def _constant_targets(pte: PteFile) -> dict[tuple[int, bytes], list[tuple[str, int]]]:
    """Each constant buffer by the size and digest of its tensor's bytes (its padding left
    out), with where it is from the segment base."""
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
        if buffer is None or buffer.size < size or not pte.in_file(buffer):
            continue
        content = pte.data[buffer.start : buffer.start + size]
        found.setdefault((size, hashlib.sha256(content).digest()), []).append((f"constant buffer {index}", buffer.start - pte.segment_base))
    return found


def _rewrite(pte: PteFile, copies: list[SharedCopy]) -> bytes | None:
    """The file with each copy's segment pointed at its target and the others laid out again,
    or None where a segment's offset cannot be rewritten in place."""
    fields = segment_offset_fields(pte.data)
    header = pte.header
    if fields is None or header is None or len(fields) != len(pte.segments) or header.length < ExtendedHeader.EXPECTED_LENGTH:
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
        target = copy.offset
        if copy.target.startswith("segment "):
            target = offsets[int(copy.target.split()[1])]
        offsets[index] = target
    data = bytearray(pte.data[:base])
    for index, offset in offsets.items():
        old = pte.segments[index].start - base
        if offset != old and fields[index] is None:
            return None  # an offset the flatbuffer leaves out (0) has no bytes to rewrite
        if fields[index] is not None:
            data[fields[index] : fields[index] + 8] = offset.to_bytes(8, "little")
    data[8 + 24 : 8 + 32] = end.to_bytes(8, "little")  # the extended header's segment data size
    parts: list[bytes | bytearray | memoryview] = [data]
    at = 0  # from the segment base: the bytes laid so far
    for index, offset in sorted(((i, o) for i, o in offsets.items() if i not in aliased), key=lambda item: item[1]):
        region = pte.segments[index]
        if offset < at:  # inside bytes laid already (stored once before): _same_reads checks they are its own
            if offset + region.size > at:
                return None
            continue
        parts += [bytes(offset - at), memoryview(pte.data)[region.start : region.end]]
        at = offset + region.size
    parts.append(bytes(end - at))
    return b"".join(parts)  # one copy of the program's bytes


def _same_reads(before: PteFile, after: PteFile) -> bool:
    """Whether every reader of ``after`` reads what it read in ``before``: the same program
    table but for its segments, each segment's bytes, each named-data entry's bytes."""
    if after.program is None or before.program is None or len(after.segments) != len(before.segments):
        return False
    if not all(after.in_file(region) and after.read(region) == before.read(old) for region, old in zip(after.segments, before.segments)):
        return False
    return after.named_data.keys() == before.named_data.keys() and all(
        after.read(after.named_data[key]) == before.read(region) for key, region in before.named_data.items()
    )
