"""The export-guards demo: the reported segmentation model, exported to ExecuTorch with XNNPACK
without and with the guards, measured side by side.

1. The lint, on the torch.export program, before any guard runs.
2. Without export-guards: ``to_edge_transform_and_lower`` with ``XnnpackPartitioner``. The
   ``spectral_norm`` convs recompute their weight at every forward, so XNNPACK leaves them out
   (the lint of the lowered program gives XNNPACK's reason).
3. With export-guards (``lower_with_guards``): the folds, every conv on XNNPACK.
4. Both programs run in ``executorch.runtime``, like for like: a warm-up each, then ``--runs``
   timed runs of each, interleaved; the median of each, the median of the paired ratios, and
   the outputs against eager.
5. ``export-guards check`` on the written program, and a runtime smoke run.

Writes ``out/segmentation.pte``, ``out/report.html`` (tables and charts) and ``out/report.md``.
Run it with ``make demo`` (about 4 minutes on 2 cores); ``--size 72 --runs 1 --out DIR`` runs a quick one.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import export_guards as eg  # first: it keeps the libraries' known noise off the terminal as they load

# isort: split

# isort: split
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from executorch.runtime import Runtime

from export_guards.analysis.partitioner_reasons import capture_partitioner_reasons
from export_guards.quiet import runtime_chatter_dropped
from export_guards.verify import Tolerance, compare_outputs

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import segmentation  # noqa: E402
from demo_report import DemoResult, Variant, render_html, render_markdown  # noqa: E402

ROOT = HERE.parent


class Clock:
    """Prints each step as it starts, and keeps how long each took, for the report."""

    def __init__(self) -> None:
        self.steps: list[tuple[str, float]] = []

    def step(self, title: str):
        clock = self

        class _Step:
            def __enter__(self) -> None:
                print(f"\n== {title}", flush=True)
                self.started = time.perf_counter()

            def __exit__(self, *exc: object) -> None:
                clock.steps.append((title, time.perf_counter() - self.started))

        return _Step()


def latencies(
    ptes: list[bytes], inputs: list[torch.Tensor], runs: int
) -> tuple[list[float], float, list[list[object]]]:
    """Like for like: each program loaded in ``executorch.runtime`` and run once to warm up,
    then ``runs`` timed runs of each, interleaved (A, B, A, B, ...) so that machine noise hits
    both alike. Returns each program's median seconds per forward, the median of the paired
    ratios first / second, and each program's outputs."""
    with runtime_chatter_dropped():  # the runtime's CPU probe, as its first XNNPACK program loads
        methods = [Runtime.get().load_program(pte).load_method("forward") for pte in ptes]
    outputs = [list(method.execute(inputs)) for method in methods]
    times: list[list[float]] = [[] for _ in ptes]
    for _ in range(runs):
        for method, samples in zip(methods, times):
            samples.append(_timed(method, inputs))
    ratio = statistics.median(a / b for a, b in zip(times[0], times[1]))
    return [statistics.median(samples) for samples in times], ratio, outputs


def _timed(method: object, inputs: list[torch.Tensor]) -> float:
    started = time.perf_counter()
    method.execute(inputs)  # type: ignore[attr-defined]
    return time.perf_counter() - started


def _eager_seconds(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> float:
    started = time.perf_counter()
    model(*inputs)
    return time.perf_counter() - started


def _where(finding: eg.Finding) -> str:
    """``examples/segmentation.py:84 (up.0.conv (Conv2d))``: the line, and the module that ran it."""
    where = (
        f"{_shown(Path(finding.location.file))}:{finding.location.line}"
        if finding.location
        else f"<method {finding.method}>"
    )
    return f"{where} ({finding.module})" if finding.module else where


def _shown(path: Path) -> str:
    """``path`` relative to the repository when it is inside it."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def variant(name: str, edge: object, pte: bytes, seconds: float | None, error: float | None, note: str = "") -> Variant:
    summary = eg.delegation_summary(edge)
    convs = summary.count("convolution")
    delegated = sum(summary.delegated.values())
    total = delegated + sum(summary.portable.values())
    return Variant(name, convs[0], convs[1], delegated, total, len(pte), seconds, error, note)


def main() -> int:
    parser = argparse.ArgumentParser(description="export-guards on the reported segmentation model")
    parser.add_argument("--size", type=int, default=400, help="input height and width (default 400, as reported)")
    parser.add_argument("--out", type=Path, default=ROOT / "out", help="where to write the .pte and the report")
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each program (default 3)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")  # torch.export's notes on spectral_norm's hooks; the lint says more
    clock = Clock()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)

    with clock.step("Build the segmentation model (ViT/16 backbone, spectral_norm upsampling decoder)"):
        model, inputs = segmentation.model(args.size)
        program = torch.export.export(model, inputs)
        with torch.no_grad():
            eager = model(*inputs)  # warm-up, then the median of as many runs as the programs get
            eager_seconds = statistics.median(_eager_seconds(model, inputs) for _ in range(args.runs))
        print(f"input {list(inputs[0].shape)}, output {list(eager.shape)}, eager forward {eager_seconds * 1e3:,.0f} ms")

    with clock.step("1. The lint of the torch.export program, before any guard (the fold off)"):
        lint = eg.lint(program, fold=False)
        print(lint)

    with clock.step("2. Without export-guards: XNNPACK as is, and the lint of what it left out"):
        with capture_partitioner_reasons() as reasons:
            plain = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
        left_out = eg.lint(plain, stage="partitioned", fold=False, reasons={"forward": reasons}).with_code("EG401")
        lint += eg.Report.of(left_out)
        print(eg.Report.of(left_out))
        plain_pte = plain.to_executorch().buffer
        plain_convs = eg.delegation_summary(plain).count("convolution")
        print(f"convs on XNNPACK: {plain_convs[0]} of {plain_convs[1]}")

    with clock.step("3. With export-guards: lower_with_guards (placement, lint, fold, XNNPACK)"):
        guarded = eg.lower_with_guards(program)
        folds = guarded.report.with_code("EG201")
        print(eg.Report.of(folds))
        guarded_pte = guarded.to_pte()
        pte_path = out / "segmentation.pte"
        pte_path.write_bytes(guarded_pte)
        convs = guarded.delegation.count("convolution")  # type: ignore[union-attr]
        print(f"convs on XNNPACK: {convs[0]} of {convs[1]}; wrote {_shown(pte_path)} ({len(guarded_pte):,} bytes)")

    measured = f"median of {args.runs} timed runs each, interleaved, after a warm-up"
    with clock.step(f"4. Both programs in executorch.runtime ({measured})"):
        (plain_seconds, guarded_seconds), speedup, (plain_outputs, guarded_outputs) = latencies(
            [plain_pte, guarded_pte], list(inputs), args.runs
        )
        plain_error = compare_outputs(eager, plain_outputs, Tolerance.absolute(atol=1e-3, rtol=1e-3))[0].max_abs
        [comparison] = compare_outputs(eager, guarded_outputs, Tolerance.absolute(atol=1e-3, rtol=1e-3))
        verdict = "within" if comparison.within else "NOT within"
        print(f"without export-guards: {plain_seconds * 1e3:,.0f} ms, max abs error vs eager {plain_error:.1e}")
        print(
            f"with export-guards: {guarded_seconds * 1e3:,.0f} ms ({speedup:.1f}x faster, the median of paired ratios); "
            f"max abs error vs eager {comparison.max_abs:.1e}, {verdict} 1e-3"
        )

    with clock.step("5. export-guards check on the written program, with a runtime smoke run"):
        check = eg.check_pte(pte_path, runtime=True)
        print(check)

    headline = (
        f"With export-guards: {convs[0]} of {convs[1]} convs on XNNPACK (without: {plain_convs[0]}), "
        f"{speedup:.1f}x faster in executorch.runtime ({measured}), outputs within "
        f"{comparison.max_abs:.1e} of eager, and the written program passes export-guards check"
        + ("." if not check.findings else f" except {len(check.findings)} finding(s).")
    )
    result = DemoResult(
        model="segmentation model (reported model a)",
        headline=headline,
        input_shape="x".join(str(d) for d in inputs[0].shape),
        eager_latency_s=eager_seconds,
        variants=[
            variant(
                "without export-guards",
                plain,
                plain_pte,
                plain_seconds,
                plain_error,
                f"spectral_norm convs left on portable kernels; {measured}",
            ),
            variant(
                "with export-guards",
                guarded.edge,
                guarded_pte,
                guarded_seconds,
                comparison.max_abs,
                f"weights folded, every conv on XNNPACK; {measured}",
            ),
        ],
        lint=[(f.code, f.severity.value, _where(f), f.message) for f in lint],
        folds=[(f.constant or "", f.message) for f in folds],
        check="no findings (structure and runtime smoke run)" if not check.findings else str(check),
        pte_path=_shown(pte_path),
        timings=clock.steps,
    )
    (out / "report.html").write_text(render_html(result))
    (out / "report.md").write_text(render_markdown(result))
    print(f"\nReport: {_shown(out / 'report.html')} (and report.md). Total {sum(s for _, s in clock.steps):.0f} s.")
    ok = comparison.within and not check.errors and convs[0] == convs[1]
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
