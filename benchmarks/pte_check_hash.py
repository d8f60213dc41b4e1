"""What verifying the weights' content-hash keys (EG523) costs ``check`` on a large program.

Run: ``make bench-check-hash`` (or ``.venv/bin/python benchmarks/pte_check_hash.py [--rounds N]``).

Writes an 85M-parameter transformer (12 blocks of width 768: attention projections and a
3072-wide MLP, about 340 MB of float32 weights) lowered to XNNPACK, whose every weight is named
data keyed by the SHA-256 of its bytes, once: it is cached in the temporary folder, by the
installed torch and executorch (``--rebuild`` writes it again). Then times, interleaved round
by round (the order alternating, so that drift and the page cache hit both alike), the check
with every rule and without EG523 (the check as it was before it): ``export-guards check FILE``
as a user runs it (a process each), and ``check_pte`` in one process. Reports the median of
the paired ratios. Target: the command with EG523 at most 1.5 x the time without. The
function's ratio is shown too: there the hashing (about 1.5 GB/s per core with SHA
instructions) is compared with the structural check alone, without the interpreter's start.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

from export_guards.pte.check import check_pte
from export_guards.settings import Settings

TARGET_RATIO = 1.5
WIDTH, HEADS, HIDDEN, BLOCKS = 768, 12, 3072, 12


def write_program(path: Path) -> None:
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q, self.k, self.v, self.o = (torch.nn.Linear(WIDTH, WIDTH) for _ in range(4))
            self.up, self.down = torch.nn.Linear(WIDTH, HIDDEN), torch.nn.Linear(HIDDEN, WIDTH)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            batch, tokens, _ = x.shape
            q, k, v = (
                p(x).view(batch, tokens, HEADS, WIDTH // HEADS).transpose(1, 2) for p in (self.q, self.k, self.v)
            )
            attended = (
                torch.nn.functional.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(batch, tokens, WIDTH)
            )
            x = x + self.o(attended)
            return x + self.down(torch.relu(self.up(x)))

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[Block() for _ in range(BLOCKS)]).eval()
    program = torch.export.export(model, (torch.randn(1, 8, WIDTH),))
    partial = path.with_suffix(".partial")
    partial.write_bytes(to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()]).to_executorch().buffer)
    partial.replace(path)  # whole or not there: a run stopped halfway leaves no half program to time
    del model, program
    gc.collect()


def cached_program(rebuild: bool) -> Path:
    """The transformer's program, written once per torch and executorch installed."""
    folder = Path(tempfile.gettempdir()) / "export-guards-bench"
    folder.mkdir(exist_ok=True)
    path = folder / f"transformer-{BLOCKS}x{WIDTH}-torch{version('torch')}-et{version('executorch')}.pte"
    if rebuild or not path.exists():
        print(f"writing {path} (once)...", flush=True)
        write_program(path)
    return path


def timed(run: object) -> float:
    start = time.perf_counter()
    run()  # type: ignore[operator]
    return time.perf_counter() - start


def paired(without: object, with_hash: object, rounds: int) -> tuple[list[float], list[float]]:
    """Times of each, round by round, the order alternating."""
    times: tuple[list[float], list[float]] = ([], [])
    for turn in range(rounds):
        order = ((0, without), (1, with_hash)) if turn % 2 == 0 else ((1, with_hash), (0, without))
        for index, run in order:
            times[index].append(timed(run))
    return times


def ratio(times: tuple[list[float], list[float]]) -> float:
    return statistics.median(b / a for a, b in zip(*times, strict=True))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--rebuild", action="store_true", help="write the program again")
    args = parser.parse_args()
    path = cached_program(args.rebuild)
    size_mb = path.stat().st_size / 1e6

    def function(settings: Settings) -> Callable[[], None]:
        def run() -> None:
            report = check_pte(path, config=settings)
            assert not report.errors, report

        return run

    def command(extra: list[str]) -> object:
        def run() -> None:
            argv = [sys.executable, "-m", "export_guards", "check", str(path), "--isolated", "-q", *extra]
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
            assert done.returncode == 0, done.stdout + done.stderr

        return run

    function(Settings())()  # warm-up: the flatbuffer readers, the page cache
    in_process = paired(function(Settings(ignore=("EG523",))), function(Settings()), args.rounds)
    commands = paired(command(["--ignore", "EG523"]), command([]), args.rounds)
    print(
        f"program: {path.name}, {size_mb:.0f} MB (XNNPACK, named data keyed by SHA-256); {os.cpu_count()} cores; {args.rounds} rounds, interleaved"
    )
    for label, times in (("export-guards check", commands), ("check_pte in-process", in_process)):
        without, with_hash = (statistics.median(t) for t in times)
        print(
            f"{label}: median without EG523 {without:.3f} s, with {with_hash:.3f} s; median paired ratio {ratio(times):.2f}"
        )
    met = ratio(commands) <= TARGET_RATIO
    print(f"command ratio {ratio(commands):.2f} (target <= {TARGET_RATIO}): {'met' if met else 'NOT met'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
