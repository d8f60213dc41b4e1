"""``export-guards rules`` and ``export-guards explain``: the codes, without torch."""

from __future__ import annotations

import json
from pathlib import Path

from export_guards.cli.arguments import UsageError, known_codes
from export_guards.cli.console import write_stdout
from export_guards.cli.options import ExplainOptions, RulesOptions
from export_guards.cli.reporting import EXIT_CLEAN
from export_guards.cli.signals import Interrupts
from export_guards.ruleset import STAGES, Rule
from export_guards.ruleset.catalog import RETIRED
from export_guards.ruleset.registry import origin
from export_guards.settings import did_you_mean

__all__ = ["explain", "rules"]


def rules(options: RulesOptions, interrupts: Interrupts) -> int:
    """Every code, export-guards' own then each installed project's: one line each, or a JSON
    table that also says which package each comes from."""
    known = known_codes()
    if options.output_format == "json":
        table = [
            {
                "code": r.code,
                "name": r.name,
                "severity": r.severity.value,
                "stage": r.stage,
                "summary": r.summary,
                "fix": r.fix,
                "url": r.help_uri,
                "package": _package(r),
            }
            for r in known.values()
        ]
        write_stdout(json.dumps(table, indent=2) + "\n")
        return EXIT_CLEAN
    width = max(len(r.name) for r in known.values())
    write_stdout(
        "".join(f"{code}  {r.name:<{width}}  {r.severity.value:<7}  {r.summary}\n" for code, r in known.items())
    )
    return EXIT_CLEAN


def explain(options: ExplainOptions, interrupts: Interrupts) -> int:
    """One code's documentation: its summary, its fix and its section of ``docs/rules.md``."""
    code = options.code.strip().upper()
    if code in RETIRED:
        write_stdout(f"{code} is no longer reported: it was {RETIRED[code]}.\n")
        return EXIT_CLEAN
    known = known_codes()
    registered = known.get(code)
    if registered is None:
        raise UsageError(f"no code {options.code!r}{did_you_mean(code)}")
    package = _package(registered)
    page = _rule_page(code) if package == "export-guards" else ""
    text = (
        f"{code} {registered.name} ({registered.severity.value}; {STAGES[registered.stage]})\n\n"
        f"{registered.summary}\n\nHow to fix: {registered.fix}\n"
        + (f"\n{page}\n" if page else "")
        + ("" if package == "export-guards" else f"\nA project rule, from the package {package}.\n")
        + (f"\nDocumentation: {registered.help_uri}\n" if registered.help_uri else "")
    )
    write_stdout(text)
    return EXIT_CLEAN


def _package(rule: Rule) -> str:
    """The package that declares ``rule``: ``export-guards`` for our own codes."""
    declared = origin(rule.code)
    return "export-guards" if declared is None else declared.package


def _rule_page(code: str) -> str:
    """The code's section of docs/rules.md, when the docs are at hand (a source checkout)."""
    docs = Path(__file__).resolve().parents[2] / "docs" / "rules.md"
    if not docs.is_file():
        return ""
    sections = docs.read_text().split("\n## ")
    return next(("## " + s.strip() for s in sections if s.startswith(code)), "")
