"""The text format, for people: ``file:line: CODE [severity] message``, like ruff."""

from __future__ import annotations

from collections import Counter

from export_guards.report import Finding, Report, Severity
from export_guards.ruleset import known_rules

__all__ = ["render_text"]

# What a guard did, counted in the summary as fixed rather than as problems.
_DONE = {
    "EG201": ("constant folded", "constants folded"),
    "EG202": ("reparametrized weight folded", "reparametrized weights folded"),
    "EG103": ("constant copied to the host", "constants copied to the host"),
}


def render_text(report: Report, *, verbose: bool = False) -> str:
    """One block per error and warning (location, code, message, source line, module, fix);
    info findings one line per code unless ``verbose``, which lists them too; then a summary
    that counts what the guards fixed and the problems left."""
    blocks = [_block(f) for f in report if verbose or f.severity is not Severity.INFO]
    if not verbose:
        infos = Counter(f.code for f in report if f.severity is Severity.INFO)
        for code, count in infos.items():
            name = known[code].name if code in (known := known_rules()) else ""
            blocks.append(f"{code} [info] {name}: {count} finding{'s' if count != 1 else ''} (-v lists them)")
    blocks.append(_summary(report))
    return "\n".join(blocks) + "\n"


def _block(finding: Finding) -> str:
    lines = [str(finding)]
    if finding.module:
        lines.append(f"    module: {finding.module}")
    if finding.constant and f"'{finding.constant}'" not in finding.message:
        lines.append(f"    constant: {finding.constant}")
    if finding.fix:
        lines.append(f"    fix: {finding.fix}")
    return "\n".join(lines)


def _summary(report: Report) -> str:
    """``Found 43 findings (43 infos): 42 constants folded; 0 problems left.``"""
    counts = Counter(f.severity.value for f in report)
    by_severity = ", ".join(f"{counts[s]} {s}{'s' if counts[s] != 1 else ''}" for s in ("error", "warning", "info") if counts[s])
    line = f"Found {len(report)} finding{'s' if len(report) != 1 else ''}" + (f" ({by_severity})" if by_severity else "")
    done = Counter(_DONE[f.code] for f in report if f.code in _DONE)
    quiet = f" ({len(report.suppressed)} suppressed by # noqa)" if report.suppressed else ""
    if not done:
        return line + quiet + "."
    problems = counts["error"] + counts["warning"]
    fixed = "; ".join(f"{n} {one if n == 1 else many}" for (one, many), n in done.items())
    return f"{line}: {fixed}; {problems} problem{'s' if problems != 1 else ''} left{quiet}."
