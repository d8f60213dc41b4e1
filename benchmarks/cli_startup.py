"""Command start-up benchmark: the answers that need no model come without torch.

Run: ``make bench-cli`` (or ``.venv/bin/python benchmarks/cli_startup.py``).

Wall time of ``export-guards rules``, ``export-guards explain EG210`` and a usage error
(``export-guards lint`` without a target), each a fresh interpreter as a user runs it
(``python -m export_guards``), interleaved round by round so that machine noise hits all alike.
Reports the median of each and, as the floor nothing can beat, a bare ``python -c pass``.
Target: each command under 1 s.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

COMMANDS = {
    "python -c pass (floor)": [sys.executable, "-c", "pass"],
    "rules": [sys.executable, "-m", "export_guards", "rules"],
    "explain EG210": [sys.executable, "-m", "export_guards", "explain", "EG210"],
    "usage error (lint, no target)": [sys.executable, "-m", "export_guards", "lint"],
}
TARGET_S = 1.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(args.rounds):
        for name, command in COMMANDS.items():
            start = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            times[name].append(time.perf_counter() - start)
            if name.startswith("usage") and done.returncode != 2 or not name.startswith("usage") and done.returncode != 0:
                raise SystemExit(f"{name} exited {done.returncode}: {done.stderr[-500:]}")
    print(f"median wall time of {args.rounds} runs each, interleaved")
    failed = False
    for name, samples in times.items():
        median = statistics.median(samples)
        verdict = "" if "floor" in name else ("  ok" if median < TARGET_S else f"  OVER {TARGET_S:.0f} s")
        failed |= verdict.startswith("  OVER")
        print(f"  {name:<32} {median * 1000:7.0f} ms{verdict}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
