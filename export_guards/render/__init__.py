"""Renderers: a report as text for people, JSON and SARIF 2.1.0 for machines.

Renderers read findings; they never compute them.
"""

from __future__ import annotations

from export_guards.render.json import render_json
from export_guards.render.sarif import render_sarif
from export_guards.render.text import render_text

__all__ = ["FORMATS", "render_json", "render_sarif", "render_text"]

FORMATS = {"text": render_text, "json": render_json, "sarif": render_sarif}
"""Renderer by format name, as ``--format`` takes it."""
