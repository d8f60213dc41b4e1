"""The command's arguments: the parser of every command, and where the parse ends, the frozen
options of the command given (``cli/options.py``), with the settings they make with
``[tool.export-guards]``. Imports neither torch nor ExecuTorch."""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from export_guards.cli.options import (
    CheckOptions,
    CommandOptions,
    DiffOptions,
    ExplainOptions,
    LintOptions,
    ReportOptions,
    RulesOptions,
)
from export_guards.compat import runtime_mismatch
from export_guards.errors import Error
from export_guards.render import FORMATS, STATISTICS_FORMATS
from export_guards.ruleset import ProjectRulesError, Rule, Stage, known_rules
from export_guards.settings import BACKENDS, PLACEMENT_POLICIES, Settings

if TYPE_CHECKING:
    from export_guards.pte.inventory import RuntimeInventory

__all__ = ["UsageError", "baseline_from", "kernels_from", "options_from", "parser", "recipe_made_here", "unrecognized"]


class UsageError(Error):
    """Bad input from the user: reported in one line, exit code 2."""


def parser() -> argparse.ArgumentParser:
    """The parser of ``export-guards`` and its commands (``args.command`` names the one given)."""
    # allow_abbrev=False: a gate must not read a typo such as `--runtim` as `--runtime`
    top = argparse.ArgumentParser(
        prog="export-guards", description="Safety checks for PyTorch to ExecuTorch exports.", allow_abbrev=False
    )
    top.add_argument("--version", action="store_true", help="print the version and exit")
    commands = top.add_subparsers(dest="command", metavar="COMMAND")

    linting = _lint_command(commands)

    checking = commands.add_parser(
        "check", help="check a written .pte file, or that a model exports to the same bytes twice", allow_abbrev=False
    )
    _check_options(checking)

    diffing = commands.add_parser(
        "diff",
        help="what shipping a new build as an app update does to XNNPACK's packed-weight cache, weight by weight",
        allow_abbrev=False,
    )
    diffing.add_argument("old", type=Path, metavar="OLD", help="the shipped program (.pte)")
    diffing.add_argument("new", type=Path, metavar="NEW", help="the new build (.pte)")
    _report_options(diffing)

    rules = commands.add_parser("rules", help="list every code", allow_abbrev=False)
    rules.add_argument(
        "--output-format",
        "--format",
        dest="output_format",
        choices=("text", "json"),
        default="text",
        help="text (default) or json",
    )

    explain = commands.add_parser("explain", help="print one code's documentation", allow_abbrev=False)
    explain.add_argument("code", help="a code, such as EG210")
    for command in (linting, checking, diffing, rules, explain):
        command.set_defaults(command_parser=command)  # whose usage an unknown option shows
    return top


def _lint_command(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """``export-guards lint`` and its arguments."""
    linting = commands.add_parser(
        "lint", help="export a model with the guards and report what would go wrong", allow_abbrev=False
    )
    linting.add_argument(
        "targets",
        nargs="+",
        metavar="TARGET",
        help="path/to/file.py:factory or package.module:factory; factory() returns (model, example_inputs); several are linted one after another",
    )
    linting.add_argument(
        "--arg",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an argument for the factory, as a Python literal (else text); repeat for several",
    )
    _export_options(linting)
    linting.add_argument(
        "--pte",
        type=Path,
        metavar="PATH",
        help="write the program here, atomically, when nothing at or above the fail level was found (one target; missing folders are made)",
    )
    linting.add_argument("--output", type=Path, help=argparse.SUPPRESS)  # the former name of --pte
    linting.add_argument(
        "--save-inputs", type=Path, metavar="PATH",
        help="write the factory's example inputs here (torch.save), as `check --runtime --inputs PATH` runs them, when nothing "
        "at or above the fail level was found (one target)",
    )  # fmt: skip
    _kernels_option(linting, " (default: the installed executorch.runtime's)")
    linting.add_argument(
        "--no-run", dest="run", action="store_false",
        help="do not run the written program on the example inputs in executorch.runtime and compare it with eager "
        "(with --kernels, a target whose runtime is not this one, it does not run)",
    )  # fmt: skip
    _report_options(linting)
    return linting


def unrecognized(arguments: Sequence[str], command: argparse.ArgumentParser) -> str:
    """The error for ``arguments`` that ``command`` does not take, each option with the closest
    one it takes, as git and ruff suggest (``--fail-levle``: did you mean ``--fail-level``?), and
    the value given after it, which argparse left over too, read as that option's."""
    actions = {option: action for option, action in command._option_string_actions.items() if option.startswith("--")}
    said, rest = [], list(arguments)
    while rest:
        argument = rest.pop(0)
        close = (
            difflib.get_close_matches(argument.split("=", 1)[0], list(actions), n=1)
            if argument.startswith("--")
            else []
        )
        if not close:
            said.append(argument)
            continue
        takes_value = actions[close[0]].nargs != 0 and "=" not in argument
        value = f" {rest.pop(0)}" if takes_value and rest and not rest[0].startswith("-") else ""
        said.append(
            f"{argument}{value} (did you mean {close[0]}{value or ('=' + argument.split('=', 1)[1] if '=' in argument else '')}?)"
        )
    return f"unrecognized arguments: {' '.join(said)}"


def short_usage(command: argparse.ArgumentParser) -> str:
    """One line of usage, where argparse prints every option (15 lines for ``check``)."""
    return f"usage: {command.prog} [options] ...  (all options: {command.prog} --help)"


def _check_options(checking: argparse.ArgumentParser) -> None:
    """``export-guards check``'s arguments."""
    checking.add_argument(
        "programs",
        nargs="*",
        type=Path,
        metavar="PROGRAM",
        help=".pte files, or folders: each .pte in a folder (and below) with the .ptd files beside it",
    )
    checking.add_argument(
        "--data",
        type=Path,
        action="append",
        default=[],
        metavar="PTD",
        help="an external data file (.ptd) the one program given uses; repeat for several",
    )
    checking.add_argument(
        "--jobs",
        "-j",
        type=int,
        default=1,
        metavar="N",
        help="check N programs at once (their --runtime runs in parallel); default 1",
    )
    _runtime_options(checking)
    _kernels_option(checking, "; with --runtime the installed executorch.runtime's")
    checking.add_argument(
        "--reproducible",
        metavar="TARGET",
        help="export path/to/file.py:factory twice, in separate processes, and compare",
    )
    _export_options(checking, " (with --reproducible)")
    _report_options(checking)


def _runtime_options(checking: argparse.ArgumentParser) -> None:
    """``export-guards check``'s arguments for running the program and replaying its calls."""
    checking.add_argument(
        "--runtime",
        action="store_true",
        help="also load and run each method once in executorch.runtime, in a child process",
    )
    checking.add_argument(
        "--runtime-timeout", type=float, default=120.0, metavar="SECONDS",
        help="with --runtime: how long each program's run may take before it is reported (a warning: a busy machine "
        "reaches a limit too); default 120",
    )  # fmt: skip
    checking.add_argument(
        "--replay", action="store_true",
        help="also replay each kernel call on torch's meta tensors (EG519: out shapes, inputs the operator refuses); "
        "loads torch, seconds (always on with --runtime)",
    )  # fmt: skip
    checking.add_argument(
        "--inputs", type=Path, metavar="FILE",
        help="with --runtime and one program: run forward on these inputs (a list saved with torch.save) instead of made-up ones",
    )  # fmt: skip


def _kernels_option(command: argparse.ArgumentParser, default: str) -> None:
    command.add_argument(
        "--kernels",
        type=Path,
        metavar="FILE",
        help="the operator kernels of the runtime that will load the program (one 'aten::mm.out' per line, or a "
        f"selected_operators.yaml{default}): each one the program needs that it lacks is an error (EG521)",
    )


def _export_options(command: argparse.ArgumentParser, suffix: str = "") -> None:
    lowering = command.add_mutually_exclusive_group()
    lowering.add_argument("--backend", choices=BACKENDS, help=f"partitioner to lower with (default xnnpack){suffix}")
    lowering.add_argument(
        "--recipe",
        metavar="NAME",
        help=f"export with this ExecuTorch recipe instead (xnnpack_fp32, xnnpack_pt2e_int8_static_per_channel, ...){suffix}",
    )
    command.add_argument(
        "--placement",
        choices=PLACEMENT_POLICIES,
        help=f"device constants: report them, or copy them to the host (default error){suffix}",
    )
    command.add_argument(
        "--fold",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=f"fold constant-only weights (default on){suffix}",
    )
    command.add_argument(
        "--fold-max-growth",
        type=float,
        metavar="TIMES",
        help=f"the fold's budget: folds that give a delegate a static weight may grow the program's constants to this many times their size (default 1.25){suffix}",
    )


def _report_options(command: argparse.ArgumentParser) -> None:
    """The arguments of every command that reports findings: which, in what form, from which configuration."""
    _selection_options(command)
    _output_options(command)
    _configuration_options(command)


def _selection_options(command: argparse.ArgumentParser) -> None:
    """Which findings are reported, and which fail the run."""
    command.add_argument(
        "--select",
        help="comma-separated codes or prefixes to report (default: EG, all of ours, and every installed project rule)",
    )
    command.add_argument("--ignore", help="comma-separated codes or prefixes not to report")
    command.add_argument("--extend-select", metavar="CODES", help="codes or prefixes to report besides those selected")
    command.add_argument(
        "--extend-ignore", metavar="CODES", help="codes or prefixes not to report, besides those ignored"
    )
    command.add_argument(
        "--fail-level", choices=["error", "warning", "info"], help="lowest severity that fails (exit 1); default error"
    )
    command.add_argument(
        "--exit-zero",
        action="store_true",
        help="exit 0 even when findings reach the fail level (errors of the tool itself still exit 2)",
    )


def _output_options(command: argparse.ArgumentParser) -> None:
    """Where the report goes and in what form; the baseline."""
    command.add_argument(
        "--output-format",
        "--format",
        dest="output_format",
        choices=tuple(FORMATS),
        default="text",
        help="report format: text (default), json, sarif, or github (Actions annotations)",
    )
    command.add_argument(
        "--report-file",
        type=Path,
        metavar="PATH",
        help="write the report here, atomically, instead of stdout (missing folders are made)",
    )
    command.add_argument(
        "--force",
        action="store_true",
        help="replace a file at an output path even when it is not a program or report that export-guards writes",
    )
    command.add_argument(
        "--statistics", action="store_true", help="count the findings per code instead of listing them"
    )
    command.add_argument(
        "--show-info",
        action="store_true",
        default=None,
        help="list info findings too (text; default: counted on the summary line; config key show-info)",
    )
    command.add_argument(
        "--baseline",
        type=Path,
        metavar="FILE",
        help="report and fail only on findings that this baseline does not hold",
    )
    command.add_argument(
        "--write-baseline",
        type=Path,
        metavar="FILE",
        help="write the findings of this run to FILE as a baseline (then exit 0 unless a step failed)",
    )


def _configuration_options(command: argparse.ArgumentParser) -> None:
    """Which configuration is read; how much is printed."""
    configuration = command.add_mutually_exclusive_group()
    configuration.add_argument(
        "--config",
        type=Path,
        help="the pyproject.toml to read [tool.export-guards] from (default: the nearest one that has the table, from the working folder up)",
    )
    configuration.add_argument(
        "--isolated", action="store_true", help="read no configuration file: defaults and the command line only"
    )
    loudness = command.add_mutually_exclusive_group()
    loudness.add_argument("-q", "--quiet", action="store_true", help="print no progress, only problems")
    loudness.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="list info findings too; show the libraries' warnings and log lines, and full tracebacks",
    )


def options_from(args: argparse.Namespace) -> CommandOptions:
    """The options of the command that ``args`` (the parser's answer) gives, each checked as far
    as the arguments alone allow, with its settings made once (``[tool.export-guards]``, then
    the command line). The one reader of the parser's answer.

    Raises:
        UsageError: a bad option, key or value (see :func:`_settings_from`), or, for ``check``,
            nothing to check, ``--jobs`` under 1, or ``--runtime`` where it cannot run.
    """
    if args.command == "rules":
        return RulesOptions(args.output_format)
    if args.command == "explain":
        return ExplainOptions(args.code)
    if args.command == "diff":
        return DiffOptions(args.old, args.new, _settings_from(args, ("update",)), _report_options_from(args))
    if args.command == "check":
        return _check_options_from(args)
    runs = args.run and args.kernels is None
    return LintOptions(
        targets=tuple(args.targets),
        settings=_settings_from(args, ("program", "partitioned", "pte", "action", *(("runtime",) if runs else ()))),
        report=_report_options_from(args),
        arguments=tuple(args.arg),
        pte=args.pte,
        former_pte=args.output,
        save_inputs=args.save_inputs,
        kernels=args.kernels,
        run=args.run,
    )


def _check_options_from(args: argparse.Namespace) -> CheckOptions:
    if not args.programs and args.reproducible is None:
        raise UsageError("give .pte files or folders to check, or --reproducible path/to/file.py:factory")
    if args.jobs < 1:
        raise UsageError(f"--jobs takes a number of programs to check at once, 1 or more; not {args.jobs}")
    if not args.runtime_timeout > 0:
        raise UsageError(f"--runtime-timeout takes a number of seconds above 0; not {args.runtime_timeout:g}")
    if args.runtime and (mismatch := runtime_mismatch()) is not None:  # every run would fail with a C++ trace
        raise UsageError(f"--runtime cannot run here: {mismatch}")
    rule_stages: tuple[Stage, ...] = ("pte", "runtime", "engine") if args.runtime else ("pte", "engine")
    return CheckOptions(
        settings=_settings_from(args, rule_stages + (("reproducible",) if args.reproducible else ())),
        report=_report_options_from(args),
        programs=tuple(args.programs),
        data=tuple(args.data),
        jobs=args.jobs,
        runtime=args.runtime,
        runtime_timeout_s=args.runtime_timeout,
        replay=args.replay,
        inputs=args.inputs,
        kernels=args.kernels,
        reproducible=args.reproducible,
    )


def _report_options_from(args: argparse.Namespace) -> ReportOptions:
    return ReportOptions(
        output_format=args.output_format,
        statistics=args.statistics,
        report_file=args.report_file,
        baseline=args.baseline,
        write_baseline=args.write_baseline,
        exit_zero=args.exit_zero,
        force=args.force,
        quiet=args.quiet,
        verbose=args.verbose,
    )


def _settings_from(args: argparse.Namespace, rule_stages: Sequence[Stage]) -> Settings:
    """``[tool.export-guards]`` of ``--config`` (default: the nearest ``pyproject.toml`` with
    the table, from the working folder up; none with ``--isolated``), then the command line.

    Raises:
        UsageError: a bad option, key or value, or a selection that reports nothing that the
            command checks (its rules' stages, ``rule_stages``).
    """
    if args.statistics and args.output_format not in STATISTICS_FORMATS:
        raise UsageError(f"--statistics counts findings as text or json, not {args.output_format}")
    if args.config is not None and not args.config.is_file():
        raise UsageError(f"no configuration file at {args.config}")
    given = {
        "select": _codes(args.select) if args.select else None,
        "ignore": _codes(args.ignore) if args.ignore else None,
        "extend_select": _codes(args.extend_select) if args.extend_select else None,
        "extend_ignore": _codes(args.extend_ignore) if args.extend_ignore else None,
        "fail_level": args.fail_level,
        "backend": getattr(args, "backend", None),  # export options: not every command has them
        "placement": getattr(args, "placement", None),
        "fold": getattr(args, "fold", None),
        "fold_max_growth": getattr(args, "fold_max_growth", None),
        "recipe": getattr(args, "recipe", None),
        "show_info": True if args.show_info or args.verbose else None,
    }
    try:
        if args.isolated:
            settings = Settings()
        elif args.config is not None:
            settings = Settings.from_pyproject(args.config)
        else:
            settings, _ = Settings.discover(Path.cwd())
        settings = settings.updated({k: v for k, v in given.items() if v is not None}, "the command line")
    except (OSError, ValueError) as error:
        raise UsageError(str(error)) from None
    if not any(settings.enabled(code) for code, r in known_codes().items() if r.stage in rule_stages):
        raise UsageError(
            f"the selection (select {list(settings.select)}, ignore {list(settings.ignore)}) reports nothing that "
            f"`{args.command}` checks; `export-guards rules` lists which codes each command reports"
        )
    return settings


def baseline_from(path: Path | None) -> frozenset[str] | None:
    """The fingerprints of ``--baseline`` ``path``, read before any work; ``None`` without one.

    Raises:
        UsageError: the file is missing, unreadable, or not a baseline.
    """
    if path is None:
        return None
    from export_guards.render.baseline import read_baseline

    try:
        return read_baseline(path.read_text(encoding="utf-8"), f"--baseline {path}")
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"cannot read --baseline {path}: {getattr(error, 'strerror', None) or error}") from None
    except ValueError as error:
        raise UsageError(str(error)) from None


def kernels_from(path: Path | None) -> RuntimeInventory | None:
    """The runtime that ``--kernels`` ``path`` lists, read before any work; ``None`` without it.

    Raises:
        UsageError: the file is missing, unreadable, or names no operator.
    """
    if path is None:
        return None
    from export_guards.pte.inventory import RuntimeInventory

    try:
        return RuntimeInventory.from_file(path)
    except (OSError, ValueError) as error:
        raise UsageError(f"--kernels: {error}") from None


def known_codes() -> Mapping[str, Rule]:
    """Every code, ours and the installed project rules' (which load here, so that a broken
    rule package is a usage error before any work).

    Raises:
        UsageError: an installed rule package cannot be used, saying which and why.
    """
    try:
        return known_rules()
    except ProjectRulesError as error:
        raise UsageError(str(error)) from None


def _codes(codes: str) -> tuple[str, ...]:
    return tuple(c.strip().upper() for c in codes.split(",") if c.strip())


def recipe_made_here(settings: Settings) -> None:
    """The settings' recipe can be made with this ExecuTorch and the backend SDKs installed
    here (its name is known to be one: ``Settings`` checks it without torch).

    Raises:
        UsageError: it cannot, naming the recipes that can.
    """
    if settings.recipe is None:
        return
    from export_guards.recipes import recipe_type

    try:
        recipe_type(settings.recipe)
    except ValueError as error:
        raise UsageError(str(error)) from None
