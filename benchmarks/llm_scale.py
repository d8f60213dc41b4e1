"""The guarded flows against stock ExecuTorch from the bundled decoder to the 1B shape: time and peak memory (issues 53, 64).

Run: ``make bench-llm-scale`` (or ``.venv/bin/python benchmarks/llm_scale.py [--size S,...]
[--variant V,...] [--ways W,...] [--pairs N] [--static]``); ``make bench-llm-scale-1b`` for the
1B shape (8da4w, static, stock against ``lower_with_guards``); ``--quick`` (the small decoder in
fp32, one pair) is the smoke test that CI runs.

``examples/llm.py``'s decoder at each size of ``SIZES`` (``small``, ``40m``, ``100m`` =
``llm.SHIPPED``, ``1b``), in fp32 and torchao 8da4w (8da4w alone at ``1b``, whose fp32 state is
4 GB), exported with a dynamic length (one decode step to the whole cache; ``--static``: the
example's length alone). Each model's weights are built once, in a child process, and kept in a
file: every timed run is a fresh process that maps them (untimed), so each run starts from the
same state and its peak memory is its own (``wait4``'s maximum resident set, the largest
process of the run's tree: the lint's runtime child included). The runs are one at a time, in
rounds of every way, the order reversed round by round; each way is paired with its baseline's
run of the same round:

- stock: ``torch.export`` + ``to_edge_transform_and_lower(..., partitioner=[XnnpackPartitioner()])``
  + ``to_executorch()``, the bytes in hand;
- guarded: ``torch.export`` + ``lower_with_guards`` + ``to_pte()``, against stock (targets, issue
  64: time at most 1.02 x, peak memory 1.03 x);
- passes: the pass list with the guarded partitioners, ``emit_passes()`` and ``store_once``
  (against stock, the same targets);
- stock+runs: stock's export, then a bare script's runs of its bytes in ``executorch.runtime``, in
  the same process, at the inputs the lint runs the program on (the example, then each dynamic
  dimension's bounds: ``verify.runs.input_sets``), the program loaded afresh for each;
- lint: ``export-guards lint`` on a factory that returns the kept model, writing the program:
  it exports, lowers, writes, checks the program and runs it at every shape against eager;
  against stock+runs (targets: 1.1 x its time, 1.1 x its peak memory).

Reported in markdown: a row per size, variant and way, with the runs' median wall seconds, CPU
seconds (the run's and its children's: on a shared machine the steadier of the two), peak MiB
and ``.pte`` bytes, and the median of the paired ratios (way / baseline) of each; then each
ratio by size, to show how it grows with the model. The exit status is 1 where a target is
missed (time: the better of the wall and the CPU ratio).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import export_guards as eg  # first: it keeps the libraries' known noise off the terminal

# isort: split

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import llm

SIZES = {
    "small": llm.Config(),
    "40m": llm.Config(vocab=32000, dim=512, layers=8, heads=8, kv_heads=4, hidden=1536, max_len=128),
    "100m": llm.SHIPPED,
    "1b": llm.Config(vocab=32000, dim=2048, layers=16, heads=32, kv_heads=8, hidden=8192, max_len=128),
}
"""The decoder's sizes: ``small`` is ``examples/llm.py``'s own (0.2 M parameters), ``40m`` and
``100m`` (``llm.SHIPPED``) are Llama-style decoders users ship, ``1b`` the 1B shape (dim 2048,
16 layers, 32 heads over 8 KV heads, hidden 8192, vocab 32,000: 1.04 B parameters, the head tied
to the embedding). The table states each one's parameter count."""
HEAVY = "1b"  # its fp32 state is 4 GB: 8da4w only, unless asked
BASELINE = {"stock": None, "guarded": "stock", "passes": "stock", "stock+runs": None, "lint": "stock+runs"}
"""What each way is compared with: the lint with stock's export followed by the runs that the
lint makes (a bare script's), the other guarded ways with stock's export."""
TARGETS = {"guarded": (1.02, 1.03), "passes": (1.02, 1.03), "lint": (1.1, 1.1)}  # time, peak memory (issue 64)
Shapes = dict[str, dict[int, torch.export.Dim]] | None
STATIC = "LLM_SCALE_STATIC"  # set (by --static): the runs export at the example's length alone
_KEPT: tuple[torch.nn.Module, tuple[torch.Tensor, ...], Shapes] | None = None  # the model of this run


def cached() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...], Shapes]:
    """The lint's factory: the model this run loaded, not a new one."""
    assert _KEPT is not None, "cached() is the benchmark's own factory"
    return _KEPT


def dynamic_length(config: llm.Config) -> Shapes:
    """One length for the tokens and their positions, from a decode step to the whole cache
    (``llm.dynamic_length()`` at ``config``'s cache length)."""
    length = torch.export.Dim("length", min=1, max=config.max_len)
    return {"tokens": {1: length}, "input_pos": {0: length}}


def stock(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], shapes: Shapes) -> int:
    return len(_stock_bytes(torch.export.export(model, inputs, dynamic_shapes=shapes)))


def _stock_bytes(program: torch.export.ExportedProgram) -> bytes:
    return to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()]).to_executorch().buffer


def stock_runs(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], shapes: Shapes) -> int:
    """Stock's export, then a bare script's runs of its bytes in ``executorch.runtime``, in this
    process, on the inputs that the lint runs the program on (the example, then each dynamic
    dimension's bounds: ``input_sets``), each on the program loaded afresh, as the lint loads it."""
    from executorch.runtime import Runtime

    from export_guards.verify.runs import input_sets

    program = torch.export.export(model, inputs, dynamic_shapes=shapes)
    pte = _stock_bytes(program)
    runtime = Runtime.get()
    for each in input_sets(program, list(inputs))[0]:
        method = runtime.load_program(pte).load_method("forward")
        for step in each.steps:
            method.execute(list(step))
    return len(pte)


def guarded(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], shapes: Shapes) -> int:
    return len(eg.lower_with_guards(torch.export.export(model, inputs, dynamic_shapes=shapes)).to_pte())


def passes(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], shapes: Shapes) -> int:
    partitioner = eg.guard_partitioners([XnnpackPartitioner()])
    edge = to_edge_transform_and_lower(
        torch.export.export(model, inputs, dynamic_shapes=shapes),
        transform_passes=eg.guard_passes(partitioner=partitioner),
        partitioner=partitioner,
    )
    return len(eg.program.store_once(edge.to_executorch(ExecutorchBackendConfig(passes=eg.emit_passes()))))


def lint(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], shapes: Shapes) -> int:
    from export_guards.cli import main

    with tempfile.TemporaryDirectory() as folder:
        written = Path(folder) / "model.pte"
        code = main(["lint", f"{Path(__file__).stem}:cached", "--pte", str(written), "-q", "--exit-zero", "--isolated"])
        if code != 0 or not written.exists():
            raise RuntimeError(f"export-guards lint exited {code}")
        return written.stat().st_size


WAYS: dict[str, Callable[..., int]] = {
    "stock": stock,
    "guarded": guarded,
    "passes": passes,
    "stock+runs": stock_runs,
    "lint": lint,
}
_IMPORTS = {
    "guarded": "export_guards.pipeline",
    "passes": "export_guards.pipeline",
    "stock+runs": "export_guards.verify.runs",
    "lint": "export_guards.cli",
}


@dataclass(frozen=True)
class Run:
    wall_s: float
    cpu_s: float
    peak_mib: float
    pte_bytes: int


def child(way: str, size: str, variant: str, state: Path) -> None:
    """One run in this process: the model from the kept weights, then ``way`` timed; prints
    the seconds and the program's bytes."""
    global _KEPT  # noqa: PLW0603 - the child's kept weights, read by the lint's factory
    this = sys.modules[__name__]  # the lint imports cached() from this very module, by its name
    this.__spec__ = importlib.util.spec_from_file_location(Path(__file__).stem, __file__)
    sys.modules.setdefault(Path(__file__).stem, this)
    if way in _IMPORTS:  # each way's modules imported before the clock starts, as stock's are (at the top)
        importlib.import_module(_IMPORTS[way])
    model = llm.Decoder(SIZES[size]).eval().requires_grad_(False)
    model.load_state_dict(torch.load(state, mmap=True), assign=True)
    model = llm.quantized(model, variant)
    _KEPT = model, llm.tokens(4), (None if os.environ.get(STATIC) else dynamic_length(SIZES[size]))
    start, cpu = time.perf_counter(), _cpu_seconds()
    written = WAYS[way](*_KEPT)
    print(json.dumps({"seconds": time.perf_counter() - start, "cpu": _cpu_seconds() - cpu, "bytes": written}))


def build(size: str, state: Path) -> None:
    """The decoder's weights, made once (``torch.manual_seed(0)``) and kept in ``state`` for the
    runs to map; prints its parameter count (the tied head counted once)."""
    torch.manual_seed(0)
    model = llm.Decoder(SIZES[size])
    torch.save(model.state_dict(), state)
    print(json.dumps({"parameters": sum(p.numel() for p in model.parameters())}))


def _cpu_seconds() -> float:
    """The CPU time of this process and of its children (the lint's runtime child) so far."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def measured(way: str, size: str, variant: str, state: Path) -> Run:
    """``way`` in a fresh process: its time, and the largest resident set of its process tree
    (the lint's runtime child included), which ``wait4`` gives."""
    result, usage = _fresh(["--child", way, size, variant, str(state)], f"{way} on the {size} {variant} decoder")
    return Run(result["seconds"], result["cpu"], usage.ru_maxrss / 1024, result["bytes"])


def _fresh(arguments: list[str], what: str) -> tuple[dict[str, float], resource.struct_rusage]:
    """This script run with ``arguments`` in a child process: the JSON line it printed last,
    and its resources."""
    command = [sys.executable, __file__, *arguments]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert process.stdout is not None
    out = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise RuntimeError(f"{what} exited {code}: rerun `{' '.join(command)}` to see why")
    return json.loads(out.decode().strip().splitlines()[-1]), usage


@dataclass
class Row:
    """One way at one size and variant: its runs, and their paired ratios to its baseline."""

    size: str
    parameters: int
    variant: str
    way: str
    runs: list[Run] = field(default_factory=list)
    ratios: dict[str, list[float]] = field(default_factory=lambda: {"wall": [], "cpu": [], "peak": []})

    def median(self, figure: str) -> float:
        return statistics.median(getattr(run, figure) for run in self.runs)

    def ratio(self, figure: str) -> float | None:
        return statistics.median(self.ratios[figure]) if self.ratios[figure] else None

    def missed(self) -> bool:
        """Whether a target is missed (time: the better of wall and CPU, as on a shared machine)."""
        if self.way not in TARGETS:
            return False
        time_target, memory_target = TARGETS[self.way]
        return (
            min(self.ratio("wall") or 0, self.ratio("cpu") or 0) > time_target
            or (self.ratio("peak") or 0) > memory_target
        )


def pairs(size: str, parameters: int, variant: str, ways: list[str], count: int, state: Path) -> list[Row]:
    """``count`` rounds of every way in fresh processes, the order reversed round by round; each
    way's ratios are to its baseline's run of the same round."""
    rows = {way: Row(size, parameters, variant, way) for way in ways}
    for round_ in range(count):
        runs = {}
        for way in ways if round_ % 2 == 0 else ways[::-1]:
            runs[way] = measured(way, size, variant, state)
            rows[way].runs.append(runs[way])
            run = runs[way]
            print(
                f"{size} {variant} {way} round {round_ + 1}: {run.wall_s:.1f} s, {run.cpu_s:.1f} s CPU, {run.peak_mib:,.0f} MiB",
                file=sys.stderr,
                flush=True,
            )
        for way, row in rows.items():
            if (baseline := BASELINE[way]) is not None:
                a, b = runs[way], runs[baseline]
                row.ratios["wall"].append(a.wall_s / b.wall_s)
                row.ratios["cpu"].append(a.cpu_s / b.cpu_s)
                row.ratios["peak"].append(a.peak_mib / b.peak_mib)
    return list(rows.values())


def table(rows: list[Row], count: int) -> str:
    """The rows in markdown, then each ratio by size (how it grows with the model)."""
    lines = [
        f"{count} pair{'s' if count > 1 else ''} per row; figures are medians of the runs, ratios the medians of the paired ratios (way / its baseline)",
        "",
        "| size | parameters | variant | way | vs | wall s | CPU s | peak MiB | wall | CPU | target | peak | target | .pte bytes |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        targets = TARGETS.get(row.way, ("", ""))
        ratios = [f"{r:.3f}" if (r := row.ratio(figure)) is not None else "" for figure in ("wall", "cpu", "peak")]
        lines.append(
            f"| {row.size} | {row.parameters:,} | {row.variant} | {row.way} | {BASELINE[row.way] or ''} | {row.median('wall_s'):.1f} | {row.median('cpu_s'):.1f} "
            f"| {row.median('peak_mib'):,.0f} | {ratios[0]} | {ratios[1]} | {f'<= {targets[0]}' if targets[0] else ''} | {ratios[2]} "
            f"| {f'<= {targets[1]}' if targets[1] else ''} | {row.runs[-1].pte_bytes:,} |"
        )
    sizes = list(dict.fromkeys(row.size for row in rows))
    lines += [
        "",
        "CPU / peak ratio by size:",
        "",
        f"| way | variant | {' | '.join(sizes)} |",
        f"|---|---|{'---|' * len(sizes)}",
    ]
    for way, variant in dict.fromkeys((row.way, row.variant) for row in rows if BASELINE[row.way]):
        cells = {
            row.size: f"{row.ratio('cpu'):.3f} / {row.ratio('peak'):.3f}"
            for row in rows
            if (row.way, row.variant) == (way, variant)
        }
        lines.append(f"| {way} | {variant} | {' | '.join(cells.get(size, '') for size in sizes)} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--size", default="small,40m,100m", help=f"comma-separated, of: {', '.join(SIZES)} (default small,40m,100m)"
    )
    parser.add_argument(
        "--variant", help="comma-separated, of: fp32, 8da4w, int8wo, pt2e (default fp32,8da4w; 8da4w alone at 1b)"
    )
    parser.add_argument(
        "--ways",
        default="guarded,passes,lint",
        help="comma-separated, of: guarded, passes, lint; each brings its baseline (default all)",
    )
    parser.add_argument("--pairs", type=int, default=3, help="pairs per way (default 3)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="the small size, fp32 unless --variant says, 1 pair: a smoke test of the benchmark",
    )
    parser.add_argument(
        "--static",
        action="store_true",
        help="export at the example's length alone (default: a dynamic length, up to the cache's)",
    )
    parser.add_argument("--child", nargs=4, metavar=("WAY", "SIZE", "VARIANT", "STATE"), help=argparse.SUPPRESS)
    parser.add_argument("--build", nargs=2, metavar=("SIZE", "STATE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child or args.build:
        child(*args.child[:3], Path(args.child[3])) if args.child else build(args.build[0], Path(args.build[1]))
        return 0
    if args.static:
        os.environ[STATIC] = "1"  # the runs' children read it
    sizes, count = (["small"], 1) if args.quick else (args.size.split(","), args.pairs)
    variants = args.variant or ("fp32" if args.quick else None)
    asked = args.ways.split(",")
    ways = [way for way in WAYS if way in asked or any(BASELINE.get(other) == way for other in asked)]
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as folder:
        for size in sizes:
            state = Path(folder) / f"{size}.pt"  # built once (in a child: the parent stays small), mapped by every run
            parameters = int(_fresh(["--build", size, str(state)], f"building the {size} decoder")[0]["parameters"])
            for variant in (variants or ("8da4w" if size == HEAVY else "fp32,8da4w")).split(","):
                rows += pairs(size, parameters, variant, ways, count, state)
            state.unlink()
    print("\n" + table(rows, count))
    return 1 if any(row.missed() for row in rows) else 0


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a crashing run leaves no core file behind
    sys.exit(main())
