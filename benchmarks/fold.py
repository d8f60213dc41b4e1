"""Fold benchmark: the 9-conv decoder with reparametrized convs, lowered to XNNPACK.

Run: ``make bench-fold`` (or ``.venv/bin/python benchmarks/fold.py [--runs N]``).

For each variant (each reparametrization API, a mix of them, and the plain twin: the same
eval-mode weights as plain parameters), side by side in one run: convs delegated to XNNPACK
without and with the fold (``transform_passes=guard_passes()``), ``.pte`` bytes, latency in
``executorch.runtime`` (unfolded, folded, plain twin; best of N, interleaved), and the time
of ``fold_constants`` against ExecuTorch's ``constant_prop_pass`` on the same torch.export
program. Targets: every conv delegated in every folded variant; folded latency <= 1.03 x
the plain twin; fold time <= 1.0 x ``constant_prop_pass``.
"""

from __future__ import annotations

import argparse
import copy
import gc
import sys
import time
from pathlib import Path

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from executorch.exir.passes.constant_prop_pass import constant_prop_pass
from executorch.runtime import Runtime

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import decoder as examples
import export_guards as eg

VARIANTS = ["spectral_norm", "parametrizations.spectral_norm", "parametrizations.weight_norm", "mixed"]


def lower(program: torch.export.ExportedProgram, fold: bool):
    edge = to_edge_transform_and_lower(
        program, transform_passes=eg.guard_passes(config=eg.Settings(fold=fold)), partitioner=[XnnpackPartitioner()]
    )
    return edge, edge.to_executorch().buffer


def latency(methods: dict[str, object], inputs: list[torch.Tensor], runs: int) -> dict[str, float]:
    """Best seconds per forward of each loaded method, interleaved run by run."""
    for method in methods.values():
        method.execute(inputs)  # warm up
    best = {name: float("inf") for name in methods}
    for _ in range(runs):
        for name, method in methods.items():
            start = time.perf_counter()
            method.execute(inputs)
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def fold_time(program: torch.export.ExportedProgram, rounds: int) -> tuple[float, float]:
    """Best seconds of ``fold_constants`` and of ``constant_prop_pass`` (on a fresh copy each
    time, as it edits its input; the copy is not timed)."""
    ours, theirs = float("inf"), float("inf")
    for _ in range(rounds):
        gc.collect()
        start = time.perf_counter()
        eg.fold.fold_constants(program)
        ours = min(ours, time.perf_counter() - start)
        fresh = copy.deepcopy(program)
        gc.collect()
        start = time.perf_counter()
        constant_prop_pass(fresh)
        theirs = min(theirs, time.perf_counter() - start)
    return ours, theirs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="timed forwards per program (default 200)")
    parser.add_argument("--unfolded-runs", type=int, default=3, help="timed forwards of the slow unfolded program")
    args = parser.parse_args()

    inputs = [examples.example_input()]
    runtime = Runtime.get()
    rows, met = [], True
    for variant in VARIANTS:
        model = examples.decoder(variant)
        twin, _ = eg.fold.fold_parametrizations(model)
        program = torch.export.export(model, tuple(inputs))
        twin_program = torch.export.export(twin, tuple(inputs))

        unfolded_edge, unfolded_pte = lower(program, fold=False)
        folded_edge, folded_pte = lower(program, fold=True)
        twin_edge, twin_pte = lower(twin_program, fold=False)
        convs = {
            name: eg.delegation_summary(edge).count("convolution")
            for name, edge in (("unfolded", unfolded_edge), ("folded", folded_edge), ("twin", twin_edge))
        }
        methods = {
            name: runtime.load_program(pte).load_method("forward")
            for name, pte in (("folded", folded_pte), ("twin", twin_pte))
        }
        fast = latency(methods, inputs, args.runs)
        slow = latency(
            {"unfolded": runtime.load_program(unfolded_pte).load_method("forward")}, inputs, args.unfolded_runs
        )
        ours, theirs = fold_time(program, rounds=5)
        cpp_convs = eg.delegation_summary(
            to_edge_transform_and_lower(constant_prop_pass(copy.deepcopy(program)), partitioner=[XnnpackPartitioner()])
        ).count("convolution")[0]

        with torch.no_grad():
            expected = model(*inputs)
        (actual,) = methods["folded"].execute(inputs)
        (twin_actual,) = methods["twin"].execute(inputs)
        error = float((actual - expected).abs().max())
        twin_error = float((twin_actual - expected).abs().max())
        latency_ratio = fast["folded"] / fast["twin"]
        time_ratio = ours / theirs
        ok = (
            convs["folded"][0] == convs["folded"][1] == 9
            and latency_ratio <= 1.03
            and time_ratio <= 1.0
            and error <= 1e-4
        )
        met = met and ok
        rows.append(
            f"| {variant} | {convs['unfolded'][0]}/9 | {cpp_convs}/9 | {convs['folded'][0]}/9 | {convs['twin'][0]}/9 "
            f"| {len(unfolded_pte):,} / {len(folded_pte):,} / {len(twin_pte):,} "
            f"| {slow['unfolded'] * 1e3:.1f} | {fast['folded'] * 1e3:.2f} | {fast['twin'] * 1e3:.2f} "
            f"| {latency_ratio:.3f} | {ours * 1e3:.1f} / {theirs * 1e3:.1f} = {time_ratio:.2f} | {error:.1e} / {twin_error:.1e} "
            f"| {'yes' if ok else 'NO'} |"
        )
        print(f"measured {variant}", file=sys.stderr, flush=True)

    print(
        "| variant | convs on XNNPACK: unfolded | after constant_prop_pass | folded | plain twin "
        "| .pte bytes: unfolded / folded / twin | latency ms: unfolded | folded | twin "
        "| folded / twin (<= 1.03) | fold ms: ours / constant_prop_pass (<= 1.0) | max abs error vs eager: folded / twin | met |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
