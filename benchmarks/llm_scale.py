"""The guarded flows against stock ExecuTorch at the sizes users ship: time and peak memory (issue 53).

Run: ``make bench-llm-scale`` (or ``.venv/bin/python benchmarks/llm_scale.py [--size S] [--variant V]
[--pairs N] [--ways W,...]``).

``examples/llm.py``'s decoder, at its bundled size (``small``, 0.2 M parameters) and at the size
users ship (``100m``: vocab 32,000, dim 768, 12 layers, the head tied to the embedding), in fp32
and torchao 8da4w. Each model's weights are built once and kept in a file: every timed run is a
fresh process that loads them (untimed), so each run starts from the same state and its peak
memory is its own (``wait4``'s maximum resident set, the largest process of the run's tree: the
lint's runtime child included). Stock and each guarded way alternate in pairs, the order swapped pair by pair:

- stock: ``torch.export`` + ``to_edge_transform_and_lower(..., partitioner=[XnnpackPartitioner()])``
  + ``to_executorch()``, the bytes in hand;
- guarded: ``torch.export`` + ``lower_with_guards`` + ``to_pte()`` (target: time and peak memory
  at most 1.05 x and 1.1 x stock's);
- passes: the pass list with the guarded partitioners, ``emit_passes()`` and ``store_once`` (the
  same targets);
- lint: ``export-guards lint`` on a factory that returns the kept model, writing the program:
  it exports, lowers, writes, checks the program and runs it at every shape against eager
  (targets: 1.5 x stock's time, 1.2 x its peak memory).

Reported per way: the median of the paired ratios (way / stock) of wall time, of CPU time (the
run's and its children's: on a shared machine the steadier of the two) and of peak memory, and
the program's bytes.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import json
import resource
import subprocess
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import export_guards as eg  # first: it keeps the libraries' known noise off the terminal

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import llm  # noqa: E402

SIZES = {"small": llm.Config(), "100m": llm.SHIPPED}
TARGETS = {"guarded": (1.05, 1.1), "passes": (1.05, 1.1), "lint": (1.5, 1.2)}  # time, peak memory
_KEPT: tuple[torch.nn.Module, tuple[torch.Tensor, ...]] | None = None  # the model of this run


def cached() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """The lint's factory: the model this run loaded, not a new one."""
    assert _KEPT is not None, "cached() is the benchmark's own factory"
    return _KEPT


def stock(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> int:
    edge = to_edge_transform_and_lower(torch.export.export(model, inputs), partitioner=[XnnpackPartitioner()])
    return len(edge.to_executorch().buffer)


def guarded(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> int:
    return len(eg.lower_with_guards(torch.export.export(model, inputs)).to_pte())


def passes(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> int:
    partitioner = eg.guard_partitioners([XnnpackPartitioner()])
    edge = to_edge_transform_and_lower(
        torch.export.export(model, inputs), transform_passes=eg.guard_passes(partitioner=partitioner), partitioner=partitioner
    )
    return len(eg.store_once(edge.to_executorch(ExecutorchBackendConfig(passes=eg.emit_passes()))))


def lint(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> int:
    from export_guards.cli import main

    with tempfile.TemporaryDirectory() as folder:
        written = Path(folder) / "model.pte"
        code = main(["lint", f"{Path(__file__).stem}:cached", "--pte", str(written), "-q", "--exit-zero", "--isolated"])
        if code != 0 or not written.exists():
            raise RuntimeError(f"export-guards lint exited {code}")
        return written.stat().st_size


WAYS: dict[str, Callable[..., int]] = {"stock": stock, "guarded": guarded, "passes": passes, "lint": lint}


@dataclass(frozen=True)
class Run:
    wall_s: float
    cpu_s: float
    peak_mib: float
    pte_bytes: int


def child(way: str, size: str, variant: str, state: Path) -> None:
    """One run in this process: the model from the kept weights, then ``way`` timed; prints
    the seconds and the program's bytes."""
    global _KEPT
    this = sys.modules[__name__]  # the lint imports cached() from this very module, by its name
    this.__spec__ = importlib.util.spec_from_file_location(Path(__file__).stem, __file__)
    sys.modules.setdefault(Path(__file__).stem, this)
    if way != "stock":  # each way's modules imported before the clock starts, as stock's are (at the top)
        importlib.import_module("export_guards.cli" if way == "lint" else "export_guards.pipeline")
    model = llm.Decoder(SIZES[size]).eval().requires_grad_(False)
    model.load_state_dict(torch.load(state, mmap=True), assign=True)
    model = llm.quantized(model, variant)
    _KEPT = model, llm.tokens(4)
    start, cpu = time.perf_counter(), _cpu_seconds()
    written = WAYS[way](*_KEPT)
    print(json.dumps({"seconds": time.perf_counter() - start, "cpu": _cpu_seconds() - cpu, "bytes": written}))


def _cpu_seconds() -> float:
    """The CPU time of this process and of its children (the lint's runtime child) so far."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def measured(way: str, size: str, variant: str, state: Path) -> Run:
    """``way`` in a fresh process: its time, and the largest resident set of its process tree
    (the lint's runtime child included), which ``wait4`` gives."""
    command = [sys.executable, __file__, "--child", way, size, variant, str(state)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert process.stdout is not None
    out = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"{way} on the {size} {variant} decoder exited {process.returncode}: rerun `{' '.join(command)}` to see why")
    result = json.loads(out.decode().strip().splitlines()[-1])
    return Run(result["seconds"], result["cpu"], usage.ru_maxrss / 1024, result["bytes"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="small,100m", help="comma-separated, of: small, 100m (default both)")
    parser.add_argument("--variant", default="fp32,8da4w", help="comma-separated, of: fp32, 8da4w, int8wo, pt2e (default fp32,8da4w)")
    parser.add_argument("--ways", default="guarded,passes,lint", help="comma-separated, of: guarded, passes, lint (default all)")
    parser.add_argument("--pairs", type=int, default=3, help="pairs per way (default 3)")
    parser.add_argument("--child", nargs=4, metavar=("WAY", "SIZE", "VARIANT", "STATE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        way, size, variant, state = args.child
        child(way, size, variant, Path(state))
        return 0
    ways = args.ways.split(",")
    failed = False
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for size in args.size.split(","):
            state = Path(folder) / f"{size}.pt"  # built once, loaded by every run
            torch.manual_seed(0)
            torch.save(llm.Decoder(SIZES[size]).state_dict(), state)
            for variant in args.variant.split(","):
                for name in ways:
                    ratios: dict[str, list[float]] = {"wall": [], "cpu": [], "peak": []}
                    sizes = {}
                    for pair in range(args.pairs):
                        order = ("stock", name) if pair % 2 == 0 else (name, "stock")
                        runs = {w: measured(w, size, variant, state) for w in order}
                        a, b = runs[name], runs["stock"]
                        ratios["wall"].append(a.wall_s / b.wall_s)
                        ratios["cpu"].append(a.cpu_s / b.cpu_s)
                        ratios["peak"].append(a.peak_mib / b.peak_mib)
                        sizes = {"stock": b.pte_bytes, name: a.pte_bytes}
                        print(
                            f"{size} {variant} {name} pair {pair + 1}: stock {b.wall_s:.1f} s {b.cpu_s:.1f} s CPU {b.peak_mib:,.0f} MiB, "
                            f"{name} {a.wall_s:.1f} s {a.cpu_s:.1f} s CPU {a.peak_mib:,.0f} MiB",
                            file=sys.stderr,
                            flush=True,
                        )
                    medians = {k: statistics.median(v) for k, v in ratios.items()}
                    time_target, memory_target = TARGETS[name]
                    ok = min(medians["wall"], medians["cpu"]) <= time_target and medians["peak"] <= memory_target
                    failed = failed or not ok
                    rows.append(
                        f"| {size} | {variant} | {name} | {medians['wall']:.3f} | {medians['cpu']:.3f} | <= {time_target} "
                        f"| {medians['peak']:.3f} | <= {memory_target} | {sizes['stock']:,} | {sizes[name]:,} |"
                    )
    print(f"\n{args.pairs} pairs per row; ratios are the median of the paired ratios (way / stock)\n")
    print("| size | variant | way | wall time | CPU time | target | peak memory | target | .pte bytes, stock | .pte bytes, way |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 1 if failed else 0


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a crashing run leaves no core file behind
    sys.exit(main())
