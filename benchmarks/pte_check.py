"""Program-check benchmark: structural check time against ``.pte`` size.

Run: ``make bench-check`` (or ``.venv/bin/python benchmarks/pte_check.py [--runs N]``).

Writes programs of about 1 MB, 100 MB and 1 GB (stacks of linear layers with random weights,
lowered to XNNPACK, whose weights become named data, and to the portable backend, whose weights
fill the constant segment), then times ``check_pte`` on each file: best of N, in one process
after one warm-up check (which generates the flatbuffer readers once). Targets: at least
500 MB/s at every size, and linear: the time per MB at 1 GB is at most 1.5 x the time per MB
at 100 MB.

Then the realistic programs under 1 MB (``tests/pte_models.py``: transformer blocks, conv nets,
a KV cache, quantized, dynamic shapes, portable and XNNPACK), each written to a file and
checked once (its first check in the process) and then N times. Target: a median under 20 ms
per file. The first check is shown beside it: it also pays, once per process, for each
operator signature the process has not seen (EG519 replays it on meta tensors, about a
millisecond each) and for unpacking code paths first taken.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower

from export_guards.pte.check import check_pte

# (label, layers, width): a 1024-wide linear holds 4 MiB of float32 weights.
SIZES = [("1 MB", 1, 512), ("100 MB", 25, 1024), ("1 GB", 256, 1024)]
TARGET_MB_S = 500.0
TARGET_LINEARITY = 1.5
TARGET_SMALL_MS = 20.0


def write_program(path: Path, layers: int, width: int, backend: str) -> int:
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)]).eval()
    program = torch.export.export(model, (torch.randn(1, width),))
    partitioner = [XnnpackPartitioner()] if backend == "xnnpack" else []
    buffer = to_edge_transform_and_lower(program, partitioner=partitioner).to_executorch().buffer
    path.write_bytes(buffer)
    del model, program, buffer
    gc.collect()
    return path.stat().st_size


def best_time(path: Path, runs: int) -> float:
    report = check_pte(path)
    assert not report.findings, f"{path} should be clean: {report}"
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        check_pte(path)
        best = min(best, time.perf_counter() - start)
    return best


def small_programs_met(scratch: Path, runs: int) -> bool:
    """Times the check of each realistic program under 1 MB; True when all are under target."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from pte_models import valid_programs

    programs = valid_programs()
    warm_up = scratch / "warm-up.pte"  # generates the flatbuffer readers, once per process
    write_program(warm_up, 1, 2, "xnnpack")
    check_pte(warm_up)
    print(f"\n{'program':<36} {'bytes':>9} {'first ms':>9} {'median ms':>10}")
    worst = worst_first = 0.0
    for index, (name, data) in enumerate(programs.items()):
        assert len(data) < 1_000_000, name
        path = scratch / f"small-{index}.pte"
        path.write_bytes(data)
        start = time.perf_counter()
        check_pte(path)
        first = (time.perf_counter() - start) * 1e3
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            check_pte(path)
            times.append((time.perf_counter() - start) * 1e3)
        worst, worst_first = max(worst, statistics.median(times)), max(worst_first, first)
        print(f"{name:<36} {len(data):>9,} {first:>9.1f} {statistics.median(times):>10.1f}", flush=True)
    print(
        f"programs under 1 MB: slowest median {worst:.1f} ms (target < {TARGET_SMALL_MS:.0f} ms); slowest first check {worst_first:.1f} ms"
    )
    return worst < TARGET_SMALL_MS


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--small-only", action="store_true", help="time only the programs under 1 MB")
    args = parser.parse_args()
    print(f"{'backend':<9} {'size':>7} {'bytes':>14} {'check s':>9} {'MB/s':>9} {'ms/MB':>8}")
    met = True
    with tempfile.TemporaryDirectory(prefix="eg-bench-") as scratch:
        for backend in () if args.small_only else ("xnnpack", "portable"):
            per_mb = {}
            for label, layers, width in SIZES:
                path = Path(scratch) / f"{backend}-{layers}.pte"
                size = write_program(path, layers, width, backend)
                seconds = best_time(path, args.runs)
                mb = size / 1e6
                per_mb[label] = seconds / mb
                met &= mb / seconds >= TARGET_MB_S
                print(
                    f"{backend:<9} {label:>7} {size:>14,} {seconds:>9.4f} {mb / seconds:>9.0f} {1e3 * seconds / mb:>8.3f}",
                    flush=True,
                )
                path.unlink()
            linearity = per_mb["1 GB"] / per_mb["100 MB"]
            met &= linearity <= TARGET_LINEARITY
            print(f"{backend}: time per MB at 1 GB / at 100 MB = {linearity:.2f} (target <= {TARGET_LINEARITY})")
        met &= small_programs_met(Path(scratch), args.runs)
    print(
        f"targets: >= {TARGET_MB_S:.0f} MB/s at every size, linear, < {TARGET_SMALL_MS:.0f} ms under 1 MB: {'met' if met else 'NOT MET'}"
    )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
