"""What kind of ExecuTorch file some bytes are, from the flatbuffer file identifier at bytes 4-8
alone: a program (``.pte``) or an external data file (``.ptd``). Imports neither torch nor
ExecuTorch, so that the command can tell before loading either."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from export_guards.pte.reader.headers import ExtendedHeader

__all__ = [
    "DATA_IDENTIFIER",
    "HEAD_LENGTH",
    "PROGRAM_IDENTIFIER",
    "FileKind",
    "file_kind",
    "file_kind_of",
    "looks_like_text",
    "unreadable_program",
    "unreadable_program_at",
]

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


HEAD_LENGTH = 8 + ExtendedHeader.EXPECTED_LENGTH
"""The bytes :func:`unreadable_program` needs: the identifier and the extended header."""

_EXPECTED = "expected an ExecuTorch program (.pte) as the export wrote it"


def unreadable_program(head: bytes, size: int) -> str | None:
    """Why a file of ``size`` bytes that begins with ``head`` (its first :data:`HEAD_LENGTH`
    bytes, or all of it) cannot be read as a program at all, in one sentence that says what it
    is and what was expected; ``None`` when it can (its contents may still be wrong: the check
    says how). ``check`` and ``diff`` both answer with it, exit 2."""
    if size == 0:
        return f"it is empty (0 bytes); {_EXPECTED}"
    if size < 8:
        return f"it is {size} bytes long, too short for a program; {_EXPECTED}"
    identifier = bytes(head[4:8])
    if file_kind(head) == "data":
        return "it is an external data file (.ptd), not a program; expected the .pte it belongs to"
    if file_kind(head) is None:
        what = (
            "a text file" if looks_like_text(head) else f"not an ExecuTorch program (bytes 4 to 8 are {identifier!r})"
        )
        return f"it is {what}; {_EXPECTED}, which holds {PROGRAM_IDENTIFIER!r} at bytes 4 to 8"
    if identifier != PROGRAM_IDENTIFIER:
        return (
            f"it is a program of schema version {identifier.decode()}; expected {PROGRAM_IDENTIFIER.decode()}, the version "
            f"this ExecuTorch reads: export and run with the same ExecuTorch version"
        )
    return _truncated(head, size)


def looks_like_text(head: bytes) -> bool:
    """Whether ``head`` is printable ASCII (a text file given where a binary one was expected)."""
    return all(32 <= b < 127 or b in b"\t\n\r" for b in head)


def _truncated(head: bytes, size: int) -> str | None:
    """The file is shorter than its extended header says (a bad copy, a download cut short)."""
    if len(head) < HEAD_LENGTH:
        return (
            f"it is truncated: {size} bytes, too few for its header; expected the whole program that the export wrote"
        )
    header = ExtendedHeader.from_bytes(bytes(head[8:HEAD_LENGTH]))
    if header.magic != ExtendedHeader.EXPECTED_MAGIC:
        return None  # no extended header: the flatbuffer is the whole file, and the check reads it
    needed = max(
        header.program_size, header.segment_base_offset + header.segment_data_size if header.segment_base_offset else 0
    )
    if header.is_valid() and needed > size:
        return f"it is truncated: {size} bytes of the {needed} its header gives; expected the whole program that the export wrote"
    return None


def unreadable_program_at(path: Path) -> str | None:
    """:func:`unreadable_program` of the file at ``path``.

    Raises:
        OSError: it cannot be opened.
    """
    with open(path, "rb") as file:
        head = file.read(HEAD_LENGTH)
        size = os.fstat(file.fileno()).st_size
    return unreadable_program(head, size)
