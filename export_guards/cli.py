"""The ``export-guards`` command: ``lint`` a model before export, list and explain rules.

Exit codes: 0 clean, 1 findings at or above the fail level, 2 usage error or a model that
failed to export. stdout carries only the report; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import sys
import tomllib
import traceback
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

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
    lint.add_argument("--backend", choices=["xnnpack", "portable"], help="partitioner to lower with (default xnnpack)")
    lint.add_argument("--placement", choices=["error", "copy"], help="device constants: report them, or copy them to the host (default error)")
    lint.add_argument("--fold", action=argparse.BooleanOptionalAction, default=None, help="fold constant-only weights (default on)")
    lint.add_argument("--select", help="comma-separated codes or prefixes to run (default EG: all)")
    lint.add_argument("--ignore", help="comma-separated codes or prefixes not to run")
    lint.add_argument("--fail-level", choices=["error", "warning", "info"], help="lowest severity that fails (exit 1); default error")
    lint.add_argument("--format", choices=["text", "json", "sarif"], default="text", help="report format on stdout")
    lint.add_argument("--output", type=Path, help="write the .pte here when nothing at or above the fail level was found")
    lint.add_argument("--config", type=Path, help="pyproject.toml to read [tool.export-guards] from (default ./pyproject.toml)")
    lint.add_argument("--verbose", action="store_true", help="print full tracebacks")
    lint.set_defaults(run=_lint)

    rules = commands.add_parser("rules", help="list the rules")
    rules.set_defaults(run=_rules)

    explain = commands.add_parser("explain", help="print one rule's documentation")
    explain.add_argument("code", help="a rule code, such as EG210")
    explain.set_defaults(run=_explain)
    return parser


def _lint(args: argparse.Namespace) -> int:
    settings = _pyproject_settings(args.config)
    from export_guards.linter import LintConfig
    from export_guards.render import FORMATS

    try:
        config = LintConfig.from_mapping(settings)
    except ValueError as error:
        raise UsageError(str(error)) from None
    if args.select:
        config = replace(config, select=_split(args.select))
    if args.ignore:
        config = replace(config, ignore=_split(args.ignore))
    if args.fail_level:
        from export_guards.report import Severity

        config = replace(config, fail_level=Severity(args.fail_level))
    backend = args.backend or settings.get("backend", "xnnpack")
    placement = args.placement or settings.get("placement", "error")
    fold = args.fold if args.fold is not None else bool(settings.get("fold", True))

    try:
        # stdout carries only the report: what the model's code prints goes to stderr.
        with contextlib.redirect_stdout(sys.stderr):
            factory = _load_factory(args.target)
            _progress(f"building the model ({args.target})")
            model, inputs = _call_factory(factory, args.target)
            _progress("exporting with torch.export")
            import torch

            from export_guards.pipeline import lower_with_guards

            program = torch.export.export(model, inputs)
            _progress(f"linting and lowering ({backend}, placement={placement}, fold={'on' if fold else 'off'})")
            result = lower_with_guards(program, backend=backend, placement=placement, fold=fold, config=config)
    except UsageError:
        raise
    except Exception as error:  # the model failed to export: summarise, exit 2
        print(f"export-guards: the model failed to export: {type(error).__name__}: {_first_line(error)}", file=sys.stderr)
        if args.verbose:
            traceback.print_exc()
        else:
            print("(run with --verbose for the full traceback)", file=sys.stderr)
        return EXIT_ERROR

    sys.stdout.write(FORMATS[args.format](result.report))
    failing = result.report.at_least(config.fail_level)
    if result.edge is None:  # a constant the host cannot read stopped the export: never clean
        _progress("the export stopped before lowering (see the EG101 / EG102 findings)")
        return EXIT_FINDINGS
    if args.output is not None:
        if failing:
            _progress(f"not writing {args.output}: {len(failing)} finding(s) at or above {config.fail_level.value}")
        else:
            try:
                args.output.write_bytes(result.to_pte())
            except OSError as error:
                raise UsageError(f"cannot write {args.output}: {error.strerror or error}") from None
            _progress(f"wrote {args.output}")
    return EXIT_FINDINGS if failing else EXIT_CLEAN


def _rules(args: argparse.Namespace) -> int:
    from export_guards.linter import RULES

    width = max(len(r.name) for r in RULES.values())
    for code, registered in sorted(RULES.items()):
        print(f"{code}  {registered.name:<{width}}  {registered.severity.value:<7}  {registered.summary}")
    return EXIT_CLEAN


def _explain(args: argparse.Namespace) -> int:
    from export_guards.linter import RULES

    code = args.code.strip().upper()
    registered = RULES.get(code)
    if registered is None:
        raise UsageError(f"no rule {args.code!r}; `export-guards rules` lists them")
    print(f"{code} {registered.name} ({registered.severity.value}, runs on the {registered.stage} program)\n")
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


def _pyproject_settings(path: Path | None) -> dict[str, Any]:
    candidate = path or Path("pyproject.toml")
    if not candidate.is_file():
        if path is not None:
            raise UsageError(f"no configuration file at {path}")
        return {}
    try:
        with open(candidate, "rb") as file:
            return dict(tomllib.load(file).get("tool", {}).get("export-guards", {}))
    except tomllib.TOMLDecodeError as error:
        raise UsageError(f"{candidate} is not valid TOML: {error}") from None


def _load_factory(target: str) -> Any:
    module_part, sep, name = target.rpartition(":")
    if not sep or not module_part or not name:
        raise UsageError(f"target {target!r} must be path/to/file.py:factory or package.module:factory")
    if module_part.endswith(".py") or "/" in module_part or "\\" in module_part:
        path = Path(module_part)
        if not path.is_file():
            raise UsageError(f"no such file: {path}")
        spec = importlib.util.spec_from_file_location(path.stem, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, str(path.resolve().parent))  # so the file can import its neighbours
        try:
            spec.loader.exec_module(module)
        except Exception as error:
            raise UsageError(f"importing {path} failed: {type(error).__name__}: {_first_line(error)}") from None
    else:
        try:
            module = importlib.import_module(module_part)
        except Exception as error:
            raise UsageError(f"cannot import {module_part!r}: {type(error).__name__}: {_first_line(error)}") from None
    factory = getattr(module, name, None)
    if not callable(factory):
        raise UsageError(f"{module_part} has no callable {name!r}")
    return factory


def _call_factory(factory: Any, target: str) -> tuple[Any, tuple[Any, ...]]:
    import torch

    produced = factory()
    if not (isinstance(produced, tuple) and len(produced) == 2 and isinstance(produced[0], torch.nn.Module)):
        raise UsageError(f"{target} must return (model, example_inputs), got {type(produced).__name__}")
    model, inputs = produced
    inputs = inputs if isinstance(inputs, tuple) else tuple(inputs) if isinstance(inputs, list) else (inputs,)
    return model, inputs


def _split(codes: str) -> tuple[str, ...]:
    return tuple(c.strip().upper() for c in codes.split(",") if c.strip())


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else "(no message)"


def _progress(message: str) -> None:
    print(f"export-guards: {message}...", file=sys.stderr, flush=True)
