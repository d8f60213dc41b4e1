"""The end of a run: the report rendered as asked, delivered to ``--report-file`` or stdout, and
the exit code that says what was found."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from export_guards.cli.console import write_stdout
from export_guards.cli.outputs import Outputs
from export_guards.render import render
from export_guards.render.sarif import project_root as _project_root
from export_guards.report import Report

__all__ = ["EXIT_CLEAN", "EXIT_ERROR", "EXIT_FINDINGS", "deliver", "exit_code", "project_root"]

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


def deliver(args: argparse.Namespace, report: Report, outputs: Outputs, *, root: Path) -> bool:
    """Render ``report`` and write it to the claimed ``--report-file``, else to stdout. Findings
    are never lost: a report that cannot be written goes to stdout, and this returns ``False``."""
    text = render(report, args.output_format, statistics=args.statistics, verbose=args.verbose, root=root)
    if args.report_file is None:
        write_stdout(text)
        return True
    if outputs.write(args.report_file, text.encode()):
        return True
    print("export-guards: the report follows on stdout instead", file=sys.stderr)
    write_stdout(text)
    return False


def exit_code(args: argparse.Namespace, *, failed: bool, complete: bool = True) -> int:
    """1 when findings reach the fail level (unless ``--exit-zero``), else 2 when an output
    could not be written, else 0."""
    if failed and not args.exit_zero:
        return EXIT_FINDINGS
    return EXIT_CLEAN if complete else EXIT_ERROR


def project_root(subject: Path | None) -> Path:
    """The project root that SARIF URIs are relative to: the one holding what is checked (the
    model's file, the program), else the working folder's."""
    return _project_root(subject.resolve() if subject is not None else Path.cwd())
