"""SARIF 2.1.0, for code-scanning tools: one run, the rules in ``tool.driver.rules``."""

from __future__ import annotations

import json
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from urllib.parse import quote

from export_guards.report import Finding, Report, Severity
from export_guards.ruleset import CATALOG, DOCS_URL

__all__ = ["render_sarif"]

_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}
_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def render_sarif(report: Report) -> str:
    codes = sorted({f.code for f in report} | set(CATALOG))
    index = {code: i for i, code in enumerate(codes)}
    rules = [_rule(code) for code in codes]
    document = {
        "$schema": _SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "export-guards",
                        "version": _version(),
                        "informationUri": DOCS_URL,
                        "rules": rules,
                    }
                },
                "results": [_result(f, index[f.code]) for f in report],
            }
        ],
    }
    return json.dumps(document, indent=2) + "\n"


def _rule(code: str) -> dict[str, object]:
    registered = CATALOG.get(code)
    if registered is None:  # a project's own rule, passed to the lint explicitly
        return {"id": code, "name": code.lower(), "shortDescription": {"text": code}}
    return {
        "id": code,
        "name": registered.name,
        "shortDescription": {"text": registered.summary},
        "helpUri": registered.help_uri,
        "defaultConfiguration": {"level": _LEVEL[registered.severity]},
    }


def _result(finding: Finding, rule_index: int) -> dict[str, object]:
    result: dict[str, object] = {
        "ruleId": finding.code,
        "ruleIndex": rule_index,
        "level": _LEVEL[finding.severity],
        "message": {"text": finding.message + (f" Fix: {finding.fix}" if finding.fix else "")},
    }
    if finding.location:
        result["locations"] = [
            {
                "physicalLocation": {
                    "artifactLocation": {"uri": _uri(finding.location.file)},
                    "region": {"startLine": finding.location.line},
                },
                "logicalLocations": [
                    {"name": finding.node or "", "kind": "function", "fullyQualifiedName": f"{finding.method}/{finding.node}"}
                ],
            }
        ]
    else:
        result["locations"] = []
    properties = {k: v for k, v in (("method", finding.method), ("node", finding.node), ("constant", finding.constant)) if v}
    if properties:
        result["properties"] = properties
    return result


def _uri(file: str) -> str:
    """A URI reference: relative to the working directory when under it, else ``file://``."""
    path = Path(file)
    if not path.is_absolute():
        return quote(path.as_posix())
    try:
        return quote(path.relative_to(Path.cwd()).as_posix())
    except ValueError:
        return path.as_uri()


def _version() -> str:
    try:
        return version("export-guards")
    except PackageNotFoundError:
        return "0"
