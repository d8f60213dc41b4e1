"""Every rule the tool knows: export-guards' own catalog and the project rules that installed
packages declare under the entry-point group ``export_guards.rules`` (as flake8 finds plugins).

An entry point's name is the prefix its codes share (``ACME``); its object is a module (every
``Rule`` in it is taken, as ``RuleSet.of`` reads modules), a ``Rule``, or an iterable of rules.
Only the names are read to make the default selection (no import); the rules load once, when
something asks for them: a lint, a check, ``rules``, ``explain``, or a setting that names a
project code. Imports neither torch nor ExecuTorch (a rule module may).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from types import MappingProxyType, ModuleType

from export_guards.errors import ProjectRulesError
from export_guards.ruleset.catalog import CATALOG
from export_guards.ruleset.engine import RuleSet
from export_guards.ruleset.rule import Rule

__all__ = [
    "CHECKED_STAGES",
    "GROUP",
    "OWN_PREFIX",
    "ProjectRules",
    "ProjectRulesError",
    "known_rules",
    "origin",
    "project_prefixes",
    "project_rules",
    "with_project_rules",
]

GROUP = "export_guards.rules"
"""The entry-point group a package declares its rules under."""

OWN_PREFIX = "EG"
"""export-guards' own codes; no project prefix may overlap it."""

CHECKED_STAGES = ("program", "partitioned", "pte", "reproducible", "update", "runtime")
"""The stages whose subjects the engine hands to a rule's check (see ``STAGES``)."""

_PREFIX = re.compile(r"^[A-Z]{1,8}$")


@dataclass(frozen=True)
class ProjectRules:
    """One entry point's rules: its prefix, the package that declares it, and the rules."""

    prefix: str
    package: str
    target: str
    rules: tuple[Rule, ...]


def project_prefixes() -> tuple[str, ...]:
    """The prefixes installed packages declare (entry-point names), without importing them."""
    return tuple(sorted(_entry_points()))


def project_rules() -> tuple[ProjectRules, ...]:
    """Every installed package's rules, loaded once and checked.

    Raises:
        ProjectRulesError: a package's entry point cannot be loaded, or its rules break the
            contract (a prefix that overlaps another, a code without its prefix, no check, a
            stage without a subject), naming the package and how to fix it.
    """
    return _loaded()


def known_rules() -> Mapping[str, Rule]:
    """Every code the tool knows, by code: its own catalog, then each project's rules."""
    return _known()


def with_project_rules(rules: RuleSet) -> RuleSet:
    """``rules`` and every project rule: what a full lint or check runs."""
    extra = [r for loaded in project_rules() for r in loaded.rules]
    return rules + RuleSet.of(*extra) if extra else rules


def origin(code: str) -> ProjectRules | None:
    """The project rules ``code`` belongs to, or ``None`` for export-guards' own codes."""
    return next((loaded for loaded in project_rules() if code.startswith(loaded.prefix)), None)


@functools.cache
def _entry_points() -> dict[str, EntryPoint]:
    found: dict[str, EntryPoint] = {}
    for point in entry_points(group=GROUP):
        if point.name in found and found[point.name].value != point.value:
            raise _error(point, f"the prefix is also declared by {_package(found[point.name])}; rename one of them")
        if not _PREFIX.match(point.name):
            raise _error(point, "the entry point's name is the codes' prefix: 1 to 8 capital letters, such as ACME")
        clash = next(
            (
                p
                for p in [OWN_PREFIX, *found]
                if p != point.name and (p.startswith(point.name) or point.name.startswith(p))
            ),
            None,
        )
        if clash is not None:
            whose = "export-guards' own" if clash == OWN_PREFIX else f"{_package(found[clash])}'s"
            raise _error(
                point, f"its prefix overlaps {whose} prefix {clash}, so a selection of one would select the other"
            )
        found[point.name] = point
    return found


@functools.cache
def _loaded() -> tuple[ProjectRules, ...]:
    return tuple(_load(point) for _, point in sorted(_entry_points().items()))


@functools.cache
def _known() -> Mapping[str, Rule]:
    return MappingProxyType({**CATALOG, **{r.code: r for loaded in _loaded() for r in loaded.rules}})


def _load(point: EntryPoint) -> ProjectRules:
    try:
        target = point.load()
    except Exception as error:
        raise _error(point, f"importing it raised {type(error).__name__}: {error}") from error
    found = _rules_in(target)
    if not found:
        raise _error(point, "it holds no Rule (a module of rules, a Rule, or a list of them)")
    codes = re.compile(rf"^{point.name}\d{{3}}$")
    seen: set[str] = set()
    for rule in found:
        if not codes.match(rule.code):
            raise _error(point, f"rule {rule.code!r} is not its prefix {point.name} and three digits")
        if rule.code in seen:
            raise _error(point, f"two rules have the code {rule.code}")
        if rule.check is None or rule.stage not in CHECKED_STAGES:
            raise _error(
                point, f"rule {rule.code} needs a check and a stage of {', '.join(CHECKED_STAGES)}, not {rule.stage!r}"
            )
        seen.add(rule.code)
    return ProjectRules(point.name, _package(point), point.value, tuple(sorted(found, key=lambda r: r.code)))


def _rules_in(target: object) -> list[Rule]:
    if isinstance(target, Rule):
        return [target]
    if isinstance(target, ModuleType):
        return [v for v in vars(target).values() if isinstance(v, Rule)]
    if isinstance(target, Iterable) and not isinstance(target, (str, bytes)):
        return [v for v in target if isinstance(v, Rule)]
    return []


def _package(point: EntryPoint) -> str:
    return point.dist.name if point.dist is not None else point.value


def _error(point: EntryPoint, problem: str) -> ProjectRulesError:
    package = _package(point)
    return ProjectRulesError(
        f"project rules {point.name} = {point.value} (package {package}, entry-point group {GROUP}): {problem}. "
        f"Fix the package, or uninstall it (pip uninstall {package})"
    )
