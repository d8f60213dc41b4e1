"""The schema torch knows for an operator a program calls, by the name and overload the program
stores (``aten::add``, ``out``), for the rules that read what an instruction passes: read from a
table, without torch.

The table is torch's operator registry with ExecuTorch's operators, as ``reader/schema_registry.py``
reads it: shipped beside this module for the torch, ExecuTorch and torchao versions it names
(a test compares it with the live registry); for other versions, built once from the live
registry (which loads torch) and kept in the user's cache. It is read on the first lookup, that
is, only for a program with kernel calls."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
import threading
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import final

__all__ = ["SHIPPED", "Argument", "OperatorSchema", "installed_versions", "operator_schema", "write_shipped", "write_table"]

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


def installed_versions() -> dict[str, str | None]:
    """The installed versions of the packages whose operators the table holds."""
    found: dict[str, str | None] = {}
    for package in PACKAGES:
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = None
    return found


_building = threading.Lock()  # --jobs: one thread reads or builds the table, the others wait for it


def _table() -> dict[str, list]:
    with _building:
        return _table_once()


@functools.cache
def _table_once() -> dict[str, list]:
    versions = installed_versions()
    for path in (SHIPPED, _cached(versions)):
        rows = _read(path, versions)
        if rows is not None:
            return rows
    from export_guards.pte.reader.schema_registry import live_table  # torch: seconds, once per version

    rows = live_table()
    try:
        write_table(_cached(versions), versions, rows)
    except OSError:
        pass  # a read-only cache: this process keeps the table, the next one builds it again
    return rows


def _read(path: Path, versions: dict[str, str | None]) -> dict[str, list] | None:
    try:
        document = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(document, dict) or document.get("versions") != versions or not isinstance(document.get("operators"), dict):
        return None
    return document["operators"]


def _cached(versions: dict[str, str | None]) -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    tag = hashlib.sha256(json.dumps(versions, sort_keys=True).encode()).hexdigest()[:16]
    return root / "export-guards" / f"operator_schemas-{tag}.json"


def write_table(path: Path, versions: dict[str, str | None], rows: dict[str, list[object]]) -> None:
    """Write the table at ``path``, whole or not at all (a concurrent reader sees the old one or
    the new one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"versions": versions, "operators": rows}, separators=(",", ":"), sort_keys=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=path.name, suffix=".part", delete=False) as file:
        file.write(text + "\n")
    os.chmod(file.name, 0o644)  # as any file written plainly (a temporary file is the owner's alone)
    os.replace(file.name, path)


def write_shipped() -> Path:
    """Write the shipped table from the live registry of the installed torch and ExecuTorch
    (``make operator-table``, after a change of the pinned versions)."""
    from export_guards.pte.reader.schema_registry import live_table

    write_table(SHIPPED, installed_versions(), live_table())
    return SHIPPED
