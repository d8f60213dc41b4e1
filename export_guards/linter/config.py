"""Which rules run and how much each matters: code selection, severities, the fail level."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, final

from export_guards.report import Severity

__all__ = ["LintConfig"]


@final
@dataclass(frozen=True)
class LintConfig:
    """Lint configuration, as in ``[tool.export-guards]`` of ``pyproject.toml``.

    Attributes:
        select: codes or code prefixes to run (``"EG"`` runs all, ``"EG2"`` the weight rules).
        ignore: codes or prefixes not to run; an ignore wins over a select of the same length
            or shorter (``select=["EG301"], ignore=["EG3"]`` still runs EG301).
        severity: per-code severity overrides.
        fail_level: findings at or above it make the lint fail (exit 1, or the lint pass raise).
    """

    select: tuple[str, ...] = ("EG",)
    ignore: tuple[str, ...] = ()
    severity: Mapping[str, Severity] = field(default_factory=dict)
    fail_level: Severity = Severity.ERROR

    def enabled(self, code: str) -> bool:
        """Whether the rule ``code`` runs: the longest matching prefix decides."""
        selected = max((len(p) for p in self.select if code.startswith(p)), default=-1)
        ignored = max((len(p) for p in self.ignore if code.startswith(p)), default=-1)
        return selected > ignored

    def severity_of(self, code: str, default: Severity) -> Severity:
        return self.severity.get(code, default)

    @classmethod
    def from_mapping(cls, table: Mapping[str, Any]) -> LintConfig:
        """A configuration from a ``[tool.export-guards]`` table.

        Raises:
            ValueError: an unknown key or severity, naming it and what is accepted.
        """
        known = {"select", "ignore", "severity", "fail-level", "backend", "placement", "fold"}
        unknown = sorted(set(table) - known)
        if unknown:
            raise ValueError(
                f"unknown key(s) {', '.join(unknown)} in [tool.export-guards]; "
                f"accepted: {', '.join(sorted(known))}"
            )
        config = cls()
        if "select" in table:
            config = replace(config, select=_codes(table["select"], "select"))
        if "ignore" in table:
            config = replace(config, ignore=_codes(table["ignore"], "ignore"))
        if "severity" in table:
            severities = table["severity"]
            if not isinstance(severities, Mapping):
                raise ValueError(
                    "severity must be a table of rule code to severity, such as "
                    f"[tool.export-guards.severity] EG304 = \"error\"; not {severities!r}"
                )
            config = replace(
                config,
                severity={_code(code): _severity(value, f"severity.{code}") for code, value in severities.items()},
            )
        if "fail-level" in table:
            config = replace(config, fail_level=_severity(table["fail-level"], "fail-level"))
        return config

    @classmethod
    def from_pyproject(cls, path: str | Path) -> LintConfig:
        """The ``[tool.export-guards]`` table of ``path`` (defaults when there is none)."""
        with open(path, "rb") as file:
            data = tomllib.load(file)
        return cls.from_mapping(data.get("tool", {}).get("export-guards", {}))


def _codes(value: object, key: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, Iterable) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{key} must be a list of rule codes or prefixes such as \"EG2\", not {value!r}")
    return tuple(v.strip().upper() for v in value)


def _code(code: str) -> str:
    normalized = str(code).strip().upper()
    if not re.fullmatch(r"EG\d{3}", normalized):
        raise ValueError(f"severity keys are rule codes such as EG304, not {code!r}")
    return normalized


def _severity(value: object, key: str) -> Severity:
    try:
        return Severity(str(value).lower())
    except ValueError:
        raise ValueError(f"{key} must be one of error, warning, info; not {value!r}") from None
