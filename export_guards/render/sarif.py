"""SARIF 2.1.0 for code scanning: every result located, URIs relative to the project root, and
fingerprints that hold across runs, working directories and machines."""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any
from urllib.parse import quote

from export_guards.render.paths import project_root
from export_guards.report import Finding, Report, Severity, SourceLocation
from export_guards.ruleset import DOCS_URL, known_rules

__all__ = ["FINGERPRINT", "ROOT_ID", "fingerprints", "project_root", "render_sarif"]

ROOT_ID = "PROJECTROOT"
"""The ``uriBaseId`` of every URI inside the project root (``run.originalUriBaseIds``)."""

FINGERPRINT = "exportGuards/v1"
"""The ``partialFingerprints`` key of a result's stable identity (a new algorithm, a new version)."""

_LINE_HASH = "primaryLocationLineHash"  # the only key GitHub code scanning matches alerts by
_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}
_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
_PATH = re.compile(r"(?:[\w.~+-]*/)+")  # the folders of anything path-like in a message
_NUMBER = re.compile(r"0[xX][0-9a-fA-F]+|\d+")


def render_sarif(report: Report, *, root: Path | None = None) -> str:
    """One run: every code in ``tool.driver.rules``, one located result per finding.

    Files under ``root`` (default: the project root of the working directory) get URIs relative
    to it, with ``uriBaseId`` ``PROJECTROOT``; others keep an absolute ``file://`` URI. Each
    result's ``partialFingerprints`` holds its identity under ``exportGuards/v1`` and, for
    GitHub, ``primaryLocationLineHash``: independent of absolute paths, line numbers and node
    numbering, and distinct for distinct results of one run.
    """
    root = (root or project_root(Path.cwd())).resolve()
    codes = sorted({f.code for f in report} | set(known_rules()))
    index = {code: i for i, code in enumerate(codes)}
    results = [
        _result(finding, index[finding.code], _physical(finding, root), fingerprint)
        for finding, fingerprint in zip(report, fingerprints(report, root=root))
    ]
    root_uri = root.as_uri()
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
                        "rules": [_rule(code) for code in codes],
                    }
                },
                "originalUriBaseIds": {
                    ROOT_ID: {
                        "uri": root_uri if root_uri.endswith("/") else root_uri + "/",
                        "description": {"text": "The project root: relative URIs are relative to it."},
                    }
                },
                "results": results,
            }
        ],
    }
    return json.dumps(document, indent=2) + "\n"


def fingerprints(report: Report, *, root: Path | None = None) -> list[str]:
    """Each finding's stable identity, in report order: what SARIF's ``partialFingerprints``
    and a baseline hold. Independent of absolute paths, line numbers and node numbering;
    findings of one identity (one line, one rule) are told apart in report order."""
    root = (root or project_root(Path.cwd())).resolve()
    seen: Counter[str] = Counter()
    found = []
    for finding in report:
        identity = _identity(finding, _physical(finding, root)["artifactLocation"])
        seen[identity] += 1
        found.append(f"{identity}:{seen[identity]}")
    return found


def _rule(code: str) -> dict[str, Any]:
    registered = known_rules().get(code)
    if registered is None:  # a rule passed to the lint explicitly, known nowhere else
        return {"id": code, "name": code.lower(), "shortDescription": {"text": code}}
    described: dict[str, Any] = {
        "id": code,
        "name": registered.name,
        "shortDescription": {"text": registered.summary},
        "defaultConfiguration": {"level": _LEVEL[registered.severity]},
    }
    if registered.help_uri is not None:
        described["helpUri"] = registered.help_uri
    return described


def _result(finding: Finding, rule_index: int, physical: dict[str, Any], fingerprint: str) -> dict[str, Any]:
    location: dict[str, Any] = {"physicalLocation": physical}
    logical = _logical(finding)
    if logical:
        location["logicalLocations"] = [logical]
    result: dict[str, Any] = {
        "ruleId": finding.code,
        "ruleIndex": rule_index,
        "level": _LEVEL[finding.severity],
        "message": {"text": finding.message + (f" Fix: {finding.fix}" if finding.fix else "")},
        "locations": [location],
        "partialFingerprints": {FINGERPRINT: fingerprint, _LINE_HASH: fingerprint},
    }
    fields = ("method", "node", "constant", "module")
    properties = {name: getattr(finding, name) for name in fields if getattr(finding, name)}
    if properties:
        result["properties"] = properties
    return result


def _physical(finding: Finding, root: Path) -> dict[str, Any]:
    """Where the finding is: the user's source line; else the program file, at its bytes when
    known; else the project itself, for what no file holds (a ``.pte`` given as bytes, a model
    built of library modules only linted from Python): code scanning rejects an upload with a
    result that names no artifact."""
    source = _source(finding)
    if source is not None:
        return {"artifactLocation": _artifact(source.file, root), "region": {"startLine": max(source.line, 1)}}
    if finding.artifact is not None:
        physical: dict[str, Any] = {"artifactLocation": _artifact(finding.artifact, root)}
        if finding.region is not None and min(finding.region) >= 0:
            physical["region"] = {"byteOffset": finding.region[0], "byteLength": finding.region[1]}
        return physical
    return {
        "artifactLocation": {
            "uri": ".",
            "uriBaseId": ROOT_ID,
            "description": {"text": "No source line or file holds this finding: see its logical location."},
        }
    }


def _artifact(file: str, root: Path) -> dict[str, Any]:
    """A URI relative to ``root`` (a relative path is taken from the working directory), or an
    absolute ``file://`` URI for a file outside it."""
    path = Path(file)
    path = (path if path.is_absolute() else Path.cwd() / path).resolve()
    try:
        return {"uri": quote(path.relative_to(root).as_posix()), "uriBaseId": ROOT_ID}
    except ValueError:
        return {"uri": path.as_uri()}


def _identity(finding: Finding, artifact: dict[str, Any]) -> str:
    """What makes a result the same result in another run: never an absolute path, a line
    number, a byte offset or a node name (tracing numbers them, ``linear_3``)."""
    uri = str(artifact["uri"])
    where = uri if "uriBaseId" in artifact else uri.rsplit("/", 1)[-1]  # outside the root: the name
    source = _source(finding)
    if source is not None:  # the line's text, not its number: it survives edits above it
        parts = ["graph", where, source.code.strip(), finding.module or ""]
    elif finding.artifact is not None:
        parts = ["file", Path(finding.artifact).name, _normalised(finding.message, finding.artifact)]
    else:
        parts = ["none", finding.module or "", _normalised(finding.message)]
    parts += [finding.code, finding.method or "", finding.constant or ""]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


def _source(finding: Finding) -> SourceLocation | None:
    """The finding's source line, unless its file is none (``<stdin>``, ``<doc example>``)."""
    location = finding.location
    return location if location is not None and not location.file.startswith("<") else None


def _normalised(message: str, artifact: str | None = None) -> str:
    """``message`` without folders and numbers: the same problem in another run or place."""
    if artifact:
        message = message.replace(artifact, Path(artifact).name)
    return _NUMBER.sub("#", _PATH.sub("", message))


def _logical(finding: Finding) -> dict[str, Any] | None:
    """The method, node or constant, for viewers that show program entities."""
    name = finding.node or finding.constant or finding.method
    if name is None:
        return None
    if name == finding.method:
        return {"name": name, "kind": "function"}
    return {
        "name": name,
        "fullyQualifiedName": f"{finding.method}/{name}" if finding.method else name,
        "kind": "variable",
    }


def _version() -> str:
    try:
        return version("export-guards")
    except PackageNotFoundError:
        return "0"
