"""The fold against the peer a user would pick instead: ExecuTorch's ``constant_prop_pass``.

Run: ``make bench-fold-peer`` (or ``.venv/bin/python benchmarks/fold_vs_peer.py [--runs N]``).

For each model (the decoder's reparametrization variants, the segmentation example, a
weight-normed vocoder, the same vocoder quantized with PT2E and ``fold_quantize=False`` (its
weights quantized by ops in the graph), a transformer block with sinusoidal positions),
lowered to XNNPACK in one process, five ways: stock; stock with ``constant_prop_pass`` as a
transform pass (the one-line alternative); ``guard_passes()``; ``guard_passes`` with no growth
limit (``max_growth=inf``: what the default budget declines to fold, and what that costs); and
``fold_non_core_constants`` before ``to_edge`` plus ``guard_passes()``, which is what
``lower_with_guards`` does. Each program first runs once in a child process
(``smoke_test``); one that fails or crashes there is reported so and not timed. Reported per model: convs and
matrix products delegated, ``.pte`` bytes, runtime latency (the programs' forwards interleaved
run by run; the median of paired per-run ratios guard / peer; stock, which recomputes the
weights on portable kernels, a few runs apart), and the time of the pass itself
(the fold against ``constant_prop_pass``, each inside ``to_edge_transform_and_lower``, best of
the rounds). Targets: delegation >= the peer's; latency ratio <= 1.02; ``.pte`` <= the peer's;
fold time <= the peer's.
"""

from __future__ import annotations

import argparse
import gc
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import executorch.kernels.quantized  # noqa: F401 - portable quantize kernels, so that programs that keep them emit
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from executorch.exir.pass_base import ExportedProgramPassBase, ExportedProgramPassResult
from executorch.exir.passes.constant_prop_pass import constant_prop_pass
from executorch.runtime import Runtime
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import decoder
import export_guards as eg
import segmentation
import transformer
from export_guards.pte.smoke import smoke_test

WAYS = ("stock", "peer", "guard", "guard, no growth limit", "guard, folded before to_edge")


class ConstantPropagation(ExportedProgramPassBase):
    """``constant_prop_pass`` as a transform pass, as a user would write it."""

    def call(self, exported_program: torch.export.ExportedProgram) -> ExportedProgramPassResult:
        return ExportedProgramPassResult(constant_prop_pass(exported_program), True)


class Timed(ExportedProgramPassBase):
    """A pass whose own time (process CPU seconds) is kept in ``seconds``."""

    def __init__(self, inner: ExportedProgramPassBase) -> None:
        self.inner, self.seconds = inner, 0.0

    def call(self, exported_program: torch.export.ExportedProgram) -> ExportedProgramPassResult:
        start = time.process_time()
        result = self.inner(exported_program)
        self.seconds += time.process_time() - start
        return result


def passes(way: str) -> list[ExportedProgramPassBase]:
    if way == "peer":
        return [ConstantPropagation()]
    if way in ("guard", "guard, folded before to_edge"):
        return eg.guard_passes()
    if way == "guard, no growth limit":
        return eg.guard_passes(config=eg.Settings(fold_max_growth=math.inf))
    return []


class Vocoder(nn.Module):
    """HiFi-GAN-like: weight-normed 1-D convs and transposed convs, leaky ReLU, residual."""

    def __init__(self) -> None:
        super().__init__()
        wn = nn.utils.parametrizations.weight_norm
        self.pre = wn(nn.Conv1d(80, 128, 7, padding=3))
        self.up = nn.ModuleList(
            [
                wn(nn.ConvTranspose1d(128, 64, 16, stride=8, padding=4)),
                wn(nn.ConvTranspose1d(64, 32, 4, stride=2, padding=1)),
            ]
        )
        self.res = nn.ModuleList([wn(nn.Conv1d(64, 64, 3, padding=1)), wn(nn.Conv1d(32, 32, 3, padding=1))])
        self.post = wn(nn.Conv1d(32, 1, 7, padding=3))

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        x = self.pre(mel)
        for up, res in zip(self.up, self.res):
            x = up(nn.functional.leaky_relu(x, 0.1))
            x = x + res(nn.functional.leaky_relu(x, 0.1))
        return torch.tanh(self.post(nn.functional.leaky_relu(x, 0.1)))


def seeded(factory: Callable[[], nn.Module]) -> nn.Module:
    torch.manual_seed(0)
    return factory().eval()


MEL = (torch.randn(1, 80, 64, generator=torch.Generator().manual_seed(0)),)
MODELS: dict[str, Callable[[], tuple[nn.Module, tuple[torch.Tensor, ...]]]] = {
    **{
        f"decoder ({api})": (lambda api=api: decoder.model(api))
        for api in ("spectral_norm", "parametrizations.spectral_norm", "parametrizations.weight_norm", "mixed")
    },
    "segmentation (224 px)": lambda: (segmentation.segmentation_model(224), (segmentation.example_input(224),)),
    "vocoder (weight norm)": lambda: (seeded(Vocoder), MEL),
    "vocoder (weight norm, PT2E int8, quantized in the graph)": lambda: (pt2e_in_graph(seeded(Vocoder), MEL), MEL),
    "transformer block": lambda: transformer.model(width=128, length=64, batch=1),
}


def pt2e_in_graph(model: nn.Module, inputs: tuple[torch.Tensor, ...]) -> nn.Module:
    """``model`` quantized for XNNPACK (int8, per channel) with ``convert_pt2e(...,
    fold_quantize=False)``: its float weights are quantized by ops in the graph."""
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    prepared = prepare_pt2e(torch.export.export(model, inputs).module(), quantizer)
    prepared(*inputs)
    return convert_pt2e(prepared, fold_quantize=False)


def lower(program: torch.export.ExportedProgram, way: str) -> tuple[bytes, tuple[int, int], float]:
    """The ``.pte``, (delegated, total) convs and matrix products, and the pass's own seconds."""
    timed = [Timed(p) for p in passes(way)]
    if way == "guard, folded before to_edge":
        start = time.process_time()
        program, _ = eg.fold_non_core_constants(program)
        timed[0].seconds += time.process_time() - start
    edge = to_edge_transform_and_lower(program, transform_passes=timed or None, partitioner=[XnnpackPartitioner()])
    counted = eg.delegation_summary(edge).count("convolution", "linear", "addmm", "mm")
    return edge.to_executorch().buffer, counted, sum(t.seconds for t in timed)


def paired_latency(methods: dict[str, object], inputs: list[torch.Tensor], runs: int) -> dict[str, list[float]]:
    """Seconds per forward of each method, interleaved run by run (rotating who goes first)."""
    for method in methods.values():
        method.execute(inputs)
    times: dict[str, list[float]] = {name: [] for name in methods}
    names = list(methods)
    for index in range(runs):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            methods[name].execute(inputs)
            times[name].append(time.perf_counter() - start)
    return times


def does_not_run(pte: bytes) -> str | None:
    """Why the program fails or crashes when the runtime runs it once (in a child process), if it does."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.pte"
        path.write_bytes(pte)
        run = smoke_test(path)
    if run.signal or run.timed_out:
        return f"the runtime died ({run.signal or 'timed out'}) at {run.last_step}"
    if run.failure is None:
        return None
    return run.stderr.splitlines()[0] if run.stderr else run.failure  # the runtime's own line says most


def median_ratio(a: list[float], b: list[float]) -> float:
    return statistics.median(x / y for x, y in zip(a, b))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100, help="interleaved timed forwards per program (default 100)")
    parser.add_argument(
        "--stock-runs", type=int, default=3, help="timed forwards of the slow stock program (default 3)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="lowerings per way, for the pass time (default 3)")
    parser.add_argument("--only", help="run only the models whose name contains this")
    args = parser.parse_args()
    runtime = Runtime.get()
    met = True
    print(
        "| model | way | convs + matmuls delegated | .pte bytes | latency / peer (median of pairs) | pass time | targets met |"
    )
    print("|---|---|---|---|---|---|---|")
    for label, make in MODELS.items():
        if args.only and args.only not in label:
            continue
        model, inputs = make()
        program = torch.export.export(model, inputs)
        results = {}
        for way in WAYS:
            seconds = []
            for _ in range(args.rounds if way in ("peer", "guard") else 1):
                gc.collect()
                pte, counted, spent = lower(program, way)
                seconds.append(spent)
            results[way] = (pte, counted, min(seconds))
        broken = {way: why for way in WAYS if (why := does_not_run(results[way][0]))}
        runnable = [way for way in WAYS if way not in broken]
        methods = {
            way: runtime.load_program(results[way][0]).load_method("forward") for way in runnable if way != "stock"
        }
        times = paired_latency(methods, list(inputs), args.runs)
        if "stock" in runnable:
            # Stock recomputes the weights on portable kernels (100x slower and more): timed
            # apart, a few runs, paired with the baseline's median.
            stock = paired_latency(
                {"stock": runtime.load_program(results["stock"][0]).load_method("forward")},
                list(inputs),
                args.stock_runs,
            )
            times["stock"] = stock["stock"]
        # The latency baseline is the peer's program, or the guarded one where the peer's does not run.
        baseline = "peer" if "peer" in runnable else "guard"
        peer_pte, peer_count, peer_time = results["peer"]
        for way in WAYS:
            pte, counted, spent = results[way]
            if way in broken:
                latency = f"does not run: {broken[way]}"
            else:
                ratio = (
                    median_ratio(times[way], times[baseline])
                    if way != "stock"
                    else statistics.median(times["stock"]) / statistics.median(times[baseline])
                )
                latency = f"{ratio:.3f} ({statistics.median(times[way]) * 1e3:.2f} ms)"
            verdict = "-"
            if way == "guard":
                checks = [
                    counted[0] >= peer_count[0],
                    way not in broken and (baseline == "guard" or ratio <= 1.02),
                    len(pte) <= len(peer_pte),
                    spent <= peer_time,
                ]
                verdict = (
                    "yes"
                    if all(checks)
                    else "NO: "
                    + ", ".join(
                        name for name, ok in zip(("delegation", "latency", "bytes", "pass time"), checks) if not ok
                    )
                )
                met = met and all(checks)
            print(
                f"| {label} | {way} | {counted[0]} / {counted[1]} | {len(pte):,} | {latency} | {spent * 1e3:.0f} ms | {verdict} |"
            )
        sys.stdout.flush()
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
