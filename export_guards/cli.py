"""The ``export-guards`` command: ``lint`` a model before export, ``check`` a written ``.pte``,
list and explain the codes.

Exit codes: 0 clean, 1 findings at or above the fail level (0 with ``--exit-zero``), 2 a usage
error or a step that failed (building the model, export, lowering, writing), 130 interrupted.
stdout carries only the report; progress and problems go to stderr. What needs no model
(``rules``, ``explain``, ``--version``, ``--help``, a usage error) imports neither torch nor
ExecuTorch.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import logging
import os
import sys
import tempfile
import traceback
import warnings
from collections.abc import Iterator, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from export_guards.report import Report, SourceLocation
from export_guards.ruleset import CATALOG, STAGES, Stage
from export_guards.ruleset.catalog import RETIRED
from export_guards.settings import BACKENDS, PLACEMENT_POLICIES, Settings
from export_guards.targets import StepFailed, TargetError, parse_arguments, step, target_file

__all__ = ["main"]

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR, EXIT_INTERRUPTED = 0, 1, 2, 130
REPORT_FORMATS = ("text", "json", "sarif", "github")
_LIBRARIES = ("torch", "torchao", "executorch", "coremltools")  # whose warnings and logs are not the user's (coremltools: imported by the CoreML recipes)


class UsageError(Exception):
    """Bad input from the user: reported in one line, exit code 2."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command with ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.version:
        print(f"export-guards {_version()}")
        return EXIT_CLEAN
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_ERROR
    try:
        return int(args.run(args))
    except UsageError as error:
        print(f"export-guards: error: {error}", file=sys.stderr)
        return EXIT_ERROR
    except StepFailed as error:
        print(f"export-guards: {error}", file=sys.stderr)
        if getattr(args, "verbose", False) and error.__cause__ is not None:
            traceback.print_exception(error.__cause__)
        elif error.__cause__ is not None:
            print("(run with -v for the full traceback)", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("export-guards: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _parser() -> argparse.ArgumentParser:
    # allow_abbrev=False: a gate must not read a typo such as `--runtim` as `--runtime`
    parser = argparse.ArgumentParser(prog="export-guards", description="Safety checks for PyTorch to ExecuTorch exports.", allow_abbrev=False)
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    lint = commands.add_parser("lint", help="export a model with the guards and report what would go wrong", allow_abbrev=False)
    lint.add_argument("target", help="path/to/file.py:factory or package.module:factory; factory() returns (model, example_inputs)")
    lint.add_argument("--arg", action="append", default=[], metavar="NAME=VALUE", help="an argument for the factory, as a Python literal (else text); repeat for several")
    _export_options(lint)
    lint.add_argument("--pte", type=Path, metavar="PATH", help="write the program here, atomically, when nothing at or above the fail level was found")
    lint.add_argument("--output", type=Path, help=argparse.SUPPRESS)  # the former name of --pte
    _report_options(lint)
    lint.set_defaults(run=_lint)

    check = commands.add_parser("check", help="check a written .pte file, or that a model exports to the same bytes twice", allow_abbrev=False)
    check.add_argument("program", nargs="?", type=Path, help="the .pte file")
    check.add_argument("--data", type=Path, action="append", default=[], metavar="PTD", help="an external data file (.ptd) the program uses; repeat for several")
    check.add_argument("--runtime", action="store_true", help="also load and run each method once in executorch.runtime, in a child process")
    check.add_argument("--reproducible", metavar="TARGET", help="export path/to/file.py:factory twice, in separate processes, and compare")
    _export_options(check, " (with --reproducible)")
    _report_options(check)
    check.set_defaults(run=_check)

    rules = commands.add_parser("rules", help="list every code", allow_abbrev=False)
    rules.add_argument("--output-format", "--format", dest="output_format", choices=("text", "json"), default="text", help="text (default) or json")
    rules.set_defaults(run=_rules)

    explain = commands.add_parser("explain", help="print one code's documentation", allow_abbrev=False)
    explain.add_argument("code", help="a code, such as EG210")
    explain.set_defaults(run=_explain)
    return parser


def _export_options(command: argparse.ArgumentParser, suffix: str = "") -> None:
    lowering = command.add_mutually_exclusive_group()
    lowering.add_argument("--backend", choices=BACKENDS, help=f"partitioner to lower with (default xnnpack){suffix}")
    lowering.add_argument("--recipe", metavar="NAME", help=f"export with this ExecuTorch recipe instead (xnnpack_fp32, xnnpack_pt2e_int8_static_per_channel, ...){suffix}")
    command.add_argument("--placement", choices=PLACEMENT_POLICIES, help=f"device constants: report them, or copy them to the host (default error){suffix}")
    command.add_argument("--fold", action=argparse.BooleanOptionalAction, default=None, help=f"fold constant-only weights (default on){suffix}")


def _report_options(command: argparse.ArgumentParser) -> None:
    command.add_argument("--select", help="comma-separated codes or prefixes to report (default EG: all)")
    command.add_argument("--ignore", help="comma-separated codes or prefixes not to report")
    command.add_argument("--fail-level", choices=["error", "warning", "info"], help="lowest severity that fails (exit 1); default error")
    command.add_argument("--exit-zero", action="store_true", help="exit 0 even when findings reach the fail level (errors of the tool itself still exit 2)")
    command.add_argument("--output-format", "--format", dest="output_format", choices=REPORT_FORMATS, default="text", help="report format: text (default), json, sarif, or github (Actions annotations)")
    command.add_argument("--report-file", type=Path, metavar="PATH", help="write the report here, atomically, instead of stdout")
    command.add_argument("--statistics", action="store_true", help="count the findings per code instead of listing them")
    command.add_argument("--config", type=Path, help="pyproject.toml to read [tool.export-guards] from (default ./pyproject.toml)")
    loudness = command.add_mutually_exclusive_group()
    loudness.add_argument("-q", "--quiet", action="store_true", help="print no progress, only problems")
    loudness.add_argument("-v", "--verbose", action="store_true", help="list info findings one by one; show library warnings and full tracebacks")


def _lint(args: argparse.Namespace) -> int:
    _check_report_options(args)
    settings = _settings(args, ("program", "partitioned", "action"))
    arguments = _arguments(args.arg)
    try:
        target_file(args.target)  # a target that names nothing is a usage error, before any import
    except TargetError as error:
        raise UsageError(str(error)) from None
    pte_path = _pte_path(args)
    with _outputs(pte_path, args.report_file) as written:
        _quiet_libraries(args.verbose)
        with _stdout_to_stderr():  # stdout carries only the report, whatever the model prints
            from export_guards.pipeline import export_target

            _check_recipe(settings)
            fold = "on" if settings.fold else "off"
            _progress(args, f"exporting and linting {args.target} ({settings.recipe or settings.backend}, placement={settings.placement}, fold={fold})")
            try:
                result = export_target(args.target, arguments, config=settings)
            except TargetError as error:
                raise UsageError(str(error)) from None
        report = _with_factory_location(result.report, args.target)
        failing = report.at_least(settings.fail_level)
        if result.edge is None:  # a constant the host cannot read stopped the export
            _progress(args, "the export stopped before lowering (see the EG101 / EG102 findings)", ongoing=False)
        elif pte_path is not None and failing:
            _progress(args, f"not writing {pte_path}: {len(failing)} finding(s) at or above {settings.fail_level.value}", ongoing=False)
        elif pte_path is not None:
            with _stdout_to_stderr(), step("writing the program (to_executorch)"):
                program = result.to_pte()
            _write(pte_path, program, written)
            _progress(args, f"wrote {pte_path}", ongoing=False)
        _report(args, report, written)
    stopped = result.edge is None
    return _exit(args, bool(failing) or stopped)


def _check(args: argparse.Namespace) -> int:
    if args.program is None and args.reproducible is None:
        raise UsageError("give a .pte file to check, or --reproducible path/to/file.py:factory")
    _check_report_options(args)
    stages: tuple[Stage, ...] = ("pte", "runtime", "engine") if args.runtime else ("pte", "engine")
    settings = _settings(args, stages + (("reproducible",) if args.reproducible else ()))
    with _outputs(None, args.report_file) as written:
        _quiet_libraries(args.verbose)
        from export_guards.pte.check import ExportFailed, check_pte, check_reproducible

        report = Report()
        if args.program is not None:
            _progress(args, f"checking {args.program}")
            try:
                report += check_pte(args.program, data_files=args.data, config=settings, runtime=args.runtime)
            except (OSError, ValueError) as error:  # a path that is not a file; --runtime with two --data
                raise UsageError(str(error)) from None
        if args.reproducible is not None:
            _check_recipe(settings)
            _progress(args, f"exporting {args.reproducible} twice, in separate processes ({settings.recipe or settings.backend})")
            try:
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
        _report(args, report, written)
    return _exit(args, bool(report.at_least(settings.fail_level)))


def _rules(args: argparse.Namespace) -> int:
    if args.output_format == "json":
        table = [
            {"code": r.code, "name": r.name, "severity": r.severity.value, "stage": r.stage, "summary": r.summary, "fix": r.fix, "url": r.help_uri}
            for r in CATALOG.values()
        ]
        print(json.dumps(table, indent=2))
        return EXIT_CLEAN
    width = max(len(r.name) for r in CATALOG.values())
    for code, registered in CATALOG.items():
        print(f"{code}  {registered.name:<{width}}  {registered.severity.value:<7}  {registered.summary}")
    return EXIT_CLEAN


def _explain(args: argparse.Namespace) -> int:
    code = args.code.strip().upper()
    registered = CATALOG.get(code)
    if code in RETIRED:
        print(f"{code} is no longer reported: it was {RETIRED[code]}.")
        return EXIT_CLEAN
    if registered is None:
        raise UsageError(f"no code {args.code!r}; `export-guards rules` lists them")
    print(f"{code} {registered.name} ({registered.severity.value}; {STAGES[registered.stage]})\n")
    print(registered.summary)
    print(f"\nHow to fix: {registered.fix}")
    page = _rule_page(code)
    if page:
        print(f"\n{page}")
    print(f"\nDocumentation: {registered.help_uri}")
    return EXIT_CLEAN


def _rule_page(code: str) -> str:
    """The code's section of docs/rules.md, when the docs are at hand (a source checkout)."""
    docs = Path(__file__).resolve().parent.parent / "docs" / "rules.md"
    if not docs.is_file():
        return ""
    sections = docs.read_text().split("\n## ")
    return next(("## " + s.strip() for s in sections if s.startswith(code)), "")


def _check_report_options(args: argparse.Namespace) -> None:
    if args.statistics and args.output_format not in ("text", "json"):
        raise UsageError(f"--statistics counts findings as text or json, not {args.output_format}")


def _settings(args: argparse.Namespace, stages: Sequence[Stage]) -> Settings:
    """``[tool.export-guards]`` of ``--config`` (default ./pyproject.toml), then the command line;
    a selection that reports nothing this command checks is a usage error."""
    path = args.config or Path("pyproject.toml")
    if args.config is not None and not path.is_file():
        raise UsageError(f"no configuration file at {path}")
    given = {
        "select": _split(args.select) if args.select else None,
        "ignore": _split(args.ignore) if args.ignore else None,
        "fail_level": args.fail_level,
        "backend": args.backend,
        "placement": args.placement,
        "fold": args.fold,
        "recipe": getattr(args, "recipe", None),
    }
    try:
        settings = Settings.from_pyproject(path) if path.is_file() else Settings()
        settings = settings.updated({k: v for k, v in given.items() if v is not None}, "the command line")
    except (OSError, ValueError) as error:
        raise UsageError(str(error)) from None
    if not any(settings.enabled(code) for code, r in CATALOG.items() if r.stage in stages):
        raise UsageError(
            f"the selection (select {list(settings.select)}, ignore {list(settings.ignore)}) reports nothing that "
            f"`{args.command}` checks; `export-guards rules` lists which codes each command reports"
        )
    return settings


def _check_recipe(settings: Settings) -> None:
    """A recipe name that this ExecuTorch does not offer is a usage error, before any export."""
    if settings.recipe is None:
        return
    from export_guards.recipes import recipe_type

    try:
        recipe_type(settings.recipe)
    except ValueError as error:
        raise UsageError(str(error)) from None


def _arguments(pairs: list[str]) -> dict[str, Any]:
    try:
        return parse_arguments(pairs)
    except TargetError as error:
        raise UsageError(str(error)) from None


def _pte_path(args: argparse.Namespace) -> Path | None:
    if args.output is not None:
        if args.pte is not None:
            raise UsageError("give --pte only (--output is its former name)")
        print("export-guards: --output is deprecated: use --pte (the report goes to --report-file)", file=sys.stderr)
        return args.output
    return args.pte


def _with_factory_location(report: Report, target: str) -> Report:
    """Findings that no user frame places point at the factory: the nearest user code."""
    path = target_file(target)
    if path is None:
        return report
    name = target.rpartition(":")[2]
    lines = path.read_text().splitlines()
    line = next((i for i, text in enumerate(lines, 1) if text.lstrip().startswith(f"def {name}(")), 1)
    return report.located_at(SourceLocation(str(path), line, lines[line - 1].strip() if lines else ""))


def _report(args: argparse.Namespace, report: Report, written: set[Path]) -> None:
    """Render ``report`` as asked: to stdout, or atomically to ``--report-file``."""
    text = _render(args, report)
    if args.report_file is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        _write(args.report_file, text.encode(), written)


def _render(args: argparse.Namespace, report: Report) -> str:
    from export_guards.render import render_json, render_sarif, render_text
    from export_guards.render.github import render_github
    from export_guards.render.statistics import render_statistics

    if args.statistics:
        return render_statistics(report, args.output_format)
    if args.output_format == "json":
        return render_json(report)
    if args.output_format == "sarif":
        return render_sarif(report, root=_root(args))
    if args.output_format == "github":
        return render_github(report)
    return render_text(report, verbose=args.verbose)


def _root(args: argparse.Namespace) -> Path:
    """The project root that SARIF URIs are relative to: the one holding what is checked."""
    from export_guards.render.sarif import project_root

    subject = getattr(args, "target", None) or getattr(args, "reproducible", None)
    path = target_file(subject) if subject else getattr(args, "program", None)
    return project_root(Path(path).resolve() if path else Path.cwd())


def _exit(args: argparse.Namespace, failed: bool) -> int:
    return EXIT_FINDINGS if failed and not args.exit_zero else EXIT_CLEAN


@contextlib.contextmanager
def _outputs(*paths: Path | None) -> Iterator[set[Path]]:
    """The files this run promises: what it does not write (findings at the fail level, a
    failed step, Ctrl-C) must not stay there to be taken for its result, as make's
    ``.DELETE_ON_ERROR`` deletes a failed target. Yields the set of paths written."""
    written: set[Path] = set()
    try:
        yield written
    finally:
        for path in paths:
            if path is not None and path not in written and (path.is_file() or path.is_symlink()):
                path.unlink()
                print(f"export-guards: removed {path}: this run did not write it, so it was not this run's result", file=sys.stderr)


def _write(path: Path, data: bytes, written: set[Path]) -> None:
    """Write ``data`` to ``path`` atomically: a temporary file beside it, flushed to disk, then
    renamed over it, so that a reader never sees a partial file."""
    try:
        descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as error:
        raise StepFailed(f"writing {path}", error.strerror or str(error)) from None
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)  # as a plain open() would create it, not mkstemp's 0600
        os.replace(temporary, path)
    except BaseException as error:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(error, OSError):
            raise StepFailed(f"writing {path}", error.strerror or str(error)) from None
        raise
    written.add(path)


def _quiet_libraries(verbose: bool) -> None:
    """Keep torch's, torchao's and ExecuTorch's warnings and log lines off the terminal (they
    are not the user's problems); ``-v`` shows them. The user's own warnings still show."""
    if verbose:
        return
    for name in _LIBRARIES:
        logging.getLogger(name).setLevel(logging.ERROR)
    import torch  # noqa: F401  (its import resets its loggers' levels: set them again after)

    for name in _LIBRARIES:
        logging.getLogger(name).setLevel(logging.ERROR)
    roots = tuple(str(Path(p).resolve()) for p in sys.path if "-packages" in p) + (os.path.dirname(os.__file__),)
    original = warnings.showwarning

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int, *rest: Any) -> None:
        if not str(Path(filename).resolve()).startswith(roots):  # the user's code warned
            original(message, category, filename, lineno, *rest)

    warnings.showwarning = show


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Send file descriptor 1 to stderr for the block: what the model's Python code prints, and
    what native code writes to fd 1, stays out of the report on stdout."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stderr.flush()
        with contextlib.suppress(Exception):
            ctypes.CDLL(None).fflush(None)  # native code's buffered writes belong to the block
        os.dup2(saved, 1)
        os.close(saved)


def _split(codes: str) -> tuple[str, ...]:
    return tuple(c.strip().upper() for c in codes.split(",") if c.strip())


def _progress(args: argparse.Namespace, message: str, *, ongoing: bool = True) -> None:
    if not args.quiet:
        print(f"export-guards: {message}{'...' if ongoing else '.'}", file=sys.stderr, flush=True)


def _version() -> str:
    try:
        return version("export-guards")
    except PackageNotFoundError:
        return "unknown (not installed)"
