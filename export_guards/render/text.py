"""The text format, for people: ``file:line: CODE [severity] message``, like ruff."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from export_guards.render.paths import with_display_paths
from export_guards.report import Finding, Report, Severity
from export_guards.ruleset import known_rules

__all__ = ["render_text", "summary_line"]

# What a guard did, counted in the summary as fixed rather than as problems.
_DONE = {
    "EG201": ("constant folded", "constants folded"),
    "EG202": ("reparametrized weight folded", "reparametrized weights folded"),
    "EG103": ("constant copied to the host", "constants copied to the host"),
}


def render_text(report: Report, *, verbose: bool = False, root: Path | None = None) -> str:
    """One block per error and warning (location, code, message, source line, module), sorted
    by file, line, then code; info findings one line per code unless ``verbose``, which lists
    them too; each distinct fix once, by code (ruff's ``--show-fixes`` idea: a fix repeated
    under every finding hides the findings); then the summary line. Paths are relative to
    ``root`` (default: the working folder's project root), absolute outside it."""
    shown = sorted((f for f in report if verbose or f.severity is not Severity.INFO), key=_position)
    blocks = [_block(with_display_paths(f, root)) for f in shown]
    if not verbose:
        infos = Counter(f.code for f in report if f.severity is Severity.INFO)
        for code, count in sorted(infos.items()):
            name = known[code].name if code in (known := known_rules()) else ""
            blocks.append(f"{code} [info] {name}: {count} finding{'s' if count != 1 else ''} (-v lists them)")
    fixes = dict.fromkeys((f.code, f.fix) for f in shown if f.fix)
    if fixes:
        blocks.append("Fixes:\n" + "\n".join(f"  {code} fix: {fix}" for code, fix in fixes))
    blocks.append(summary_line(report))
    return "\n".join(blocks) + "\n"


def _position(finding: Finding) -> tuple[object, ...]:
    """Where a finding sorts: by source file and line, then by program file and byte, then by
    method; then by code."""
    if finding.location is not None:
        return (0, finding.location.file, finding.location.line, finding.code)
    if finding.artifact is not None:
        return (1, finding.artifact, finding.region[0] if finding.region else -1, finding.code)
    return (2, finding.method or "", 0, finding.code)


def _block(finding: Finding) -> str:
    lines = [str(finding)]
    if finding.module:
        lines.append(f"    module: {finding.module}")
    if finding.constant and f"'{finding.constant}'" not in finding.message:
        lines.append(f"    constant: {finding.constant}")
    return "\n".join(lines)


def summary_line(report: Report) -> str:
    """The one summary line of every text format: ``Found 43 findings (43 infos; 1 suppressed
    by # noqa): 42 constants folded; 0 problems left.``"""
    counts = Counter(f.severity.value for f in report)
    parts = [", ".join(f"{counts[s]} {s}{'s' if counts[s] != 1 else ''}" for s in ("error", "warning", "info") if counts[s])]
    parts.append(f"{len(report.suppressed)} suppressed by # noqa" if report.suppressed else "")
    detail = "; ".join(p for p in parts if p)
    line = f"Found {len(report)} finding{'s' if len(report) != 1 else ''}" + (f" ({detail})" if detail else "")
    done = Counter(_DONE[f.code] for f in report if f.code in _DONE)
    if not done:
        return line + "."
    problems = counts["error"] + counts["warning"]
    fixed = "; ".join(f"{n} {one if n == 1 else many}" for (one, many), n in done.items())
    return f"{line}: {fixed}; {problems} problem{'s' if problems != 1 else ''} left."
