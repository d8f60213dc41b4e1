"""EG511 and EG522: the program crashed, hung or failed when the ExecuTorch runtime ran it, or
its outputs differ from eager."""

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
    elif run.failure and run.failed_call is not None:
        # A kernel refused its call: name the operator (placed on the user's line where the
        # caller knows the graph) and the runtime's own reason, not only its error code.
        instruction, operator = run.failed_call
        reason = run.reason or run.failure
        method = run.last_step.removeprefix("run ")
        yield Hit(
            f"the runtime's kernel {operator} (instruction {instruction}) failed in {run.program}: {reason} ({run.failure})",
            node=operator,
            subjects=(f"instruction {instruction} of '{method}'",),
            symptom_of=("EG519",),  # the check named the refusal before the run: one problem, one finding
        )
    elif run.failure:
        yield Hit(f"the runtime failed on {run.program}: {run.failure}{said}")


@rule("EG522")
def runtime_output_mismatch(run: SmokeRun) -> Iterator[Hit]:
    for mismatch in run.mismatches:
        yield Hit(f"{run.program} ran, but {mismatch}", method="forward")
