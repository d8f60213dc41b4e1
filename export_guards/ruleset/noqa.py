"""Per-line suppression: ``# noqa: EG301`` (or a bare ``# noqa``, every code) on the source line
a finding points at suppresses that finding there, as flake8 and ruff read the same comment.
Imports neither torch nor ExecuTorch."""

from __future__ import annotations

import functools
import linecache
import re
from collections.abc import Iterable

from export_guards.report import Finding

__all__ = ["UNSUPPRESSIBLE", "split_suppressed"]

UNSUPPRESSIBLE = frozenset({"EG001", "EG002"})
"""A rule that failed and a step that failed: no comment on a line can answer for them."""

_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[,\s]+[A-Z]+[0-9]+)*))?", re.IGNORECASE)


def split_suppressed(findings: Iterable[Finding]) -> tuple[list[Finding], list[Finding]]:
    """``findings`` as (kept, suppressed by a ``# noqa`` on their line)."""
    kept: list[Finding] = []
    suppressed: list[Finding] = []
    for found in findings:
        (suppressed if _suppressed(found) else kept).append(found)
    return kept, suppressed


def _suppressed(found: Finding) -> bool:
    if found.location is None or found.code in UNSUPPRESSIBLE:
        return False
    codes = _noqa_codes(found.location.file, found.location.line)
    return codes is not None and (not codes or found.code in codes)


@functools.lru_cache(maxsize=4096)
def _noqa_codes(file: str, line: int) -> frozenset[str] | None:
    """The codes a ``# noqa`` on that line names (empty: every code), or ``None`` for none."""
    match = _NOQA.search(linecache.getline(file, line))
    if match is None:
        return None
    return frozenset(c.upper() for c in re.split(r"[,\s]+", match["codes"] or "") if c)
