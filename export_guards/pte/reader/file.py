"""A ``.pte`` file as ExecuTorch's own serialization modules read it, with every region's bounds.

Reading never raises for a malformed file: what could not be read is recorded in ``problems``
for the rules to report. Only a path that cannot be opened as a file raises ``OSError``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import mmap
import os
import signal
import sys
import threading
import time
import typing
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, final

from flatbuffers import number_types
from flatbuffers.table import Table

from export_guards.pte.reader.headers import ExtendedHeader
from export_guards.pte.reader.identity import PROGRAM_IDENTIFIER as FILE_IDENTIFIER
from export_guards.pte.reader.program_table import parse_program
from export_guards.pte.reader.wheel import DataLocation, Program, ProgramTable, SubsegmentOffsets
from export_guards.ruleset import describe_error

__all__ = [
    "FILE_IDENTIFIER",
    "MIN_ALIGNMENT",
    "PARSE_SECONDS",
    "Delegate",
    "PteFile",
    "Region",
    "SubsegmentTable",
    "open_bytes",
    "verified_reader",
]

# The runtime's minimum alignment for tensor and delegate data (alignof(max_align_t)).
MIN_ALIGNMENT = 16


@final
@dataclass(frozen=True)
class Delegate:
    """One delegate call of a method: its backend and processed data (None when unreadable)."""

    method: str
    index: int
    backend: str
    where: str  # "segment 3" or "inline 0"
    data: bytes | None

    def __str__(self) -> str:
        return f"delegate {self.index} ({self.backend}) of method '{self.method}'"


@final
@dataclass(frozen=True)
class Region:
    """``size`` bytes at ``start`` (absolute offset in the file), and what they hold."""

    start: int
    size: int
    what: str

    @property
    def end(self) -> int:
        return self.start + self.size


def open_bytes(path: str | os.PathLike[str]) -> bytes | mmap.mmap:
    """The file's bytes, memory-mapped: read lazily, never copied whole.

    Raises:
        FileNotFoundError, IsADirectoryError, PermissionError: naming the path.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such file: {path}")
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a directory, not a file")
    if not path.is_file():
        raise OSError(f"{path} is not a regular file")
    with open(path, "rb") as file:
        if os.fstat(file.fileno()).st_size == 0:
            return b""
        return mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)


@final
@dataclass(frozen=True)
class SubsegmentTable:
    """A segment cut into buffers: the constant segment, or a mutable data segment.

    Attributes:
        label: what it holds, ``"constant data"`` or ``"mutable data 0"``.
        name: what it is, ``"constant segment"`` or ``"mutable data segment 0"``.
        table: the program's offsets table.
        segment: the segment, or None when its index does not exist.
    """

    label: str
    name: str
    table: SubsegmentOffsets
    segment: Region | None

    @property
    def buffer_sizes(self) -> list[int | None]:
        """The bytes each buffer may hold (padding included; None when out of bounds)."""
        offsets = list(self.table.offsets)
        if self.segment is None:
            return [None] * len(offsets)
        ends = [*offsets[1:], self.segment.size]
        return [end - start if 0 <= start <= end <= self.segment.size else None for start, end in zip(offsets, ends)]

    def buffer(self, index: int) -> Region | None:
        sizes = self.buffer_sizes
        if self.segment is None or not 0 <= index < len(sizes) or sizes[index] is None:
            return None
        return Region(self.segment.start + self.table.offsets[index], sizes[index] or 0, f"{self.label} buffer {index}")


@final
@dataclass
class PteFile:
    """A program file's bytes and what ExecuTorch's deserializer makes of them.

    Attributes:
        data: the file's bytes (or a read-only memory map of them).
        name: how findings refer to the file.
        problems: why the header or the flatbuffer could not be read, in order.
    """

    data: bytes | mmap.mmap
    name: str = "<bytes>"
    problems: list[str] = field(default_factory=list)

    @property
    def size(self) -> int:
        return len(self.data)

    @cached_property
    def identifier(self) -> bytes:
        """The flatbuffer file identifier: ``ET12`` for the schema this ExecuTorch reads."""
        return bytes(self.data[4:8])

    @cached_property
    def header(self) -> ExtendedHeader | None:
        """The extended header, when its magic is present (valid or not: the rules judge it)."""
        if self.size < 8 + ExtendedHeader.EXPECTED_LENGTH:
            return None
        header = ExtendedHeader.from_bytes(bytes(self.data[8 : 8 + ExtendedHeader.EXPECTED_LENGTH]))
        return header if header.magic == ExtendedHeader.EXPECTED_MAGIC else None

    @property
    def program_size(self) -> int:
        """Bytes of flatbuffer: the header's ``program_size``, or the whole file without one."""
        return self.header.program_size if self.header else self.size

    @property
    def segment_base(self) -> int:
        return self.header.segment_base_offset if self.header else 0

    @cached_property
    def program(self) -> Program | None:
        """The program table, parsed by ExecuTorch's deserializer; None (with a problem) if it fails."""
        if self.size < 8 or not ProgramTable.ProgramBufferHasIdentifier(bytes(self.data[:8]), 0):
            self.problems.append(
                f"no ExecuTorch program: file identifier {self.identifier!r}, expected {FILE_IDENTIFIER!r}"
            )
            return None
        if not 8 <= self.program_size <= self.size:
            self.problems.append(
                f"the header's program size {self.program_size} is outside the file ({self.size} bytes)"
            )
            return None
        try:
            with _time_limit(PARSE_SECONDS + self.program_size / PARSE_BYTES_PER_SECOND), verified_reader():
                program = parse_program(bytes(self.data[: self.program_size]))
            missing = _first_missing_field(program, "program")
            if missing:
                self.problems.append(f"the program flatbuffer lacks {missing}, which the schema requires")
                return None
            return program
        except RecursionError:
            self.problems.append("the program flatbuffer nests without end")
        except _ParseTimeout:
            self.problems.append(
                "the program flatbuffer expands without bound (its tables are referenced over and over): "
                "parsing it did not finish in time"
            )
        except Exception as error:  # noqa: BLE001 - a malformed flatbuffer fails in many ways; each is a finding
            self.problems.append(f"the program flatbuffer cannot be parsed: {describe_error(error)}")
        return None

    @cached_property
    def segments(self) -> list[Region]:
        """Every segment the program lists, at its absolute offset."""
        if self.program is None:
            return []
        return [
            Region(self.segment_base + s.offset, s.size, f"segment {i}") for i, s in enumerate(self.program.segments)
        ]

    def segment(self, index: int) -> Region | None:
        return self.segments[index] if 0 <= index < len(self.segments) else None

    def in_file(self, region: Region) -> bool:
        return region.start >= 0 and region.size >= 0 and region.end <= self.size

    def read(self, region: Region) -> bytes:
        """The region's bytes (only ever called on regions inside the file)."""
        return bytes(self.data[region.start : region.end])

    @cached_property
    def delegates(self) -> list[Delegate]:
        """Every delegate of every method, with its processed data when it can be read."""
        payloads: list[Delegate] = []
        if self.program is None:
            return payloads
        for plan in self.program.execution_plan:
            for index, delegate in enumerate(plan.delegates):
                ref = delegate.processed
                data: bytes | None = None
                if ref.location == DataLocation.SEGMENT:
                    where = f"segment {ref.index}"
                    region = self.segment(ref.index)
                    if region is not None and self.in_file(region):
                        data = self.read(region)
                else:
                    where = f"inline {ref.index}"
                    if 0 <= ref.index < len(self.program.backend_delegate_data):
                        data = bytes(self.program.backend_delegate_data[ref.index].data)
                payloads.append(Delegate(plan.name, index, delegate.id, where, data))
        return payloads

    @cached_property
    def constant_table(self) -> SubsegmentTable | None:
        """The constant segment, when the program keeps its constants there (not inline)."""
        program = self.program
        if program is None or not (program.constant_segment and program.constant_segment.offsets and program.segments):
            return None
        table = program.constant_segment
        return SubsegmentTable("constant data", "constant segment", table, self.segment(table.segment_index))

    @cached_property
    def mutable_tables(self) -> list[SubsegmentTable]:
        """The mutable data segments: initial values of mutable buffers."""
        tables = self.program.mutable_data_segments if self.program else None
        return [
            SubsegmentTable(f"mutable data {i}", f"mutable data segment {i}", t, self.segment(t.segment_index))
            for i, t in enumerate(tables or [])
        ]

    @property
    def subsegment_tables(self) -> list[SubsegmentTable]:
        return ([self.constant_table] if self.constant_table else []) + self.mutable_tables

    @cached_property
    def constant_buffer_sizes(self) -> list[int | None]:
        """The bytes each constant buffer may hold (padding included; None when out of bounds)."""
        if self.program is None:
            return []
        if self.constant_table is None:
            return [len(b.storage) for b in self.program.constant_buffer]
        return self.constant_table.buffer_sizes

    def constant_buffer(self, index: int) -> bytes | None:
        """Constant buffer ``index``'s bytes (padding included), or None when it cannot be read."""
        if self.program is None:
            return None
        if self.constant_table is None:
            buffers = self.program.constant_buffer
            return bytes(buffers[index].storage) if 0 <= index < len(buffers) else None
        region = self.constant_table.buffer(index)
        return self.read(region) if region is not None and self.in_file(region) else None

    @cached_property
    def contents(self) -> dict[str, str]:
        """What each segment holds, in the program's terms: ``{"segment 3": "named data 'k'"}``."""
        holds: dict[str, list[str]] = {}
        for table in self.subsegment_tables:
            holds.setdefault(f"segment {table.table.segment_index}", []).append(table.label)
        for delegate in self.delegates:
            if delegate.where.startswith("segment"):
                holds.setdefault(delegate.where, []).append(str(delegate))
        for entry in (self.program.named_data or []) if self.program else []:
            holds.setdefault(f"segment {entry.segment_index}", []).append(f"named data '{entry.key}'")
        return {segment: ", ".join(what) for segment, what in holds.items()}

    @cached_property
    def named_data(self) -> dict[str, Region]:
        """The program's named data by key (the first entry of a repeated key)."""
        found: dict[str, Region] = {}
        for entry in (self.program.named_data or []) if self.program else []:
            region = self.segment(entry.segment_index)
            if region is not None and entry.key not in found:
                found[entry.key] = region
        return found


def _first_missing_field(value: object, path: str) -> str | None:
    """The first field that the schema requires but the flatbuffer left out (read as None):
    damaged tables parse, so the rules could not otherwise trust any field."""
    missing = _missing(value)
    return path + "".join(reversed(missing)) if missing is not None else None


def _missing(value: object) -> list[str] | None:
    """The path to the first required field left out, innermost part first."""
    if isinstance(value, list):
        for i, item in enumerate(value):
            missing = _missing(item)
            if missing is not None:
                return [*missing, f"[{i}]"]
        return None
    for name, required, nested in _field_plan(type(value)):
        item = getattr(value, name, None)
        if item is None:
            if required:
                return [f".{name}"]
        elif nested:
            missing = _missing(item)
            if missing is not None:
                return [*missing, f".{name}"]
    return None


@functools.cache
def _field_plan(cls: type) -> tuple[tuple[str, bool, bool], ...]:
    """Per field of a schema dataclass (none for another type): its name, whether the schema
    requires it, and whether it can hold dataclasses (a list of numbers need not be walked)."""
    if not dataclasses.is_dataclass(cls):
        return ()
    return tuple(
        (name, type(None) not in typing.get_args(hint), _holds_dataclasses(hint))
        for name, hint in typing.get_type_hints(cls).items()
    )


def _holds_dataclasses(hint: object) -> bool:
    return dataclasses.is_dataclass(hint) or any(_holds_dataclasses(arg) for arg in typing.get_args(hint))


# A valid program parses at megabytes a second; one whose tables are shared by many references
# expands quadratically (a 6 KB file can take hours), so the parse has a time limit.
PARSE_SECONDS = 20.0
PARSE_BYTES_PER_SECOND = 2e6


@contextlib.contextmanager
def verified_reader() -> Iterator[None]:
    """The flatbuffer reader's ``Table``, patched for a parse (the program's, an XNNPACK graph's;
    the generated classes offer no other hook). Strings are read as the runtime's flatbuffer
    verifier checks them: their bytes and the NUL after them inside the buffer. Python's reader
    slices past the end in silence, so a program size cut short by a byte or two would parse
    here, where the runtime refuses the program. Scalars and vtable offsets are read as the reader reads them, minus its layers of
    calls (a third of the parse): same checks, same values, same errors."""
    read, get, offset = Table.String, Table.Get, Table.Offset

    def verified(self: Table, off: int) -> bytes:
        at = off + int.from_bytes(self.Bytes[off : off + 4], "little")
        length = int.from_bytes(self.Bytes[at : at + 4], "little")
        end = at + 4 + length
        if end >= len(self.Bytes) or self.Bytes[end] != 0:
            raise ValueError(
                f"the string at byte {at} ({length} bytes and its terminating NUL) runs past the "
                f"{len(self.Bytes)} bytes of the flatbuffer (the runtime's verifier refuses it)"
            )
        return bytes(self.Bytes[at + 4 : end])

    def fast_get(self: Table, flags: Any, off: int) -> Any:
        if not 0 <= off <= _UOFFSET_MAX:  # number_types.enforce_number's check and error
            raise TypeError(f"bad number {off} for type uint32")
        return flags.py_type(flags.packer_type.unpack_from(self.Bytes, off)[0])

    def fast_offset(self: Table, vtable_offset: int) -> int:
        vtable = self.Pos - fast_get(self, _SOFFSET, self.Pos)
        if vtable_offset < fast_get(self, _VOFFSET, vtable):
            return fast_get(self, _VOFFSET, vtable + vtable_offset)
        return 0

    Table.String, Table.Get, Table.Offset = verified, fast_get, fast_offset
    try:
        yield
    finally:
        Table.String, Table.Get, Table.Offset = read, get, offset


_UOFFSET_MAX = 2**32 - 1
_SOFFSET, _VOFFSET = number_types.SOffsetTFlags, number_types.VOffsetTFlags


class _ParseTimeout(BaseException):
    """Raised in the parse by the time limit; a BaseException so that no handler swallows it."""


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Interrupt the block after ``seconds`` (main thread only, where signals are delivered);
    an alarm already set by the caller keeps its remaining time."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return
    armed = [True]

    def expire(signum: int, frame: object) -> None:
        if armed[0]:
            raise _ParseTimeout

    def unraisable(report: Any) -> None:  # our own tick, swallowed where it landed: said by nobody
        if not isinstance(report.exc_value, _ParseTimeout):
            previous_unraisable(report)

    started = time.monotonic()
    previous_unraisable, sys.unraisablehook = sys.unraisablehook, unraisable
    previous_handler = signal.signal(signal.SIGALRM, expire)
    # Repeating: an exception raised while a weakref callback or __del__ runs is swallowed (and
    # reported as unraisable: the hook above keeps those quiet, so that no later tick lands in a
    # reporter such as pytest's), so the alarm fires again until one lands in the parse.
    previous_delay, previous_interval = signal.setitimer(signal.ITIMER_REAL, seconds, 0.05)
    if previous_delay and previous_delay < seconds:
        signal.signal(signal.SIGALRM, previous_handler)  # the caller's alarm comes first
        signal.setitimer(signal.ITIMER_REAL, previous_delay, previous_interval)
    try:
        yield
    finally:
        armed[0] = False  # first: a tick from here on raises nothing
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous_handler)
        sys.unraisablehook = previous_unraisable
        remaining = previous_delay - (time.monotonic() - started)
        if previous_delay and remaining > 0:  # not yet due (had it been, it would have fired)
            signal.setitimer(signal.ITIMER_REAL, remaining, previous_interval)
