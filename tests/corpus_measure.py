"""Measure export-guards' precision on the corpus of realistic models (tests/precision_corpus.py).

A script, not a test. For each model (all, or the names given):

1. ``export_guards.export_with_guards(model, inputs)`` (XNNPACK, fold on: the defaults), timed;
2. ``export_guards.lint(torch.export.export(model, inputs))``, the pre-lowering lint, timed
   (and the same lint with the fold off, ``Settings(fold=False)``);
3. the ``.pte`` (``to_executorch()``), its size, ``check_pte`` on its bytes, and a run in
   ``executorch.runtime`` compared with eager (``export_guards.verify``).

Printed per model: the times, the findings per code and severity of each report, every
warning / error finding in full, every info finding in full except the per-weight fold codes
(EG201, EG210, EG212) and EG402 (one sample each), findings reported more than once for the
same constant, the model's distinct constant bytes (to set against the ``.pte`` size), where each constant that EG307 calls unused ends up (still in
the lowered program or not), the delegation of conv / linear / matmul ops, the ``.pte`` size
and the error against eager.

    .venv/bin/python tests/corpus_measure.py [NAME ...] [--isolate] | tee /tmp/corpus-measure.txt

``--isolate`` runs each model in a child process, so that a crash (a signal in the runtime, say)
costs one model, not the run.
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
import time
import traceback
import warnings
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))

import torch  # noqa: E402

import export_guards as eg  # noqa: E402
from export_guards.verify import Tolerance, compare_outputs, run_pte  # noqa: E402
from precision_corpus import FACTORIES  # noqa: E402

# Float models: XNNPACK's kernels reorder sums (and fold BN), so agreement to ~1e-4 relative is
# what a correct lowering gives. Quantized models run int8 kernels against convert_pt2e's
# simulated quantization (dequantize -> float op -> quantize): one quantization step apart.
TOLERANCE = {"float": (1e-3, 1e-3), "quantized": (5e-2, 5e-2)}

CONV_OPS = ("convolution", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d")
LINEAR_OPS = ("linear", "addmm", "mm")
BATCHED_OPS = ("bmm", "matmul", "baddbmm")


def _counts(report: eg.Report) -> str:
    """``EG201 x 26 (info), EG307 x 1 (warning)``, ordered by code."""
    counts = Counter((f.code, f.severity.value) for f in report)
    return ", ".join(f"{code} x {n} ({severity})" for (code, severity), n in sorted(counts.items())) or "none"


# Codes with one finding per folded or foldable weight: counted, with one sample message.
_PER_WEIGHT = ("EG201", "EG210", "EG212")


def _print_findings(title: str, report: eg.Report) -> None:
    """Counts per code and severity; every warning / error in full; every info finding in full
    except the per-weight fold codes and EG402 (one sample each)."""
    print(f"  {title}: {len(report)} findings: {_counts(report)}")
    for finding in report.at_least(eg.Severity.WARNING):
        lines = str(finding).splitlines()
        print(f"    - {lines[0]}")
        for line in lines[1:]:
            print(f"      {line}")
        extra = [
            f"{k}={v}"
            for k, v in (("constant", finding.constant), ("module", finding.module), ("node", finding.node))
            if v
        ]
        if extra:
            print(f"      [{', '.join(extra)}]")
    samples: dict[str, eg.Finding] = {}
    for finding in report:
        if finding.severity is not eg.Severity.INFO:
            continue
        if finding.code in _PER_WEIGHT or finding.code == "EG402":
            samples.setdefault(finding.code, finding)
        else:
            print(
                f"    - info {finding.code}: {finding.message}"
                + (f" [constant={finding.constant}]" if finding.constant else "")
            )
    for code, finding in sorted(samples.items()):
        print(
            f"    info sample {code}: {finding.message}"
            + (f" [constant={finding.constant}]" if finding.constant else "")
        )
    folds = report.with_code("EG201")
    if folds:
        reused = sum("an identical result, stored once" in f.message for f in folds)
        print(
            f"    EG201: {len(folds)} folds into {len({f.constant for f in folds})} parameters ({reused} reuse an identical result)"
        )
    repeated = Counter((f.code, f.constant or f.node or f.message) for f in report if f.code != "EG201")
    for (code, what), n in sorted(repeated.items()):
        if n > 1:
            print(f"    REPEATED: {code} x {n} for {what!r}")


def _constant_bytes(model: torch.nn.Module) -> int:
    """Bytes of the model's parameters and buffers, each storage counted once (ties once)."""
    seen: dict[int, int] = {}
    for tensor in [*model.parameters(), *model.buffers()]:
        storage = tensor.untyped_storage()
        seen[storage.data_ptr()] = max(seen.get(storage.data_ptr(), 0), storage.nbytes())
    return sum(seen.values())


def _constant_names(program: torch.export.ExportedProgram) -> set[str]:
    sig = program.graph_signature
    return (
        set(sig.inputs_to_parameters.values())
        | set(sig.inputs_to_buffers.values())
        | set(sig.inputs_to_lifted_tensor_constants.values())
    )


def measure(name: str) -> bool:
    """Measure one model; True when it exported, lowered, ran and matched eager."""
    print(f"=== {name} ===")
    print(f"  mirrors: {(FACTORIES[name].__doc__ or '').strip().splitlines()[0]}")
    ok = True
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.perf_counter()
        model, inputs = FACTORIES[name]()
        built = time.perf_counter() - start
        with torch.no_grad():
            eager = model(*inputs)
        parameters = sum(p.numel() for p in model.parameters())
        buffers = sum(b.numel() for b in model.buffers())
        print(
            f"  build: {built:.2f} s; {parameters:,} parameter and {buffers:,} buffer elements, "
            f"{_constant_bytes(model):,} bytes of distinct constant storage"
        )

        try:
            start = time.perf_counter()
            result = eg.export_with_guards(model, inputs)
            exported = time.perf_counter() - start
        except Exception:  # noqa: BLE001 - a measurement: it reports the failure and goes on
            print("  EXPORT FAILED (export_with_guards):")
            print("    " + traceback.format_exc().replace("\n", "\n    "))
            return False
        print(f"  export_with_guards (torch.export + guards + lowering): {exported:.2f} s")

        try:
            start = time.perf_counter()
            program = torch.export.export(model, inputs)
            pre_export = time.perf_counter() - start
            start = time.perf_counter()
            pre = eg.lint(program)
            linted = time.perf_counter() - start
            print(f"  pre-lowering lint: torch.export {pre_export:.2f} s, lint {linted:.2f} s")
        except Exception:  # noqa: BLE001 - a measurement: it reports the failure and goes on
            print("  PRE-LOWERING LINT FAILED:")
            print("    " + traceback.format_exc().replace("\n", "\n    "))
            pre, program, ok = eg.Report(), None, False

        _print_findings("export_with_guards report", result.report)
        _print_findings("pre-lowering lint", pre)
        if program is not None:  # what the lint says when the fold will not run
            _print_findings("pre-lowering lint, fold off", eg.lint(program, eg.Settings(fold=False)))

        if result.edge is None:
            print("  NOT LOWERED: the export stopped before lowering")
            return False
        unused = [f.constant for f in pre.with_code("EG307") + result.report.with_code("EG307") if f.constant]
        if unused:
            lowered = result.edge.exported_program()
            kept = _constant_names(lowered)
            placeholders = {n.name: n for n in lowered.graph.nodes if n.op == "placeholder"}
            spec = {s.target: s.arg.name for s in lowered.graph_signature.input_specs if s.target}
            for fqn in dict.fromkeys(unused):
                where = "still an input of the lowered program" if fqn in kept else "gone from the lowered program"
                if fqn in spec and spec[fqn] in placeholders:
                    where += f" ({len(placeholders[spec[fqn]].users)} users)"
                print(f"  EG307 '{fqn}': {where}")

        delegation = result.delegation
        assert delegation is not None
        conv, linear, batched = (delegation.count(*ops) for ops in (CONV_OPS, LINEAR_OPS, BATCHED_OPS))
        print(
            f"  delegation: conv {conv[0]}/{conv[1]}, linear {linear[0]}/{linear[1]}, bmm/matmul {batched[0]}/{batched[1]}, "
            f"all {delegation.fraction_delegated:.0%}; backends {dict(delegation.backends)}"
        )
        if delegation.portable:
            print(f"    portable compute ops: {dict(delegation.portable)}")

        try:
            start = time.perf_counter()
            manager = result.edge.to_executorch()
            pte = manager.buffer
            written = time.perf_counter() - start
        except Exception:  # noqa: BLE001 - a measurement: it reports the failure and goes on
            print("  TO_EXECUTORCH FAILED:")
            print("    " + traceback.format_exc().replace("\n", "\n    "))
            return False
        checked = eg.check_pte(pte)
        print(f"  .pte: {len(pte):,} bytes (to_executorch {written:.2f} s); check_pte: {_counts(checked)}")
        for finding in checked.at_least(eg.Severity.WARNING):
            print(f"    - {finding}")

        kind = "quantized" if name.startswith("pt2e_") else "float"
        atol, rtol = TOLERANCE[kind]
        try:
            start = time.perf_counter()
            outputs = run_pte(pte, inputs)
            ran = time.perf_counter() - start
        except Exception:  # noqa: BLE001 - a measurement: it reports the failure and goes on
            print("  RUNTIME FAILED:")
            print("    " + traceback.format_exc().replace("\n", "\n    "))
            return False
        errors = compare_outputs(eager, outputs, Tolerance.absolute(atol=atol, rtol=rtol))
        print(f"  runtime: {ran:.2f} s; vs eager (atol {atol:g}, rtol {rtol:g}):")
        for error in errors:
            print(f"    {error}")
        ok = ok and all(e.within for e in errors)
    messages = Counter(f"{w.category.__name__}: {str(w.message).splitlines()[0][:160]}" for w in caught)
    for message, n in messages.most_common():
        print(f"  python warning x {n}: {message}")
    print(f"  verdict: {'OK' if ok else 'PROBLEM'}")
    return ok


def _warm_up() -> None:
    """One small guarded export and run, so that the first model's time is not the imports'."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 2)).eval()
        inputs = (torch.randn(1, 3, 8, 8),)
        run_pte(eg.export_with_guards(model, inputs).to_pte(), inputs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help=f"models to measure (default: all): {', '.join(FACTORIES)}")
    parser.add_argument("--isolate", action="store_true", help="run each model in a child process")
    parser.add_argument("--timeout", type=float, default=600.0, help="per-model limit with --isolate (s)")
    args = parser.parse_args()
    names = args.names or list(FACTORIES)
    unknown = [n for n in names if n not in FACTORIES]
    if unknown:
        parser.error(f"unknown models: {', '.join(unknown)}")
    logging.getLogger().setLevel(logging.ERROR)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {len(names)} models")
    failed = []
    if args.isolate:
        for name in names:
            try:
                child = subprocess.run(
                    [sys.executable, __file__, name], timeout=args.timeout, stdout=subprocess.PIPE, text=True
                )
            except subprocess.TimeoutExpired as e:
                print(e.stdout or "", end="")
                print(f"  CHILD TIMED OUT after {args.timeout:g} s")
                failed.append(name)
                continue
            print("\n".join(line for line in child.stdout.splitlines() if not line.startswith("torch ")))
            if child.returncode != 0:
                if child.returncode < 0:
                    print(f"  CHILD DIED: signal {-child.returncode}")
                failed.append(name)
            sys.stdout.flush()
    else:
        _warm_up()
        for name in names:
            try:
                if not measure(name):
                    failed.append(name)
            except Exception:  # noqa: BLE001 - a measurement: it reports the failure and goes on
                print("  UNEXPECTED FAILURE:")
                print("    " + traceback.format_exc().replace("\n", "\n    "))
                failed.append(name)
            sys.stdout.flush()
    print(
        f"=== summary: {len(names) - len(failed)} of {len(names)} OK"
        + (f"; problems: {', '.join(failed)}" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
