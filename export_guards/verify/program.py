"""A guarded export's written program checked as ``export-guards check`` checks a file, against
the runtime that will load it."""

from __future__ import annotations

from export_guards.analysis.source import operator_sites
from export_guards.pipeline import GuardedExport
from export_guards.pte.check import check_pte
from export_guards.pte.inventory import RuntimeInventory
from export_guards.pte.rules import PTE_RULES, portable
from export_guards.report import Report
from export_guards.ruleset import RuleSet, with_project_rules
from export_guards.settings import Settings

__all__ = ["WRITTEN_PROGRAM_RULES", "check_program"]

WRITTEN_PROGRAM_RULES = PTE_RULES.without(RuleSet.of(portable))
"""The check of a guarded export's written program: EG520 (compute with no delegate) aside, since
the export states its delegation itself (EG401-EG403) and a portable export chose no delegate."""


def check_program(
    export: GuardedExport, pte: bytes, *, against: RuntimeInventory | None = None, settings: Settings = Settings()
) -> Report:
    """``pte``, ``export``'s written program (:meth:`GuardedExport.to_pte`), checked as
    ``export-guards check`` checks a file (structure, delegate data, kernels:
    ``WRITTEN_PROGRAM_RULES``), against the runtime that will load it: ``against``, by default the
    installed ``executorch.runtime`` (``RuntimeInventory.from_file`` reads a selective build's
    list). A finding about an operator, such as one the runtime has no kernel for (EG521, an
    error), is placed on the user's line that made it. ``export-guards lint`` and the
    ``check_export`` fixture run it before they keep a program, so that a clean verdict means the
    program loads."""
    return check_pte(
        pte,
        config=settings,
        against=against or RuntimeInventory.installed(),
        locate=operator_sites(export.edge) if export.edge is not None else None,
        rules=with_project_rules(WRITTEN_PROGRAM_RULES),
        replay=True,  # torch is loaded: the export made the program
    )
