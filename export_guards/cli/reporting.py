"""The end of a run: the report rendered as asked, delivered to ``--report-file`` or stdout, and
the exit code that says what was found."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from export_guards.cli.console import colour_report, colours, progress, write_stdout
from export_guards.cli.outputs import Outputs
from export_guards.render import render
from export_guards.render.baseline import render_baseline, without_baselined
from export_guards.render.sarif import project_root as _project_root
from export_guards.report import Report, SourceLocation
from export_guards.ruleset import CATALOG, Hit, finding
from export_guards.targets import StepFailed, target_file

__all__ = ["EXIT_CLEAN", "EXIT_ERROR", "EXIT_FINDINGS", "against_baseline", "deliver", "exit_code", "failed_report", "project_root", "reported_if_failed", "with_factory_location"]

STEP_FAILED = "EG002"

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


def deliver(args: argparse.Namespace, report: Report, outputs: Outputs, *, root: Path) -> bool:
    """Render ``report`` and write it to the claimed ``--report-file``, else to stdout. Findings
    are never lost: a report that cannot be written goes to stdout, and this returns ``False``.
    The text format is coloured on stdout where :func:`~export_guards.cli.console.colours` says
    so; a file and the machine formats never are."""
    text = render(report, args.output_format, statistics=args.statistics, verbose=args.verbose, root=root)
    if args.report_file is None:
        _to_stdout(args, text)
        return True
    if outputs.write(args.report_file, text.encode()):
        return True
    print("export-guards: the report follows on stdout instead", file=sys.stderr)
    _to_stdout(args, text)
    return False


def _to_stdout(args: argparse.Namespace, text: str) -> None:
    write_stdout(colour_report(text) if args.output_format == "text" and colours(sys.stdout) else text)


def against_baseline(args: argparse.Namespace, report: Report, baseline: frozenset[str] | None, outputs: Outputs, *, root: Path) -> tuple[Report, bool]:
    """``report`` less what ``--baseline`` holds (said on stderr); with ``--write-baseline``,
    ``report`` written there and then left out whole, as the new baseline holds it all. Also
    whether that write succeeded. What it did is a progress line: none with ``-q``."""
    written = True
    if args.write_baseline is not None:
        written = outputs.write(args.write_baseline, render_baseline(report, root=root).encode())
        if written:
            progress(args, f"wrote {len(report)} finding(s) to the baseline {args.write_baseline}", ongoing=False)
        return Report((), report.suppressed), written
    if baseline is not None:
        report, left_out = without_baselined(report, baseline, root=root)
        if left_out:
            progress(args, f"{left_out} finding(s) in the baseline {args.baseline} left out", ongoing=False)
    return report, written


def exit_code(args: argparse.Namespace, *, failed: bool, complete: bool = True) -> int:
    """1 when findings reach the fail level (unless ``--exit-zero``), else 2 when an output
    could not be written, else 0."""
    if failed and not args.exit_zero:
        return EXIT_FINDINGS
    return EXIT_CLEAN if complete else EXIT_ERROR


def project_root(subject: Path | None) -> Path:
    """The project root that every format's paths are relative to (text, JSON, GitHub, SARIF):
    the one holding what is checked (the model's file, the program), else the working folder's."""
    return _project_root(subject.resolve() if subject is not None else Path.cwd())


@contextlib.contextmanager
def reported_if_failed(args: argparse.Namespace, outputs: Outputs, source: Path | None, target: str | None) -> Iterator[None]:
    """A step that fails is a report too (one EG002 finding: the step, the innermost cause,
    the user's line), for a reader of JSON, SARIF, annotations or a report file; the error
    still goes to stderr and the exit code is still 2. Text on stdout would repeat stderr."""
    try:
        yield
    except StepFailed as failed:
        if args.output_format != "text" or args.report_file is not None:
            report = failed_report(failed)
            deliver(args, with_factory_location(report, target) if target else report, outputs, root=project_root(source))
        raise


def failed_report(failed: StepFailed) -> Report:
    """The report of a run that a failed step ended: its EG002 finding, on the user's line
    when the failure went through it."""
    found = finding(CATALOG[STEP_FAILED], Hit(f"{failed.step} failed: {failed.cause}"))
    return Report.of([replace(found, location=failed.location)])


def with_factory_location(report: Report, target: str) -> Report:
    """Findings that no user frame places point at the factory: the nearest user code."""
    path = target_file(target)
    if path is None:
        return report
    name = target.rpartition(":")[2]
    lines = path.read_text().splitlines()
    line = next((i for i, text in enumerate(lines, 1) if text.lstrip().startswith(f"def {name}(")), 1)
    return report.located_at(SourceLocation(str(path), line, lines[line - 1].strip() if lines else ""))
