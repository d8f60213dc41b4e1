"""Per-line suppression: ``# noqa: EG301`` (or a bare ``# noqa``, every code) on the source line
a finding points at suppresses that finding there, as flake8 and ruff read the same comment; and
EG003, a ``# noqa`` that suppressed nothing (ruff's RUF100). Imports neither torch nor ExecuTorch."""

from __future__ import annotations

import functools
import linecache
import re
from collections.abc import Callable, Iterable, Mapping

from export_guards.report import Finding, Report, SourceLocation
from export_guards.ruleset.catalog import CATALOG
from export_guards.ruleset.rule import Rule, Stage
from export_guards.ruleset.selection import Selection

__all__ = ["UNSUPPRESSIBLE", "split_suppressed", "unused_noqa", "unused_noqa_report"]

UNSUPPRESSIBLE = frozenset({"EG001", "EG002", "EG003"})
"""A rule that failed, a step that failed, a comment that suppressed nothing: no comment on a
line can answer for them (a bare ``# noqa`` would otherwise hide its own EG003)."""

_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[,\s]+[A-Z]+[0-9]+)*))?", re.IGNORECASE)


def split_suppressed(findings: Iterable[Finding]) -> tuple[list[Finding], list[Finding]]:
    """``findings`` as (kept, suppressed by a ``# noqa`` on their line)."""
    kept: list[Finding] = []
    suppressed: list[Finding] = []
    for found in findings:
        (suppressed if _suppressed(found) else kept).append(found)
    return kept, suppressed


def _suppressed(found: Finding) -> bool:
    if found.location is None or found.code in UNSUPPRESSIBLE:
        return False
    codes = _noqa_codes(found.location.file, found.location.line)
    return codes is not None and (not codes or found.code in codes)


@functools.lru_cache(maxsize=4096)
def _noqa_codes(file: str, line: int) -> frozenset[str] | None:
    """The codes a ``# noqa`` on that line names (empty: every code), or ``None`` for none."""
    match = _NOQA.search(linecache.getline(file, line))
    if match is None:
        return None
    return frozenset(c.upper() for c in re.split(r"[,\s]+", match["codes"] or "") if c)


def unused_noqa(report: Report, lines: Iterable[tuple[str, int]], judged: Callable[[str], bool]) -> list[Finding]:
    """An EG003 finding (default severity) for each ``# noqa`` on ``lines`` that suppressed
    nothing in ``report``. Only what the run could have suppressed is judged: ``lines`` are the
    user's source lines the program's nodes come from (the lines findings can point at), and
    ``judged`` says which codes this run checked (selected, and of a stage that ran). A bare
    ``# noqa`` is unused when no finding on its line was suppressed; one with codes, for each
    judged code of which no finding on its line was suppressed."""
    used: dict[tuple[str, int], set[str]] = {}
    for found in report.suppressed:
        if found.location is not None:
            used.setdefault((found.location.file, found.location.line), set()).add(found.code)
    rule, findings = CATALOG["EG003"], []
    for file, line in sorted(set(lines)):
        codes = _noqa_codes(file, line)
        if codes is None:
            continue
        suppressed = used.get((file, line), set())
        if not codes:
            message = "# noqa suppressed nothing: no finding points at this line" if not suppressed else None
        else:
            unused = sorted(c for c in codes if judged(c) and c not in suppressed)
            message = (
                f"# noqa: {', '.join(unused)} suppressed nothing: no {' or '.join(unused)} finding points at this line"
                if unused
                else None
            )
        if message is not None:
            location = SourceLocation(file, line, linecache.getline(file, line).strip())
            findings.append(Finding(rule.code, rule.severity, message, location=location, fix=rule.fix))
    return findings


def unused_noqa_report(
    report: Report,
    lines: Callable[[], Iterable[tuple[str, int]]],
    settings: Selection,
    stages: Iterable[Stage],
    known: Callable[[], Mapping[str, Rule]],
) -> list[Finding]:
    """EG003, where ``settings`` select it: :func:`unused_noqa` over ``lines()`` (read only then:
    reading every node's line costs time), judging the codes ``settings`` select that are
    ``known()`` (the registry's every known rule, asked only then) and of one of the
    ``stages`` that ran."""
    if not settings.enabled("EG003"):
        return []
    rules, ran = known(), frozenset(stages)

    def judged(code: str) -> bool:
        return settings.enabled(code) and code in rules and rules[code].stage in ran

    return unused_noqa(report, lines(), judged)
