"""The text format, for people: ``file:line: CODE [severity] message``, like ruff."""

from __future__ import annotations

from collections import Counter

from export_guards.report import Report

__all__ = ["render_text"]


def render_text(report: Report) -> str:
    """One block per finding (location, code, message, source line, fix), then a summary."""
    blocks = []
    for finding in report:
        lines = [str(finding)]
        if finding.module:
            lines.append(f"    module: {finding.module}")
        if finding.constant and f"'{finding.constant}'" not in finding.message:
            lines.append(f"    constant: {finding.constant}")
        if finding.fix:
            lines.append(f"    fix: {finding.fix}")
        blocks.append("\n".join(lines))
    counts = Counter(f.severity.value for f in report)
    summary = ", ".join(f"{counts[s]} {s}{'s' if counts[s] != 1 else ''}" for s in ("error", "warning", "info") if counts[s])
    blocks.append(f"Found {len(report)} finding{'s' if len(report) != 1 else ''}" + (f" ({summary})." if summary else "."))
    return "\n".join(blocks) + "\n"
