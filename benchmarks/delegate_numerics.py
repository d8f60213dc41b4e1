"""Which quantization configurations a delegate computes wrong: every case against eager.

Run: ``make delegate-numerics`` (or ``.venv/bin/python benchmarks/delegate_numerics.py [--case NAME]``).

Each case is a small model quantized as ExecuTorch and torchao document it for XNNPACK: torchao's
``quantize_`` configurations (weight-only and dynamic-activation, int8 and int4, per channel and
per group, linears and embeddings) and the PT2E XNNPACK quantizer (static and dynamic, per tensor
and per channel). Each is written three ways and run in ``executorch.runtime`` on the same input:
stock (``to_edge_transform_and_lower`` with ``XnnpackPartitioner``), portable (no partitioner)
and guarded (``lower_with_guards``). Printed: each program's largest difference from eager,
relative to eager's largest value, and ``WRONG`` past 1e-2 (a quantized program may differ from
its float model by rounding, never by more), and the known-wrong entries that match the case's
edge program (they should match exactly the rows where stock is wrong). Each case runs in its own child process, so that a
delegate's crash is a row, not the end of the table. This is how the known-wrong table in
``export_guards/analysis/known_wrong.py`` was derived; rerun it on a new ExecuTorch release.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

TOLERANCE = 1e-2

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from quantized_cases import CASES, as_partitioned  # noqa: E402  (tests/quantized_cases.py)


def _run(pte: bytes, inputs: tuple) -> object:
    from executorch.runtime import Runtime

    from export_guards.compat import register_quantized_kernels

    register_quantized_kernels()  # as export-guards runs a program: the embedding cases' kernels (EG408)
    method = Runtime.get().load_program(pte).load_method("forward")
    return method.execute(list(inputs))[0]


def _case(name: str) -> dict[str, object]:
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    import export_guards as eg
    from export_guards.analysis.known_wrong import known_wrong_in

    model, inputs = CASES[name]()
    with torch.no_grad():
        expected = model(*inputs)
    scale = float(expected.abs().max())
    row: dict[str, object] = {"case": name, "known": []}
    ways = {
        "stock": lambda ep: to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer,
        "portable": lambda ep: to_edge_transform_and_lower(ep).to_executorch().buffer,
        "guarded": lambda ep: eg.lower_with_guards(ep).to_pte(),
    }
    try:
        row["known"] = sorted({match.entry.name for match in known_wrong_in(as_partitioned(model, inputs))})
    except Exception as error:  # noqa: BLE001 - a lowering that fails before partitioning fails in every column below
        row["known"] = [f"({type(error).__name__})"]
    for way, write in ways.items():
        try:
            out = _run(write(torch.export.export(model, inputs)), inputs)
            row[way] = float((out - expected).abs().max()) / scale
        except Exception as error:  # noqa: BLE001 - a row, not the end of the table
            row[way] = f"{type(error).__name__}: {str(error).splitlines()[0][:80] if str(error) else ''}"
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=sorted(CASES), help="one case, in this process")
    args = parser.parse_args()
    if args.case:
        print(json.dumps(_case(args.case)))
        return 0
    print(
        f"{'case':40} {'stock':>12} {'portable':>12} {'guarded':>12}   (largest difference / eager's largest value)   known-wrong entry matched"
    )
    for name in CASES:
        done = subprocess.run([sys.executable, __file__, "--case", name], capture_output=True, text=True)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        row = (
            json.loads(lines[-1])
            if lines
            else dict.fromkeys(("stock", "portable", "guarded"), f"died ({done.returncode})")
        )
        cells = [row[w] for w in ("stock", "portable", "guarded")]
        shown = [
            f"{c:12.2e}{' WRONG' if c > TOLERANCE else '      '}" if isinstance(c, float) else f"{str(c)[:40]:>18}"
            for c in cells
        ]
        print(f"{name:40} {' '.join(shown)}   {', '.join(row.get('known') or ()) or '-'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
