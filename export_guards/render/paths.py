"""Paths as every format shows them: relative to the project root, absolute outside it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from export_guards.report import Finding

__all__ = ["display_path", "project_root", "with_display_paths"]


def project_root(start: Path) -> Path:
    """The nearest directory at or above ``start`` holding ``pyproject.toml`` or ``.git``; else
    ``start``'s directory (``start`` itself when it is one)."""
    start = Path(start).resolve()
    directory = start if start.is_dir() else start.parent
    for candidate in (directory, *directory.parents):
        if (candidate / "pyproject.toml").is_file() or (candidate / ".git").exists():
            return candidate
    return directory


def display_path(file: str, root: Path | None = None) -> str:
    """``file`` relative to ``root`` (default: the working folder's project root), in POSIX
    form; absolute when it lies outside ``root``. A relative ``file`` is taken from the working
    folder; a name that is no file (``<stdin>``) is left as it is."""
    if file.startswith("<"):
        return file
    path = Path(file)
    path = (path if path.is_absolute() else Path.cwd() / path).resolve()
    try:
        return path.relative_to((root or project_root(Path.cwd())).resolve()).as_posix()
    except ValueError:
        return str(path)


def with_display_paths(finding: Finding, root: Path | None = None) -> Finding:
    """``finding`` with its source file and program file as :func:`display_path` shows them."""
    location = finding.location and replace(finding.location, file=display_path(finding.location.file, root))
    artifact = finding.artifact and display_path(finding.artifact, root)
    return replace(finding, location=location, artifact=artifact)
