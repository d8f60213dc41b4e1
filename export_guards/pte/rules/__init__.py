"""The program-file rules (EG501-EG526, and EG530-EG535 of an update), one module per subject, as ``PTE_RULES``."""

from __future__ import annotations

from export_guards.pte.rules import (
    availability,
    delegate_calls,
    delegates,
    dtypes,
    external,
    instructions,
    kernels,
    known_wrong,
    out_bounds,
    portable,
    reproducible,
    runtime,
    structure,
    update,
    values,
)
from export_guards.ruleset import RuleSet

__all__ = ["PTE_RULES"]

# A new rule: its entry in ruleset/catalog.py, its check under @rule(code) in its subject's module.
PTE_RULES = RuleSet.of(
    structure,
    delegates,
    delegate_calls,
    external,
    instructions,
    kernels,
    dtypes,
    out_bounds,
    portable,
    availability,
    values,
    known_wrong,
    reproducible,
    update,
    runtime,
)
"""Every built-in program-file rule, by code (stages ``pte``, ``reproducible``, ``update``, ``runtime``)."""
