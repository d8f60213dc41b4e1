"""Model (b): a model whose weights sit on an accelerator, exported to ExecuTorch.

1. Without the guard, ``to_edge_transform_and_lower`` with XNNPACK dies with SIGSEGV (shown in
   a child process, so the demo survives it).
2. With the guard passes, the same call raises ``ConstantPlacementError`` naming every constant.
3. With the ``"copy"`` policy, the program is moved to the host and exported; the ``.pte`` runs
   in ``executorch.runtime`` and its outputs equal eager's.

The accelerator is CUDA where it is available, the test device (``trapdev``) elsewhere. Run it
with ``.venv/bin/python examples/device_demo.py``; it writes ``out/device_constants.pte``.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from executorch.runtime import Runtime

import export_guards as eg
from export_guards.compat import runtime_mismatch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import device_constants  # noqa: E402

OUT = HERE.parent / "out"

UNGUARDED = """
import sys, torch
sys.path.insert(0, {here!r})
import device_constants
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
model, inputs = device_constants.model()
program = torch.export.export(model, inputs)
to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()]).to_executorch()
"""


def heading(text: str) -> None:
    print(f"\n== {text}", flush=True)


def main() -> int:
    heading("1. Unguarded export of a model whose weights are on the accelerator (child process)")
    child = subprocess.run(
        [sys.executable, "-c", UNGUARDED.format(here=str(HERE))], capture_output=True, text=True, check=False
    )
    if child.returncode < 0:
        print(f"the export process died with {signal.Signals(-child.returncode).name}: no message, no constant named")
    else:
        print(f"the export process exited with {child.returncode}")

    model, inputs = device_constants.model()
    program = torch.export.export(model, inputs)

    heading("2. The same export with the guard passes")
    try:
        to_edge_transform_and_lower(program, transform_passes=eg.guard_passes(), partitioner=[XnnpackPartitioner()])
    except eg.ConstantPlacementError as error:
        print(error)

    heading("3. The 'copy' policy on the torch.export program, then XNNPACK")
    host_program = eg.placement.guard_constant_placement(program, policy="copy")
    executorch_program = to_edge_transform_and_lower(
        host_program, transform_passes=eg.guard_passes(), partitioner=[XnnpackPartitioner()]
    ).to_executorch()
    OUT.mkdir(exist_ok=True)
    pte = OUT / "device_constants.pte"
    pte.write_bytes(executorch_program.buffer)
    print(f"wrote {pte.relative_to(HERE.parent)} ({len(executorch_program.buffer):,} bytes)")

    mismatch = runtime_mismatch()
    if mismatch is not None:  # every run would fail with a C++ trace: say why instead
        print(f"not run: {mismatch}")
        return 0
    method = Runtime.get().load_program(executorch_program.buffer).load_method("forward")
    (on_runtime,) = method.execute([x.cpu() for x in inputs])
    with torch.no_grad():
        eager = model(*inputs).cpu()
    error = float((on_runtime - eager).abs().max())
    print(f"executorch.runtime vs eager: max abs error {error:.2e}")
    print(f"the caller's model stayed on {next(model.parameters()).device}")
    return 0 if error <= 1e-5 else 1


if __name__ == "__main__":
    raise SystemExit(main())
