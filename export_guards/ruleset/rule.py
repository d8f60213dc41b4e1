"""What a rule is: its metadata (code, name, severity, summary, fix, stage), the check that
finds it, and the ``Hit`` a check yields. Imports neither torch nor ExecuTorch."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, final

from export_guards.report import Severity

__all__ = ["DOCS_URL", "STAGES", "Check", "Hit", "Rule", "Stage"]

Stage = Literal["program", "partitioned", "pte", "reproducible", "update", "runtime", "action", "step", "engine"]
"""What a rule reads, or who reports its code (see ``STAGES``)."""

STAGES: dict[str, str] = {
    "program": "the torch.export program, before lowering",
    "partitioned": "the lowered program, after partitioning",
    "pte": "a written .pte file and its .ptd files",
    "reproducible": "two exports of one model",
    "update": "a shipped .pte and its new build, weight by weight (export-guards diff)",
    "runtime": "a run of the .pte in executorch.runtime",
    "action": "what a guard did (a copy, a fold), reported by the guard itself",
    "step": "a step of the export that failed, reported by the command",
    "engine": "the rule engine itself",
}
"""Each stage, as ``explain`` describes it."""

DOCS_URL = "https://github.com/export-guards/export-guards/blob/main/docs/rules.md"


@final
@dataclass(frozen=True)
class Hit:
    """What a check found: the reason (the user's message) and where.

    Attributes:
        message: what is wrong, in one sentence; it becomes the finding's message.
        node: the graph node concerned (a ``torch.fx.Node``), for rules that read a graph; for
            a program file's rules, the operator concerned as the kernel registry spells it
            (``"aten::sort.values"``), which a check given the graph places on the user's line.
        constant: the fully-qualified name of the constant concerned (or a named-data key).
        fix: overrides the rule's general fix when the hit knows better.
        severity: overrides the rule's default (the user's settings still win).
        method: the method concerned, for subjects that hold every method (a ``.pte`` file).
        region: the bytes concerned in the file, as ``(offset, length)``, when known.
        artifact: the file concerned when it is not the subject's own (a ``.ptd`` beside the
            ``.pte``), as given.
        subjects: what the hit is about, named alike in every stage of one export (a graph
            node by its origin, ``analysis.source.node_origin``), so that findings meet.
        symptom_of: codes whose finding about one of the same ``subjects`` is this hit's cause:
            the report keeps the cause and drops this one (one problem, one finding).
    """

    message: str
    node: Any = None
    constant: str | None = None
    fix: str | None = None
    severity: Severity | None = None
    method: str | None = None
    region: tuple[int, int] | None = None
    artifact: str | None = None
    subjects: tuple[str, ...] = ()
    symptom_of: tuple[str, ...] = ()


Check = Callable[[Any], Iterable[Hit]]
"""A rule's check: given its stage's subject, yields a ``Hit`` per problem."""


@final
@dataclass(frozen=True)
class Rule:
    """A code export-guards can report, and the check that finds it.

    Attributes:
        code: stable code: ``EG`` and three digits; a project's own rules use their package's
            prefix (``ACME001``; see ``export_guards.ruleset.registry``).
        name: a short kebab-case name.
        severity: the default severity.
        summary: one line saying what it finds.
        fix: how to fix what it finds, in general.
        stage: what its check reads, or who reports it (``STAGES``).
        check: yields a ``Hit`` per problem, given the stage's subject; ``None`` for codes that
            a guard reports itself (stage ``action``) or the engine does (``engine``).
        url: the rule's documentation page, for a project's rules (export-guards' own codes
            link to their section of ``docs/rules.md``).
        done: for a code that reports what a guard did (stage ``action``), what one and what
            several findings did, as the text summary counts them among what was fixed
            (``("constant folded", "constants folded")``).
    """

    code: str
    name: str
    severity: Severity
    summary: str
    fix: str
    stage: Stage
    check: Check | None = dataclasses.field(default=None, compare=False, repr=False)
    url: str | None = None
    done: tuple[str, str] | None = None

    @property
    def help_uri(self) -> str | None:
        """The rule's documentation page (``None`` for a project rule that names none)."""
        if self.url is not None or not self.code.startswith("EG"):
            return self.url
        return f"{DOCS_URL}#{self.code.lower()}-{self.name}"

    def checked_by(self, check: Check) -> Rule:
        """This rule with ``check`` as its check."""
        return dataclasses.replace(self, check=check)
