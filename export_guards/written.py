"""The files export-guards writes, whoever asks (the command's outputs, the pytest plugin's
artifacts): each written atomically, and the test of whether a file already there is of the
tool's kind, which decides whether it may be replaced or removed without asking."""

from __future__ import annotations

import contextlib
import os
import tempfile
import zipfile
from pathlib import Path
from typing import Literal

from export_guards.pte.reader.identity import file_kind_of
from export_guards.render import is_report

__all__ = ["WHAT", "OutputKind", "is_kind", "write_atomically"]

OutputKind = Literal["program", "report", "inputs"]
"""What a written file is: an ExecuTorch program, an export-guards report, or a program's inputs
(a list that ``torch.save`` wrote, for ``check --runtime --inputs``)."""
WHAT = {
    "program": "an ExecuTorch program",
    "report": "an export-guards report",
    "inputs": "a file of inputs saved with torch.save",
}
"""Each kind, as a message names it."""
_LARGEST_REPORT = 64 << 20  # a larger file is not read whole to decide whether it is a report


def write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file beside it, flushed to disk and
    renamed over it: whoever reads ``path`` sees the old file or the whole new one.

    Raises:
        OSError: the write failed; nothing is left behind.
    """
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)  # as a plain open() would create it, not mkstemp's 0600
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def is_kind(path: Path, kind: OutputKind) -> bool:
    """Whether the file at ``path`` is an artifact of the tool's kind for that output."""
    if kind == "program":
        return file_kind_of(path) == "program"
    if kind == "inputs":
        return _saved_by_torch(path)
    try:
        if path.stat().st_size > _LARGEST_REPORT:
            return False
        return is_report(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError):
        return False


def _saved_by_torch(path: Path) -> bool:
    """Whether ``path`` is a file ``torch.save`` wrote (a zip archive with its pickle), told
    without torch."""
    try:
        with zipfile.ZipFile(path) as archive:
            return any(name.endswith("/data.pkl") for name in archive.namelist())
    except (OSError, zipfile.BadZipFile):
        return False
