"""Decode a flatbuffer that ExecuTorch has no Python reader for (XNNPACK payloads, ``.ptd``
headers), with ExecuTorch's own ``flatc`` and schema, in a child process with a time limit."""

from __future__ import annotations

import functools
import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from executorch.exir._serialize._flatbuffer import _get_flatc_path

__all__ = ["DecodeError", "decode"]

TIMEOUT_S = 30


class DecodeError(Exception):
    """The bytes are not a flatbuffer of the schema (or flatc failed on them)."""


@functools.lru_cache(maxsize=64)  # fuzzing and repeated checks decode the same payloads
def decode(schemas: tuple[tuple[str, bytes], ...], data: bytes, raw_binary: bool = False) -> Any:
    """The JSON object that ``flatc --json`` makes of ``data`` with the first of ``schemas``
    (the others are the files it includes).

    Raises:
        DecodeError: flatc rejected the bytes, crashed on them or ran past ``TIMEOUT_S``.
    """
    with tempfile.TemporaryDirectory(prefix="export-guards-") as scratch:
        folder = Path(scratch)
        for name, text in schemas:
            (folder / name).write_bytes(text)
        (folder / "data.bin").write_bytes(data)
        command = [_get_flatc_path(), "--json", "--strict-json", "--defaults-json", "-o", scratch]
        command += ["--raw-binary"] if raw_binary else []
        try:
            done = subprocess.run(
                [*command, str(folder / schemas[0][0]), "--", str(folder / "data.bin")],
                capture_output=True,
                timeout=TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            raise DecodeError(f"flatc did not finish within {TIMEOUT_S} s") from None
        output = folder / "data.json"
        if done.returncode != 0 or not output.is_file():
            reason = done.stderr.decode(errors="replace").strip().splitlines()
            raise DecodeError(reason[-1][:200] if reason else f"flatc exited with {done.returncode}")
        try:
            return json.loads(output.read_bytes())
        except (ValueError, RecursionError) as error:
            raise DecodeError(f"flatc wrote unreadable JSON: {error}") from None
