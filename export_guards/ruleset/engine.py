"""The one rule engine: runs a rule set's enabled rules of one stage on a subject and turns
their hits into findings; applies the user's settings to findings that a guard made itself.
It knows no subject: the caller says what the subject is called and how to place a node."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from types import ModuleType
from typing import Any, final

from export_guards.report import Finding, Report
from export_guards.ruleset.catalog import CATALOG
from export_guards.ruleset.noqa import split_suppressed
from export_guards.ruleset.rule import Hit, Rule, Stage
from export_guards.ruleset.selection import Selection

__all__ = [
    "Locate",
    "RuleSet",
    "Selection",
    "describe_error",
    "finding",
    "first_line",
    "once",
    "run",
    "settle",
    "without_symptoms",
]


Locate = Callable[[Any], Mapping[str, Any]]
"""Where a hit's node is, as ``Finding`` fields (``node``, ``location``, ``module``)."""


@final
@dataclass(frozen=True)
class RuleSet:
    """An explicit set of rules with checks, by code: the value a subject hands the engine."""

    rules: Mapping[str, Rule]

    @classmethod
    def of(cls, *sources: Rule | ModuleType) -> RuleSet:
        """The rules given, and every checked rule defined in the modules given.

        Raises:
            ValueError: a rule without a check, or two different rules with one code.
        """
        rules: dict[str, Rule] = {}
        for source in sources:
            found = [source] if isinstance(source, Rule) else [v for v in vars(source).values() if isinstance(v, Rule)]
            for rule in found:
                if rule.check is None:
                    raise ValueError(f"{rule.code} has no check; bind one with @rule({rule.code!r})")
                if rules.setdefault(rule.code, rule) is not rule:
                    raise ValueError(f"two rules have the code {rule.code}")
        return cls(dict(sorted(rules.items())))

    def stage(self, stage: Stage) -> tuple[Rule, ...]:
        """The rules of ``stage``, in code order."""
        return tuple(r for r in self.rules.values() if r.stage == stage)

    def without(self, other: RuleSet) -> RuleSet:
        """These rules, less those of ``other``."""
        return RuleSet({code: r for code, r in self.rules.items() if code not in other.rules})

    def __iter__(self) -> Iterator[Rule]:
        return iter(self.rules.values())

    def __len__(self) -> int:
        return len(self.rules)

    def __add__(self, other: RuleSet) -> RuleSet:
        return RuleSet.of(*self, *other)


def run(
    rules: RuleSet,
    stage: Stage,
    subject: object,
    settings: Selection,
    *,
    name: str,
    method: str | None = None,
    locate: Locate | None = None,
    artifact: str | None = None,
) -> Report:
    """Every enabled rule of ``stage`` in ``rules``, run on ``subject``, as settled findings.

    A rule that raises does not stop the others: its failure is an ``EG001`` finding that
    says which rule failed on what (``name``, how findings call the subject).

    Args:
        method: the method findings belong to, unless a hit names its own.
        locate: places a hit's node (graph subjects); hits without a node are not placed.
        artifact: the file the subject was read from (a ``.pte``), for findings to point at,
            unless a hit names its own.
    """
    findings: list[Finding] = []
    for rule in rules.stage(stage):
        if not settings.enabled(rule.code):
            continue
        assert rule.check is not None  # RuleSet.of refuses rules without one
        try:
            hits = list(rule.check(subject))
        except Exception as error:  # noqa: BLE001 - an input the rule did not expect: say so, carry on
            message = f"rule {rule.code} ({rule.name}) failed on {name}: {describe_error(error)}"
            findings.append(finding(CATALOG["EG001"], Hit(message), method=method, artifact=artifact))
            continue
        findings.extend(finding(rule, hit, method=method, locate=locate, artifact=artifact) for hit in hits)
    return settle(findings, settings)


def finding(
    rule: Rule, hit: Hit, *, method: str | None = None, locate: Locate | None = None, artifact: str | None = None
) -> Finding:
    """The finding ``hit`` makes for ``rule``, at its default severity (``settle`` applies
    the user's), in ``artifact`` unless the hit names its own file."""
    place = locate(hit.node) if locate is not None and hit.node is not None else {}
    return Finding(
        code=rule.code,
        severity=hit.severity or rule.severity,
        message=hit.message,
        method=hit.method or method,
        constant=hit.constant,
        fix=hit.fix or rule.fix,
        artifact=hit.artifact or artifact,
        region=hit.region,
        subjects=hit.subjects,
        symptom_of=hit.symptom_of,
        **place,
    )


def settle(findings: Iterable[Finding], settings: Selection) -> Report:
    """``findings`` as the user asked: without the codes not selected or ignored, at the
    severities overridden, and without those a ``# noqa`` on their source line suppresses
    (kept in the report's ``suppressed``). A rule's failure (EG001) is reported unless it is
    ignored by name or prefix: selecting some rules must not hide that one of them failed."""
    settled = []
    for found in findings:
        shown = settings.enabled(found.code) or (found.code == "EG001" and not settings.ignores(found.code))
        if shown:
            severity = settings.severity_of(found.code, found.severity)
            settled.append(found if severity is found.severity else replace(found, severity=severity))
    kept, suppressed = split_suppressed(settled)
    return Report(tuple(kept), tuple(suppressed))


def without_symptoms(report: Report) -> Report:
    """``report`` without the findings whose cause it holds: a finding that is a symptom of
    some codes (``symptom_of``) is dropped where a finding of one of them is about one of its
    ``subjects``, reported or suppressed by ``# noqa`` (the user has answered it). One problem
    is one finding, whichever stages saw it: a reparametrized weight (EG212) and its conv left
    out of the delegate (EG401) are one problem, reported once, as its cause."""
    causes = {(f.code, subject) for f in (*report.findings, *report.suppressed) for subject in f.subjects}

    def symptom(found: Finding) -> bool:
        return any((code, subject) in causes for code in found.symptom_of for subject in found.subjects)

    return Report(
        tuple(f for f in report.findings if not symptom(f)), tuple(f for f in report.suppressed if not symptom(f))
    )


def once(steps: Iterable[Report]) -> Report:
    """The reports of an export's steps merged, each finding once: a finding equal to one
    already kept (the same report recorded twice) is left out, and so is one whose code an
    earlier step reported about one of its ``subjects`` in the same method (one computation that
    the fold before the quantizer and the fold in ``transform_passes`` both saw: one problem,
    one finding, as the first stage reported it; a step that does not know its method, such as
    the fold before the quantizer, matches any). Findings of one step about one subject are
    kept: a rule that reports a node twice says two different things."""
    kept: list[Finding] = []
    seen: set[Finding] = set()
    earlier: dict[tuple[str, str], set[str | None]] = {}
    suppressed: list[Finding] = []

    def reported(found: Finding) -> bool:
        for subject in found.subjects:
            methods = earlier.get((found.code, subject), set())
            if methods and (found.method is None or None in methods or found.method in methods):
                return True
        return False

    for step in steps:
        mine: list[Finding] = []
        for found in step.findings:
            if found in seen or reported(found):
                continue
            seen.add(found)
            mine.append(found)
        for found in mine:
            for subject in found.subjects:
                earlier.setdefault((found.code, subject), set()).add(found.method)
        kept += mine
        suppressed += [f for f in step.suppressed if f not in suppressed]
    return Report(tuple(kept), tuple(suppressed))


def first_line(error: BaseException) -> str:
    """The first line of an error's message: the one way export-guards says an error in a line."""
    text = str(error).strip()
    return text.splitlines()[0] if text else "(no message)"


def describe_error(error: BaseException) -> str:
    """An exception in one line, for a finding: its type and the first line of its message."""
    return f"{type(error).__name__}: {first_line(error)[:200]}"
