"""Export one model twice, each in a fresh process, to see whether the ``.pte`` bytes repeat.

XNNPACK's on-device weight cache is keyed by named data: an export that renames or rewrites
unchanged weights makes every app update re-pack every weight. Each export is a child
(``export_guards.workers.export_once``), which writes the program and, beside it,
``OUT.pte.names.json``: the SHA-256 of each constant's bytes to its name, so that differences
can name the constant.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import final

from export_guards.errors import ExportFailed
from export_guards.settings import Settings

__all__ = ["ExportFailed", "ExportPair", "export_twice"]

WORKER = "export_guards.workers.export_once"
EXPORT_FAILED = "export-guards: export failed: "
"""What the export child prints on stderr before a failed step's message."""


@final
@dataclass(frozen=True)
class ExportPair:
    """Two exports of one model.

    Attributes:
        target: how findings name the pair: ``"the two exports of path/to/file.py:factory"``.
        first, second: the ``.pte`` bytes of each export.
        names: SHA-256 of a constant's bytes (as stored: contiguous, and channels-last for
            4-d tensors, as XNNPACK stores conv weights) to its fully-qualified name.
    """

    target: str
    first: bytes
    second: bytes
    names: dict[str, str]


def export_twice(
    target: str,
    settings: Settings = Settings(),
    *,
    timeout_s: float = 900.0,
) -> ExportPair:
    """Export ``target`` twice, each in its own process, with the guarded pipeline and
    ``settings``, handed to each child whole (``Settings.to_json``).

    Raises:
        ExportFailed: an export failed, ran past ``timeout_s``, or its lint stopped it.
    """
    with tempfile.TemporaryDirectory(prefix="export-guards-") as scratch:
        outputs = [Path(scratch) / f"export{i}.pte" for i in (1, 2)]
        for output in outputs:
            command = [sys.executable, "-m", WORKER, target, str(output), settings.to_json()]
            try:
                done = subprocess.run(
                    command, check=False, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL
                )
            except subprocess.TimeoutExpired:
                raise ExportFailed(f"exporting {target} took longer than {timeout_s:.0f} s") from None
            if done.returncode != 0 or not output.is_file():
                raise ExportFailed(f"exporting {target} failed: {_why(done)}")
        names = json.loads(Path(f"{outputs[0]}.names.json").read_text())
        return ExportPair(f"the two exports of {target}", outputs[0].read_bytes(), outputs[1].read_bytes(), names)


def _why(done: subprocess.CompletedProcess[str]) -> str:
    """The child's own account of its failure (a step's message, which may span lines), else
    its last line of stderr, else its exit status."""
    stderr = done.stderr.strip()
    if EXPORT_FAILED in stderr:
        return stderr.rsplit(EXPORT_FAILED, 1)[1]
    lines = stderr.splitlines()
    return lines[-1] if lines else f"exit status {done.returncode}"
