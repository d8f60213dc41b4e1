"""``export-guards check --runtime`` against the runtime's own cost, side by side.

Run: ``make bench-check-runtime`` (or ``.venv/bin/python benchmarks/check_runtime_cost.py [--runs N]``).

Writes a small CNN's program (XNNPACK), then times, best of N each, in fresh processes: a
three-line script that imports ``executorch.runtime``, loads the program and runs it once (what
any run costs), and ``export-guards check --runtime`` on the same file (the structural check,
EG519's replay and that run, in a child process started first, so that its import overlaps the
check). Target: the command at most 1.2 x the script.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower

TARGET_RATIO = 1.2

SCRIPT = """
import sys, torch
from executorch.runtime import Runtime
Runtime.get().load_program(sys.argv[1]).load_method("forward").execute([torch.randn(1, 3, 64, 64)])
"""


def write_program(path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(16, 32, 3, stride=2), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10),
    ).eval()  # fmt: skip
    program = torch.export.export(model, (torch.randn(1, 3, 64, 64),))
    path.write_bytes(to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()]).to_executorch().buffer)


def best(command: list[str], runs: int) -> float:
    fastest = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        fastest = min(fastest, time.perf_counter() - start)
        assert done.returncode == 0, done.stdout + done.stderr
    return fastest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="eg-bench-runtime-") as scratch:
        path = Path(scratch) / "cnn.pte"
        write_program(path)
        script = Path(scratch) / "run.py"
        script.write_text(SCRIPT)
        runtime = best([sys.executable, str(script), str(path)], args.runs)
        check = best([sys.executable, "-m", "export_guards", "check", str(path), "--runtime", "--isolated", "-q"], args.runs)
    ratio = check / runtime
    print(f"{os.cpu_count()} cores; best of {args.runs}")
    print(f"import executorch.runtime, load, run:  {runtime:.2f} s")
    print(f"export-guards check --runtime:         {check:.2f} s")
    met = ratio <= TARGET_RATIO
    print(f"ratio {ratio:.2f} (target <= {TARGET_RATIO}): {'met' if met else 'NOT met'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
