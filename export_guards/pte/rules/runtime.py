"""EG511: the program crashed, hung or failed when the ExecuTorch runtime ran it."""

from __future__ import annotations

from collections.abc import Iterator

from export_guards.pte.smoke import SmokeRun
from export_guards.ruleset import Hit, rule


@rule("EG511")
def runtime_smoke_failed(run: SmokeRun) -> Iterator[Hit]:
    where = run.last_step
    said = f" (the runtime's log: {' '.join(run.stderr.split())})" if run.stderr else ""
    if run.signal:
        yield Hit(f"the runtime died with {run.signal} during '{where}' of {run.program}{said}")
    elif run.timed_out:
        yield Hit(f"the runtime did not finish '{where}' of {run.program} within the time limit")
    elif run.failure:
        yield Hit(f"the runtime failed on {run.program}: {run.failure}{said}")
