"""Check time per file, this tree against another revision, side by side.

Run: ``.venv/bin/python benchmarks/pte_check_ab.py [--baseline REV] [--rounds N]``.

Writes the realistic programs of ``tests/pte_models.py`` (transformer blocks, conv nets, a KV
cache, quantized, dynamic shapes, portable and XNNPACK) once, then for each round checks all of
them in a fresh process with the baseline's ``export_guards`` (a ``git worktree`` of REV,
default ``HEAD``) and in a fresh process with this tree's, in alternating order. Each process
checks every file once to warm up, then times the median check per file over 5 passes. Reported:
each round's ratio (this tree / baseline) and the median of the paired ratios. Target (issue 26):
at most 1.5.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = 1.5

_TIMER = """
import json, statistics, sys, time
from pathlib import Path
from export_guards.pte.check import check_pte
files = sorted(Path(sys.argv[1]).glob("*.pte"))
for path in files:
    check_pte(path)
times = []
for path in files:
    runs = []
    for _ in range(5):
        start = time.perf_counter(); check_pte(path); runs.append(time.perf_counter() - start)
    times.append(statistics.median(runs))
print(json.dumps(statistics.mean(times)))
"""


def per_file_seconds(tree: Path, folder: Path) -> float:
    """The mean over the files of the median check time, in a fresh process importing ``tree``."""
    done = subprocess.run(
        [sys.executable, "-c", _TIMER, str(folder)], env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, check=True, cwd=tree,
    )  # fmt: skip
    return float(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="HEAD", help="the revision to compare with (default HEAD)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tests"))
    from pte_models import valid_programs

    with tempfile.TemporaryDirectory(prefix="eg-ab-") as scratch:
        folder, baseline = Path(scratch, "programs"), Path(scratch, "baseline")
        folder.mkdir()
        for n, data in enumerate(valid_programs().values()):
            (folder / f"{n}.pte").write_bytes(data)
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(baseline), args.baseline],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        try:
            ratios = []
            for round_ in range(args.rounds):
                order = (baseline, ROOT) if round_ % 2 == 0 else (ROOT, baseline)
                seconds = {tree: per_file_seconds(tree, folder) for tree in order}
                ratios.append(seconds[ROOT] / seconds[baseline])
                print(
                    f"round {round_ + 1}: baseline {1e3 * seconds[baseline]:.2f} ms, this tree {1e3 * seconds[ROOT]:.2f} ms per file: x{ratios[-1]:.2f}",
                    flush=True,
                )
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(baseline)], cwd=ROOT, check=False, capture_output=True
            )
    median = statistics.median(ratios)
    print(f"median of paired ratios: x{median:.2f} (target <= {TARGET})")
    return 0 if median <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
