"""The text format, for people: ``file:line: CODE [severity] message``, like ruff."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from export_guards.render.paths import with_display_paths
from export_guards.report import Finding, Report, Severity
from export_guards.ruleset import known_rules

__all__ = ["render_text", "summary_line"]


def render_text(
    report: Report,
    *,
    show_info: bool = False,
    root: Path | None = None,
    ran: Sequence[str] = (),
    subject: str | None = None,
) -> str:
    """One block per error and warning (location, code, message, source line, module), sorted
    by file, line, then code; info findings too with ``show_info`` (else only counted, as ruff
    and flake8 leave what is not a problem out); each distinct fix once, by code (ruff's
    ``--show-fixes`` idea: a fix repeated under every finding hides the findings); then the
    summary line (:func:`summary_line`, with ``ran`` and, before it, ``subject``: the file or
    target this report is of, when there are several). Paths are relative to ``root``
    (default: the working folder's project root), absolute outside it."""
    shown = sorted((f for f in report if show_info or f.severity is not Severity.INFO), key=_position)
    blocks = [_block(with_display_paths(f, root)) for f in shown]
    fixes = dict.fromkeys((f.code, f.fix) for f in shown if f.fix)
    if fixes:
        blocks.append("Fixes:\n" + "\n".join(f"  {code} fix: {fix}" for code, fix in fixes))
    blocks.append((f"{subject}: " if subject else "") + summary_line(report, show_info=show_info, ran=ran))
    return "\n".join(blocks) + "\n"


def _position(finding: Finding) -> tuple[object, ...]:
    """Where a finding sorts: by source file and line, then by program file and byte (those on
    a whole file, such as diff's total, after every file's bytes), then by method; then by code."""
    if finding.location is not None:
        return (0, finding.location.file, finding.location.line, finding.code)
    if finding.artifact is not None:
        return (1, not finding.region, finding.artifact, finding.region[0] if finding.region else 0, finding.code)
    return (2, finding.method or "", 0, finding.code)


def _block(finding: Finding) -> str:
    lines = [str(finding)]
    if finding.module:
        lines.append(f"    module: {finding.module}")
    if finding.constant and f"'{finding.constant}'" not in finding.message:
        lines.append(f"    constant: {finding.constant}")
    return "\n".join(lines)


def summary_line(report: Report, *, show_info: bool = True, ran: Sequence[str] = ()) -> str:
    """The one summary line of every text format. Without an error or a warning, ``All checks
    passed: 4 constants folded; 12 of 12 compute ops delegated (100 %); program 1,185,104
    bytes (3 infos not shown: --show-info).``, with what the run did (``ran``); else ``Found 2
    findings (1 error, 1 warning; 3 infos not shown: --show-info; 1 suppressed by # noqa): 4
    constants folded; 2 problems left.``"""
    counts = Counter(f.severity.value for f in report)
    problems = counts["error"] + counts["warning"]
    rules = known_rules()
    done = Counter(
        rule.done for f in report if (rule := rules.get(f.code)) is not None and rule.done
    )  # fixed, not problems
    fixed = [f"{n} {one if n == 1 else many}" for (one, many), n in done.items()]
    infos = counts["info"]
    hidden = f"{infos} info{'s' if infos != 1 else ''} not shown: --show-info" if infos and not show_info else ""
    suppressed = f"{len(report.suppressed)} suppressed by # noqa" if report.suppressed else ""
    if not problems and not (show_info and infos):
        notes = "; ".join(p for p in (hidden, suppressed) if p)
        details = "; ".join((*fixed, *ran))
        return "All checks passed" + (f": {details}" if details else "") + (f" ({notes})" if notes else "") + "."
    shown = [s for s in ("error", "warning", "info") if counts[s] and (s != "info" or show_info)]
    total = sum(counts[s] for s in shown)
    detail = "; ".join(
        p
        for p in (", ".join(f"{counts[s]} {s}{'s' if counts[s] != 1 else ''}" for s in shown), hidden, suppressed)
        if p
    )
    line = f"Found {total} finding{'s' if total != 1 else ''}" + (f" ({detail})" if detail else "")
    if not fixed:
        return line + "."
    return f"{line}: {'; '.join(fixed)}; {problems} problem{'s' if problems != 1 else ''} left."
