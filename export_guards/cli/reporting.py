"""The end of a run: each input's report (a program, a lint target) rendered as asked,
delivered to ``--report-file`` or stdout, and the exit code that says what was found."""

from __future__ import annotations

import contextlib
import sys
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from export_guards.cli.console import ProgressLines, colour_report, colours, problem, write_stdout
from export_guards.cli.options import ReportOptions
from export_guards.cli.outputs import Outputs
from export_guards.cli.signals import Interrupts
from export_guards.render import render
from export_guards.render.baseline import held_by, render_baseline
from export_guards.render.sarif import project_root as _project_root
from export_guards.render.text import render_text
from export_guards.report import Report, Severity, SourceLocation
from export_guards.targets import StepFailed, target_file

__all__ = [
    "EXIT_CLEAN",
    "EXIT_ERROR",
    "EXIT_FINDINGS",
    "Checked",
    "against_baseline",
    "deliver",
    "exit_code",
    "merged",
    "project_root",
    "reported_if_failed",
    "said_failed",
    "with_factory_location",
]


EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


@dataclass(frozen=True)
class Checked:
    """One input of the run and its report.

    Attributes:
        subject: the input as the user named it (``model.pte``, ``models.py:net``).
        report: what was found.
        ran: what the run did, for the text summary line (``program 12,304 bytes``).
    """

    subject: str
    report: Report
    ran: tuple[str, ...] = ()


def merged(checked: Sequence[Checked]) -> Report:
    """The findings of every input, in input order: what the machine formats and the exit code read."""
    return sum((c.report for c in checked), Report())


def deliver(
    options: ReportOptions, checked: Sequence[Checked], outputs: Outputs, *, root: Path, show_info: bool = False
) -> bool:
    """Render the reports and write them to the claimed ``--report-file``, else to stdout.
    Text gives each input's findings and summary line, then, for several inputs, one line
    over them all; the machine formats and ``--statistics`` hold every input's findings as one
    report (each finding names its file). Findings are never lost: a report that cannot be
    written goes to stdout, and this returns ``False``. Text is coloured on stdout where
    :func:`~export_guards.cli.console.colours` says so; a file and the machine formats never are."""
    if options.output_format != "text" or options.statistics or len(checked) == 1:
        one = checked[0] if len(checked) == 1 else Checked("", merged(checked))
        text = render(
            one.report,
            options.output_format,
            statistics=options.statistics,
            show_info=show_info,
            root=root,
            ran=one.ran,
        )
    else:
        blocks = [render_text(c.report, show_info=show_info, root=root, ran=c.ran, subject=c.subject) for c in checked]
        text = "\n".join(blocks) + "\n" + _over_all(checked) + "\n"
    if options.report_file is None:
        _to_stdout(options.output_format, text)
        return True
    if outputs.write(options.report_file, text.encode()):
        return True
    print("export-guards: the report follows on stdout instead", file=sys.stderr)
    _to_stdout(options.output_format, text)
    return False


def _over_all(checked: Sequence[Checked]) -> str:
    """``Checked 3 programs: 2 passed, 1 with problems (1 error, 2 warnings).``"""
    problems = [c for c in checked if any(f.severity.rank > 0 for f in c.report)]
    total = merged(checked)
    errors, warnings = len(total.errors), len(total.at_least(Severity.WARNING)) - len(total.errors)
    counts = ", ".join(
        f"{n} {word}{'s' if n != 1 else ''}" for n, word in ((errors, "error"), (warnings, "warning")) if n
    )
    kind = "program" if all(c.subject.endswith(".pte") for c in checked) else "target"
    said = f"Checked {len(checked)} {kind}s: {len(checked) - len(problems)} passed"
    return said + (f", {len(problems)} with problems ({counts})." if problems else ".")


def _to_stdout(output_format: str, text: str) -> None:
    write_stdout(colour_report(text) if output_format == "text" and colours(sys.stdout) else text)


def against_baseline(
    options: ReportOptions,
    checked: Sequence[Checked],
    baseline: frozenset[str] | None,
    outputs: Outputs,
    *,
    root: Path,
    lines: ProgressLines,
) -> tuple[list[Checked], bool]:
    """Each input's report less what ``--baseline`` holds (said on stderr); with
    ``--write-baseline``, every input's findings written there and then left out whole, as the
    new baseline holds them all. Also whether that write succeeded. What it did is one of the
    run's progress ``lines``: none with ``-q``. Fingerprints are those of all inputs' findings together, as the
    baseline holds them."""
    checked = list(checked)
    if options.write_baseline is not None:
        written = outputs.write(options.write_baseline, render_baseline(merged(checked), root=root).encode())
        if written:
            lines.say(
                f"wrote {len(merged(checked))} finding(s) to the baseline {options.write_baseline}", ongoing=False
            )
        return [replace(c, report=Report((), c.report.suppressed)) for c in checked], written
    if baseline is None:
        return checked, True
    held = iter(held_by(merged(checked), baseline, root=root))
    kept = [
        replace(c, report=Report(tuple(f for f in c.report if not next(held)), c.report.suppressed)) for c in checked
    ]
    left_out = len(merged(checked)) - len(merged(kept))
    if left_out:
        lines.say(f"{left_out} finding(s) in the baseline {options.baseline} left out", ongoing=False)
    return kept, True


def exit_code(options: ReportOptions, *, failed: bool, complete: bool = True) -> int:
    """1 when findings reach the fail level (unless ``--exit-zero``), else 2 when an output
    could not be written, else 0."""
    if failed and not options.exit_zero:
        return EXIT_FINDINGS
    return EXIT_CLEAN if complete else EXIT_ERROR


def project_root(subject: Path | None) -> Path:
    """The project root that every format's paths are relative to (text, JSON, GitHub, SARIF):
    the one holding what is checked (the model's file, the program), else the working folder's."""
    return _project_root(subject.resolve() if subject is not None else Path.cwd())


@contextlib.contextmanager
def reported_if_failed(
    options: ReportOptions, outputs: Outputs, source: Path | None, target: str | None
) -> Iterator[None]:
    """A step that fails is a report too (one EG002 finding: the step, the innermost cause,
    the user's line), for a reader of JSON, SARIF, annotations or a report file; the error
    still goes to stderr and the exit code is still 2. Text on stdout would repeat stderr."""
    try:
        yield
    except StepFailed as failed:
        if options.output_format != "text" or options.report_file is not None:
            report = failed.report
            located = with_factory_location(report, target) if target else report
            deliver(options, [Checked(target or str(source), located)], outputs, root=project_root(source))
        raise


def said_failed(error: StepFailed, interrupts: Interrupts, *, verbose: bool) -> None:
    """A failed step on stderr: what failed and why, and the cause's traceback with ``-v``
    (``verbose``)."""
    interrupts.check()  # a library turned the interrupt into an error of its own
    problem(f"{error.step} failed", error.detail)
    if verbose and error.__cause__ is not None:
        traceback.print_exception(error.__cause__)
    elif error.__cause__ is not None:
        print("(run with -v for the full traceback)", file=sys.stderr)


def with_factory_location(report: Report, target: str) -> Report:
    """Findings that no user frame places point at the factory: the nearest user code."""
    path = target_file(target)
    if path is None:
        return report
    name = target.rpartition(":")[2]
    lines = path.read_text().splitlines()
    line = next((i for i, text in enumerate(lines, 1) if text.lstrip().startswith(f"def {name}(")), 1)
    return report.located_at(SourceLocation(str(path), line, lines[line - 1].strip() if lines else ""))
