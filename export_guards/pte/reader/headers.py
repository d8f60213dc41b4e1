"""The three fixed headers ExecuTorch writes, read from the bytes as ExecuTorch's own classes
read them: the program's extended header ('eh00', ``exir/_serialize/_program.py``
``_ExtendedHeader``), the ``.ptd`` header ('FH01', ``extension/flat_tensor/serialize/
serialize.py`` ``FlatTensorHeader``) and the XNNPACK payload header ('XH00', ``backends/xnnpack/
serialization/xnnpack_graph_serialize.py`` ``XNNHeader``).

Their modules import torch (``_program.py`` through ``executorch.exir.tensor``) or a package
that does (``executorch.backends.xnnpack``), so the check keeps these copies: same magic, same
lengths and offsets, same fields, same validity test. ``tests/test_pte_without_torch.py``
compares each with ExecuTorch's class on real programs and on damaged bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, final

__all__ = ["ExtendedHeader", "FlatTensorHeader", "XNNHeader"]


def _int(data: bytes, start: int, end: int) -> int:
    return int.from_bytes(data[start:end], byteorder="little")


@final
@dataclass
class ExtendedHeader:
    """A program's extended header, at byte 8 (``_ExtendedHeader``)."""

    EXPECTED_MAGIC: ClassVar[bytes] = b"eh00"
    MINIMUM_LENGTH: ClassVar[int] = 4 + 4 + 8 + 8  # magic, length, program size, segment base offset
    EXPECTED_LENGTH: ClassVar[int] = MINIMUM_LENGTH + 8  # and the segment data size

    program_size: int
    segment_base_offset: int
    segment_data_size: int
    magic: bytes = EXPECTED_MAGIC
    length: int = EXPECTED_LENGTH

    @staticmethod
    def from_bytes(data: bytes) -> ExtendedHeader:
        """The fields of ``data`` (at least ``EXPECTED_LENGTH`` bytes), valid or not: a segment
        data size only where the length says it is there.

        Raises:
            ValueError: fewer bytes than that.
        """
        if len(data) < ExtendedHeader.EXPECTED_LENGTH:
            raise ValueError(f"Not enough data for extended header: {len(data)} < {ExtendedHeader.EXPECTED_LENGTH}")
        length = _int(data, 4, 8)
        return ExtendedHeader(
            magic=data[0:4],
            length=length,
            program_size=_int(data, 8, 16),
            segment_base_offset=_int(data, 16, 24),
            segment_data_size=_int(data, 24, 32) if length > ExtendedHeader.MINIMUM_LENGTH else 0,
        )

    def is_valid(self) -> bool:
        return self.magic == ExtendedHeader.EXPECTED_MAGIC and self.length >= ExtendedHeader.MINIMUM_LENGTH


@final
@dataclass
class FlatTensorHeader:
    """A ``.ptd`` file's header, at byte 8 (``FlatTensorHeader``)."""

    EXPECTED_MAGIC: ClassVar[bytes] = b"FH01"
    EXPECTED_LENGTH: ClassVar[int] = (
        4 + 4 + 8 + 8 + 8 + 8
    )  # magic, length, flatbuffer offset and size, segments' base and size

    flatbuffer_offset: int
    flatbuffer_size: int
    segment_base_offset: int
    segment_data_size: int
    magic: bytes = EXPECTED_MAGIC
    length: int = EXPECTED_LENGTH

    @staticmethod
    def from_bytes(data: bytes) -> FlatTensorHeader:
        """The fields of ``data`` (at least ``EXPECTED_LENGTH`` bytes), valid or not.

        Raises:
            ValueError: fewer bytes than that.
        """
        if len(data) < FlatTensorHeader.EXPECTED_LENGTH:
            raise ValueError(
                f"Not enough data for flat_tensor header: {len(data)} < {FlatTensorHeader.EXPECTED_LENGTH}"
            )
        return FlatTensorHeader(
            magic=data[0:4],
            length=_int(data, 4, 8),
            flatbuffer_offset=_int(data, 8, 16),
            flatbuffer_size=_int(data, 16, 24),
            segment_base_offset=_int(data, 24, 32),
            segment_data_size=_int(data, 32, 40),
        )

    def is_valid(self) -> bool:
        return self.magic == FlatTensorHeader.EXPECTED_MAGIC and self.length >= FlatTensorHeader.EXPECTED_LENGTH


@final
class XNNHeader:
    """Where an XNNPACK payload's header keeps its fields (``XNNHeader``'s layout; the check
    reads the fields at these offsets, as the runtime does)."""

    MAGIC_OFFSET: ClassVar[slice] = slice(4, 8)
    HEADER_SIZE_OFFSET: ClassVar[slice] = slice(8, 10)
    FLATBUFFER_OFFSET_OFFSET: ClassVar[slice] = slice(10, 14)
    FLATBUFFER_SIZE_OFFSET: ClassVar[slice] = slice(14, 18)
    CONSTANT_DATA_OFFSET_OFFSET: ClassVar[slice] = slice(18, 22)
    CONSTANT_DATA_SIZE_OFFSET: ClassVar[slice] = slice(22, 30)
    EXPECTED_MAGIC: ClassVar[bytes] = b"XH00"
    EXPECTED_LENGTH: ClassVar[int] = (
        4 + 4 + 2 + 4 + 4 + 4 + 8
    )  # padding, magic, length, graph offset and size, constants' offset and size
