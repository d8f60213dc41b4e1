"""Command start-up benchmark: the answers that need no model come without torch.

Run: ``make bench-cli`` (or ``.venv/bin/python benchmarks/cli_startup.py``).

Wall time of ``export-guards rules``, ``export-guards explain EG210`` and each usage error the
command answers before loading torch (a missing file, a syntax error, an unknown factory, a
``.ptd`` given as the program, an unknown recipe, an output that is an input, a folder given as
a file, a user's file at an output path), each a fresh interpreter as a user runs it
(``python -m export_guards``), interleaved round by round so that machine noise hits all alike.
Reports the median of each and, as the floor nothing can beat, a bare ``python -c pass``.
Target: each command under 1 s.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 1.0


def commands(folder: Path) -> dict[str, tuple[list[str], int]]:
    """Each command, and the exit code it must give."""
    model = folder / "zoo.py"
    model.write_text("import torch\n\n\ndef model():\n    return torch.nn.Linear(4, 3), (torch.randn(2, 4),)\n")
    (folder / "bad.py").write_text("def model(:\n")
    (folder / "weights.ptd").write_bytes(b"\0\0\0\0FT01" + bytes(64))
    (folder / "notes.txt").write_text("a user's notes\n")
    eg = [sys.executable, "-m", "export_guards"]
    return {
        "python -c pass (floor)": ([sys.executable, "-c", "pass"], 0),
        "rules": ([*eg, "rules"], 0),
        "explain EG210": ([*eg, "explain", "EG210"], 0),
        "usage: lint, no target": ([*eg, "lint"], 2),
        "usage: missing model file": ([*eg, "lint", f"{folder / 'missing.py'}:model"], 2),
        "usage: syntax error": ([*eg, "lint", f"{folder / 'bad.py'}:model"], 2),
        "usage: unknown factory": ([*eg, "lint", f"{model}:modle"], 2),
        "usage: missing program": ([*eg, "check", str(folder / "missing.pte")], 2),
        "usage: a .ptd as the program": ([*eg, "check", str(folder / "weights.ptd")], 2),
        "usage: unknown recipe": ([*eg, "lint", f"{model}:model", "--recipe", "xnnpack_fp23"], 2),
        "usage: --pte is the model file": ([*eg, "lint", f"{model}:model", "--pte", str(model)], 2),
        "usage: a folder as --report-file": ([*eg, "lint", f"{model}:model", "--report-file", str(folder)], 2),
        "usage: a user's file at --pte": ([*eg, "lint", f"{model}:model", "--pte", str(folder / "notes.txt")], 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        table = commands(Path(folder))
        times: dict[str, list[float]] = {name: [] for name in table}
        for _ in range(args.rounds):
            for name, (command, expected) in table.items():
                start = time.perf_counter()
                done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=folder)
                times[name].append(time.perf_counter() - start)
                if done.returncode != expected:
                    raise SystemExit(f"{name} exited {done.returncode}, not {expected}: {done.stderr[-500:]}")
    print(f"median wall time of {args.rounds} runs each, interleaved")
    failed = False
    for name, samples in times.items():
        median = statistics.median(samples)
        verdict = "" if "floor" in name else ("  ok" if median < TARGET_S else f"  OVER {TARGET_S:.0f} s")
        failed |= verdict.startswith("  OVER")
        print(f"  {name:<36} {median * 1000:7.0f} ms{verdict}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
