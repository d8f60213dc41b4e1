"""The quantized decoder's guarded export against stock ExecuTorch, side by side (issue 45).

Run: ``make bench-llm`` (or ``.venv/bin/python benchmarks/llm_export.py [--pairs N] [--variant V]``).

``examples/llm.py``'s decoder (torchao 8da4w by default), exported from the same model in one
process, stock and guarded in turn (the order alternating pair by pair): stock is
``torch.export`` + ``to_edge_transform_and_lower(..., partitioner=[XnnpackPartitioner()])`` +
``to_executorch()``; guarded is ``torch.export`` + ``lower_with_guards`` + ``to_pte()``, which
adds the lint, the fold and the placement guard. Reported: the median of the paired time ratios
(guarded / stock; target at most 1.05) and both ``.pte`` sizes (target: guarded at most stock's).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import export_guards as eg  # first: it keeps the libraries' known noise off the terminal

# isort: split

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import llm


def stock(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> bytes:
    edge = to_edge_transform_and_lower(torch.export.export(model, inputs), partitioner=[XnnpackPartitioner()])
    return edge.to_executorch().buffer


def guarded(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> bytes:
    return eg.lower_with_guards(torch.export.export(model, inputs)).to_pte()


def timed(
    export: Callable[..., bytes], model: torch.nn.Module, inputs: tuple[torch.Tensor, ...]
) -> tuple[float, bytes]:
    gc.collect()
    start = time.perf_counter()
    pte = export(model, inputs)
    return time.perf_counter() - start, pte


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5, help="stock / guarded pairs (default 5)")
    parser.add_argument(
        "--variant", default="8da4w", choices=llm.VARIANTS, help="the decoder's variant (default 8da4w)"
    )
    args = parser.parse_args()
    model, inputs = llm.model(args.variant)
    timed(stock, model, inputs)  # warm-up: first-call imports and caches, for both
    timed(guarded, model, inputs)
    ratios, sizes = [], {}
    for pair in range(args.pairs):
        ways = (stock, guarded) if pair % 2 == 0 else (guarded, stock)
        seconds = {}
        for way in ways:
            seconds[way.__name__], pte = timed(way, model, inputs)
            sizes[way.__name__] = len(pte)
        ratios.append(seconds["guarded"] / seconds["stock"])
        print(
            f"pair {pair + 1}: stock {seconds['stock']:.2f} s, guarded {seconds['guarded']:.2f} s, ratio {ratios[-1]:.3f}",
            flush=True,
        )
    ratio = statistics.median(ratios)
    print(f"\n| decoder ({args.variant}) | measured | target |\n|---|---|---|")
    print(f"| guarded / stock export time (median of {args.pairs} paired ratios) | {ratio:.3f} | <= 1.05 |")
    print(f"| .pte bytes, stock | {sizes['stock']:,} | |")
    print(f"| .pte bytes, guarded | {sizes['guarded']:,} | <= stock's |")
    return 0 if ratio <= 1.05 and sizes["guarded"] <= sizes["stock"] else 1


if __name__ == "__main__":
    sys.exit(main())
