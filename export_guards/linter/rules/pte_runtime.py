"""EG511: the program crashed, hung or failed when the ExecuTorch runtime ran it."""

from __future__ import annotations

from collections.abc import Iterator

from export_guards.linter.registry import Hit, rule
from export_guards.pte.smoke import SmokeRun
from export_guards.report import Severity


@rule(
    "EG511",
    "runtime-smoke-failed",
    Severity.ERROR,
    "Loading the program in executorch.runtime, or running a method once, crashed, hung or failed.",
    "Run `export-guards check` without --runtime to find a structural cause; otherwise re-export "
    "and compare with eager using the pytest fixture check_export.",
    stage="runtime",
)
def runtime_smoke_failed(run: SmokeRun) -> Iterator[Hit]:
    where = run.last_step
    said = f" (the runtime's log: {' '.join(run.stderr.split())})" if run.stderr else ""
    if run.signal:
        yield Hit(f"the runtime died with {run.signal} during '{where}' of {run.program}{said}")
    elif run.timed_out:
        yield Hit(f"the runtime did not finish '{where}' of {run.program} within the time limit")
    elif run.failure:
        yield Hit(f"the runtime failed on {run.program}: {run.failure}{said}")
