"""``export-guards lint``: export each model with the guards, write its program and check it as
``export-guards check`` would against the runtime that will load it, report, and keep the
program when nothing reached the fail level."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, final

from export_guards.cli.arguments import UsageError, baseline_from, kernels_from, recipe_made_here
from export_guards.cli.console import ProgressLines, problem, quiet_libraries, stdout_to_stderr
from export_guards.cli.options import LintOptions
from export_guards.cli.outputs import Outputs
from export_guards.cli.reporting import (
    EXIT_ERROR,
    Checked,
    against_baseline,
    deliver,
    exit_code,
    merged,
    project_root,
    reported_if_failed,
    said_failed,
    with_factory_location,
)
from export_guards.cli.signals import Interrupts
from export_guards.report import Report, Severity
from export_guards.ruleset import without_symptoms
from export_guards.targets import (
    Exportable,
    StepFailed,
    TargetError,
    check_target,
    load_target,
    parse_arguments,
    target_file,
)
from export_guards.targets import step as failing_step  # a failure in it is a StepFailed that names the step

if TYPE_CHECKING:
    from export_guards.pipeline import GuardedExport
    from export_guards.pte.inventory import RuntimeInventory
    from export_guards.pte.smoke import SmokeWorker
    from export_guards.verify import ProgramRuns

__all__ = ["run"]


@final
@dataclass(frozen=True)
class Linted:
    """One target linted.

    Attributes:
        checked: the target and its report.
        program: the written program; ``None`` when a constant the host cannot read stopped
            the export before lowering, or a step failed.
            inputs: the example inputs saved with ``torch.save`` (with ``--save-inputs``).
        failed_step: a step failed (its report is ``checked``'s), and the run exits 2.
    """

    checked: Checked
    program: bytes | None = None
    inputs: bytes | None = None
    failed_step: bool = False


def run(options: LintOptions, interrupts: Interrupts) -> int:
    """Lint ``options.targets``, one after another; exit code as
    :func:`~export_guards.cli.reporting.exit_code`, or 2 when a target's step failed (the
    others are linted all the same)."""
    settings, report = options.settings, options.report
    against = kernels_from(options.kernels)
    try:
        arguments = parse_arguments(options.arguments)
        sources = [
            check_target(target) for target in options.targets
        ]  # missing, unparsable, no such factory: before any import
    except TargetError as error:
        raise UsageError(str(error)) from None
    several = len(options.targets) > 1
    if several and (options.pte or options.former_pte):
        raise UsageError(f"--pte writes one program: give one target with it ({len(options.targets)} were given)")
    if several and options.save_inputs:
        raise UsageError(
            f"--save-inputs writes one target's inputs: give one target with it ({len(options.targets)} were given)"
        )
    outputs = Outputs(inputs=sources, force=report.force, interrupts=interrupts)
    pte_path = outputs.claim(_pte_path(options), "program", "--pte" if options.former_pte is None else "--output")
    inputs_path = outputs.claim(options.save_inputs, "inputs", "--save-inputs")
    outputs.claim(report.report_file, "report", "--report-file")
    outputs.claim(report.write_baseline, "report", "--write-baseline")
    baseline = baseline_from(report.baseline)
    lines = ProgressLines(quiet=report.quiet)
    with outputs, quiet_libraries(report.verbose):
        linted = [
            _lint_target(options, target, source, arguments, against, outputs, interrupts, lines)
            for target, source in zip(options.targets, sources, strict=True)
        ]
        root = project_root(sources[0])
        checked, baselined = against_baseline(
            report, [one.checked for one in linted], baseline, outputs, root=root, lines=lines
        )
        failing = merged(checked).at_least(settings.fail_level)
        if pte_path is not None and linted[0].program is not None and failing:
            lines.say(
                f"not writing {pte_path}: {len(failing)} finding(s) at or above {settings.fail_level.value}",
                ongoing=False,
            )
        kept = [
            (pte_path, linted[0].program, str(pte_path)),
            (inputs_path, linted[0].inputs, f"the example inputs to {inputs_path}"),
        ]
        written = True if failing else _written(outputs, kept, lines)  # nothing is kept when something fails
        delivered = deliver(report, checked, outputs, root=root, show_info=settings.show_info)
    if any(one.failed_step for one in linted):
        return EXIT_ERROR
    unlowered = any(one.program is None for one in linted)
    return exit_code(report, failed=bool(failing) or unlowered, complete=written and delivered and baselined)


def _lint_target(
    options: LintOptions,
    target: str,
    source: Path | None,
    arguments: dict[str, object],
    against: RuntimeInventory | None,
    outputs: Outputs,
    interrupts: Interrupts,
    lines: ProgressLines,
) -> Linted:
    """:func:`_export_and_check` ``target``. One target: a failed step ends the run (its
    report too, for a machine format). Several: it is that target's report, and the others are
    linted all the same."""
    if len(options.targets) == 1:
        with reported_if_failed(options.report, outputs, source, target):
            return _export_and_check(options, target, arguments, against, lines)
    try:
        return _export_and_check(options, target, arguments, against, lines)
    except StepFailed as failed:
        said_failed(failed, interrupts, verbose=options.report.verbose)
        return Linted(Checked(target, with_factory_location(failed.report, target)), failed_step=True)


def _export_and_check(
    options: LintOptions,
    target: str,
    arguments: dict[str, object],
    against: RuntimeInventory | None,
    lines: ProgressLines,
) -> Linted:
    """Export one target with the guards (the lint runs in the export), write its program,
    check it as ``check`` would and run it on the example inputs (unless ``--no-run`` or
    ``--kernels``): its report, its program (``None`` when a constant the host cannot read
    stopped the export before lowering), and its example inputs saved with ``torch.save``
    (with ``--save-inputs``)."""
    settings = options.settings
    fold = "on" if settings.fold else "off"
    lines.say(
        f"exporting and linting {target} ({settings.recipe or settings.backend}, placement={settings.placement}, fold={fold})"
    )
    # Imported here: the rest of the command (its usage errors, `rules`) answers without ExecuTorch.
    from export_guards.pte.smoke import SmokeWorker

    # the run's child starts now: its import of the runtime overlaps the export
    with (
        stdout_to_stderr(),
        SmokeWorker() if options.runs_program else contextlib.nullcontext() as worker,
    ):  # stdout carries only the report, whatever the model prints
        made, result, saved = _exported(options, target, arguments, lines)
        found, program, runs = result.report, None, None
        if result.edge is not None:  # written and checked whether or not it is kept: the verdict is the program's
            with (
                lines.timed("writing the program (to_executorch)"),
                failing_step("writing the program (to_executorch)"),
            ):
                program = result.to_pte(refuse=False)  # checked below, each error a finding
            found, runs = _checked_and_run(options, result, program, made, against, worker, lines)
    if program is None:
        lines.say("the export stopped before lowering (see the EG101 / EG102 findings)", ongoing=False)
        return Linted(Checked(target, with_factory_location(found, target)), None, saved)
    return Linted(
        Checked(target, with_factory_location(found, target), _what_ran(result, program, runs, settings.backend)),
        program,
        saved,
    )


def _exported(
    options: LintOptions, target: str, arguments: dict[str, object], lines: ProgressLines
) -> tuple[Exportable, GuardedExport, bytes | None]:
    """What the target's factory made, its guarded export (each step a timed line), and its
    example inputs saved as given, before the export runs the model (with ``--save-inputs``)."""
    with lines.timed("loading ExecuTorch"):
        from export_guards.pipeline import export_in_steps

    settings = options.settings
    recipe_made_here(settings)
    try:
        with lines.timed("building the model"):
            made = load_target(target, arguments)
    except TargetError as error:
        raise UsageError(str(error)) from None
    saved = _saved(made.inputs) if options.save_inputs is not None else None
    if made.partitioners is not None and settings.recipe is None:  # the header named the backend before the factory ran
        named = ", ".join(type(p).__name__ for p in made.lowering.partitioners or ()) or "none: the portable kernels"
        lines.say(
            f"lowering with the factory's partitioners ({named}), not {settings.backend}'s default", ongoing=False
        )
    result = export_in_steps(
        made.model,
        made.inputs,
        config=settings,
        source=target_file(target),
        each_step=lines.timed,
        dynamic_shapes=made.dynamic_shapes,
        strict=made.strict,
        lowering=made.lowering,
    )
    return made, result, saved


def _checked_and_run(
    options: LintOptions,
    result: GuardedExport,
    program: bytes,
    made: Exportable,
    against: RuntimeInventory | None,
    worker: SmokeWorker | None,
    lines: ProgressLines,
) -> tuple[Report, ProgramRuns | None]:
    """The export's report with the written program's check (against the runtime that will load
    it) and, unless ``--no-run`` or ``--kernels``, its run on the example inputs in
    executorch.runtime (``worker``, the run's child) compared with eager; and that run."""
    from export_guards.pte.rules.availability import runtime_lacks_kernel
    from export_guards.verify import check_program, run_program

    with lines.timed("checking the written program"):
        checked = check_program(result, program, against=against, settings=options.settings)
    found = result.report + checked
    # clean means it loads, runs and matches eager, here; a program that this runtime
    # cannot load (EG521's error) would only fail again
    unloadable = [f for f in checked.with_code(runtime_lacks_kernel.code) if f.severity is Severity.ERROR]
    if not options.runs_program or unloadable:
        return found, None
    with lines.timed("running the program (executorch.runtime)"):
        runs = run_program(result, program, made.model, made.inputs, settings=options.settings, worker=worker)
    bounds = runs.shapes[1:]
    if bounds:  # a dynamic export: say where it ran besides the example
        lines.say(f"ran the program on the example inputs and at {', '.join(bounds)}", ongoing=False)
    for skipped in runs.skipped:
        lines.say(f"did not run the program at {skipped}", ongoing=False)
    return without_symptoms(found + runs.report), runs


def _what_ran(result: GuardedExport, program: bytes, runs: ProgramRuns | None, backend: str) -> tuple[str, ...]:
    """What the text summary line says the lint did: the delegation, the program's size, and
    where it ran."""
    delegation = result.delegation
    ran = ((delegation.stated(),) if delegation is not None and backend != "portable" else ()) + (
        f"program {len(program):,} bytes",
    )
    if runs is not None:
        at = " and ".join(shape.partition(" (")[0] for shape in runs.shapes[1:])
        ran += (
            "ran in executorch.runtime and matched eager"
            + (f" on the example inputs and at the dynamic bounds {at}" if at else ""),
        )
    return ran


def _written(outputs: Outputs, files: Sequence[tuple[Path | None, bytes | None, str]], lines: ProgressLines) -> bool:
    """Write each file asked for (a path) that the run made (its bytes), saying so (as
    ``wrote {what}``); whether every write succeeded."""
    written = True
    for path, data, what in files:
        if path is not None and data is not None:
            done = outputs.write(path, data)
            written = written and done
            if done:
                lines.say(f"wrote {what}", ongoing=False)
    return written


def _saved(inputs: Sequence[object]) -> bytes:
    """``inputs`` as ``check --runtime --inputs`` takes them: flattened (a ``None`` kept in its
    place, as the program holds it), on the host, in a file that ``torch.save`` writes."""
    import torch
    import torch.utils._pytree as pytree

    flat = [x.detach().cpu() if isinstance(x, torch.Tensor) else x for x in pytree.tree_leaves(list(inputs))]
    buffer = io.BytesIO()
    torch.save(flat, buffer)
    return buffer.getvalue()


def _pte_path(options: LintOptions) -> Path | None:
    if options.former_pte is not None:
        if options.pte is not None:
            raise UsageError("give --pte only (--output is its former name)")
        problem("warning", "--output is deprecated: use --pte (the report goes to --report-file)")
        return options.former_pte
    return options.pte
