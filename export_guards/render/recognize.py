"""Whether a file holds a report these renderers wrote: what the command may replace or remove
at ``--report-file`` without asking."""

from __future__ import annotations

import json
import re

from export_guards.render.baseline import is_baseline

__all__ = ["is_report"]

# The last line of the text and statistics formats: one report's summary, or the line over
# several inputs' reports.
_SUMMARY = re.compile(r"^(Found \d+ findings?\b|All checks passed\b|Checked \d+ (programs|targets): \d+ passed\b)")
_ANNOTATION = ("::error ", "::warning ", "::notice ")  # every line of the GitHub format


def is_report(text: str) -> bool:
    """Whether ``text`` is a report these renderers write, in any format: what the command may
    replace or remove at ``--report-file`` without asking. An empty file counts (the GitHub
    format of a clean report)."""
    if not text.strip():
        return True
    try:
        document = json.loads(text)
    except ValueError:
        lines = text.strip().splitlines()
        return bool(_SUMMARY.match(lines[-1])) or all(line.startswith(_ANNOTATION) for line in lines)
    if not isinstance(document, dict):
        return False
    if {"version", "findings", "summary"} <= document.keys() or is_baseline(document):
        return True
    if "statistics" in document and set(document) <= {"statistics", "suppressed"}:
        return True
    runs = document.get("runs")
    return isinstance(runs, list) and any(_driver(run) == "export-guards" for run in runs)


def _driver(run: object) -> object:
    """A SARIF run's ``tool.driver.name``, or ``None``."""
    for key in ("tool", "driver", "name"):
        run = run.get(key) if isinstance(run, dict) else None
    return run
