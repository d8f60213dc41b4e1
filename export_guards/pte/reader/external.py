"""An external data file (``.ptd``) as ExecuTorch writes it: its header, its named data and
each entry's bounds. Like ``PteFile``, reading never raises for a malformed file."""

from __future__ import annotations

import mmap
from dataclasses import dataclass, field
from functools import cached_property
from typing import final

from export_guards.pte.reader.file import Region
from export_guards.pte.reader.flatc import generated_reader
from export_guards.pte.reader.headers import FlatTensorHeader
from export_guards.pte.reader.identity import DATA_IDENTIFIER as IDENTIFIER

__all__ = ["PtdFile"]


@final
@dataclass
class PtdFile:
    """A ``.ptd`` file's bytes and what its flatbuffer lists.

    Attributes:
        data: the file's bytes (or a read-only memory map of them).
        name: how findings refer to the file.
        problems: why it could not be read, in order.
    """

    data: bytes | mmap.mmap
    name: str
    problems: list[str] = field(default_factory=list)

    @cached_property
    def header(self) -> FlatTensorHeader | None:
        size = len(self.data)
        if size < 8 + FlatTensorHeader.EXPECTED_LENGTH or bytes(self.data[4:8]) != IDENTIFIER:
            self.problems.append(f"not an ExecuTorch data file: expected {IDENTIFIER!r} at byte 4 of {size} bytes")
            return None
        header = FlatTensorHeader.from_bytes(bytes(self.data[8 : 8 + FlatTensorHeader.EXPECTED_LENGTH]))
        end = header.flatbuffer_offset + header.flatbuffer_size
        if not header.is_valid() or end > size or header.segment_base_offset + header.segment_data_size > size:
            self.problems.append(
                f"its header is invalid or points outside the file ({size} bytes): flatbuffer "
                f"{header.flatbuffer_offset}+{header.flatbuffer_size}, segments "
                f"{header.segment_base_offset}+{header.segment_data_size}"
            )
            return None
        return header

    @cached_property
    def entries(self) -> list[tuple[str, Region | None]]:
        """Each named-data entry: its key, and its bytes' region (None: no such segment)."""
        return self._parsed[0]

    @property
    def layouts(self) -> dict[str, tuple[int, tuple[int, ...], tuple[int, ...]]]:
        """Each key's tensor layout as the file states it, where it states one: (scalar type,
        sizes, dim order), which the runtime compares with the program's tensor when it loads."""
        return self._parsed[1]

    @cached_property
    def _parsed(
        self,
    ) -> tuple[list[tuple[str, Region | None]], dict[str, tuple[int, tuple[int, ...], tuple[int, ...]]]]:
        if self.header is None:
            return [], {}
        reader = generated_reader("executorch.extension.flat_tensor.serialize", "flat_tensor.fbs", "scalar_type.fbs")
        end = self.header.flatbuffer_offset + self.header.flatbuffer_size
        try:
            root = reader.FlatTensor.GetRootAs(bytes(self.data[:end]), 0)
            base = self.header.segment_base_offset
            segments = [root.Segments(i) for i in range(root.SegmentsLength())]
            regions = [Region(base + s.Offset(), s.Size(), f"segment {i}") for i, s in enumerate(segments)]
            found, layouts = [], {}
            for i in range(root.NamedDataLength()):
                entry = root.NamedData(i)
                key, index, layout = (entry.Key() or b"").decode(), entry.SegmentIndex(), entry.TensorLayout()
                found.append((key, regions[index] if 0 <= index < len(regions) else None))
                if layout is not None:
                    sizes = tuple(layout.Sizes(k) for k in range(layout.SizesLength()))
                    layouts.setdefault(
                        key,
                        (layout.ScalarType(), sizes, tuple(layout.DimOrder(k) for k in range(layout.DimOrderLength()))),
                    )
            return found, layouts
        except Exception as error:  # noqa: BLE001 - a damaged flatbuffer fails in the reader in many ways
            self.problems.append(f"its flatbuffer cannot be read: {type(error).__name__}: {error}")
            return [], {}

    @property
    def named_data(self) -> dict[str, Region]:
        """The entries whose segment exists, by key (the first of a repeated key)."""
        found: dict[str, Region] = {}
        for key, region in self.entries:
            if region is not None:
                found.setdefault(key, region)
        return found
