"""What a failing check keeps (``--eg-artifacts DIR``): its report and its ``.pte``, one folder
per test, written as the command writes its outputs (``written.py``): atomically, and never
over a file that is not of the tool's kind."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, cast

import pytest

from export_guards.pytest_plugin.quiet import libraries_kept_quiet

if TYPE_CHECKING:
    from export_guards.pipeline import GuardedExport
    from export_guards.report import Report
    from export_guards.written import OutputKind

__all__ = ["_eg_fail"]


@pytest.fixture
def _eg_fail(request: pytest.FixtureRequest) -> Callable[..., NoReturn]:
    """``fail(message, export, pte=None)``: fail the test with ``message``, keeping ``export``'s
    report (``export``: a ``GuardedExport``, or the ``Report`` of a step that failed; and
    ``pte``: bytes, or a function that makes them) where ``--eg-artifacts`` says, plus the line
    that says where, or why they could not be kept. Every failure of the fixtures goes through
    here."""
    config = request.config
    folder = config.getoption("--eg-artifacts") or config.getini("export_guards_artifacts")
    # Relative to where pytest was started, whatever directory a test moves to.
    root = (config.invocation_params.dir / folder) if folder else None

    def fail(
        message: str, export: GuardedExport | Report, pte: bytes | Callable[[], bytes | None] | None = None
    ) -> NoReturn:
        pytest.fail(message + _save(root, request.node.nodeid, export, pte), pytrace=False)

    return fail


_READABLE = 100  # characters of the sanitised test id in a folder name (file systems allow 255)


def _artifact_folder(root: Path, test_name: str) -> Path:
    """``root/<sanitised test id, at most 100 characters>-<hash of the whole id>``: readable,
    unique (ids can read alike once sanitised or cut), and short enough for any file system
    whatever the id's length."""
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "_", test_name)[:_READABLE].strip("_.")
    digest = hashlib.sha1(test_name.encode(), usedforsecurity=False).hexdigest()[:8]
    return root / f"{readable}-{digest}"


def _save(
    root: Path | None, test_name: str, export: GuardedExport | Report, pte: bytes | Callable[[], bytes | None] | None
) -> str:
    """Keep the failing check's artifacts under ``root``; returns the line that says where, or
    why they could not be kept (never an exception: that would hide the test's own failure).
    As the command's outputs: each written atomically; one an earlier run left and this one
    does not write (no ``.pte`` this time) removed; a file there that is not the tool's (a
    user's notes named ``report.txt``) never replaced nor removed."""
    if root is None:
        return "\n(keep the .pte and report of failing checks with --eg-artifacts DIR)"
    from export_guards.render import render_json, render_text
    from export_guards.written import is_kind, write_atomically

    folder = _artifact_folder(root, test_name)
    report = cast("Report", getattr(export, "report", export))  # a GuardedExport's, or a failed step's
    try:
        with libraries_kept_quiet():
            data = pte() if callable(pte) else pte
        files: dict[Path, tuple[OutputKind, bytes | None]] = {
            folder / "report.txt": ("report", render_text(report, show_info=True).encode()),
            folder / "report.json": ("report", render_json(report).encode()),
            folder / "model.pte": ("program", data),
        }
        kept = [path.name for path, (kind, _) in files.items() if path.exists() and not is_kind(path, kind)]
        if kept:
            return f"\nexport-guards: the artifacts were not saved in {folder}: {', '.join(kept)} there is not export-guards' to replace"
        folder.mkdir(parents=True, exist_ok=True)
        for path, (_, content) in files.items():
            if content is not None:
                write_atomically(path, content)
            else:
                path.unlink(missing_ok=True)  # an earlier run's program: not this failure's
    except Exception as error:  # noqa: BLE001 - a full disk, a file in the way, a .pte that cannot be made
        return f"\nexport-guards: the artifacts could not be saved in {folder}: {type(error).__name__}: {error}"
    return f"\nartifacts saved in {folder}"
