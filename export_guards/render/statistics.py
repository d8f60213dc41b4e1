"""Counts per code, for ``--statistics``: what a large report is made of, at a glance."""

from __future__ import annotations

import json
from collections import Counter

from export_guards.render.text import summary_line
from export_guards.report import Report, Severity
from export_guards.ruleset import known_rules

__all__ = ["render_statistics"]


def render_statistics(report: Report, output_format: str = "text") -> str:
    """One row per code, most frequent first: count, code, name, severity (the highest a
    finding of it has), then how many a ``# noqa`` suppressed; JSON as ``{"statistics": [{"code",
    "name", "severity", "count"}], "suppressed": {code: count}}``."""
    counts = Counter(f.code for f in report)
    worst: dict[str, Severity] = {}
    for finding in report:
        if finding.code not in worst or finding.severity.rank > worst[finding.code].rank:
            worst[finding.code] = finding.severity
    rows = [
        {
            "code": code,
            "name": known[code].name if code in (known := known_rules()) else "",
            "severity": worst[code].value,
            "count": count,
        }
        for code, count in sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    ]
    suppressed = dict(sorted(Counter(f.code for f in report.suppressed).items()))
    if output_format == "json":
        return json.dumps({"statistics": rows, "suppressed": suppressed}, indent=2) + "\n"
    width = max((len(str(r["name"])) for r in rows), default=0)
    lines = [f"{r['count']:6d}  {r['code']}  {r['name']:<{width}}  [{r['severity']}]" for r in rows]
    lines.append(summary_line(report))
    return "\n".join(lines) + "\n"
