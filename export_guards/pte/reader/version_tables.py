"""Tables derived from the installed packages (the operator schemas, the kernels' dtypes): shipped
as JSON for the pinned versions, kept in the user's cache for any other, and read and written one
way, so that a table of other versions is never read and a half-written one never seen."""

from __future__ import annotations

import functools
import hashlib
import json
import marshal
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

__all__ = ["Versions", "cache_folder", "cached_path", "installed_versions", "read_table", "write_table"]

Versions = dict[str, str | None]
"""Each package's installed version (``None``: not installed), as a table is keyed by them."""


def installed_versions(packages: Sequence[str]) -> Versions:
    """The installed version of each of ``packages``."""
    return {package: _installed(package) for package in packages}


@functools.cache
def _installed(package: str) -> str | None:
    """Read once a process: each table asks (reading a package's metadata takes milliseconds)."""
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def cache_folder() -> Path:
    """The user's cache of what export-guards derives from the installed packages:
    ``$XDG_CACHE_HOME/export-guards``, else ``~/.cache/export-guards``."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "export-guards"


def cached_path(name: str, versions: Versions) -> Path:
    """Where the user's cache (:func:`cache_folder`) keeps table ``name`` for ``versions``."""
    tag = hashlib.sha256(json.dumps(versions, sort_keys=True).encode()).hexdigest()[:16]
    return cache_folder() / f"{name}-{tag}.json"


def read_table(path: Path, versions: Versions, key: str) -> Mapping[str, Any] | None:
    """The rows under ``key`` of the table at ``path``, if it is one for ``versions``; None where
    it is missing, unreadable or of other versions. Each row is decoded when first asked for,
    from an index of the table kept in the user's cache (:func:`_index`): a check looks up a
    few of the thousands of rows, and decoding them all took longer than reading the program."""
    index = _index(path, key)
    if index is None:
        return None
    table_versions, rows = index
    return _Rows(rows) if table_versions == versions else None


class _Rows(Mapping[str, Any]):
    """A table's rows by key, each decoded from its JSON text on first use."""

    def __init__(self, texts: dict[str, str]) -> None:
        self._texts, self._rows = texts, {}

    def __getitem__(self, key: str) -> Any:
        if key not in self._rows:
            self._rows[key] = json.loads(self._texts[key])
        return self._rows[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._texts)

    def __len__(self) -> int:
        return len(self._texts)


_INDEX_FORMAT = b"export-guards table index 1"


def _index(path: Path, key: str) -> tuple[object, dict[str, str]] | None:
    """The versions of the table at ``path`` and the JSON text of each row under ``key``; None
    where it is missing or not a table. Kept in the user's cache (named by the table file's
    identity: its path, inode, size and modification time) and trusted only where its own hash
    matches; built from the table where it is not kept (and kept, where the cache is writable)."""
    try:
        stat = path.stat()
    except OSError:
        return None
    identity = f"{path.resolve()}\0{stat.st_ino}\0{stat.st_size}\0{stat.st_mtime_ns}\0{key}\0{marshal.version}".encode()
    kept = (
        cache_folder() / "indexes" / f"{path.stem}-{hashlib.sha256(_INDEX_FORMAT + identity).hexdigest()[:32]}.marshal"
    )
    try:
        data = kept.read_bytes()
        if hashlib.sha256(data[32:]).digest() == data[:32]:
            versions, texts = marshal.loads(data[32:])  # noqa: S302 - our own cache file, its sha256 checked, as Python's bytecode cache is
            if isinstance(texts, dict):
                return versions, texts
    except (OSError, ValueError, EOFError, TypeError):
        pass  # none kept, or damaged: built again
    try:
        document = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(document, dict) or not isinstance(document.get(key), dict):
        return None
    index = (
        document.get("versions"),
        {name: json.dumps(row, separators=(",", ":")) for name, row in document[key].items()},
    )
    data = marshal.dumps(index)
    try:
        kept.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("wb", dir=kept.parent, prefix=kept.name, suffix=".part", delete=False) as file:
            file.write(hashlib.sha256(data).digest() + data)
        os.replace(file.name, kept)
    except OSError:
        pass  # a read-only cache: built again next time
    return index


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
