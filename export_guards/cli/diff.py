"""``export-guards diff OLD.pte NEW.pte``: what shipping the new build as an app update does to
XNNPACK's packed-weight cache, weight by weight. Reads both programs without torch."""

from __future__ import annotations

from pathlib import Path

from export_guards.cli.arguments import UsageError, baseline_from
from export_guards.cli.console import ProgressLines, quiet_libraries
from export_guards.cli.options import DiffOptions
from export_guards.cli.outputs import Outputs
from export_guards.cli.reporting import Checked, against_baseline, deliver, exit_code, merged, project_root
from export_guards.cli.signals import Interrupts
from export_guards.pte.reader.identity import file_kind_of, unreadable_program_at
from export_guards.report import Severity

__all__ = ["run"]


def run(options: DiffOptions, interrupts: Interrupts) -> int:
    """Diff ``options.old`` and ``options.new``; exit 1 when a weight re-packs for nothing or the
    cache would serve a stale one (at or above the fail level), 0 otherwise, 2 on bad input."""
    settings, report, old, new = options.settings, options.report, options.old, options.new
    for path, role in ((old, "OLD, the shipped program"), (new, "NEW, the new build")):
        _program_file(path, role)
    outputs = Outputs(inputs=[old, new], force=report.force, interrupts=interrupts)
    outputs.claim(report.report_file, "report", "--report-file")
    outputs.claim(report.write_baseline, "report", "--write-baseline")
    baseline = baseline_from(report.baseline)
    with outputs, quiet_libraries(report.verbose, load_torch=False):
        from export_guards.pte.check import read_update, update_report

        lines = ProgressLines(quiet=report.quiet)
        with lines.timed(f"comparing the weights of {old} and {new}"):
            try:
                diff = read_update(old, new)
            except ValueError as error:
                raise UsageError(
                    f"{error}: give the .pte files that the export wrote (export-guards check FILE says what is wrong with one)"
                ) from None
            checked = [Checked(f"{new} (update of {old})", update_report(diff, settings), (diff.summary(),))]
        if report.output_format == "text" and not settings.show_info and merged(checked).at_least(Severity.WARNING):
            lines.say(diff.summary(), ongoing=False)  # the summary line gives it only when all passed
        root = project_root(new)
        checked, baselined = against_baseline(report, checked, baseline, outputs, root=root, lines=lines)
        delivered = deliver(report, checked, outputs, root=root, show_info=settings.show_info)
    failed = bool(merged(checked).at_least(settings.fail_level))
    return exit_code(report, failed=failed, complete=delivered and baselined)


def _program_file(path: Path, role: str) -> None:
    """``path`` is a readable file that holds an ExecuTorch program (by its first bytes).

    Raises:
        UsageError: it is missing, a folder, unreadable, a data file (.ptd) or not a program.
    """
    if not path.exists():
        raise UsageError(f"no such file: {path} ({role}): give the path of a .pte file")
    if path.is_dir():
        raise UsageError(f"{path} is a folder, not a program ({role}): give the path of a .pte file")
    try:
        why = unreadable_program_at(path)
    except OSError as error:
        raise UsageError(f"cannot read {path} ({role}): {error.strerror or error}") from None
    if file_kind_of(path) == "data":
        raise UsageError(f"{path} is an external data file (.ptd), not a program ({role}): give the .pte it belongs to")
    if why is not None:
        raise UsageError(f"{path} ({role}) cannot be read as a program: {why}")
