"""The ``export-guards`` command: ``lint`` a model before export, ``check`` a written ``.pte``,
``diff`` a shipped ``.pte`` and its new build (the weights an update re-packs), list and explain
the codes.

Exit codes: 0 clean, 1 findings at or above the fail level (0 with ``--exit-zero``), 2 a usage
error or a step that failed (building the model, export, lowering, writing), 128+N a signal
(130 Ctrl-C, 143 SIGTERM, 129 SIGHUP). stdout carries only the report; progress and problems
go to stderr. Usage errors (bad options, missing or unparsable files, an unknown factory or
recipe, an output path that would overwrite an input or a file that is not the tool's) are
found before torch or ExecuTorch loads.

One module per command (``lint``, ``check``, ``diff``, ``codes``), each handed its frozen options
(``options``); ``arguments`` parses, into those options, ``outputs`` is
the only code that writes or removes a file the user named, ``signals`` turns signals into
one exception, ``console`` keeps stdout for the report and says what the run is doing on
stderr (a line per step; colour on a terminal, ``NO_COLOR`` / ``FORCE_COLOR`` as ruff).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

from export_guards.cli import check, codes, diff, lint
from export_guards.cli.arguments import UsageError, options_from, parser, short_usage, unrecognized
from export_guards.cli.console import problem, write_stdout
from export_guards.cli.options import CheckOptions, DiffOptions, ExplainOptions, LintOptions, RulesOptions
from export_guards.cli.reporting import EXIT_CLEAN, EXIT_ERROR, said_failed
from export_guards.cli.signals import Interrupted, Interrupts
from export_guards.targets import StepFailed

__all__ = ["main"]

_COMMANDS = {
    LintOptions: lint.run,
    CheckOptions: check.run,
    DiffOptions: diff.run,
    RulesOptions: codes.rules,
    ExplainOptions: codes.explain,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command with ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    with Interrupts() as interrupts:  # first: an interrupt during start-up is one too
        try:
            try:
                return _run(argv, interrupts)
            finally:
                interrupts.check()  # an interrupt that some code swallowed still ends the run
        except Interrupted as stop:
            print(f"export-guards: interrupted ({stop.name})", file=sys.stderr)
            return stop.exit_code
        except KeyboardInterrupt:  # code that caught ours raised its own
            print("export-guards: interrupted (SIGINT)", file=sys.stderr)
            return 130


def _run(argv: Sequence[str] | None, interrupts: Interrupts) -> int:
    top = parser()
    args, unknown = top.parse_known_args(argv)
    if unknown:  # the command given, in three lines at most: its one-line usage, not every option
        command = getattr(args, "command_parser", None) or top
        print(f"{short_usage(command)}\n{command.prog}: error: {unrecognized(unknown, command)}", file=sys.stderr)
        return EXIT_ERROR
    if args.version:
        write_stdout(f"export-guards {_version()}\n")
        return EXIT_CLEAN
    if args.command is None:
        top.print_help(sys.stderr)
        return EXIT_ERROR
    try:
        options = options_from(args)
        return _COMMANDS[type(options)](options, interrupts)  # type: ignore[operator]
    except UsageError as error:
        problem("error", str(error))
        return EXIT_ERROR
    except StepFailed as error:  # lint's, check's or diff's: each takes -v
        said_failed(error, interrupts, verbose=args.verbose)
        return EXIT_ERROR


def _version() -> str:
    try:
        return version("export-guards")
    except PackageNotFoundError:
        return "unknown (not installed)"
