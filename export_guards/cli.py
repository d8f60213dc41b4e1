"""The ``export-guards`` command: ``lint`` a model before export, ``check`` a written ``.pte``,
list and explain rules.

Exit codes: 0 clean, 1 findings at or above the fail level, 2 usage error or a model that
failed to export. stdout carries only the report; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from export_guards.settings import BACKENDS, PLACEMENT_POLICIES, Settings
from export_guards.targets import first_line

__all__ = ["main"]

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


class UsageError(Exception):
    """Bad input from the user: reported in one line, exit code 2."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_ERROR
    try:
        return int(args.run(args))
    except UsageError as error:
        print(f"export-guards: error: {error}", file=sys.stderr)
        return EXIT_ERROR


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="export-guards", description="Safety checks for PyTorch to ExecuTorch exports.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    lint = commands.add_parser("lint", help="export a model with the guards and report what would go wrong")
    lint.add_argument("target", help="path/to/file.py:factory or package.module:factory; factory() returns (model, example_inputs)")
    lint.add_argument("--backend", choices=BACKENDS, help="partitioner to lower with (default xnnpack)")
    lint.add_argument("--placement", choices=PLACEMENT_POLICIES, help="device constants: report them, or copy them to the host (default error)")
    lint.add_argument("--fold", action=argparse.BooleanOptionalAction, default=None, help="fold constant-only weights (default on)")
    _report_options(lint)
    lint.add_argument("--output", type=Path, help="write the .pte here when nothing at or above the fail level was found")
    lint.add_argument("--verbose", action="store_true", help="print full tracebacks")
    lint.set_defaults(run=_lint)

    check = commands.add_parser("check", help="check a written .pte file, or that a model exports to the same bytes twice")
    check.add_argument("program", nargs="?", type=Path, help="the .pte file")
    check.add_argument("--data", type=Path, action="append", default=[], metavar="PTD", help="an external data file (.ptd) the program uses; repeat for several")
    check.add_argument("--runtime", action="store_true", help="also load and run each method once in executorch.runtime, in a child process")
    check.add_argument("--reproducible", metavar="TARGET", help="export path/to/file.py:factory twice, in separate processes, and compare")
    check.add_argument("--backend", choices=BACKENDS, help="partitioner for --reproducible (default xnnpack)")
    check.add_argument("--placement", choices=PLACEMENT_POLICIES, help="device constants, for --reproducible (default error)")
    check.add_argument("--fold", action=argparse.BooleanOptionalAction, default=None, help="fold constant-only weights, for --reproducible (default on)")
    _report_options(check)
    check.set_defaults(run=_check)

    rules = commands.add_parser("rules", help="list the rules")
    rules.set_defaults(run=_rules)

    explain = commands.add_parser("explain", help="print one rule's documentation")
    explain.add_argument("code", help="a rule code, such as EG210")
    explain.set_defaults(run=_explain)
    return parser


def _report_options(command: argparse.ArgumentParser) -> None:
    command.add_argument("--select", help="comma-separated codes or prefixes to run (default EG: all)")
    command.add_argument("--ignore", help="comma-separated codes or prefixes not to run")
    command.add_argument("--fail-level", choices=["error", "warning", "info"], help="lowest severity that fails (exit 1); default error")
    command.add_argument("--format", choices=["text", "json", "sarif"], default="text", help="report format on stdout")
    command.add_argument("--config", type=Path, help="pyproject.toml to read [tool.export-guards] from (default ./pyproject.toml)")


def _lint(args: argparse.Namespace) -> int:
    settings = _settings(args)
    from export_guards.render import FORMATS

    try:
        # stdout carries only the report: what the model's code prints goes to stderr.
        with contextlib.redirect_stdout(sys.stderr):
            _progress(f"building the model ({args.target})")
            model, inputs = _target(args.target)
            _progress("exporting with torch.export")
            import torch

            from export_guards.pipeline import lower_with_guards

            program = torch.export.export(model, inputs)
            fold = "on" if settings.fold else "off"
            _progress(f"linting and lowering ({settings.backend}, placement={settings.placement}, fold={fold})")
            result = lower_with_guards(program, config=settings)
    except UsageError:
        raise
    except Exception as error:  # the model failed to export: summarise, exit 2
        print(f"export-guards: the model failed to export: {type(error).__name__}: {first_line(error)}", file=sys.stderr)
        if args.verbose:
            traceback.print_exc()
        else:
            print("(run with --verbose for the full traceback)", file=sys.stderr)
        return EXIT_ERROR

    sys.stdout.write(FORMATS[args.format](result.report))
    failing = result.report.at_least(settings.fail_level)
    if result.edge is None:  # a constant the host cannot read stopped the export: never clean
        _progress("the export stopped before lowering (see the EG101 / EG102 findings)")
        return EXIT_FINDINGS
    if args.output is not None:
        if failing:
            _progress(f"not writing {args.output}: {len(failing)} finding(s) at or above {settings.fail_level.value}")
        else:
            try:
                args.output.write_bytes(result.to_pte())
            except OSError as error:
                raise UsageError(f"cannot write {args.output}: {error.strerror or error}") from None
            _progress(f"wrote {args.output}")
    return EXIT_FINDINGS if failing else EXIT_CLEAN


def _check(args: argparse.Namespace) -> int:
    if args.program is None and args.reproducible is None:
        raise UsageError("give a .pte file to check, or --reproducible path/to/file.py:factory")
    settings = _settings(args)
    from export_guards.pte.check import ExportFailed, check_pte, check_reproducible
    from export_guards.render import FORMATS
    from export_guards.report import Report

    report = Report()
    if args.program is not None:
        _progress(f"checking {args.program}")
        try:
            report += check_pte(args.program, data_files=args.data, config=settings, runtime=args.runtime)
        except (OSError, ValueError) as error:  # a path that is not a file; --runtime with two --data
            raise UsageError(str(error)) from None
    if args.reproducible is not None:
        _progress(f"exporting {args.reproducible} twice, in separate processes ({settings.backend})")
        try:
            report += check_reproducible(
                args.reproducible,
                backend=settings.backend,
                placement=settings.placement,
                fold=settings.fold,
                config=settings,
            )
        except ExportFailed as error:
            raise UsageError(str(error)) from None
    sys.stdout.write(FORMATS[args.format](report))
    return EXIT_FINDINGS if report.at_least(settings.fail_level) else EXIT_CLEAN


def _rules(args: argparse.Namespace) -> int:
    from export_guards.ruleset import CATALOG

    width = max(len(r.name) for r in CATALOG.values())
    for code, registered in CATALOG.items():
        print(f"{code}  {registered.name:<{width}}  {registered.severity.value:<7}  {registered.summary}")
    return EXIT_CLEAN


def _explain(args: argparse.Namespace) -> int:
    from export_guards.ruleset import CATALOG, STAGES

    code = args.code.strip().upper()
    registered = CATALOG.get(code)
    if registered is None:
        raise UsageError(f"no rule {args.code!r}; `export-guards rules` lists them")
    print(f"{code} {registered.name} ({registered.severity.value}; {STAGES[registered.stage]})\n")
    print(registered.summary)
    print(f"\nHow to fix: {registered.fix}")
    page = _rule_page(code)
    if page:
        print(f"\n{page}")
    print(f"\nDocumentation: {registered.help_uri}")
    return EXIT_CLEAN


def _rule_page(code: str) -> str:
    """The rule's section of docs/rules.md, when the docs are at hand (a source checkout)."""
    docs = Path(__file__).resolve().parent.parent / "docs" / "rules.md"
    if not docs.is_file():
        return ""
    sections = docs.read_text().split("\n## ")
    return next(("## " + s.strip() for s in sections if s.startswith(code)), "")


def _settings(args: argparse.Namespace) -> Settings:
    """``[tool.export-guards]`` of ``--config`` (default ./pyproject.toml), then the command line."""
    path = args.config or Path("pyproject.toml")
    if args.config is not None and not path.is_file():
        raise UsageError(f"no configuration file at {path}")
    given = {
        "select": _split(args.select) if args.select else None,
        "ignore": _split(args.ignore) if args.ignore else None,
        "fail_level": args.fail_level,
        "backend": getattr(args, "backend", None),
        "placement": getattr(args, "placement", None),
        "fold": getattr(args, "fold", None),
    }
    try:
        settings = Settings.from_pyproject(path) if path.is_file() else Settings()
        return settings.updated({k: v for k, v in given.items() if v is not None}, "the command line")
    except (OSError, ValueError) as error:
        raise UsageError(str(error)) from None


def _target(target: str) -> tuple[Any, tuple[Any, ...]]:
    from export_guards.targets import TargetError, load_target

    try:
        return load_target(target)
    except TargetError as error:
        raise UsageError(str(error)) from None


def _split(codes: str) -> tuple[str, ...]:
    return tuple(c.strip().upper() for c in codes.split(",") if c.strip())


def _progress(message: str) -> None:
    print(f"export-guards: {message}...", file=sys.stderr, flush=True)
