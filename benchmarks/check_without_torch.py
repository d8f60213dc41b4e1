"""Program check benchmark without torch (issue 38): ``export-guards check`` of a program that
XNNPACK runs whole loads neither torch nor ``executorch.exir``.

Run: ``.venv/bin/python benchmarks/check_without_torch.py``.

Exports a small conv and linear net through XNNPACK once (in this process, with torch), makes
sure the program has no kernel call (nothing that needs torch's operator schemas or a replay on
meta tensors) and that a check of it in a fresh interpreter leaves torch and ``executorch.exir``
unloaded; then times, each in a fresh interpreter as a user runs it, interleaved round by round
so that machine noise hits all alike: ``python -m export_guards check model.pte``, the schema
modules alone (``import export_guards.pte.reader.wheel``), and, as the floor nothing can beat, a
bare ``python -c pass``. Reports the median of each. Target: the check at most 1 s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 1.0

HEAVY = """
import runpy, sys
sys.argv = ["export_guards", *sys.argv[1:]]
try:
    runpy.run_module("export_guards", run_name="__main__", alter_sys=True)
except SystemExit:
    pass
print(sorted(m for m in sys.modules if m == "torch" or m.startswith("torch.") or m == "executorch.exir"), file=sys.stderr)
"""


def delegated_program(path: Path) -> None:
    """A conv and linear net, every op delegated to XNNPACK, written to ``path``."""
    import export_guards  # noqa: F401  (first: its known-noise filters, before the libraries load)

    # isort: split
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 8, 3), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 4),
    ).eval()  # fmt: skip
    with torch.no_grad():
        program = torch.export.export(model, (torch.randn(1, 3, 16, 16),))
    path.write_bytes(to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()]).to_executorch().buffer)

    from export_guards.pte.reader.file import PteFile
    from export_guards.pte.reader.wheel import KernelCall

    plans = PteFile(path.read_bytes()).program.execution_plan  # type: ignore[union-attr]
    kernels = [
        i for plan in plans for chain in plan.chains for i in chain.instructions if isinstance(i.instr_args, KernelCall)
    ]
    if kernels:
        raise SystemExit(f"the program has {len(kernels)} kernel calls: not a program that XNNPACK runs whole")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        program = Path(folder) / "model.pte"
        delegated_program(program)
        loaded = subprocess.run(
            [sys.executable, "-c", HEAVY, "check", str(program)],
            capture_output=True,
            text=True,
            check=False,
            cwd=folder,
        )
        heavy = json.loads(loaded.stderr.strip().splitlines()[-1].replace("'", '"'))
        table = {
            "python -c pass (floor)": [sys.executable, "-c", "pass"],
            "import the schema modules (wheel.py)": [sys.executable, "-c", "import export_guards.pte.reader.wheel"],
            f"check {program.name} ({program.stat().st_size:,} bytes)": [
                sys.executable,
                "-m",
                "export_guards",
                "check",
                str(program),
            ],
        }
        times: dict[str, list[float]] = {name: [] for name in table}
        for _ in range(args.rounds):
            for name, command in table.items():
                start = time.perf_counter()
                done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=folder)
                times[name].append(time.perf_counter() - start)
                if done.returncode != 0:
                    raise SystemExit(f"{name} exited {done.returncode}: {done.stderr[-500:]}")
    print(f"median wall time of {args.rounds} runs each, interleaved (fresh interpreters)")
    print(
        f"  the check loads: {', '.join(heavy[:3]) + (' ...' if len(heavy) > 3 else '') if heavy else 'neither torch nor executorch.exir'}"
    )
    failed = bool(heavy)
    for name, samples in times.items():
        median = statistics.median(samples)
        verdict = "  ok" if median <= TARGET_S else f"  OVER {TARGET_S:.0f} s"
        verdict = verdict if name.startswith("check") else ""
        failed |= verdict.startswith("  OVER")
        print(f"  {name:<40} {median * 1000:7.0f} ms{verdict}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
