"""``export-guards lint``: export each model with the guards, write its program and check it as
``export-guards check`` would against the runtime that will load it, report, and keep the
program when nothing reached the fail level."""

from __future__ import annotations

import argparse
import contextlib
import io
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from export_guards.cli.arguments import UsageError, baseline_from, kernels_from, recipe_made_here, settings_from
from export_guards.cli.console import Stages, problem, progress, quiet_libraries, stdout_to_stderr
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
from export_guards.report import Severity
from export_guards.ruleset import without_symptoms
from export_guards.settings import Settings
from export_guards.targets import StepFailed, TargetError, check_target, load_target, parse_arguments, step, target_file

if TYPE_CHECKING:
    from export_guards.pte.inventory import RuntimeInventory

__all__ = ["run"]


def run(args: argparse.Namespace, interrupts: Interrupts) -> int:
    """Lint ``args.targets``, one after another; exit code as
    :func:`~export_guards.cli.reporting.exit_code`, or 2 when a target's step failed (the
    others are linted all the same)."""
    runs = args.run and args.kernels is None
    settings = settings_from(args, ("program", "partitioned", "pte", "action", *(("runtime",) if runs else ())))
    against = kernels_from(args)
    try:
        arguments = parse_arguments(args.arg)
        sources = [check_target(target) for target in args.targets]  # missing, unparsable, no such factory: before any import
    except TargetError as error:
        raise UsageError(str(error)) from None
    several = len(args.targets) > 1
    if several and (args.pte or args.output):
        raise UsageError(f"--pte writes one program: give one target with it ({len(args.targets)} were given)")
    if several and args.save_inputs:
        raise UsageError(f"--save-inputs writes one target's inputs: give one target with it ({len(args.targets)} were given)")
    outputs = Outputs(inputs=sources, force=args.force, interrupts=interrupts)
    pte_path = outputs.claim(_pte_path(args), "program", "--pte" if args.output is None else "--output")
    inputs_path = outputs.claim(args.save_inputs, "inputs", "--save-inputs")
    outputs.claim(args.report_file, "report", "--report-file")
    outputs.claim(args.write_baseline, "report", "--write-baseline")
    baseline = baseline_from(args)
    steps = Stages(args)
    checked: list[Checked] = []
    programs: list[bytes | None] = []
    saved: list[bytes | None] = []
    stopped = False
    with outputs, quiet_libraries(args.verbose):
        for target, source in zip(args.targets, sources, strict=True):
            # One target: a failed step ends the run (its report too, for a machine format).
            # Several: it is that target's report, and the others are linted all the same.
            with contextlib.nullcontext() if several else reported_if_failed(args, outputs, source, target):
                try:
                    one, program, inputs = _lint(args, target, arguments, settings, against, steps)
                except StepFailed as failed:
                    if not several:
                        raise
                    said_failed(args, failed, interrupts)
                    one, program, inputs, stopped = Checked(target, with_factory_location(failed.report, target)), None, None, True
            checked.append(one)
            programs.append(program)
            saved.append(inputs)
        root = project_root(sources[0])
        checked, baselined = against_baseline(args, checked, baseline, outputs, root=root)
        failing = merged(checked).at_least(settings.fail_level)
        if pte_path is not None and programs[0] is not None and failing:
            progress(args, f"not writing {pte_path}: {len(failing)} finding(s) at or above {settings.fail_level.value}", ongoing=False)
        kept = [(pte_path, programs[0], str(pte_path)), (inputs_path, saved[0], f"the example inputs to {inputs_path}")]
        written = True if failing else _written(args, outputs, kept)  # nothing is kept when something fails
        delivered = deliver(args, checked, outputs, root=root, show_info=settings.show_info)
    if stopped:
        return EXIT_ERROR
    unlowered = any(program is None for program in programs)
    return exit_code(args, failed=bool(failing) or unlowered, complete=written and delivered and baselined)


def _written(args: argparse.Namespace, outputs: Outputs, files: Sequence[tuple[Path | None, bytes | None, str]]) -> bool:
    """Write each file asked for (a path) that the run made (its bytes), saying so (as
    ``wrote {what}``); whether every write succeeded."""
    written = True
    for path, data, what in files:
        if path is not None and data is not None:
            done = outputs.write(path, data)
            written = written and done
            if done:
                progress(args, f"wrote {what}", ongoing=False)
    return written


def _lint(
    args: argparse.Namespace, target: str, arguments: dict[str, object], settings: Settings, against: RuntimeInventory | None, steps: Stages
) -> tuple[Checked, bytes | None, bytes | None]:
    """Export, lint, write and check one target: its report, its program (``None`` when a
    constant the host cannot read stopped the export before lowering), and its example inputs
    saved with ``torch.save`` (with ``--save-inputs``; else ``None``)."""
    fold = "on" if settings.fold else "off"
    runs = args.run and against is None  # a program for another runtime (--kernels) is not judged by this one's run
    progress(args, f"exporting and linting {target} ({settings.recipe or settings.backend}, placement={settings.placement}, fold={fold})")
    # Imported here: the rest of the command (its usage errors, `rules`) answers without ExecuTorch.
    from export_guards.pte.rules.availability import runtime_lacks_kernel
    from export_guards.pte.smoke import SmokeWorker

    # the run's child starts now: its import of the runtime overlaps the export
    with stdout_to_stderr(), SmokeWorker() if runs else contextlib.nullcontext() as worker:  # stdout carries only the report, whatever the model prints
        with steps("loading ExecuTorch"):
            from export_guards.pipeline import export_in_steps
            from export_guards.verify import check_program, run_program

        recipe_made_here(settings)
        try:
            with steps("building the model"):
                made = load_target(target, arguments)
        except TargetError as error:
            raise UsageError(str(error)) from None
        model, inputs = made.model, made.inputs
        saved = _saved(inputs) if args.save_inputs is not None else None  # as given, before the export runs the model
        result = export_in_steps(
            model, inputs, config=settings, source=target_file(target), each_step=steps, dynamic_shapes=made.dynamic_shapes, strict=made.strict, lowering=made.lowering
        )
        found, program = result.report, None
        if result.edge is not None:  # written and checked whether or not it is kept: the verdict is the program's
            with steps("writing the program (to_executorch)"), step("writing the program (to_executorch)"):
                program = result.to_pte()
            with steps("checking the written program"):
                checked = check_program(result, program, against=against, settings=settings)
            found += checked
            # clean means it loads, runs and matches eager, here; a program that this runtime
            # cannot load (EG521's error) would only fail again
            unloadable = [f for f in checked.with_code(runtime_lacks_kernel.code) if f.severity is Severity.ERROR]
            runs = runs and not unloadable
            if runs:
                with steps("running the program (executorch.runtime)"):
                    done = run_program(result, program, model, inputs, settings=settings, worker=worker)
                found = without_symptoms(found + done.report)
                bounds = done.shapes[1:]
                if bounds:  # a dynamic export: say where it ran besides the example
                    progress(args, f"ran the program on the example inputs and at {', '.join(bounds)}", ongoing=False)
                for skipped in done.skipped:
                    progress(args, f"did not run the program at {skipped}", ongoing=False)
    if program is None:
        progress(args, "the export stopped before lowering (see the EG101 / EG102 findings)", ongoing=False)
        ran: tuple[str, ...] = ()
    else:
        delegation = result.delegation
        ran = ((delegation.stated(),) if delegation is not None and settings.backend != "portable" else ()) + (f"program {len(program):,} bytes",)
        if runs:
            at = " and ".join(shape.partition(" (")[0] for shape in done.shapes[1:])
            ran += ("ran in executorch.runtime and matched eager" + (f" on the example inputs and at the dynamic bounds {at}" if at else ""),)
    return Checked(target, with_factory_location(found, target), ran), program, saved


def _saved(inputs: Sequence[object]) -> bytes:
    """``inputs`` as ``check --runtime --inputs`` takes them: flattened (a ``None`` kept in its
    place, as the program holds it), on the host, in a file that ``torch.save`` writes."""
    import torch
    import torch.utils._pytree as pytree

    flat = [x.detach().cpu() if isinstance(x, torch.Tensor) else x for x in pytree.tree_leaves(list(inputs))]
    buffer = io.BytesIO()
    torch.save(flat, buffer)
    return buffer.getvalue()


def _pte_path(args: argparse.Namespace) -> Path | None:
    if args.output is not None:
        if args.pte is not None:
            raise UsageError("give --pte only (--output is its former name)")
        problem("warning", "--output is deprecated: use --pte (the report goes to --report-file)")
        return args.output
    return args.pte
