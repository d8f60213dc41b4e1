"""What checking the written program costs the lint (issue 36): ``export-guards lint``'s work on
the segmentation example, with the check of the written program against the installed
``executorch.runtime`` (this tree) and without it (the lint before it), side by side.

Run: ``make bench-verdict`` (or ``.venv/bin/python benchmarks/lint_verdict.py [--rounds N]
[--size S]``).

Each round runs, in one process and in alternating order, A: the guarded export and
``to_executorch`` (what ``lint --pte`` did before), and B: the same, then
``export_guards.program.check_program`` (what it does now; the runtime's inventory included, read once
per process as the command does). Reported: the median of the paired ratios B / A (target at
most 1.1), and the same against a lint that wrote no program (``lint`` without ``--pte`` did
not emit: C, the export alone), for the whole picture. Wall times.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="paired rounds (default 5)")
    parser.add_argument(
        "--size", type=int, default=400, help="the segmentation model's input size (default 400, the demo's)"
    )
    args = parser.parse_args()

    import segmentation
    from export_guards.pipeline import export_in_steps
    from export_guards.program import check_program
    from export_guards.quiet import libraries_quiet

    def export():  # the lint before the program: export, lint, lower, partitioned lint
        model, inputs = segmentation.model(args.size)
        return export_in_steps(model, inputs)

    def without_check() -> None:
        export().to_pte()

    def with_check() -> None:
        result = export()
        findings = check_program(result, result.to_pte())
        assert not findings.errors, str(findings)

    def timed(run) -> float:
        gc.collect()
        start = time.perf_counter()
        run()
        return time.perf_counter() - start

    with libraries_quiet():
        with_check()  # warm up: imports, the runtime's inventory, caches
        over_emitting, over_exporting = [], []
        for round_ in range(args.rounds):
            order = (without_check, with_check, export) if round_ % 2 == 0 else (export, with_check, without_check)
            times = {run.__name__: timed(run) for run in order}
            over_emitting.append(times["with_check"] / times["without_check"])
            over_exporting.append(times["with_check"] / times["export"])
            print(
                f"round {round_ + 1}: export {times['export']:.2f} s, + to_executorch {times['without_check']:.2f} s, "
                f"+ check {times['with_check']:.2f} s",
                flush=True,
            )
    ratio = statistics.median(over_emitting)
    print(f"\nsegmentation ({args.size}), {args.rounds} paired rounds:")
    print(
        f"  lint with the written program's check / lint --pte before: x{ratio:.3f} (median of paired ratios; target <= 1.1)"
    )
    print(
        f"  lint with the written program's check / lint without --pte before: x{statistics.median(over_exporting):.3f}"
    )
    met = ratio <= 1.1
    print("target met" if met else "target NOT met")
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
