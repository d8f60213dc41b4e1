"""``Selection``: what the engine and the suppression report ask of the user's settings."""

from __future__ import annotations

from typing import Protocol

from export_guards.report import Severity

__all__ = ["Selection"]


class Selection(Protocol):
    """What the engine asks of the user's settings (``export_guards.settings.Settings``)."""

    def enabled(self, code: str) -> bool: ...

    def ignores(self, code: str) -> bool: ...

    def severity_of(self, code: str, default: Severity) -> Severity: ...
