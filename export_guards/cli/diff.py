"""``export-guards diff OLD.pte NEW.pte``: what shipping the new build as an app update does to
XNNPACK's packed-weight cache, weight by weight. Reads both programs without torch."""

from __future__ import annotations

import argparse
from pathlib import Path

from export_guards.cli.arguments import UsageError, baseline_from, settings_from
from export_guards.cli.console import Stages, progress, quiet_libraries
from export_guards.cli.outputs import Outputs
from export_guards.cli.reporting import Checked, against_baseline, deliver, exit_code, merged, project_root
from export_guards.cli.signals import Interrupts
from export_guards.pte.reader.identity import file_kind
from export_guards.report import Severity

__all__ = ["run"]


def run(args: argparse.Namespace, interrupts: Interrupts) -> int:
    """Diff ``args.old`` and ``args.new``; exit 1 when a weight re-packs for nothing or the cache
    would serve a stale one (at or above the fail level), 0 otherwise, 2 on bad input."""
    settings = settings_from(args, ("update",))
    for path, role in ((args.old, "OLD, the shipped program"), (args.new, "NEW, the new build")):
        _program_file(path, role)
    outputs = Outputs(inputs=[args.old, args.new], force=args.force, interrupts=interrupts)
    outputs.claim(args.report_file, "report", "--report-file")
    outputs.claim(args.write_baseline, "report", "--write-baseline")
    baseline = baseline_from(args)
    with outputs, quiet_libraries(args.verbose, load_torch=False):
        from export_guards.pte.check import read_update, update_report

        with Stages(args)(f"comparing the weights of {args.old} and {args.new}"):
            try:
                diff = read_update(args.old, args.new)
            except ValueError as error:
                raise UsageError(f"{error}: give the .pte files that the export wrote (export-guards check FILE says what is wrong with one)") from None
            checked = [Checked(f"{args.new} (update of {args.old})", update_report(diff, settings), (diff.summary(),))]
        if args.output_format == "text" and not settings.show_info and merged(checked).at_least(Severity.WARNING):
            progress(args, diff.summary(), ongoing=False)  # the summary line gives it only when all passed
        root = project_root(args.new)
        checked, baselined = against_baseline(args, checked, baseline, outputs, root=root)
        delivered = deliver(args, checked, outputs, root=root, show_info=settings.show_info)
    failed = bool(merged(checked).at_least(settings.fail_level))
    return exit_code(args, failed=failed, complete=delivered and baselined)


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
        with open(path, "rb") as file:
            head = file.read(8)
    except OSError as error:
        raise UsageError(f"cannot read {path} ({role}): {error.strerror or error}") from None
    kind = file_kind(head)
    if kind == "data":
        raise UsageError(f"{path} is an external data file (.ptd), not a program ({role}): give the .pte it belongs to")
    if kind != "program":
        raise UsageError(
            f"{path} is not an ExecuTorch program ({role}): it has {len(head)} bytes to begin with, and a .pte holds 'ET' and "
            "a schema version at bytes 4 to 8 (this holds {bytes(head[4:8])!r}); give the .pte file that the export wrote"
        )
