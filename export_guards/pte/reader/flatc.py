"""Readers for the flatbuffers that ExecuTorch has no Python reader for (XNNPACK payloads,
``.ptd`` files): generated once per process by ExecuTorch's own ``flatc`` from the schema that
ExecuTorch ships (read from the wheel's files: importing the packages that hold them would
import torch), then read in-process, lazily (no child process per payload)."""

from __future__ import annotations

import functools
import subprocess
import tempfile
import types
from pathlib import Path

from export_guards.errors import Error
from export_guards.pte.reader.wheel import flatc_path, read_resource

__all__ = ["DecodeError", "generated_reader"]

TIMEOUT_S = 60


class DecodeError(Error):
    """The bytes are not a flatbuffer of the schema, saying how."""


@functools.cache
def generated_reader(package: str, schema: str, *included: str) -> types.ModuleType:
    """The Python reader ``flatc --python`` generates for ``schema`` of ``package`` (and the
    schema files it includes), as a module.

    Raises:
        RuntimeError: flatc failed, saying why (an installation problem, not a file problem).
    """
    with tempfile.TemporaryDirectory(prefix="export-guards-") as scratch:
        folder = Path(scratch)
        for name in (schema, *included):
            (folder / name).write_bytes(read_resource(package, name))
        command = [flatc_path(), "--python", "--gen-onefile", "--gen-all", "-o", scratch, str(folder / schema)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
        generated = folder / f"{Path(schema).stem}_generated.py"
        if done.returncode != 0 or not generated.is_file():
            raise RuntimeError(f"flatc could not generate a reader for {schema}: {done.stderr.strip()[-300:]}")
        module = types.ModuleType(f"export_guards._generated.{Path(schema).stem}")
        exec(compile(generated.read_text(), str(generated), "exec"), module.__dict__)  # noqa: S102  (flatc's own output)
        return module
