"""``export-guards check``: check a written ``.pte`` (and its ``.ptd`` files), or export a model
twice and compare the bytes."""

from __future__ import annotations

import argparse
from pathlib import Path

from export_guards.cli.arguments import UsageError, baseline_from, kernels_from, recipe_made_here, settings_from
from export_guards.cli.console import Stages, quiet_libraries
from export_guards.cli.outputs import Outputs
from export_guards.cli.reporting import against_baseline, deliver, exit_code, project_root, reported_if_failed
from export_guards.cli.signals import Interrupts
from export_guards.pte.reader.identity import file_kind_of
from export_guards.report import Report
from export_guards.ruleset import Stage
from export_guards.targets import StepFailed, TargetError, check_target

__all__ = ["run"]


def run(args: argparse.Namespace, interrupts: Interrupts) -> int:
    """Check ``args.program`` and/or ``args.reproducible``; exit code as
    :func:`~export_guards.cli.reporting.exit_code`."""
    if args.program is None and args.reproducible is None:
        raise UsageError("give a .pte file to check, or --reproducible path/to/file.py:factory")
    stages: tuple[Stage, ...] = ("pte", "runtime", "engine") if args.runtime else ("pte", "engine")
    settings = settings_from(args, stages + (("reproducible",) if args.reproducible else ()))
    _check_files(args)
    against = kernels_from(args)
    try:
        source = check_target(args.reproducible) if args.reproducible is not None else None
    except TargetError as error:
        raise UsageError(str(error)) from None
    outputs = Outputs(inputs=[args.program, *args.data, source], force=args.force, interrupts=interrupts)
    outputs.claim(args.report_file, "report", "--report-file")
    outputs.claim(args.write_baseline, "report", "--write-baseline")
    baseline = baseline_from(args)
    steps = Stages(args)
    with outputs, quiet_libraries(args.verbose), reported_if_failed(args, outputs, source or args.program, args.reproducible):
        from export_guards.pte.check import ExportFailed, check_pte, check_reproducible

        report = Report()
        if args.program is not None:
            with steps(f"checking {args.program}" + (" and running it in executorch.runtime" if args.runtime else "")):
                report += check_pte(args.program, data_files=args.data, config=settings, runtime=args.runtime, against=against)
        if args.reproducible is not None:
            recipe_made_here(settings)
            try:
                with steps(f"exporting {args.reproducible} twice, in separate processes ({settings.recipe or settings.backend})"):
                    report += check_reproducible(
                        args.reproducible,
                        backend=settings.backend,
                        placement=settings.placement,
                        fold=settings.fold,
                        recipe=settings.recipe,
                        config=settings,
                    )
            except ExportFailed as error:
                raise StepFailed("the reproducibility check", str(error)) from None
        root = project_root(source or args.program)
        report, baselined = against_baseline(args, report, baseline, outputs, root=root)
        delivered = deliver(args, report, outputs, root=root)
    return exit_code(args, failed=bool(report.at_least(settings.fail_level)), complete=delivered and baselined)


def _check_files(args: argparse.Namespace) -> None:
    """The program and data files exist, are files, and are of their kind, before any import."""
    if args.runtime and len(args.data) > 1:
        raise UsageError(f"--runtime loads one data file (executorch.runtime takes one data_path); {len(args.data)} were given")
    if args.program is not None:
        _readable_file(args.program, "the program")
        if file_kind_of(args.program) == "data":
            raise UsageError(f"{args.program} is an external data file (.ptd), not a program: pass it with --data next to its .pte")
    for path in args.data:
        _readable_file(path, "--data")
        if file_kind_of(path) == "program":
            raise UsageError(f"--data {path} is a program (.pte), not a data file: give it as the program to check")


def _readable_file(path: Path, option: str) -> None:
    if not path.exists():
        raise UsageError(f"no such file: {path} ({option})")
    if path.is_dir():
        raise UsageError(f"{path} is a folder, not a file ({option})")
    try:
        with open(path, "rb"):
            pass
    except OSError as error:
        raise UsageError(f"cannot read {path} ({option}): {error.strerror or error}") from None
