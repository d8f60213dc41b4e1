"""The guards' errors: each carries the report that explains it, and each is ExecuTorch's
``InternalError`` too (what a pass raises inside ExecuTorch's pass manager reaches the caller as
it is), beside :class:`export_guards.Error`. Read through :mod:`export_guards.errors`, which
imports this module (and so ExecuTorch) on their first use."""

from __future__ import annotations

from typing import TYPE_CHECKING

from executorch.exir.error import InternalError

from export_guards.errors.base import Error

if TYPE_CHECKING:
    from export_guards.report import Report, SourceLocation

__all__ = [
    "ConstantPlacementError",
    "GuardError",
    "KnownWrongDelegationError",
    "LintError",
    "LoweringFailed",
    "ProgramRefused",
    "SharedMemoryError",
]


class GuardError(Error, InternalError):
    """A guard stopped the export. ``report`` holds every finding, not only the first."""

    def __init__(self, message: str, report: Report) -> None:
        super().__init__(message)
        self.report = report


class ConstantPlacementError(GuardError):
    """Constants that the emitter or a delegate would read from host memory are not there."""


class KnownWrongDelegationError(GuardError):
    """A partitioner took an op that its delegate is known to compute wrong, and no guard pass
    kept it off (``guard_passes()`` does: EG405)."""


class LintError(GuardError):
    """The lint found problems at or above its fail level."""


class LoweringFailed(GuardError):
    """ExecuTorch could not lower the program; ``report`` holds what the lint found before,
    which often says why (a train-mode batch norm, say), then the failure (EG002, with ``hint``
    as its fix); ``location`` is the user's line that made the operator ExecuTorch's error
    names, when it names one; ``hint``, how to fix a known cause (an op outside core ATen: the
    compile config), as the lint says it."""

    def __init__(
        self, message: str, report: Report, location: SourceLocation | None = None, hint: str | None = None
    ) -> None:
        super().__init__(message + (f"\n  hint: {hint}" if hint else ""), report)
        self.location = location
        self.hint = hint


class ProgramRefused(GuardError):
    """The written program is one the runtime refuses or computes wrong: ``check_pte`` finds
    errors in it (the check a user of the pass list runs), so the guarded export does not hand it
    out. ``report`` holds those errors, each on the user's line where the program's graph says;
    ``pte``, the program's bytes, for a caller that reports on them itself."""

    def __init__(self, message: str, report: Report, pte: bytes = b"") -> None:
        super().__init__(message, report)
        self.pte = pte


class SharedMemoryError(ProgramRefused):
    """The written program gives two values that are alive at once the same planned bytes
    (EG518), where the guards could not give one of them its own; ``report`` holds the
    findings, each naming both values and the operators that write them."""


for _error in (
    GuardError,
    ConstantPlacementError,
    KnownWrongDelegationError,
    LintError,
    LoweringFailed,
    ProgramRefused,
    SharedMemoryError,
):
    _error.__module__ = "export_guards.errors"  # their one place, as users name them
