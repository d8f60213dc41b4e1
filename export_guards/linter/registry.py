"""The rule registry: each rule is one small function with a stable code, found by code."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Literal, final

import torch

from export_guards.report import Severity

__all__ = ["Hit", "Rule", "RULES", "Stage", "rule"]

Stage = Literal["program", "partitioned", "pte", "reproducible", "runtime"]
"""What a rule reads: the torch.export program before lowering (``program``), the lowered
program (``partitioned``), a written ``.pte`` file (``pte``), two exports of one model
(``reproducible``), or a run of the ``.pte`` in the ExecuTorch runtime (``runtime``)."""

DOCS_URL = "https://github.com/export-guards/export-guards/blob/main/docs/rules.md"


@final
@dataclass(frozen=True)
class Hit:
    """What a rule's check found: the reason (the user's message) and where."""

    message: str
    node: torch.fx.Node | None = None
    constant: str | None = None
    fix: str | None = None  # overrides the rule's general fix when the hit knows better
    severity: Severity | None = None  # overrides the rule's default (not the user's choice)
    method: str | None = None  # for rules that read a .pte file, which holds every method


@final
@dataclass(frozen=True)
class Rule:
    """A lint rule.

    Attributes:
        code: stable code, ``EG`` and three digits.
        name: a short kebab-case name.
        severity: the default severity.
        summary: one line saying what it finds.
        fix: how to fix what it finds, in general.
        stage: when it runs.
        check: yields a ``Hit`` per problem, given the lint context.
    """

    code: str
    name: str
    severity: Severity
    summary: str
    fix: str
    stage: Stage
    check: Callable[..., Iterable[Hit]]

    @property
    def help_uri(self) -> str:
        """The rule's documentation page."""
        return f"{DOCS_URL}#{self.code.lower()}-{self.name}"


RULES: dict[str, Rule] = {}
"""Every registered rule, by code, in registration order."""


def rule(
    code: str, name: str, severity: Severity, summary: str, fix: str, stage: Stage = "program"
) -> Callable[[Callable[..., Iterator[Hit]]], Callable[..., Iterator[Hit]]]:
    """Register the decorated check as a rule; adding a rule touches nothing else."""

    def register(check: Callable[..., Iterator[Hit]]) -> Callable[..., Iterator[Hit]]:
        if code in RULES:
            raise ValueError(f"rule code {code} is registered twice")
        RULES[code] = Rule(code, name, severity, summary, fix, stage, check)
        return check

    return register
