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
    Error as Error,
)
from export_guards.errors.base import (
    ExportFailed as ExportFailed,
)
from export_guards.errors.base import (
    GradModeWriteError as GradModeWriteError,
)
from export_guards.errors.base import (
    NotAModule as NotAModule,
)
from export_guards.errors.base import (
    ProjectRulesError as ProjectRulesError,
)
from export_guards.errors.base import (
    RuntimeMismatch as RuntimeMismatch,
)
from export_guards.errors.base import (
    TargetError as TargetError,
)

if TYPE_CHECKING:  # made on first use (they import ExecuTorch): see __getattr__
    from export_guards.errors.guard import (
        ConstantPlacementError as ConstantPlacementError,
    )
    from export_guards.errors.guard import (
        GuardError as GuardError,
    )
    from export_guards.errors.guard import (
        KnownWrongDelegationError as KnownWrongDelegationError,
    )
    from export_guards.errors.guard import (
        LintError as LintError,
    )
    from export_guards.errors.guard import (
        LoweringFailed as LoweringFailed,
    )
    from export_guards.errors.guard import (
        ProgramRefused as ProgramRefused,
    )
    from export_guards.errors.guard import (
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

__all__ = [
    "ConstantPlacementError",
    "Error",
    "ExportFailed",
    "GradModeWriteError",
    "GuardError",
    "KnownWrongDelegationError",
    "LintError",
    "LoweringFailed",
    "NotAModule",
    "ProgramRefused",
    "ProjectRulesError",
    "RuntimeMismatch",
    "SharedMemoryError",
    "TargetError",
]


def __getattr__(name: str) -> Any:
    if name in _GUARD_ERRORS:
        value = getattr(importlib.import_module("export_guards.errors.guard"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'export_guards.errors' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
