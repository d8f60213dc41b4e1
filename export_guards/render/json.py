"""The JSON format: stable and additive (new keys may appear; none change meaning)."""

from __future__ import annotations

import json
from pathlib import Path

from export_guards.render.paths import with_display_paths
from export_guards.report import Finding, Report

__all__ = ["finding_to_dict", "render_json"]

SCHEMA_VERSION = 1


def finding_to_dict(finding: Finding) -> dict[str, object]:
    """``finding`` as the JSON format's object (paths as the finding holds them)."""
    location, region = finding.location, finding.region
    return {
        "code": finding.code,
        "severity": finding.severity.value,
        "message": finding.message,
        "method": finding.method,
        "node": finding.node,
        "constant": finding.constant,
        "location": ({"file": location.file, "line": location.line, "source": location.code} if location else None),
        "fix": finding.fix,
        "module": finding.module,
        "artifact": finding.artifact,
        "region": {"offset": region[0], "length": region[1]} if region else None,
    }


def render_json(report: Report, *, root: Path | None = None) -> str:
    """``{"version": 1, "findings": [...], "summary": {"error": n, "warning": n, "info": n,
    "suppressed": n}}``: ``suppressed`` counts the findings a ``# noqa`` suppressed. Paths are
    relative to ``root`` (default: the working folder's project root), absolute outside it."""
    summary = {s: sum(f.severity.value == s for f in report) for s in ("error", "warning", "info")}
    summary["suppressed"] = len(report.suppressed)
    document = {
        "version": SCHEMA_VERSION,
        "findings": [finding_to_dict(with_display_paths(f, root)) for f in report],
        "summary": summary,
    }
    return json.dumps(document, indent=2) + "\n"
