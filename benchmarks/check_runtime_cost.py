"""``export-guards check --runtime`` against the runtime's own cost, side by side.

Run: ``make bench-check-runtime`` (or ``.venv/bin/python benchmarks/check_runtime_cost.py [--rounds N]``).

Writes two programs once (cached in the temporary folder, by the installed torch and
executorch): a small CNN (XNNPACK) and ``examples/decoder.py``'s, exported as the lint exports
it (kernel calls beside its delegates). For each, times, in fresh processes, interleaved round
by round with the order alternating: a three-line script that imports ``executorch.runtime``,
loads the program and runs it once (what any run costs), and ``export-guards check --runtime``
on the same file (the structural check in this process, which loads neither torch nor the
runtime; the run, the runtime's inventory and EG519's replay in one child, started first).
Reports the median of the paired ratios. Target: the command at most 1.2 x the script.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

TARGET_RATIO = 1.2
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

SCRIPT = """
import sys, torch
from executorch.runtime import Runtime
Runtime.get().load_program(sys.argv[1]).load_method("forward").execute([torch.randn(*map(int, sys.argv[2:]))])
"""


def write_cnn(path: Path) -> None:
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(16, 32, 3, stride=2), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10),
    ).eval()  # fmt: skip
    program = torch.export.export(model, (torch.randn(1, 3, 64, 64),))
    path.write_bytes(to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()]).to_executorch().buffer)


def write_decoder(path: Path) -> None:
    from export_guards.pipeline import export_target

    path.write_bytes(export_target(str(EXAMPLES / "decoder.py:model")).to_pte())


PROGRAMS = {"small CNN": (write_cnn, (1, 3, 64, 64)), "examples/decoder.py": (write_decoder, (1, 3, 128, 128))}


def cached(name: str) -> Path:
    """The program ``name``, written once per torch and executorch installed."""
    folder = Path(tempfile.gettempdir()) / "export-guards-bench"
    folder.mkdir(exist_ok=True)
    path = folder / f"{name.replace('/', '-').replace(' ', '-')}-torch{version('torch')}-et{version('executorch')}.pte"
    if not path.exists():
        partial = path.with_suffix(".partial")
        PROGRAMS[name][0](partial)
        partial.replace(path)  # whole or not there
    return path


def timed(command: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    assert done.returncode == 0, done.stdout + done.stderr
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    ratios: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="eg-bench-runtime-") as scratch:
        script = Path(scratch) / "run.py"
        script.write_text(SCRIPT)
        print(f"{os.cpu_count()} cores; {args.rounds} rounds, interleaved")
        for name, (_, shape) in PROGRAMS.items():
            path = cached(name)
            commands = (
                [sys.executable, str(script), str(path), *map(str, shape)],
                [sys.executable, "-m", "export_guards", "check", str(path), "--runtime", "--isolated", "-q"],
            )
            times: tuple[list[float], list[float]] = ([], [])
            for turn in range(args.rounds):
                for index in (0, 1) if turn % 2 == 0 else (1, 0):
                    times[index].append(timed(commands[index]))
            ratios[name] = statistics.median(b / a for a, b in zip(*times, strict=True))
            runtime, check = (statistics.median(t) for t in times)
            print(
                f"{name}: import executorch.runtime, load, run: median {runtime:.2f} s; export-guards check --runtime: {check:.2f} s; median paired ratio {ratios[name]:.2f}"
            )
    met = all(ratio <= TARGET_RATIO for ratio in ratios.values())
    print(f"worst ratio {max(ratios.values()):.2f} (target <= {TARGET_RATIO}): {'met' if met else 'NOT met'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
