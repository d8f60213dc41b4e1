"""``benchmarks/llm_scale.py --quick`` still runs (issue 64): every way in a fresh process, and
the table with a row per way and the ratios by size. Its figures are the benchmark's to report,
never a test's to assert."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow]  # five exports of the small decoder, each in its own process

BENCHMARK = Path(__file__).parent.parent / "benchmarks" / "llm_scale.py"


def test_quick_prints_a_row_per_way(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCHMARK), "--quick"], capture_output=True, text=True, cwd=tmp_path, timeout=1500
    )
    # 1: a target missed, which the small decoder may (its figures are not this test's)
    assert done.returncode in (0, 1), done.stderr[-3000:]
    rows = re.findall(r"^\| small \| [\d,]+ \| fp32 \| (\S+) \| (\S*) ?\|", done.stdout, re.MULTILINE)
    assert rows == [
        ("stock", ""),
        ("guarded", "stock"),
        ("passes", "stock"),
        ("stock+runs", ""),
        ("lint", "stock+runs"),
    ], done.stdout
    assert re.search(r"^\| lint \| fp32 \| \d\.\d{3} / \d\.\d{3} \|$", done.stdout, re.MULTILINE), done.stdout
    assert not list(tmp_path.iterdir()), "the benchmark leaves its files behind"
