"""GitHub Actions annotations: one workflow command per finding, shown on the pull request."""

from __future__ import annotations

from pathlib import Path

from export_guards.render.paths import with_display_paths
from export_guards.report import Finding, Report, Severity
from export_guards.ruleset import known_rules

__all__ = ["render_github"]

_COMMAND = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def render_github(report: Report, *, root: Path | None = None) -> str:
    """``::error file=model.py,line=12,title=EG301 train-mode-dropout::message`` lines, with
    paths relative to ``root`` (default: the working folder's project root, the checkout in
    Actions), as every format has them."""
    return "".join(_annotation(with_display_paths(f, root)) + "\n" for f in report)


def _annotation(finding: Finding) -> str:
    properties = {}
    if finding.location is not None:
        properties["file"] = finding.location.file
        properties["line"] = str(finding.location.line)
    elif finding.artifact is not None:
        properties["file"] = finding.artifact
    registered = known_rules().get(finding.code)
    properties["title"] = f"{finding.code} {registered.name}" if registered else finding.code
    fields = ",".join(f"{key}={_escape(value, property_value=True)}" for key, value in properties.items())
    message = finding.message + (f"\nFix: {finding.fix}" if finding.fix else "")
    return f"::{_COMMAND[finding.severity]} {fields}::{_escape(message)}"


def _escape(text: str, *, property_value: bool = False) -> str:
    """Workflow-command escaping: ``%``, CR and LF always; ``:`` and ``,`` in properties."""
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if property_value else text
