"""``export-guards lint``: export a model with the guards, write its program and check it as
``export-guards check`` would against the runtime that will load it, report, and keep the
program when nothing reached the fail level."""

from __future__ import annotations

import argparse
from pathlib import Path

from export_guards.cli.arguments import UsageError, baseline_from, kernels_from, recipe_made_here, settings_from
from export_guards.cli.console import Stages, problem, progress, quiet_libraries, stdout_to_stderr
from export_guards.cli.outputs import Outputs
from export_guards.cli.reporting import against_baseline, deliver, exit_code, project_root, reported_if_failed, with_factory_location
from export_guards.cli.signals import Interrupts
from export_guards.targets import TargetError, check_target, parse_arguments, step

__all__ = ["run"]


def run(args: argparse.Namespace, interrupts: Interrupts) -> int:
    """Lint ``args.target``; exit code as :func:`~export_guards.cli.reporting.exit_code`."""
    settings = settings_from(args, ("program", "partitioned", "pte", "action"))
    against = kernels_from(args)
    try:
        arguments = parse_arguments(args.arg)
        source = check_target(args.target)  # missing, unparsable, no such factory: before any import
    except TargetError as error:
        raise UsageError(str(error)) from None
    outputs = Outputs(inputs=[source], force=args.force, interrupts=interrupts)
    pte_path = outputs.claim(_pte_path(args), "program", "--pte" if args.output is None else "--output")
    outputs.claim(args.report_file, "report", "--report-file")
    outputs.claim(args.write_baseline, "report", "--write-baseline")
    baseline = baseline_from(args)
    steps = Stages(args)
    fold = "on" if settings.fold else "off"
    progress(args, f"exporting and linting {args.target} ({settings.recipe or settings.backend}, placement={settings.placement}, fold={fold})")
    with outputs, quiet_libraries(args.verbose), reported_if_failed(args, outputs, source, args.target):
        with stdout_to_stderr():  # stdout carries only the report, whatever the model prints
            with steps("loading ExecuTorch"):
                from export_guards.pipeline import export_target

            recipe_made_here(settings)
            try:
                result = export_target(args.target, arguments, config=settings, each_step=steps)
            except TargetError as error:
                raise UsageError(str(error)) from None
            found, program = result.report, None
            if result.edge is not None:  # written and checked whether or not it is kept: the verdict is the program's
                with steps("writing the program (to_executorch)"), step("writing the program (to_executorch)"):
                    program = result.to_pte()
                with steps("checking the written program"):
                    found += result.check_program(program, against=against, config=settings)
        root = project_root(source)
        report, baselined = against_baseline(args, with_factory_location(found, args.target), baseline, outputs, root=root)
        failing = report.at_least(settings.fail_level)
        written = True
        if program is None:  # a constant the host cannot read stopped the export
            progress(args, "the export stopped before lowering (see the EG101 / EG102 findings)", ongoing=False)
        elif pte_path is not None and failing:
            progress(args, f"not writing {pte_path}: {len(failing)} finding(s) at or above {settings.fail_level.value}", ongoing=False)
        elif pte_path is not None:
            written = outputs.write(pte_path, program)
            if written:
                progress(args, f"wrote {pte_path}", ongoing=False)
        delivered = deliver(args, report, outputs, root=root)
    return exit_code(args, failed=bool(failing) or program is None, complete=written and delivered and baselined)


def _pte_path(args: argparse.Namespace) -> Path | None:
    if args.output is not None:
        if args.pte is not None:
            raise UsageError("give --pte only (--output is its former name)")
        problem("warning", "--output is deprecated: use --pte (the report goes to --report-file)")
        return args.output
    return args.pte
