"""Where each named-data entry of a program or data file lies, read straight from its
flatbuffer's two tables (``segments`` and ``named_data``) with ``struct``: before the command
imports ExecuTorch's reader (numpy and the generated classes, a fifth of a second), so that
hashing the weights (EG523) starts that much earlier. A head start only: the rules read the
same tables with ExecuTorch's reader, and whatever this reads otherwise (a damaged file) is
hashed then. Never raises."""

from __future__ import annotations

import mmap
import struct

from export_guards.pte.reader.headers import ExtendedHeader, FlatTensorHeader
from export_guards.pte.reader.identity import file_kind

__all__ = ["named_data_regions", "segment_offset_fields"]

# The field numbers of `segments` and `named_data`: program.fbs's Program, flat_tensor.fbs's
# FlatTensor. DataSegment is (offset: uint64, size: uint64), NamedData (key: string,
# segment_index: uint32, ...) in both.
_FIELDS = {"program": (4, 7), "data": (1, 2)}


def named_data_regions(data: bytes | mmap.mmap) -> dict[str, tuple[int, int]]:
    """Each named-data key of the ``.pte`` or ``.ptd`` bytes ``data``, with the start and end of
    its segment in the file (the first entry of a repeated key; an entry whose segment does not
    exist is left out): what ``PteFile.named_data`` and ``PtdFile.named_data`` read, or less."""
    try:
        return _regions(memoryview(data).cast("B"))
    except (struct.error, IndexError, ValueError, UnicodeDecodeError, TypeError):
        return {}


def _regions(data: memoryview) -> dict[str, tuple[int, int]]:
    kind = file_kind(bytes(data[:8]))
    if kind is None:
        return {}
    base = _segment_base(data, kind)
    if base is None:
        return {}
    segments_field, named_field = _FIELDS[kind]
    root = _u32(data, 0)
    segments = [
        (base + _scalar(data, s, 0, "<Q"), _scalar(data, s, 1, "<Q")) for s in _tables(data, root, segments_field)
    ]
    found: dict[str, tuple[int, int]] = {}
    for entry in _tables(data, root, named_field):
        key, index = _string(data, entry, 0), _scalar(data, entry, 1, "<I")
        if key is not None and 0 <= index < len(segments) and key not in found:
            start, size = segments[index]
            found[key] = (start, start + size)
    return found


def segment_offset_fields(data: bytes | mmap.mmap) -> list[int | None] | None:
    """Where each ``DataSegment`` of the ``.pte`` bytes ``data`` keeps its ``offset`` (the byte
    of its little-endian uint64), by segment index: ``None`` for a segment whose offset the
    flatbuffer leaves out (the default, 0). ``None`` for bytes that are no program. What
    rewrites a segment's offset in place writes there (``pte/store_once.py``)."""
    try:
        view = memoryview(data).cast("B")
        if file_kind(bytes(view[:8])) != "program":
            return None
        return [_field(view, segment, 0) for segment in _tables(view, _u32(view, 0), _FIELDS["program"][0])]
    except (struct.error, IndexError, ValueError, TypeError):
        return None


def _segment_base(data: memoryview, kind: str) -> int | None:
    if kind == "program":
        if len(data) < 8 + ExtendedHeader.EXPECTED_LENGTH:
            return None
        header = ExtendedHeader.from_bytes(bytes(data[8 : 8 + ExtendedHeader.EXPECTED_LENGTH]))
        return header.segment_base_offset if header.magic == ExtendedHeader.EXPECTED_MAGIC else None
    if len(data) < 8 + FlatTensorHeader.EXPECTED_LENGTH:
        return None
    flat = FlatTensorHeader.from_bytes(bytes(data[8 : 8 + FlatTensorHeader.EXPECTED_LENGTH]))
    return flat.segment_base_offset if flat.is_valid() else None


def _u32(data: memoryview, at: int) -> int:
    return struct.unpack_from("<I", data, at)[0]


def _field(data: memoryview, table: int, number: int) -> int | None:
    """Where field ``number`` of the table at ``table`` is, or None when the table leaves it out."""
    vtable = table - struct.unpack_from("<i", data, table)[0]
    if 4 + 2 * number >= struct.unpack_from("<H", data, vtable)[0]:
        return None
    offset = struct.unpack_from("<H", data, vtable + 4 + 2 * number)[0]
    return table + offset if offset else None


def _scalar(data: memoryview, table: int, number: int, form: str) -> int:
    at = _field(data, table, number)
    return struct.unpack_from(form, data, at)[0] if at is not None else 0


def _string(data: memoryview, table: int, number: int) -> str | None:
    at = _field(data, table, number)
    if at is None:
        return None
    start = at + _u32(data, at)
    return bytes(data[start + 4 : start + 4 + _u32(data, start)]).decode("utf-8")


def _tables(data: memoryview, table: int, number: int) -> list[int]:
    """The tables of the vector field ``number``, by position."""
    at = _field(data, table, number)
    if at is None:
        return []
    vector = at + _u32(data, at)
    count = _u32(data, vector)
    if 4 * count > len(data):
        raise ValueError("a vector longer than the file")
    return [item + _u32(data, item) for item in range(vector + 4, vector + 4 + 4 * count, 4)]
