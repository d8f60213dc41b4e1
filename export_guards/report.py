"""The report that every guard returns: immutable findings with code, severity and location."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import final

__all__ = ["Finding", "Report", "Severity", "SourceLocation"]


class Severity(str, enum.Enum):
    """How much a finding matters: an ``ERROR`` stops a guarded export."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        """2 for errors, 1 for warnings, 0 for info: compare severities with it."""
        return {"error": 2, "warning": 1, "info": 0}[self.value]


@final
@dataclass(frozen=True)
class SourceLocation:
    """A line of the user's source, taken from a graph node's stack trace."""

    file: str
    line: int
    code: str = ""

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@final
@dataclass(frozen=True)
class Finding:
    """One thing a guard found or did.

    Attributes:
        code: stable rule code, for example ``"EG101"``.
        severity: how much it matters.
        message: what is wrong (or what was done), in one sentence.
        method: the program method, when known (``"forward"`` for single-method programs).
        node: the graph node concerned, if any.
        constant: the fully-qualified name of the constant concerned, if any.
        location: the user's source line that created the node, if known.
        fix: how to fix it.
        module: the module that created the node, ``"decoder.0 (Conv2d)"``, if known.
        artifact: the file a program-file finding is about (the ``.pte`` or ``.ptd`` path, as
            given), if any.
        region: where in ``artifact``, as ``(byte offset, byte length)``, when known.
        subjects: what the finding is about, named alike in every stage of one export (graph
            nodes by their origin in the torch.export program); not rendered.
        symptom_of: codes whose finding about one of the same ``subjects`` is this one's cause;
            the report assembler drops this one when that finding is there (``without_symptoms``).
    """

    code: str
    severity: Severity
    message: str
    method: str | None = None
    node: str | None = None
    constant: str | None = None
    location: SourceLocation | None = None
    fix: str | None = None
    module: str | None = None
    artifact: str | None = None
    region: tuple[int, int] | None = None
    # How findings relate, not what they say: left out of equality, as renderers leave them out.
    subjects: tuple[str, ...] = field(default=(), compare=False)
    symptom_of: tuple[str, ...] = field(default=(), compare=False)

    def __str__(self) -> str:
        if self.location:
            where = str(self.location)
        elif self.artifact:  # a program file: its path, and the byte offset when known
            where = self.artifact + (f"@{self.region[0]}" if self.region else "")
        else:
            where = f"<method {self.method}>" if self.method else "<program>"
        lines = [f"{where}: {self.code} [{self.severity.value}] {self.message}"]
        if self.location and self.location.code:
            lines.append(f"    {self.location.code}")
        return "\n".join(lines)


@final
@dataclass(frozen=True)
class Report:
    """The findings of one or more guards, in the order they were made.

    Attributes:
        findings: what is reported.
        suppressed: findings a ``# noqa`` comment on their source line suppressed: not
            reported, only counted (``--statistics``, the JSON summary).
    """

    findings: tuple[Finding, ...] = ()
    suppressed: tuple[Finding, ...] = ()

    @classmethod
    def of(cls, findings: Iterable[Finding]) -> Report:
        """A report holding ``findings``."""
        return cls(tuple(findings))

    def __iter__(self) -> Iterator[Finding]:
        return iter(self.findings)

    def __len__(self) -> int:
        return len(self.findings)

    def __add__(self, other: Report) -> Report:
        return Report(self.findings + other.findings, self.suppressed + other.suppressed)

    @property
    def errors(self) -> tuple[Finding, ...]:
        """The findings of severity ``ERROR``."""
        return tuple(f for f in self.findings if f.severity is Severity.ERROR)

    def at_least(self, severity: Severity) -> tuple[Finding, ...]:
        """The findings of ``severity`` or worse."""
        return tuple(f for f in self.findings if f.severity.rank >= severity.rank)

    def located_at(self, location: SourceLocation) -> Report:
        """This report with ``location`` given to every finding that has neither a location nor
        an artifact: the nearest user code (a command's factory) for what no user frame places."""
        placed = tuple(f if f.location or f.artifact else replace(f, location=location) for f in self.findings)
        return Report(placed, self.suppressed)

    def with_code(self, *codes: str) -> tuple[Finding, ...]:
        """The findings whose code is one of ``codes``."""
        return tuple(f for f in self.findings if f.code in codes)

    def __str__(self) -> str:
        return "\n".join(str(f) for f in self.findings) if self.findings else "no findings"
