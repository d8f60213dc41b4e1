"""EG511 and EG522: the program crashed, hung or failed when the ExecuTorch runtime ran it, or
its outputs differ from eager.

A run on inputs that the check made up (``check --runtime`` without ``--inputs``) proves less
than a run on the author's: a kernel that refuses made-up integers (an index, a cache position)
may take every value the program is given. So a method that loaded and then failed on made-up
integers is a warning that says which inputs ran and how to give real ones, and so is one that
failed on made-up floats alone and then ran with zeros for them (a float read as an index).
A run that reaches its time limit is a warning too: a loaded machine reaches it as well.
Everything else stays an error: a load (the method's operators and delegates, whatever the
inputs), a crash (a kernel refuses a bad value with an error, it does not die of it),
and a failure on made-up floats that zeros repeat (the shapes, dtypes and dim orders are the
program's own: a layout or an argument the kernel refuses).
"""

from __future__ import annotations

from collections.abc import Iterator

from export_guards.pte.smoke import SmokeRun
from export_guards.report import Severity
from export_guards.ruleset import Hit, rule

REAL_INPUTS = (
    "Run it on real inputs: `export-guards check --runtime --inputs inputs.pt PROGRAM`, where inputs.pt is a list of forward's "
    "inputs saved with torch.save (`export-guards lint TARGET --pte PROGRAM --save-inputs inputs.pt` writes the factory's; the "
    "lint itself runs the program on them, and at each dynamic dimension's bounds); where it also fails there, fix what the "
    "runtime's reason names."
)


SLOW_RUN = (
    "Run it again with a longer limit (`export-guards check --runtime --runtime-timeout 600 PROGRAM`; "
    "`check_pte(..., runtime_timeout_s=600)`), on a quieter machine; a program that still does not finish hangs in the "
    "runtime: report it with the file."
)


@rule("EG511")
def runtime_smoke_failed(run: SmokeRun) -> Iterator[Hit]:
    where = run.last_step
    said = f" (the runtime's log: {' '.join(run.stderr.split())})" if run.stderr else ""
    made_up = run.made_up is not None and run.failure is not None and not (run.signal or run.timed_out)
    doubtful = made_up and (run.made_up_indices or run.made_up_values_failed)  # inputs the program may never be given
    on = f" on inputs that export-guards made up ({run.made_up})" if made_up else ""
    why = (
        "; made-up integers may index past what the program holds, so this is no error until real inputs fail too"
        if made_up and run.made_up_indices
        else "; it ran with zeros for the made-up floats, so their values failed, not the program: no error until real inputs fail too"
        if doubtful
        else ""
    )
    severity, fix = (Severity.WARNING, REAL_INPUTS) if doubtful else (None, None)  # else the rule's own
    if run.signal:
        yield Hit(f"the runtime died with {run.signal} during '{where}' of {run.program}{said}")
    elif run.timed_out:  # a busy machine reaches a time limit too: a hang is not proved
        limit = f" of {run.time_limit_s:g} s" if run.time_limit_s is not None else ""
        yield Hit(
            f"the runtime did not finish '{where}' of {run.program} within the time limit{limit}: a loaded or slow machine "
            "reaches it too, so this proves no fault of the program",
            severity=Severity.WARNING,
            fix=SLOW_RUN,
        )
    elif run.failure and run.failed_call is not None:
        # A kernel refused its call: name the operator (placed on the user's line where the
        # caller knows the graph) and the runtime's own reason, not only its error code.
        instruction, operator = run.failed_call
        reason = run.reason or run.failure
        method = run.last_step.removeprefix("run ")
        yield Hit(
            f"the runtime's kernel {operator} (instruction {instruction}) failed in {run.program}{on}: {reason} ({run.failure}){why}",
            node=operator,
            subjects=(f"instruction {instruction} of '{method}'",),
            symptom_of=("EG519",),  # the check named the refusal before the run: one problem, one finding
            severity=severity,
            fix=fix,
        )
    elif run.failure:
        yield Hit(f"the runtime failed on {run.program}{on}: {run.failure}{said}{why}", severity=severity, fix=fix)


@rule("EG522")
def runtime_output_mismatch(run: SmokeRun) -> Iterator[Hit]:
    for mismatch in run.mismatches:
        yield Hit(f"{run.program} ran, but {mismatch}", method="forward")
