"""The room for what differs between versions (export_guards/compat.py): what it detects, and
the one line on a pair the suite has not run on."""

from __future__ import annotations

import logging
from importlib import metadata

import pytest

from export_guards import compat


def test_a_tested_pair_says_nothing_and_another_pair_says_both_versions_in_one_line() -> None:
    for executorch, torch in sorted(compat.TESTED):
        assert compat.untested({"executorch": f"{executorch}.1", "torch": f"{torch}.0+cpu"}) is None

    line = compat.untested({"executorch": "1.6.0", "torch": "2.13.0+cpu"})
    assert line is not None and "\n" not in line
    assert "executorch 1.6.0" in line and "torch 2.13.0+cpu" in line and "docs/compatibility.md" in line
    assert compat.untested({"executorch": "1.5.1", "torch": "2.99.0"}) is not None
    assert compat.untested({"executorch": None, "torch": "2.13.0"}) is None, "a missing package is its import's to report"


def test_the_installed_pair_is_tested_here_and_an_untested_one_is_said_once(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    installed = {name: metadata.version(name) for name in ("executorch", "torch")}
    assert compat.untested(installed) is None, f"the suite runs on {installed}: add the pair to compat.TESTED and docs/compatibility.md"

    monkeypatch.setattr(compat, "TESTED", frozenset())
    monkeypatch.setattr(compat, "_said", False)
    with caplog.at_level(logging.WARNING, logger="export_guards"):
        compat.say_once_if_untested()
        compat.say_once_if_untested()
    lines = [r.getMessage() for r in caplog.records if r.name == "export_guards"]
    assert len(lines) == 1 and f"executorch {installed['executorch']}" in lines[0]
