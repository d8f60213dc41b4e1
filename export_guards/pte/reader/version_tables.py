"""Tables derived from the installed packages (the operator schemas, the kernels' dtypes): shipped
as JSON for the pinned versions, kept in the user's cache for any other, and read and written one
way, so that a table of other versions is never read and a half-written one never seen."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

__all__ = ["Versions", "cache_folder", "cached_path", "installed_versions", "read_table", "write_table"]

Versions = dict[str, str | None]
"""Each package's installed version (``None``: not installed), as a table is keyed by them."""


def installed_versions(packages: Sequence[str]) -> Versions:
    """The installed version of each of ``packages``."""
    found: Versions = {}
    for package in packages:
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = None
    return found


def cache_folder() -> Path:
    """The user's cache of what export-guards derives from the installed packages:
    ``$XDG_CACHE_HOME/export-guards``, else ``~/.cache/export-guards``."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "export-guards"


def cached_path(name: str, versions: Versions) -> Path:
    """Where the user's cache (:func:`cache_folder`) keeps table ``name`` for ``versions``."""
    tag = hashlib.sha256(json.dumps(versions, sort_keys=True).encode()).hexdigest()[:16]
    return cache_folder() / f"{name}-{tag}.json"


def read_table(path: Path, versions: Versions, key: str) -> dict[str, Any] | None:
    """The rows under ``key`` of the table at ``path``, if it is one for ``versions``; None where
    it is missing, unreadable or of other versions."""
    try:
        document = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(document, dict) or document.get("versions") != versions or not isinstance(document.get(key), dict):
        return None
    return document[key]


def write_table(path: Path, versions: Versions, key: str, rows: Mapping[str, object], *, lines: bool = False) -> None:
    """Write ``rows`` under ``key`` at ``path``, whole or not at all (a concurrent reader sees the
    old table or the new one); ``lines``: one value a line, for a table that is reviewed in diffs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    layout: dict[str, Any] = {"indent": 0} if lines else {"separators": (",", ":")}
    text = json.dumps({"versions": versions, key: rows}, sort_keys=True, **layout)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=path.name, suffix=".part", delete=False) as file:
        file.write(text + "\n")
    os.chmod(file.name, 0o644)  # as any file written plainly (a temporary file is the owner's alone)
    os.replace(file.name, path)
