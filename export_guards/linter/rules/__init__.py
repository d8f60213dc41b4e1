"""The graph rules (EG1xx-EG4xx), one module per subject; ``LINT_RULES`` is the set the lint
runs. To add a rule: its entry in ``ruleset/catalog.py``, its check here under ``@rule(code)``
in the module of its subject (a new module goes into the list below)."""

from export_guards.linter.rules import constants, delegation, inputs, mutation, numerics, placement, training, weights
from export_guards.ruleset import RuleSet

__all__ = ["LINT_RULES"]

LINT_RULES = RuleSet.of(constants, delegation, inputs, mutation, numerics, placement, training, weights)
"""Every built-in graph rule, by code."""
