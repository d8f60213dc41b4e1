"""``export-guards rules`` and ``export-guards explain``: the codes, without torch."""

from __future__ import annotations

import argparse
import difflib
import json
from pathlib import Path

from export_guards.cli.arguments import UsageError
from export_guards.cli.console import write_stdout
from export_guards.cli.reporting import EXIT_CLEAN
from export_guards.cli.signals import Interrupts
from export_guards.ruleset import CATALOG, STAGES
from export_guards.ruleset.catalog import RETIRED

__all__ = ["explain", "rules"]


def rules(args: argparse.Namespace, interrupts: Interrupts) -> int:
    """Every code: one line each, or a JSON table."""
    if args.output_format == "json":
        table = [
            {"code": r.code, "name": r.name, "severity": r.severity.value, "stage": r.stage, "summary": r.summary, "fix": r.fix, "url": r.help_uri}
            for r in CATALOG.values()
        ]
        write_stdout(json.dumps(table, indent=2) + "\n")
        return EXIT_CLEAN
    width = max(len(r.name) for r in CATALOG.values())
    write_stdout("".join(f"{code}  {r.name:<{width}}  {r.severity.value:<7}  {r.summary}\n" for code, r in CATALOG.items()))
    return EXIT_CLEAN


def explain(args: argparse.Namespace, interrupts: Interrupts) -> int:
    """One code's documentation: its summary, its fix and its section of ``docs/rules.md``."""
    code = args.code.strip().upper()
    if code in RETIRED:
        write_stdout(f"{code} is no longer reported: it was {RETIRED[code]}.\n")
        return EXIT_CLEAN
    registered = CATALOG.get(code)
    if registered is None:
        close = difflib.get_close_matches(code.translate(str.maketrans("OIL", "011")), list(CATALOG), n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise UsageError(f"no code {args.code!r}{hint} (`export-guards rules` lists them)")
    page = _rule_page(code)
    text = (
        f"{code} {registered.name} ({registered.severity.value}; {STAGES[registered.stage]})\n\n"
        f"{registered.summary}\n\nHow to fix: {registered.fix}\n"
        + (f"\n{page}\n" if page else "")
        + f"\nDocumentation: {registered.help_uri}\n"
    )
    write_stdout(text)
    return EXIT_CLEAN


def _rule_page(code: str) -> str:
    """The code's section of docs/rules.md, when the docs are at hand (a source checkout)."""
    docs = Path(__file__).resolve().parents[2] / "docs" / "rules.md"
    if not docs.is_file():
        return ""
    sections = docs.read_text().split("\n## ")
    return next(("## " + s.strip() for s in sections if s.startswith(code)), "")
