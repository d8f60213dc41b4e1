"""The schema torch knows for an operator a program calls, by the name and overload the program
stores (``aten::add``, ``out``), for the rules that read what an instruction passes: read from a
table, without torch.

The table is torch's operator registry with ExecuTorch's operators, as ``reader/schema_registry.py``
reads it: shipped beside this module for the torch, ExecuTorch and torchao versions it names
(a test compares it with the live registry); for other versions, built once from the live
registry (which loads torch) and kept in the user's cache. It is read on the first lookup, that
is, only for a program with kernel calls."""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import final

from export_guards.pte.reader import version_tables
from export_guards.pte.reader.version_tables import Versions

__all__ = [
    "SHIPPED",
    "Argument",
    "OperatorSchema",
    "installed_versions",
    "operator_schema",
    "write_shipped",
    "write_table",
]

SHIPPED = Path(__file__).with_name("operator_schemas.json")
PACKAGES = ("torch", "executorch", "torchao")  # whose versions decide which operators torch knows


@final
@dataclass(frozen=True)
class Argument:
    """One argument or return of an operator's schema."""

    name: str
    type: str
    """As torch prints it (``Tensor``, ``Optional[int]``, ``List[Optional[Tensor]]``)."""
    element: str | None
    """The type an optional argument holds (``int`` of ``Optional[int]``); None when not optional."""
    written: bool = False
    """Written by the operator (``Tensor(a!)``): an ``out`` argument, or in place."""
    kwarg_only: bool = False

    @property
    def optional(self) -> bool:
        return self.element is not None


@final
@dataclass(frozen=True)
class OperatorSchema:
    """An operator's arguments and returns, and whether EG519 can replay it on meta tensors."""

    arguments: tuple[Argument, ...]
    returns: tuple[Argument, ...]
    replayable: bool
    """An ATen or ``dim_order_ops`` operator with a kernel that runs on meta tensors."""


@functools.cache
def operator_schema(name: str, overload: str) -> OperatorSchema | None:
    """The schema of ``name.overload``, or None where torch does not know the operator here."""
    row = _table().get(f"{name}.{overload}")
    if row is None:
        return None
    arguments, returns, replayable = row
    return OperatorSchema(
        tuple(Argument(a[0], a[1], a[2], bool(a[3]), bool(a[4])) for a in arguments),
        tuple(Argument("", r[0], r[1]) for r in returns),
        bool(replayable),
    )


def installed_versions() -> Versions:
    """The installed versions of the packages whose operators the table holds."""
    return version_tables.installed_versions(PACKAGES)


_building = threading.Lock()  # --jobs: one thread reads or builds the table, the others wait for it


def _table() -> Mapping[str, list]:
    with _building:
        return _table_once()


@functools.cache
def _table_once() -> Mapping[str, list]:
    versions = installed_versions()
    for path in (SHIPPED, _cached(versions)):
        rows = _read(path, versions)
        if rows is not None:
            return rows
    from export_guards.pte.reader.schema_registry import live_table  # torch: seconds, once per version

    rows = live_table()
    with contextlib.suppress(OSError):  # a read-only cache: this process keeps the table, the next one builds it again
        write_table(_cached(versions), versions, rows)
    return rows


def _read(path: Path, versions: Versions) -> Mapping[str, list] | None:
    return version_tables.read_table(path, versions, "operators")


def _cached(versions: Versions) -> Path:
    return version_tables.cached_path("operator_schemas", versions)


def write_table(path: Path, versions: Versions, rows: dict[str, list[object]]) -> None:
    """Write the table at ``path``, whole or not at all (a concurrent reader sees the old one or
    the new one)."""
    version_tables.write_table(path, versions, "operators", rows)


def write_shipped() -> Path:
    """Write the shipped table from the live registry of the installed torch and ExecuTorch
    (``make operator-table``, after a change of the pinned versions)."""
    from export_guards.pte.reader.schema_registry import live_table

    write_table(SHIPPED, installed_versions(), live_table())
    return SHIPPED
