"""What the known-wrong pass costs the pass list on programs without a known-wrong pattern.

Run: ``make bench-known-wrong`` (or ``.venv/bin/python benchmarks/known_wrong_cost.py [--pairs N]``).

``to_edge_transform_and_lower(..., transform_passes=guard_passes(), partitioner=[XnnpackPartitioner()])``
then ``to_executorch()``, with the pass list as it ships (B) and without its
``KnownWrongDelegationPass`` (A: the pass list before it), on programs that hold no such pattern
(a conv net with batch norm, ``examples/llm.py``'s fp32 and 8da4w decoders), in one process, A
and B alternating pair by pair. Reported: the median of the paired ratios B / A (target at most
1.02) and whether the bytes are the same (they must be).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

import export_guards as eg  # first: it keeps the libraries' known noise off the terminal

# isort: split

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower

from export_guards.passes.defaults import GuardPasses
from export_guards.passes.known_wrong import KnownWrongDelegationPass

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import llm


def conv_net() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    layers = [
        torch.nn.Conv2d(3, 16, 3),
        torch.nn.BatchNorm2d(16),
        torch.nn.ReLU(),
        torch.nn.Conv2d(16, 16, 3),
        torch.nn.ReLU(),
    ]
    return torch.nn.Sequential(*layers).eval(), (torch.randn(1, 3, 32, 32),)


MODELS = {"conv+bn": conv_net, "decoder fp32": lambda: llm.model("fp32"), "decoder 8da4w": lambda: llm.model("8da4w")}


def before() -> GuardPasses:
    return GuardPasses([p for p in eg.guard_passes() if not isinstance(p, KnownWrongDelegationPass)])


def timed(passes: GuardPasses, model: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> tuple[float, bytes]:
    program = torch.export.export(model, inputs)
    gc.collect()
    start = time.perf_counter()
    pte = (
        to_edge_transform_and_lower(program, transform_passes=passes, partitioner=[XnnpackPartitioner()])
        .to_executorch()
        .buffer
    )
    return time.perf_counter() - start, pte


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=7, help="A / B pairs per model (default 7)")
    args = parser.parse_args()
    ratios: list[float] = []
    for name, build in MODELS.items():
        model, inputs = build()
        timed(before(), model, inputs)  # warm-up, for both
        timed(eg.guard_passes(), model, inputs)
        pairs, same = [], True
        for pair in range(args.pairs):
            ways = ("A", "B") if pair % 2 == 0 else ("B", "A")
            seconds, bytes_ = {}, {}
            for way in ways:
                seconds[way], bytes_[way] = timed(before() if way == "A" else eg.guard_passes(), model, inputs)
            pairs.append(seconds["B"] / seconds["A"])
            same = same and bytes_["A"] == bytes_["B"]
        ratios += pairs
        print(
            f"{name:14} B/A median x{statistics.median(pairs):.3f} (pairs {min(pairs):.3f}-{max(pairs):.3f}); same bytes: {same}",
            flush=True,
        )
    print(f"all models: median of paired ratios x{statistics.median(ratios):.3f} (target at most 1.02)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
