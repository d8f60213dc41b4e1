"""The program flatbuffer as ExecuTorch's schema dataclasses, quickly.

ExecuTorch's ``_flatbuffer_to_program`` unpacks the flatbuffer with its generated object API and
then converts every value to the dataclasses by inspecting its type hints, once per value. Here
the unpacking is ExecuTorch's own, and the conversion follows the same rules with a plan made
once per dataclass and field type, which takes about a fifth off the parse of a small program
(the check's largest cost). ``tests/test_pte_check.py`` compares the two on every program it
writes. ExecuTorch's helpers and classes come from ``reader/wheel.py``: loaded without torch.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable
from dataclasses import is_dataclass
from typing import Any, Union, get_args, get_origin

from export_guards.pte.reader.wheel import Program, ProgramT, coerce_bytes, dataclass_field_map, dataclass_type_hints, patch_generated_flatbuffer_aliases

__all__ = ["parse_program"]

Converter = Callable[[Any], Any]


def parse_program(data: bytes) -> Program:
    """``data`` (the program flatbuffer) as a ``Program``, equal to what ExecuTorch's
    ``_flatbuffer_to_program`` gives. Raises what the unpacking raises on a damaged buffer."""
    patch_generated_flatbuffer_aliases()
    return _converter(Program)(ProgramT.InitFromPackedBuf(data))


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
        return lambda value: None if value is None else coerce_bytes(value).decode("utf-8") if isinstance(value, (bytes, bytearray, memoryview)) else str(value)
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
