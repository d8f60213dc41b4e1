"""Lint benchmark: its time against lowering, and how it scales with the graph's size.

Run: ``make bench-lint`` (or ``.venv/bin/python benchmarks/lint.py``).

1. On a program of at least 10,000 nodes, lint time (both stages: the torch.export program,
   and the lowered one) as a fraction of ``to_edge_transform_and_lower`` (XNNPACK) +
   ``to_executorch``, in one process. Target <= 5 %.
2. Lint time of the torch.export program at 1k, 10k and 50k nodes. Target: linear, judged by
   the time per node at 50k being at most 1.5 x the time per node at 1k.
Times are the best of several runs (CPU time of this process).
"""

from __future__ import annotations

import argparse
import gc
import time

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from torch import nn

import export_guards as eg
from export_guards.analysis.partitioner_reasons import capture_partitioner_reasons


class Chain(nn.Module):
    """``blocks`` residual blocks of small ops (linear, GELU, scale, add): 7 graph nodes
    each, parameters included."""

    def __init__(self, blocks: int, width: int = 8) -> None:
        super().__init__()
        self.linears = nn.ModuleList(nn.Linear(width, width) for _ in range(blocks))
        self.scales = nn.ParameterList(nn.Parameter(torch.full((width,), 0.5)) for _ in range(blocks))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for linear, scale in zip(self.linears, self.scales):
            x = x + nn.functional.gelu(linear(x)) * scale
        return x


def program_of(nodes: int) -> torch.export.ExportedProgram:
    torch.manual_seed(0)
    blocks = max(1, -(-nodes // 7))
    return torch.export.export(Chain(blocks).eval(), (torch.randn(2, 8),))


def best(function, runs: int) -> float:
    times = []
    for _ in range(runs):
        gc.collect()
        start = time.process_time()
        function()
        times.append(time.process_time() - start)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,50000", help="node counts for the scaling test")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per measurement (best kept)")
    args = parser.parse_args()

    program = program_of(10_000)
    nodes = len(program.graph.nodes)
    start = time.process_time()
    with capture_partitioner_reasons() as reasons:
        edge = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
    edge.to_executorch()
    lowering = time.process_time() - start
    lint_time = best(lambda: eg.lint(program), args.runs) + best(
        lambda: eg.lint(edge, stage="partitioned", reasons={"forward": reasons}), args.runs
    )
    fraction = lint_time / lowering
    fraction_ok = nodes >= 10_000 and fraction <= 0.05

    per_node = {}
    for size in (int(s) for s in args.sizes.split(",")):
        scaled = program_of(size)
        count = len(scaled.graph.nodes)
        per_node[count] = best(lambda: eg.lint(scaled), args.runs) / count  # noqa: B023 - called at once, in this iteration
    counts = sorted(per_node)
    growth = per_node[counts[-1]] / per_node[counts[0]]
    linear_ok = growth <= 1.5

    print("| measure | value | target | met |")
    print("|---|---|---|---|")
    print(
        f"| lint (both stages) / (lower + to_executorch), {nodes:,} nodes | {lint_time:.2f} s / "
        f"{lowering:.1f} s = {fraction:.1%} | <= 5 % | {'yes' if fraction_ok else 'NO'} |"
    )
    for count in counts:
        print(f"| lint time per node, {count:,} nodes | {per_node[count] * 1e6:.1f} us | - | - |")
    print(
        f"| per-node time, {counts[-1]:,} vs {counts[0]:,} nodes | {growth:.2f} x | <= 1.5 x (linear) "
        f"| {'yes' if linear_ok else 'NO'} |"
    )
    return 0 if fraction_ok and linear_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
