"""The program flatbuffer as ExecuTorch's schema dataclasses, quickly.

ExecuTorch's ``_flatbuffer_to_program`` unpacks the flatbuffer with its generated object API (a
Python call per field read, numpy arrays for vectors) and then converts every value to the
dataclasses by inspecting its type hints. Here (:func:`read_program`) the flatbuffer is decoded
straight into the dataclasses by a reader made once per table: which vtable slot each field
has, how it is stored and its default are learnt by calling the generated classes' own
accessors on a recording stand-in for their table, and each table's reader is compiled from
them, reading with ``struct`` and ``memoryview`` (ten times faster). It reads every field the
object API reads, with the checks it makes (a vtable before the buffer, strings as
``file.verified_reader`` reads them, vectors inside the buffer), so it succeeds only where the
object API does, with its result; where it fails (a damaged buffer, or one whose vectors are
shared, :class:`_Parse`), ExecuTorch's unpacking reads the buffer again (:func:`parse_program`),
for its own error, or its result.
``tests/test_pte_check.py`` compares both with ``_flatbuffer_to_program`` on every program it
writes. ExecuTorch's helpers and classes come from ``reader/wheel.py``: loaded without torch.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import importlib
import importlib.util
import marshal
import os
import struct
import sys
import tempfile
import threading
import types
from collections.abc import Callable
from dataclasses import is_dataclass
from typing import Any, Union, get_args, get_origin

from export_guards.pte.reader.version_tables import cache_folder
from export_guards.pte.reader.wheel import (
    Program,
    ProgramT,
    ProgramTable,
    coerce_bytes,
    dataclass_field_map,
    dataclass_type_hints,
    patch_generated_flatbuffer_aliases,
)

__all__ = ["parse_program", "read_program"]

Converter = Callable[[Any], Any]


def parse_program(data: bytes) -> Program:
    """``data`` (the program flatbuffer) as a ``Program``, equal to what ExecuTorch's
    ``_flatbuffer_to_program`` gives. Raises what the unpacking raises on a damaged buffer."""
    reader = _program_reader()
    if reader is not None:
        try:
            return reader(data)
        except Exception:  # noqa: S110, BLE001 - damaged: ExecuTorch's unpacking below says how, as before
            pass
    patch_generated_flatbuffer_aliases()
    return _converter(Program)(ProgramT.InitFromPackedBuf(data))


def read_program(data: bytes) -> Program:
    """``data`` decoded by the compiled readers alone (what :func:`parse_program` tries first).

    Raises:
        LookupError: this ExecuTorch's generated classes have a form the readers do not know.
        Exception: the buffer is damaged (of no particular type: :func:`parse_program` asks
            ExecuTorch's unpacking why).
    """
    reader = _program_reader()
    if reader is None:
        raise LookupError("the generated program classes have a form the compiled readers do not know")
    return reader(data)


# ExecuTorch's conversion of unpacked values, with a plan made once per dataclass and field type
# (the fallback for a damaged buffer, and the leaves' conversion of the compiled readers).


@functools.cache
def _converter(expected: Any) -> Converter:
    """How to convert an unpacked value to ``expected`` (ExecuTorch's rules, decided once)."""
    origin = get_origin(expected)
    if origin is list:
        item = _converter(get_args(expected)[0])
        return lambda value: None if value is None else [item(v) for v in value]
    if origin is Union:
        choices = get_args(expected)
        return lambda value: None if value is None else _union(choices, value)
    if expected is bytes:
        return lambda value: None if value is None else coerce_bytes(value)
    if expected is str:
        return lambda value: (
            None
            if value is None
            else coerce_bytes(value).decode("utf-8")
            if isinstance(value, (bytes, bytearray, memoryview))
            else str(value)
        )
    if is_dataclass(expected):
        return _dataclass_converter(expected)
    if isinstance(expected, type) and issubclass(expected, enum.Enum):
        return lambda value: None if value is None else value if isinstance(value, expected) else expected(value)
    if isinstance(expected, type):
        return lambda value: None if value is None else expected(value)
    return lambda value: value


def _dataclass_converter(cls: type) -> Converter:
    hints = dataclass_type_hints(cls)
    plan: list[tuple[str, str, Converter]] = []

    def convert(value: Any) -> Any:
        if value is None:
            return None
        if not plan:  # filled on first use: a field may hold this very dataclass
            plan.extend((name, source, _converter(hints[name])) for name, source in dataclass_field_map(cls))
        return cls(**{name: field(getattr(value, source)) for name, source, field in plan})

    return convert


def _union(choices: tuple[Any, ...], value: Any) -> Any:
    chosen = _union_choice(choices, type(value))
    if chosen is None:
        raise TypeError(f"Could not match value type {type(value)} to Union{list(choices)}")
    return None if chosen is type(None) else _converter(chosen)(value)


@functools.cache
def _union_choice(choices: tuple[Any, ...], value_type: type) -> Any:
    """The union member ExecuTorch's ``_union_choice_from_value`` picks for a value of this type
    (its tests depend on the type alone): a dataclass by its generated ``...T`` class name, else
    the first member the value is an instance of."""
    name = value_type.__name__
    for choice in choices:
        if choice is type(None):
            continue
        if is_dataclass(choice) and choice.__name__ in (name, name[:-1] if name.endswith("T") else None):
            return choice
        if choice is Any or (choice is str and issubclass(value_type, (bytes, bytearray, memoryview))):
            return choice
        if get_origin(choice) is list and hasattr(value_type, "__iter__"):
            return choice
        if isinstance(choice, type) and issubclass(value_type, choice):
            return choice
    return None


# The compiled readers.

_U32 = struct.Struct("<I").unpack_from
_I32 = struct.Struct("<i").unpack_from
_U16 = struct.Struct("<H").unpack_from
_SIZES = {"b": 1, "B": 1, "?": 1, "h": 2, "H": 2, "i": 4, "I": 4, "q": 8, "Q": 8, "f": 4, "d": 8}
_INTEGERS = frozenset("bBhHiIqQ")


class _Unknown(LookupError):
    """The generated classes have a form the readers do not know: ExecuTorch's unpacking reads."""


_building = threading.Lock()


@functools.cache
def _program_reader() -> Callable[[bytes], Program] | None:
    """The compiled reader of the root table (None where the generated classes are of another
    form: every program is then read by ExecuTorch's unpacking)."""
    with _building:
        patch_generated_flatbuffer_aliases()  # what the generated accessors need to run at all
        try:
            compiled = _Compiler()
            root_name = compiled.reader(ProgramTable, Program)
            compiled.finish()
        except _Unknown:
            return None
        root = compiled.space[root_name]

    def read(data: bytes) -> Program:
        return root(data, _Parse(data), _U32(data, 0)[0])

    return read


class _Recorder:
    """A generated table's ``_tab``: records what an accessor reads (and reads nothing)."""

    __slots__ = ("Bytes", "Pos", "log", "present")

    def __init__(self, present: bool) -> None:
        self.Bytes, self.Pos, self.log, self.present = bytearray(), 0, [], present

    def Offset(self, slot: int) -> int:  # noqa: N802  (flatbuffers' names)
        self.log.append(("offset", slot))
        return 4 if self.present else 0

    def Get(self, flags: Any, off: int) -> Any:  # noqa: N802
        self.log.append(("get", flags.packer_type.format))
        return flags.py_type(0)

    def Vector(self, off: int) -> int:  # noqa: N802
        self.log.append(("vector",))
        return 0

    def VectorLen(self, off: int) -> int:  # noqa: N802
        return 0

    def Indirect(self, off: int) -> int:  # noqa: N802
        self.log.append(("indirect",))
        return 0

    def String(self, off: int) -> bytes:  # noqa: N802
        self.log.append(("string",))
        return b""

    def Union(self, table: Any, off: int) -> None:  # noqa: N802
        self.log.append(("union",))


def _probe(table: type, accessor: str, present: bool, *args: int) -> tuple[list[tuple[Any, ...]], Any]:
    """What ``table.accessor(*args)`` reads, and what it returns, on a table with the field
    present (or absent)."""
    recorder = _Recorder(present)
    instance = table.__new__(table)
    instance._tab = recorder
    try:
        returned = getattr(table, accessor)(instance, *args)
    except Exception as error:  # noqa: BLE001 - a damaged flatbuffer fails the reader in many ways
        raise _Unknown(f"{table.__name__}.{accessor}: {error}") from None
    return recorder.log, returned


def _format(log: list[tuple[Any, ...]]) -> str:
    formats = [entry[1] for entry in log if entry[0] == "get"]
    if len(formats) != 1 or formats[0].lstrip("<") not in _SIZES:
        raise _Unknown(f"a scalar read as {formats}")
    return formats[0].lstrip("<")  # "?" has no byte order


class _Compiler:
    """Compiles one reader per (generated table, dataclass), each a function of the buffer, its
    memoryview and the table's position, into one namespace."""

    def __init__(self) -> None:
        self.names: dict[tuple[type, type], str] = {}
        self.source: list[str] = []
        self.pending: list[tuple[dict[int, Any], int, str]] = []
        self.space: dict[str, Any] = {
            "_U32": _U32,
            "_I32": _I32,
            "_U16": _U16,
            "_string": _string,
            "_vector": _vector,
            "_offsets": _offsets,
            "_member": _member,
        }

    def reader(self, table: type, cls: type) -> str:
        """The name of the reader of ``table`` as ``cls`` (compiled by :meth:`finish`)."""
        return self._name(table, cls)

    def finish(self) -> None:
        exec(_compiled("\n".join(self.source)), self.space)  # noqa: S102  (our own source)
        for readers, number, name in self.pending:  # the unions' members, compiled now
            readers[number] = self.space[name]

    def constant(self, value: Any) -> str:
        name = f"_k{len(self.space)}"
        self.space[name] = value
        return name

    def _name(self, table: type, cls: type) -> str:
        if (table, cls) not in self.names:
            self.names[table, cls] = f"_read_{table.__name__}_{len(self.names)}"
            self.source.append(self._function(table, cls))
        return self.names[table, cls]

    def _function(self, table: type, cls: type) -> str:
        """The reader's source: every field the generated ``_UnPack`` reads, then the dataclass."""
        unpacked = _unpacked_fields(table)
        hints = dataclass_type_hints(cls)
        wanted = {source: name for name, source in dataclass_field_map(cls)}
        if not set(wanted) <= set(unpacked):
            raise _Unknown(f"{cls.__name__} has fields that {table.__name__} lacks")
        unions = {f"{source}Type" for source in unpacked if _is_union(table, source)}
        unpacked = [source for source in unpacked if source not in unions]  # read with their value
        lines = [f"def {self.names[table, cls]}(b, s, pos):"]
        if unpacked:  # a table without fields is not read (nor is its vtable)
            lines += [
                "    vt = pos - _I32(b, pos)[0]",
                "    if vt < 0:",
                "        raise ValueError('a vtable before the buffer')",
                "    vn = _U16(b, vt)[0]",
            ]
        for number, source in enumerate(unpacked):
            hint = hints[wanted[source]] if source in wanted else Any
            lines += ["    " + line for line in self._field(table, source, hint, f"v{number}")]
        arguments = ", ".join(f"{name}=v{unpacked.index(source)}" for source, name in wanted.items())
        lines.append(f"    return {self.constant(cls)}({arguments})")
        return "\n".join(lines) + "\n"

    def _field(self, table: type, source: str, hint: Any, out: str) -> list[str]:
        accessor = source[0].upper() + source[1:]
        slot_of = f"{out}o"
        if hasattr(table, f"{accessor}Length"):
            log, returned = _probe(table, accessor, True, 0)
            kind = "vector"
        else:
            log, returned = _probe(table, accessor, True)
            kind = "union" if ("union",) in log else "field"
        slots = [entry[1] for entry in log if entry[0] == "offset"]
        if len(slots) != 1:
            raise _Unknown(f"{table.__name__}.{accessor} reads slots {slots}")
        lines = [f"{slot_of} = _U16(b, vt + {slots[0]})[0] if vn > {slots[0]} else 0"]
        if kind == "union":
            return lines + self._union(table, accessor, hint, out, slot_of)
        if kind == "vector":
            return lines + self._vector(table, log, returned, hint, out, slot_of)
        if ("string",) in log:
            return [
                *lines,
                f"{out} = _string(b, s, pos + {slot_of}) if {slot_of} else None",
                *self._convert(hint, out, "string"),
            ]
        if ("indirect",) in log:
            child = self._child(returned, hint, optional=True)
            return [
                *lines,
                f"{out} = {child}(b, s, pos + {slot_of} + _U32(b, pos + {slot_of})[0]) if {slot_of} else None",
            ]
        code = _format(log)
        _, default = _probe(table, accessor, False)
        unpack = self.constant(struct.Struct("<" + code).unpack_from)
        return [
            *lines,
            f"{out} = {unpack}(b, pos + {slot_of})[0] if {slot_of} else {self.constant(default)}",
            *self._convert(hint, out, code),
        ]

    def _vector(
        self, table: type, log: list[tuple[Any, ...]], returned: Any, hint: Any, out: str, slot_of: str
    ) -> list[str]:
        start = f"pos + {slot_of}"
        if ("indirect",) in log:
            item = get_args(_without_none(hint))[0] if get_origin(_without_none(hint)) is list else Any
            child = self._child(returned, item, optional=False)
            return [
                f"{out} = [{child}(b, s, e + _U32(b, e)[0]) for e in _offsets(b, s, {start})] if {slot_of} else None"
            ]
        if ("string",) in log:
            return [
                f"{out} = [_string(b, s, e) for e in _offsets(b, s, {start})] if {slot_of} else None",
                *self._convert(hint, out, "strings"),
            ]
        code = _format(log)
        if _without_none(hint) is bytes and code == "B":
            return [
                f"{out} = _vector(b, s, {start}, 'B', 1, True) if {slot_of} else None",
                *self._convert(hint, out, "bytes"),
            ]
        return [
            f"{out} = _vector(b, s, {start}, '{code}', {_SIZES[code]}, False) if {slot_of} else None",
            *self._convert(hint, out, f"[{code}]"),
        ]

    def _union(self, table: type, accessor: str, hint: Any, out: str, slot_of: str) -> list[str]:
        type_log, _ = _probe(table, f"{accessor}Type", True)
        type_slots = [entry[1] for entry in type_log if entry[0] == "offset"]
        if len(type_slots) != 1 or _format(type_log) not in _INTEGERS:
            raise _Unknown(f"{table.__name__}.{accessor}Type reads {type_log}")
        readers, unmatched = self._members(table, hint)
        code = _format(type_log)
        unpack = self.constant(struct.Struct("<" + code).unpack_from)
        return [
            f"{out}t = _U16(b, vt + {type_slots[0]})[0] if vn > {type_slots[0]} else 0",
            f"{out}k = {unpack}(b, pos + {out}t)[0] if {out}t else 0",
            f"{out}p = pos + {slot_of} + _U32(b, pos + {slot_of})[0] if {slot_of} else None",
            f"{out} = _member({self.constant(readers)}, {self.constant(unmatched)}, {out}k, b, s, {out}p)",
        ]

    def _members(self, table: type, hint: Any) -> tuple[dict[int, Any], frozenset[int]]:
        """The reader of each member of the union the field holds, by its type number, and the
        numbers of the members the dataclass union has no match for (ExecuTorch raises)."""
        choices = [c for c in get_args(hint) if c is not type(None)] if get_origin(hint) is Union else []
        if not choices or not all(is_dataclass(c) for c in choices):
            raise _Unknown(f"a union field of {table.__name__} typed {hint}")
        unpack = getattr(_t_class(table), "_UnPack", None)
        names = set(getattr(getattr(unpack, "__code__", None), "co_names", ()))
        package = table.__module__.rpartition(".")[0]
        for name in sorted(n for n in names if f"{n}Creator" in names):
            enumeration = getattr(importlib.import_module(f"{package}.{name}"), name, None)
            members = {
                k: v
                for k, v in vars(enumeration).items()
                if not k.startswith("_") and isinstance(v, int) and k != "NONE"
            }
            if {c.__name__ for c in choices} <= set(members):
                by_name = {c.__name__: c for c in choices}
                readers: dict[int, Any] = {}
                for member, number in members.items():
                    if member in by_name:
                        self.pending.append(
                            (readers, number, self.reader(_generated(package, member), by_name[member]))
                        )
                return readers, frozenset(number for member, number in members.items() if member not in by_name)
        raise _Unknown(f"no union enumeration of {table.__name__} holds {choices}")

    def _child(self, returned: Any, hint: Any, *, optional: bool) -> str:
        table = type(returned)
        wanted = _without_none(hint) if optional else hint
        if not is_dataclass(wanted) or (wanted is not hint and wanted.__name__ != table.__name__):
            raise _Unknown(f"a table {table.__name__} typed {hint}")  # ExecuTorch's conversion is by name
        return self._name(table, wanted)

    def _convert(self, hint: Any, out: str, stored: str) -> list[str]:
        """The line that converts a leaf as ExecuTorch's conversion does (none where the value
        is of the type already)."""
        if stored == "string" and hint is str:
            return [f"{out} = {out}.decode('utf-8') if {out} is not None else None"]
        if (
            (stored in _INTEGERS and hint is int)
            or (stored == "?" and hint is bool)
            or (stored in ("f", "d") and hint is float)
        ):
            return []
        if stored == "bytes" and hint is bytes:
            return []
        if stored.startswith("[") and get_origin(hint) is list:
            item, code = get_args(hint)[0], stored[1:-1]
            if (code in _INTEGERS and item is int) or (code == "?" and item is bool) or (code == "d" and item is float):
                return []
        if isinstance(hint, type) and issubclass(hint, enum.Enum) and stored in _INTEGERS:
            return [f"{out} = {self.constant(hint)}({out})"]
        return [f"{out} = {self.constant(_converter(hint))}({out})"]


def _compiled(source: str) -> types.CodeType:
    """``source`` compiled, or its code as the user's cache keeps it (compiling is half the
    readers' making): named by the hash of the source and of this Python's bytecode format,
    and trusted only where its own hash matches."""
    key = hashlib.sha256(importlib.util.MAGIC_NUMBER + source.encode()).hexdigest()[:32]
    path = cache_folder() / f"program_readers_{key}.marshal"
    try:
        kept = path.read_bytes()
        if hashlib.sha256(kept[32:]).digest() == kept[:32]:
            return marshal.loads(kept[32:])  # noqa: S302 - our own cache file, its sha256 checked, as Python's bytecode cache is
    except (OSError, ValueError, EOFError, TypeError):
        pass  # none kept, or damaged: compiled again
    code = compile(source, "<export_guards program readers>", "exec")
    data = marshal.dumps(code)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("wb", dir=path.parent, prefix=path.name, suffix=".part", delete=False) as file:
            file.write(hashlib.sha256(data).digest() + data)
        os.replace(file.name, path)
    except OSError:
        pass  # a read-only cache: compiled again next time
    return code


def _without_none(hint: Any) -> Any:
    """``X`` of ``Optional[X]``; any other hint as it is."""
    if get_origin(hint) is Union:
        rest = [c for c in get_args(hint) if c is not type(None)]
        return rest[0] if len(rest) == 1 else hint
    return hint


def _t_class(table: type) -> type:
    t_class = getattr(sys.modules[table.__module__], f"{table.__name__}T", None)
    if not isinstance(t_class, type):
        raise _Unknown(f"no object-API class of {table.__name__}")
    return t_class


def _unpacked_fields(table: type) -> list[str]:
    """The attributes the object API's ``_UnPack`` sets, in order."""
    return list(vars(_t_class(table)()))


def _is_union(table: type, source: str) -> bool:
    accessor = source[0].upper() + source[1:]
    return (
        hasattr(table, f"{accessor}Type")
        and not hasattr(table, f"{accessor}Length")
        and ("union",) in _probe(table, accessor, True)[0]
    )


def _generated(package: str, name: str) -> type:
    table = getattr(importlib.import_module(f"{package}.{name}"), name, None)
    if not isinstance(table, type):
        raise _Unknown(f"no generated table {name}")
    return table


class _Parse:
    """One parse's buffer as a memoryview, and how many more bytes of vectors and strings it
    may read: a buffer read once holds each in bytes of its own, so reading more than its size
    means that they are shared, over and over perhaps (``file.PARSE_SECONDS``); such a buffer
    is read by ExecuTorch's unpacking, as it always was."""

    __slots__ = ("left", "view")

    def __init__(self, data: bytes) -> None:
        self.view, self.left = memoryview(data), len(data)

    def spend(self, size: int) -> None:
        self.left -= size
        if self.left < 0:
            raise ValueError("vectors and strings shared: more of them read than the buffer holds")


def _string(b: bytes, s: _Parse, at: int) -> bytes:
    """The string whose offset is at ``at``, as ``file.verified_reader`` reads it: its bytes and
    the NUL after them inside the buffer."""
    start = at + _U32(b, at)[0]
    end = start + 4 + _U32(b, start)[0]
    if end >= len(b) or b[end] != 0:
        raise ValueError("a string runs past the buffer")
    s.spend(end + 1 - start)
    return b[start + 4 : end]


def _offsets(b: bytes, s: _Parse, at: int) -> range:
    """The positions of the offsets a vector of tables or strings holds."""
    start = at + _U32(b, at)[0]
    end = start + 4 + 4 * _U32(b, start)[0]
    if end > len(b):
        raise ValueError("a vector runs past the buffer")
    s.spend(end - start)
    return range(start + 4, end, 4)


_LITTLE = sys.byteorder == "little"


def _vector(b: bytes, s: _Parse, at: int, code: str, size: int, as_bytes: bool) -> Any:
    """The scalars of the vector whose offset is at ``at``: a list, or bytes."""
    start = at + _U32(b, at)[0]
    count = _U32(b, start)[0]
    end = start + 4 + size * count
    if end > len(b):
        raise ValueError("a vector runs past the buffer")
    s.spend(end - start)
    if as_bytes:
        return b[start + 4 : end]
    if _LITTLE:
        return s.view[start + 4 : end].cast(code).tolist()
    return list(struct.unpack_from(f"<{count}{code}", b, start + 4))


def _member(
    readers: dict[int, Any], unmatched: frozenset[int], number: int, b: bytes, s: _Parse, at: int | None
) -> Any:
    """A union's value: its member's table read, None where it has none (or a type the schema
    does not know, as ExecuTorch reads it)."""
    if at is None:
        return None
    reader = readers.get(number)
    if reader is not None:
        return reader(b, s, at)
    if number in unmatched:
        raise TypeError(f"a union member {number} that the dataclasses have no match for")
    return None
