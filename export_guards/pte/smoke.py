"""The runtime smoke check: load a ``.pte`` in ``executorch.runtime`` in a child process and run
each method once on generated inputs. A crash there is a finding, never the checker's death.

Run as ``python -m export_guards.pte.smoke program.pte [data.ptd]`` it is that child: it
prints one JSON line per step, so that the parent knows where a crash happened.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import final

__all__ = ["SmokeRun", "smoke_test"]


@final
@dataclass(frozen=True)
class SmokeRun:
    """What happened when the runtime loaded and ran the program.

    Attributes:
        program: the ``.pte`` path.
        steps: what the child did, in order (``"load"``, ``"run forward"``, ``"ran forward"``).
        failure: the exception the runtime raised, if any (``"run forward: RuntimeError: ..."``).
        signal: the signal that killed the child (``"SIGSEGV"``), if any.
        timed_out: whether it ran past its time limit.
        returncode: the child's exit status.
        stderr: the last lines the child wrote to stderr.
    """

    program: str
    steps: tuple[str, ...] = ()
    failure: str | None = None
    signal: str | None = None
    timed_out: bool = False
    returncode: int = 0
    stderr: str = field(default="", repr=False)

    @property
    def last_step(self) -> str:
        return self.steps[-1] if self.steps else "start"


def smoke_test(program: str | os.PathLike[str], data_files: Sequence[str] = (), timeout_s: float = 120.0) -> SmokeRun:
    """Run the child on ``program`` and describe what happened."""
    command = [sys.executable, "-m", "export_guards.pte.smoke", os.fspath(program), *data_files[:1]]
    try:
        done = subprocess.run(command, capture_output=True, timeout=timeout_s, text=True, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as expired:
        stdout = expired.stdout.decode(errors="replace") if isinstance(expired.stdout, bytes) else expired.stdout or ""
        return SmokeRun(os.fspath(program), _steps(stdout), timed_out=True, returncode=-1)
    steps, failure = _steps(done.stdout), None
    for line in done.stdout.splitlines():
        if line.startswith('{"failure"'):
            failure = json.loads(line)["failure"]
    died = -done.returncode if done.returncode < 0 else None
    return SmokeRun(
        os.fspath(program),
        steps,
        failure=failure or (None if done.returncode <= 0 else f"the child exited with {done.returncode}"),
        signal=signal.Signals(died).name if died else None,
        returncode=done.returncode,
        stderr="\n".join(done.stderr.strip().splitlines()[-5:]),
    )


def _steps(stdout: str) -> tuple[str, ...]:
    return tuple(json.loads(line)["step"] for line in stdout.splitlines() if line.startswith('{"step"'))


def _child(program: str, data_file: str | None) -> int:
    import torch
    from executorch.exir.schema import Bool, Double, Int, Tensor
    from executorch.exir.tensor import get_scalar_type
    from executorch.runtime import Runtime

    from export_guards.pte.file import PteFile, open_bytes

    def step(name: str) -> None:
        print(json.dumps({"step": name}), flush=True)

    plans = {plan.name: plan for plan in (PteFile(open_bytes(program)[0]).program.execution_plan)}
    step("load")
    try:
        loaded = Runtime.get().load_program(program, data_path=data_file)
    except Exception as error:
        print(json.dumps({"failure": f"load: {type(error).__name__}: {error}"}), flush=True)
        return 0
    for name in sorted(loaded.method_names):
        plan = plans[name]
        inputs = []
        for index in plan.inputs:
            value = plan.values[index].val
            if isinstance(value, Tensor):
                dtype = get_scalar_type(value.scalar_type)
                shape = list(value.sizes)
                inputs.append(torch.randn(shape).to(dtype) if dtype.is_floating_point else torch.ones(shape, dtype=dtype))
            elif isinstance(value, (Int, Double, Bool)):
                inputs.append(value.int_val if isinstance(value, Int) else value.double_val if isinstance(value, Double) else value.bool_val)
        step(f"run {name}")
        try:
            loaded.load_method(name).execute(inputs)
        except Exception as error:
            print(json.dumps({"failure": f"run {name}: {type(error).__name__}: {error}"}), flush=True)
            return 0
        step(f"ran {name}")
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None))
