"""Every error export-guards raises on purpose, under one root: :class:`Error`.

This module imports neither torch nor ExecuTorch, so ``except export_guards.Error`` costs
nothing where the torch-free checks run. The guards' errors (:class:`GuardError` and its
subclasses) are also ExecuTorch's ``InternalError``, as a pass's error must be; they are made in
:mod:`export_guards.errors.guard`, which imports ExecuTorch, on their first use here. Each error
keeps the built-in base it had (``ValueError``, ``RuntimeError``, ``TypeError``), so an
``except`` written for that base still catches it. docs/api.md lists them all.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from export_guards.errors.base import (
    Error,
    ExportFailed,
    GradModeWriteError,
    NotAModule,
    ProjectRulesError,
    RuntimeMismatch,
    TargetError,
)

if TYPE_CHECKING:  # made on first use (they import ExecuTorch): see __getattr__
    from export_guards.errors.guard import (
        ConstantPlacementError as ConstantPlacementError,
        GuardError as GuardError,
        KnownWrongDelegationError as KnownWrongDelegationError,
        LintError as LintError,
        LoweringFailed as LoweringFailed,
        ProgramRefused as ProgramRefused,
        SharedMemoryError as SharedMemoryError,
    )

_GUARD_ERRORS = (
    "ConstantPlacementError",
    "GuardError",
    "KnownWrongDelegationError",
    "LintError",
    "LoweringFailed",
    "ProgramRefused",
    "SharedMemoryError",
)

__all__ = sorted(
    [
        *_GUARD_ERRORS,
        "Error",
        "ExportFailed",
        "GradModeWriteError",
        "NotAModule",
        "ProjectRulesError",
        "RuntimeMismatch",
        "TargetError",
    ]
)


def __getattr__(name: str) -> Any:
    if name in _GUARD_ERRORS:
        value = getattr(importlib.import_module("export_guards.errors.guard"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'export_guards.errors' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
