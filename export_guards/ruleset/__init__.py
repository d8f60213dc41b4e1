"""The rule engine: what a rule is, the catalog of every code, and the runner that turns
rules into findings; the registry adds the rules that installed packages declare. Imports neither torch nor ExecuTorch."""

from export_guards.ruleset.catalog import CATALOG, rule
from export_guards.ruleset.engine import (
    Locate,
    RuleSet,
    describe_error,
    finding,
    first_line,
    once,
    run,
    settle,
    without_symptoms,
)
from export_guards.ruleset.registry import ProjectRulesError, known_rules, with_project_rules
from export_guards.ruleset.rule import DOCS_URL, STAGES, Check, Hit, Rule, Stage

RULES = CATALOG
"""The catalog under its public name, ``export_guards.RULES``: every code's rule."""

__all__ = [
    "CATALOG",
    "DOCS_URL",
    "RULES",
    "STAGES",
    "Check",
    "Hit",
    "Locate",
    "ProjectRulesError",
    "Rule",
    "RuleSet",
    "Stage",
    "describe_error",
    "finding",
    "first_line",
    "known_rules",
    "once",
    "rule",
    "run",
    "settle",
    "with_project_rules",
    "without_symptoms",
]
