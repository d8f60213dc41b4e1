"""Renderers: a report as text for people, JSON, SARIF 2.1.0 and GitHub annotations for
machines, or counted per code.

Renderers read findings; they never compute them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from export_guards.render.github import render_github
from export_guards.render.json import render_json
from export_guards.render.recognize import is_report
from export_guards.render.sarif import render_sarif
from export_guards.render.statistics import render_statistics
from export_guards.render.text import render_text
from export_guards.report import Report

__all__ = ["FORMATS", "STATISTICS_FORMATS", "is_report", "render", "render_json", "render_sarif", "render_text"]

FORMATS: dict[str, Callable[..., str]] = {
    "text": render_text,
    "json": render_json,
    "sarif": render_sarif,
    "github": render_github,
}
"""Renderer by format name, as ``--output-format`` takes it."""
STATISTICS_FORMATS = ("text", "json")
"""The formats ``--statistics`` counts in."""


def render(
    report: Report,
    output_format: str,
    *,
    statistics: bool = False,
    show_info: bool = False,
    root: Path | None = None,
    ran: Sequence[str] = (),
) -> str:
    """``report`` in ``output_format`` (a key of :data:`FORMATS`), or counted per code with
    ``statistics``; ``show_info`` lists text info findings (the machine formats hold them
    all); ``root`` is the project root that every format's paths are relative to; ``ran``
    says what the run did, on the text summary line."""
    if statistics:
        return render_statistics(report, output_format)
    options = {"text": {"show_info": show_info, "ran": ran}}.get(output_format, {})
    return FORMATS[output_format](report, root=root, **options)
