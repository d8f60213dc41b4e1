"""Shared fixtures: the test-only device (built once a session) and the devices to run on."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from export_guards.report import Finding
from export_guards.ruleset import CATALOG
from export_guards.testing import load_trapdev

TESTS = Path(__file__).parent

DEVICES = [
    "trapdev",
    pytest.param(
        "cuda",
        marks=pytest.mark.skipif(
            not torch.cuda.is_available(),
            reason="CUDA is not available here; the trapdev device covers the same host-read crash",
        ),
    ),
]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--pte-fuzz-cases", type=int, default=2000, help="damaged .pte files the fuzz test checks (default 2000)"
    )


@pytest.fixture(scope="session", autouse=True)
def every_emitted_code_is_registered_and_documented() -> Iterator[set[str]]:
    """Record the code of every finding the suite makes in this process; at the end, each
    must be in the catalog and have a section in docs/rules.md."""
    emitted: set[str] = set()
    original = Finding.__init__

    def recording(self: Finding, *args: object, **kwargs: object) -> None:
        original(self, *args, **kwargs)
        emitted.add(self.code)

    Finding.__init__ = recording  # type: ignore[method-assign]
    try:
        yield emitted
    finally:
        Finding.__init__ = original  # type: ignore[method-assign]
    rules_page = (TESTS.parent / "docs" / "rules.md").read_text()
    unregistered = sorted(emitted - set(CATALOG))
    undocumented = sorted(c for c in emitted & set(CATALOG) if f"## {c} {CATALOG[c].name}\n" not in rules_page)
    assert not unregistered and not undocumented, f"emitted but not registered: {unregistered}; not documented: {undocumented}"


@pytest.fixture(scope="session")
def trapdev() -> torch.device:
    """The test accelerator whose memory faults on a host read (compiled once, cached)."""
    return load_trapdev()


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> torch.device:
    """Each non-CPU device available: trapdev always, CUDA where present."""
    if request.param == "trapdev":
        return request.getfixturevalue("trapdev")
    return torch.device(request.param)


def run_script(script: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run ``tests/<script>`` in a fresh interpreter with faulthandler on, so a crash there
    shows where it happened and cannot take the test session down."""
    return subprocess.run(
        [sys.executable, "-X", "faulthandler", str(TESTS / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=TESTS,
    )


def last_json(completed: subprocess.CompletedProcess[str]) -> dict[str, object]:
    """The JSON line a scenario printed last; fails with its stderr when there is none."""
    lines = completed.stdout.strip().splitlines()
    assert completed.returncode == 0 and lines, (
        f"scenario exited {completed.returncode}:\n{completed.stderr[-4000:]}"
    )
    return json.loads(lines[-1])
