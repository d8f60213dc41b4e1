"""What kind of ExecuTorch file some bytes are, from the flatbuffer file identifier at bytes 4-8
alone: a program (``.pte``) or an external data file (``.ptd``). Imports neither torch nor
ExecuTorch, so that the command can tell before loading either."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

__all__ = ["DATA_IDENTIFIER", "PROGRAM_IDENTIFIER", "FileKind", "file_kind", "file_kind_of"]

PROGRAM_IDENTIFIER = b"ET12"
"""The program schema version this ExecuTorch reads."""
DATA_IDENTIFIER = b"FT01"

FileKind = Literal["program", "data"]


def file_kind(head: bytes) -> FileKind | None:
    """``"program"`` for any program schema version (``ET`` and two digits), ``"data"`` for a
    ``.ptd``, else ``None``; ``head`` is at least the file's first 8 bytes."""
    identifier = bytes(head[4:8])
    if identifier[:2] == b"ET" and identifier[2:].isdigit():
        return "program"
    return "data" if identifier == DATA_IDENTIFIER else None


def file_kind_of(path: Path) -> FileKind | None:
    """:func:`file_kind` of the file at ``path`` (``None`` when it cannot be read)."""
    try:
        with open(path, "rb") as file:
            return file_kind(file.read(8))
    except OSError:
        return None
