"""The SHA-256 of the named-data entries whose key has the form of one (XNNPACK names its
weights by their content's hash; EG523 compares), hashed in background threads straight from
the mapped files: hashlib releases the GIL, so the hashing runs while this process imports and
the other rules run. Imports no reader: the command starts it before it imports one."""

from __future__ import annotations

import hashlib
import mmap
import os
import re
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import final

from export_guards.pte.reader.named_regions import named_data_regions

__all__ = ["ContentDigests", "is_content_key"]

_SHA256_KEY = re.compile(r"[0-9a-f]{64}")


def is_content_key(key: str) -> bool:
    """Whether ``key`` has the form of a SHA-256 digest (64 lowercase hex digits)."""
    return _SHA256_KEY.fullmatch(key) is not None


@final
class ContentDigests:
    """Hashes under way or done, each of one region of one file: started by whoever knows the
    region first (the command, from :func:`named_data_regions`, before its imports; else the
    rules' context), and each hashed once."""

    def __init__(self) -> None:
        self._started: dict[tuple[str, int, int], Future[str]] = {}

    def hash(self, regions: Iterable[tuple[str, bytes | mmap.mmap, int, int]]) -> list[Future[str]]:
        """The digest of each ``(file, its bytes, start, end)``: started now in background
        threads where it is not under way already. Regions outside their file are not for
        hashing (EG503's)."""
        regions = list(regions)
        if any(start < 0 or end > len(data) or start > end for _, data, start, end in regions):
            raise ValueError("a region outside its file")
        pool: ThreadPoolExecutor | None = None
        for name, data, start, end in regions:
            if (name, start, end) not in self._started:
                pool = pool or ThreadPoolExecutor(
                    max_workers=max(1, min(8, os.cpu_count() or 1)), thread_name_prefix="eg-hash"
                )
                self._started[name, start, end] = pool.submit(_sha256, data, start, end)
        if pool is not None:
            pool.shutdown(wait=False)  # the submitted hashes still run; the pool takes no more
        return [self._started[name, start, end] for name, _, start, end in regions]

    def start(self, files: Iterable[tuple[str, bytes | mmap.mmap]]) -> None:
        """Start hashing the content-keyed entries of each ``(name, bytes)``, a program or a data
        file, where its own tables (read without ExecuTorch's reader) place them."""
        self.hash(
            (name, data, start, end)
            for name, data in files
            for key, (start, end) in named_data_regions(data).items()
            if is_content_key(key) and 0 <= start <= end <= len(data)
        )


def _sha256(data: bytes | mmap.mmap, start: int, end: int) -> str:
    return hashlib.sha256(memoryview(data)[start:end]).hexdigest()
