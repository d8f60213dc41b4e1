"""The runtime child of the kernel probe (``pte/kernel_probe.py``): run one-op programs in
``executorch.runtime`` and say what each did.

``python -m export_guards.workers.kernel_probe`` reads its job from stdin, one JSON list of
``{"program": PATH, "inputs": [[DTYPE, SIZES], ...]}``, runs each program's ``forward`` once on
inputs of ones (a valid index, a true mask and a nonzero divisor in every dtype), and prints one
JSON line before each (``{"start": PATH}``) and one after (``{"outcome": "ok"}``, or the error
code the runtime returned: ``{"outcome": "0x12"}``), flushed as it goes: a kernel that aborts
takes this process with it, and the parent knows which program it was running.
"""

from __future__ import annotations

import json
import re
import sys

from export_guards.workers.runtime_alone import defer_exir_init

defer_exir_init()  # first: executorch.runtime without the whole of executorch.exir (seconds of start-up)

import torch  # noqa: E402
from executorch.runtime import Runtime  # noqa: E402


def main() -> int:
    runtime = Runtime.get()
    for job in json.loads(sys.stdin.read()):
        print(json.dumps({"start": job["program"]}), flush=True)
        try:
            method = runtime.load_program(job["program"]).load_method("forward")
            method.execute([torch.ones(sizes, dtype=getattr(torch, dtype)) for dtype, sizes in job["inputs"]])
            outcome = "ok"
        except Exception as error:  # noqa: BLE001 - whatever the runtime raises is the kernel's answer
            code = re.search(r"0x[0-9a-fA-F]+", str(error))
            outcome = code.group(0).lower() if code else type(error).__name__
        print(json.dumps({"outcome": outcome}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
