"""What the program-file rules read: the ``.pte`` and the external data files given with it."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from export_guards.pte.reader.external import PtdFile
from export_guards.pte.reader.file import Delegate, PteFile, Region
from export_guards.pte.reader.flatc import DecodeError
from export_guards.pte.reader.xnnpack import BACKEND_ID, XnnPayload, read_payload

__all__ = ["PteContext"]


@dataclass
class PteContext:
    """A program file and its data files, as the ``pte`` rules see them."""

    pte: PteFile
    data_files: tuple[PtdFile, ...] = field(default=())

    @cached_property
    def named_data(self) -> dict[str, tuple[str, Region]]:
        """Every resolvable named-data key: the file that holds it, and where (the program wins)."""
        found: dict[str, tuple[str, Region]] = {}
        for ptd in reversed(self.data_files):
            found.update((key, (ptd.name, region)) for key, region in ptd.named_data.items())
        found.update((key, (self.pte.name, region)) for key, region in self.pte.named_data.items())
        return found

    @cached_property
    def xnnpack_payloads(self) -> list[tuple[Delegate, XnnPayload | DecodeError]]:
        """Each XNNPACK delegate that has data, with its decoded payload or why it cannot be
        decoded: decoded once, for every rule that reads it."""
        decoded: list[tuple[Delegate, XnnPayload | DecodeError]] = []
        for delegate in self.pte.delegates:
            if delegate.backend == BACKEND_ID and delegate.data:
                try:
                    decoded.append((delegate, read_payload(delegate.data)))
                except DecodeError as error:
                    decoded.append((delegate, error))
        return decoded
