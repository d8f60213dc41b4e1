"""A baseline: the findings a project has accepted, by fingerprint (the SARIF fingerprints:
stable across working folders, line moves and node numbering), so that a gate fails only on
new ones. ``--write-baseline`` writes one; ``--baseline`` leaves its findings out."""

from __future__ import annotations

import json
from pathlib import Path

from export_guards.render.sarif import fingerprints
from export_guards.report import Report

__all__ = ["BASELINE_VERSION", "held_by", "read_baseline", "render_baseline"]

BASELINE_VERSION = 1


def render_baseline(report: Report, *, root: Path | None = None) -> str:
    """``{"version": 1, "baseline": [{"fingerprint", "code", "message"}, ...]}``: the code and
    message are for the reader; only the fingerprint is matched."""
    entries = [
        {"fingerprint": fingerprint, "code": finding.code, "message": finding.message}
        for finding, fingerprint in zip(report, fingerprints(report, root=root))
    ]
    return json.dumps({"version": BASELINE_VERSION, "baseline": entries}, indent=2) + "\n"


def read_baseline(text: str, where: str) -> frozenset[str]:
    """The fingerprints of a baseline ``render_baseline`` wrote.

    Raises:
        ValueError: ``text`` is not such a baseline, naming ``where`` it came from.
    """
    try:
        document = json.loads(text)
    except ValueError:
        document = None
    if not is_baseline(document):
        raise ValueError(f"{where} is not an export-guards baseline: write one with --write-baseline")
    return frozenset(entry["fingerprint"] for entry in document["baseline"])


def is_baseline(document: object) -> bool:
    """Whether a parsed JSON document is a baseline of this version."""
    return (
        isinstance(document, dict)
        and document.get("version") == BASELINE_VERSION
        and isinstance(document.get("baseline"), list)
        and all(isinstance(e, dict) and isinstance(e.get("fingerprint"), str) for e in document["baseline"])
    )


def held_by(report: Report, baseline: frozenset[str], *, root: Path | None = None) -> list[bool]:
    """For each finding of ``report``, in order, whether ``baseline`` holds it."""
    return [fingerprint in baseline for fingerprint in fingerprints(report, root=root)]
