"""A fast reader of XNNPACK graphs: the tables of XNNPACK's ``schema.fbs`` (read from the wheel,
as flatc reads it) laid out by hand, and the flatbuffer read with ``struct`` on the buffer, only
the fields the rules read plus those the runtime's verifier checks, no numpy and no generated
classes. It is strict: any offset out of the buffer, any field it cannot lay out, and it gives
up (:class:`Unreadable`), and the caller reads the graph with the generated classes, which say
what is wrong in their words. Where it reads a graph, the generated classes read the same values
(tests/test_xnnpack_graph.py holds it to them on the schema's every node table)."""

from __future__ import annotations

import functools
import re
import struct
from dataclasses import dataclass
from typing import Any, final

from export_guards.pte.reader.wheel import read_resource

__all__ = ["Field", "Layout", "Table", "Unreadable", "layout"]

_SCALARS = {
    "bool": "?", "byte": "b", "ubyte": "B", "int8": "b", "uint8": "B", "short": "h", "ushort": "H", "int16": "h",
    "uint16": "H", "int": "i", "uint": "I", "int32": "i", "uint32": "I", "long": "q", "ulong": "Q", "int64": "q",
    "uint64": "Q", "float": "f", "float32": "f", "double": "d", "float64": "d",
}  # fmt: skip
_U32, _I32, _U16 = struct.Struct("<I"), struct.Struct("<i"), struct.Struct("<H")


class Unreadable(Exception):
    """This reader gives the graph up: the generated classes read it (and say what is wrong)."""


@final
@dataclass(frozen=True)
class Field:
    """A table field: its accessor's name as flatc writes it (``Input1Id``), its vtable slot,
    and its kind: a scalar's ``struct`` code, ``"[" + code`` for a vector of scalars,
    ``"string"``, ``"union"`` (its ``...Type`` is the slot before), or a table's name."""

    name: str
    slot: int
    kind: str
    default: Any = 0


@final
@dataclass(frozen=True)
class Layout:
    """The schema's tables (name -> fields by accessor name), its enums (name -> member ->
    value) and its unions (name -> tag -> (member, table))."""

    tables: dict[str, dict[str, Field]]
    enums: dict[str, dict[str, int]]
    unions: dict[str, dict[int, tuple[str, str]]]


@functools.cache
def layout() -> Layout | None:
    """The layout of ExecuTorch's XNNPACK ``schema.fbs``, or None where it holds what this
    reader does not lay out (structs, attributes it does not know, explicit field ids)."""
    text = re.sub(r"//[^\n]*", "", read_resource("executorch.backends.xnnpack.serialization", "schema.fbs").decode())
    try:
        return _parsed(text)
    except (ValueError, KeyError):
        return None


def _parsed(text: str) -> Layout:
    if re.search(r"^\s*struct\s", text, re.MULTILINE) or re.search(r"\bid\s*:", text):
        raise ValueError("a layout this reader does not follow")
    enums: dict[str, dict[str, int]] = {}
    types: dict[str, str] = {}
    for name, base, body in re.findall(r"enum\s+(\w+)\s*:\s*(\w+)\s*\{(.*?)\}", text, re.DOTALL):
        members, value = {}, -1
        for member in filter(None, (m.strip() for m in body.split(","))):
            key, _, given = (p.strip() for p in member.partition("="))
            value = int(given, 0) if given else value + 1
            members[key] = value
        enums[name], types[name] = members, _SCALARS[base]
    unions = {}
    for name, body in re.findall(r"union\s+(\w+)\s*\{(.*?)\}", text, re.DOTALL):
        members = [tuple(p.strip() for p in m.partition(":")) for m in body.split(",") if m.strip()]
        if any("=" in m[0] for m in members):
            raise ValueError("a union with explicit tags")
        unions[name] = {tag: (m[0], m[2] or m[0]) for tag, m in enumerate(members, 1)}
    tables = {
        name: _fields(body, types, set(unions))
        for name, body in re.findall(r"table\s+(\w+)\s*\{(.*?)\}", text, re.DOTALL)
    }
    return Layout(tables, enums, unions)


def _fields(body: str, enum_types: dict[str, str], unions: set[str]) -> dict[str, Field]:
    fields: dict[str, Field] = {}
    slot = 0
    for line in filter(None, (f.strip() for f in body.split(";"))):
        match = re.fullmatch(r"(\w+)\s*:\s*(\[?\s*\w+\s*\]?)\s*(?:\((.*?)\))?\s*(?:=\s*(\S+))?", line, re.DOTALL)
        if match is None:
            raise ValueError(f"a field this reader does not follow: {line}")
        field, kind, attributes, default = match.groups()
        kind = kind.replace(" ", "")
        deprecated = "deprecated" in (attributes or "")
        name = "".join(part[:1].upper() + part[1:] for part in field.split("_"))
        if kind in unions:
            if not deprecated:
                fields[f"{name}Type"] = Field(f"{name}Type", slot, "B")
                fields[name] = Field(name, slot + 1, "union")
            slot += 2
            continue
        if not deprecated:
            fields[name] = _field(name, slot, kind, default, enum_types)
        slot += 1
    return fields


def _field(name: str, slot: int, kind: str, default: str | None, enum_types: dict[str, str]) -> Field:
    inner = kind.strip("[]")
    code = _SCALARS.get(inner) or enum_types.get(inner)
    if kind.startswith("["):
        return Field(name, slot, "[" + code if code else f"[{inner}")
    if code is None:
        if default is not None:
            raise ValueError(f"a default for {kind}")
        return Field(name, slot, "string" if kind == "string" else kind)
    value: Any = (float if code in "fd" else bool if code == "?" else int)(0)
    if default is not None:
        value = float(default) if code in "fd" else default == "true" if code == "?" else int(default, 0)
    return Field(name, slot, code, value)


class Table:
    """A table of a flatbuffer at ``pos``, read strictly: an offset outside the buffer raises
    (``struct.error``, or :class:`Unreadable` for one before it), as the generated classes'
    reads raise there; the vtable is read whole, once."""

    __slots__ = ("buf", "fields", "pos", "slots")

    def __init__(self, buf: Any, pos: int, fields: dict[str, Field]) -> None:
        self.buf, self.pos, self.fields = buf, pos, fields
        vtable = pos - _I32.unpack_from(buf, pos)[0]
        if vtable < 0:
            raise Unreadable
        # The generated Offset() reads slot n's entry where 4 + 2n < the vtable's stated size.
        count = max(0, (_U16.unpack_from(buf, vtable)[0] - 3) // 2)
        self.slots = struct.unpack_from(f"<{count}H", buf, vtable + 4) if count else ()

    def _offset(self, name: str) -> tuple[Field, int]:
        field = self.fields[name]
        return field, (self.slots[field.slot] if field.slot < len(self.slots) else 0)

    def get(self, name: str) -> Any:
        """A scalar field's value (its default where absent)."""
        field, offset = self._offset(name)
        if not offset:
            return field.default
        return _struct(field.kind).unpack_from(self.buf, self.pos + offset)[0]

    def table(self, name: str, fields: dict[str, Field]) -> Table | None:
        """A table field (or a union's value, with its table's ``fields``), None where absent."""
        _, offset = self._offset(name)
        if not offset:
            return None
        at = self.pos + offset
        return Table(self.buf, at + _U32.unpack_from(self.buf, at)[0], fields)

    def _vector(self, name: str) -> tuple[str, int, int]:
        """A vector field's element kind, first element's position and length (0 where absent)."""
        field, offset = self._offset(name)
        if not offset:
            return field.kind[1:], 0, 0
        at = self.pos + offset
        start = at + _U32.unpack_from(self.buf, at)[0]
        return field.kind[1:], start + 4, _U32.unpack_from(self.buf, start)[0]

    def numbers(self, name: str) -> tuple[Any, ...]:
        """A vector of scalars, whole (``()`` where absent)."""
        code, start, length = self._vector(name)
        if not length:
            return ()
        _struct(code)  # one scalar type, or this reader gives up
        return struct.unpack_from(f"<{length}{code}", self.buf, start)

    def tables(self, name: str, fields: dict[str, Field]) -> list[Table]:
        """A vector of tables, each read with ``fields``."""
        _, start, length = self._vector(name)
        if not length:
            return []
        offsets = struct.unpack_from(f"<{length}I", self.buf, start)
        return [Table(self.buf, start + 4 * k + offset, fields) for k, offset in enumerate(offsets)]

    def string(self, name: str) -> bytes | None:
        """A string field's bytes (None where absent), only where its bytes and the NUL after
        them lie inside the buffer, as the runtime's verifier reads it."""
        _, offset = self._offset(name)
        if not offset:
            return None
        at = self.pos + offset
        at += _U32.unpack_from(self.buf, at)[0]
        end = at + 4 + _U32.unpack_from(self.buf, at)[0]
        if end >= len(self.buf) or self.buf[end] != 0:
            raise Unreadable
        return bytes(self.buf[at + 4 : end])


@functools.cache
def _struct(code: str) -> struct.Struct:
    if len(code) != 1:
        raise Unreadable  # a vector of tables read as numbers, or a table as a scalar
    return struct.Struct("<" + code)
