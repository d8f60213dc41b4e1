"""The errors that need neither torch nor ExecuTorch, :class:`Error` the root of them all; read
through :mod:`export_guards.errors`."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from export_guards.report import SourceLocation

__all__ = [
    "Error",
    "ExportFailed",
    "GradModeWriteError",
    "NotAModule",
    "ProjectRulesError",
    "RuntimeMismatch",
    "TargetError",
]


class Error(Exception):
    """The root of every error export-guards raises on purpose: ``except export_guards.Error``
    catches any of them, and nothing of torch's, ExecuTorch's or the user's own code."""


class GradModeWriteError(Error, RuntimeError):
    """``to_executorch`` failed with torch's "a leaf Variable that requires grad is being used in
    an in-place operation": the message names what the program writes in place (a KV cache's
    buffer, most often, while the model's parameters require grad); ``hint`` says how to fix it;
    ``location`` is the user's line that writes it, when known."""

    def __init__(self, message: str, hint: str, location: SourceLocation | None = None) -> None:
        super().__init__(message)
        self.hint = hint
        self.location = location


class RuntimeMismatch(Error, RuntimeError):
    """executorch's native runtime cannot run programs with the installed torch; the message
    says, in one line, which torch it needs and which is installed."""


class ExportFailed(Error):
    """An export of the target failed; the message says how."""


class TargetError(Error, ValueError):
    """The target is not a factory that can be called: a usage error, said in one line."""


class NotAModule(Error, TypeError):
    """A quantize step returned something else than the quantized ``nn.Module``."""


class ProjectRulesError(Error, ValueError):
    """An installed package declares rules that cannot be used (the message says which and why)."""


for _error in (Error, ExportFailed, GradModeWriteError, NotAModule, ProjectRulesError, RuntimeMismatch, TargetError):
    _error.__module__ = "export_guards.errors"  # their one place, as users name them
