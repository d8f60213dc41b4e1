"""What verifying the weights' content-hash keys (EG523) costs ``check`` on a large program.

Run: ``make bench-check-hash`` (or ``.venv/bin/python benchmarks/pte_check_hash.py [--runs N]``).

Writes an 85M-parameter transformer (12 blocks of width 768: attention projections and a
3072-wide MLP, about 340 MB of float32 weights) lowered to XNNPACK, whose every weight is named
data keyed by the SHA-256 of its bytes, then times the check with every rule and without EG523
(the check as it was before it), best of N each: ``export-guards check FILE`` as a user runs it
(a process each), and ``check_pte`` in one process after a warm-up check. Target: the command
with EG523 at most 1.5 x the time without. The function's ratio is shown too: there the hashing
(about 1 GB/s per core) is compared with the structural check alone, which reads only the
flatbuffer and the payloads.
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower

from export_guards.pte.check import check_pte
from export_guards.settings import Settings

TARGET_RATIO = 1.5
WIDTH, HEADS, HIDDEN, BLOCKS = 768, 12, 3072, 12


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v, self.o = (torch.nn.Linear(WIDTH, WIDTH) for _ in range(4))
        self.up, self.down = torch.nn.Linear(WIDTH, HIDDEN), torch.nn.Linear(HIDDEN, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, _ = x.shape
        q, k, v = (p(x).view(batch, tokens, HEADS, WIDTH // HEADS).transpose(1, 2) for p in (self.q, self.k, self.v))
        attended = torch.nn.functional.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(batch, tokens, WIDTH)
        x = x + self.o(attended)
        return x + self.down(torch.relu(self.up(x)))


def write_program(path: Path) -> int:
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[Block() for _ in range(BLOCKS)]).eval()
    parameters = sum(p.numel() for p in model.parameters())
    program = torch.export.export(model, (torch.randn(1, 8, WIDTH),))
    path.write_bytes(to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()]).to_executorch().buffer)
    del model, program
    gc.collect()
    return parameters


def best_time(path: Path, settings: Settings, runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        report = check_pte(path, config=settings)
        best = min(best, time.perf_counter() - start)
        assert not report.errors, report
    return best


def best_command_time(path: Path, extra: list[str], runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "export_guards", "check", str(path), "--isolated", "-q", *extra], capture_output=True, text=True, check=False)
        best = min(best, time.perf_counter() - start)
        assert done.returncode == 0, done.stdout + done.stderr
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="eg-bench-hash-") as scratch:
        path = Path(scratch) / "transformer.pte"
        parameters = write_program(path)
        size_mb = path.stat().st_size / 1e6
        check_pte(path)  # warm-up: the flatbuffer readers, the page cache
        without = best_time(path, Settings(ignore=("EG523",)), args.runs)
        with_hash = best_time(path, Settings(), args.runs)
        command_without = best_command_time(path, ["--ignore", "EG523"], args.runs)
        command_with = best_command_time(path, [], args.runs)
    print(f"program: {parameters / 1e6:.0f}M parameters, {size_mb:.0f} MB (XNNPACK, named data keyed by SHA-256); {os.cpu_count()} cores")
    print(f"export-guards check, without EG523: {command_without:.3f} s; with: {command_with:.3f} s; ratio {command_with / command_without:.2f}")
    print(f"check_pte in-process, without EG523: {without:.3f} s ({size_mb / without:.0f} MB/s); with: {with_hash:.3f} s ({size_mb / with_hash:.0f} MB/s); ratio {with_hash / without:.2f}")
    met = command_with / command_without <= TARGET_RATIO
    print(f"command ratio {command_with / command_without:.2f} (target <= {TARGET_RATIO}): {'met' if met else 'NOT met'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
