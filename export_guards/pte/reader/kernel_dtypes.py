"""The dtypes each portable kernel of ``executorch.runtime`` takes, by the dtype signature of a
call (:func:`signature`), as ``pte/kernel_probe.py`` found by running each kernel: read from a
table, without torch, for EG525.

The table is shipped beside this module for the ExecuTorch version it names (``make
kernel-table``; a test probes a few kernels again and compares); for another version, the user's
cache holds the one ``pte.kernel_probe.write_cached`` built, or there is none and EG525 says
nothing. It is read on the first lookup, that is, only for a program with kernel calls."""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import final

from export_guards.pte.reader import version_tables
from export_guards.pte.reader.schemas import operator_schema
from export_guards.pte.reader.tensors import dtype_name
from export_guards.pte.reader.version_tables import Versions
from export_guards.pte.reader.wheel import (
    Bool,
    Double,
    ExecutionPlan,
    Int,
    KernelCall,
    Null,
    OptionalTensorList,
    Tensor,
    TensorList,
)

__all__ = ["SHIPPED", "KernelDtypes", "cached_path", "installed_versions", "kernel_dtypes", "signature", "write_table"]

SHIPPED = Path(__file__).with_name("kernel_dtypes.json")
PACKAGES = ("executorch",)  # whose runtime's kernels the table holds


@final
@dataclass(frozen=True)
class KernelDtypes:
    """What one kernel did when probed."""

    takes: tuple[str, ...]
    """The dtypes it ran with, every tensor of its probe call's base dtype in that dtype."""
    calls: dict[str, str]
    """Each call signature probed: ``"ok"``, or how the runtime failed it (``"0x12"``, ``"abort"``)."""


def signature(plan: ExecutionPlan, call: KernelCall) -> str | None:
    """A call's dtype signature: each tensor argument's dtype by its schema's name (a list's
    dtypes in brackets, each once; an absent optional tensor ``None``) and each ``Scalar``'s kind (``self=float64
    out=float64``); None where the schema is not known or the call's arguments do not fit it."""
    operator = plan.operators[call.op_index] if 0 <= call.op_index < len(plan.operators) else None
    schema = operator_schema(operator.name, operator.overload) if operator is not None else None
    if (
        schema is None
        or len(call.args) < len(schema.arguments)
        or not all(0 <= i < len(plan.values) for i in call.args)
    ):
        return None
    parts = []
    for argument, index in zip(schema.arguments, call.args):
        value = plan.values[index].val
        kind = argument.element or argument.type
        if kind == "Tensor":
            parts.append(f"{argument.name}={_dtype(value)}")
        elif kind in ("List[Tensor]", "List[Optional[Tensor]]") and isinstance(value, (TensorList, OptionalTensorList)):
            items = [plan.values[i].val if 0 <= i < len(plan.values) else None for i in value.items]
            dtypes = dict.fromkeys(_dtype(item) for item in items)  # each dtype once: a list of any length
            parts.append(f"{argument.name}=[{','.join(dtypes)}]")
        elif kind == "number":
            parts.append(f"{argument.name}={_scalar(value)}")
    return " ".join(parts)


def _dtype(value: object) -> str:
    if isinstance(value, Tensor):
        return dtype_name(value.scalar_type)
    return "None" if value is None or isinstance(value, Null) else type(value).__name__


def _scalar(value: object) -> str:
    kind = {Int: "int", Double: "float", Bool: "bool"}.get(type(value))
    return f"Scalar({kind})" if kind else "None" if isinstance(value, Null) else type(value).__name__


def kernel_dtypes(name: str) -> KernelDtypes | None:
    """What the probe found of the kernel ``name`` (``aten::_log_softmax.out``) in the installed
    ExecuTorch; None where it was not probed, or no table is there for this version."""
    row = _table().get(name)
    return KernelDtypes(tuple(row["takes"]), row["calls"]) if row is not None else None


def installed_versions() -> Versions:
    """The installed versions of the packages whose kernels the table holds."""
    return version_tables.installed_versions(PACKAGES)


_reading = threading.Lock()  # --jobs: one thread reads the table, the others wait for it


def _table() -> dict[str, dict]:
    with _reading:
        return _table_once()


@functools.cache
def _table_once() -> dict[str, dict]:
    versions = installed_versions()
    for path in (SHIPPED, cached_path(versions)):
        rows = _read(path, versions)
        if rows is not None:
            return rows
    return {}  # no table for this ExecuTorch: EG525 says nothing rather than guess


def _read(path: Path, versions: Versions) -> dict[str, dict] | None:
    return version_tables.read_table(path, versions, "kernels")


def cached_path(versions: Versions) -> Path:
    """Where the user's cache keeps the table of an ExecuTorch version other than the shipped one's."""
    return version_tables.cached_path("kernel_dtypes", versions)


def write_table(path: Path, versions: Versions, kernels: dict[str, dict]) -> None:
    """Write the table at ``path``, whole or not at all, one value a line (it is reviewed in diffs)."""
    version_tables.write_table(path, versions, "kernels", kernels, lines=True)
