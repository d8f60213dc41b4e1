"""The demo, end to end in a child process as ``make demo`` runs it, on a small input (72, which the model pads to 80)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.subprocess, pytest.mark.slow]  # the demo, as make demo runs it

DEMO = Path(__file__).resolve().parent.parent / "examples" / "demo.py"


def test_demo_exports_runs_and_writes_the_report(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(DEMO), "--size", "72", "--runs", "2", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stderr == ""  # only the demo's own lines: no torchao, torch or runtime line (issue 38)
    assert "convs on XNNPACK: 7 of 11" in done.stdout  # without the guards: spectral_norm convs left out
    assert "convs on XNNPACK: 11 of 11" in done.stdout
    assert (tmp_path / "segmentation.pte").read_bytes()[4:8] == b"ET12"
    page = (tmp_path / "report.html").read_text()
    assert "<table>" in page and page.count("<svg") == 2  # the table, and the latency and delegation charts
    assert "<td>with export-guards</td><td>11/11</td>" in page
    # The four spectral_norm convs' findings: each paragraph once, with a count and the places.
    assert page.count("Expected weight to be a static param") == 1 and page.count("is still reparametrized") == 1
    assert page.count("<summary>4 places</summary>") == 2
    markdown = (tmp_path / "report.md").read_text()
    assert "| without export-guards | 7/11 |" in markdown and "EG212" in markdown  # one finding per weight
    assert markdown.count("(4 times)") == 2
    assert "median of 2 timed runs each, interleaved, after a warm-up" in markdown  # like for like, said
    assert "x faster, the median of paired ratios" in done.stdout


LLM_EXAMPLE = DEMO.parent / "export_llm_guarded.py"


@pytest.mark.parametrize(
    ("option", "said"),
    [
        ("--layer=1", "unknown option --layer=1"),
        ("--layers=0", "1 or more (got '0')"),
        ("--layers=two", "1 or more (got 'two')"),
    ],
)
def test_the_export_llm_example_stops_on_a_misspelt_option_or_a_count_it_cannot_use(option: str, said: str) -> None:
    done = subprocess.run([sys.executable, str(LLM_EXAMPLE), option], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and done.stderr.startswith("usage: python examples/export_llm_guarded.py"), done.stderr
    assert done.stderr.rstrip().endswith(said) and "Traceback" not in done.stderr


def test_the_export_llm_example_prints_only_its_comparison() -> None:
    """``export_llama`` stock and guarded on a shipped config: the same bytes, the same tokens,
    and no library line (torchao's start-up, torch's FutureWarnings, export_llama's prints).
    One layer: each layer adds to both lowerings (most of the run) and nothing to what is checked."""
    done = subprocess.run(
        [sys.executable, str(LLM_EXAMPLE), "--no-embedding-quantize", "--layers=1"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].endswith("(byte for byte)") and len(lines) == 7, done.stdout
    assert all("same token True" in line for line in lines[1:]), done.stdout
    assert done.stderr == "", done.stderr
