"""Torch's, torchao's, ExecuTorch's and coremltools' log lines and prints kept quiet while
export-guards runs them: their loggers, the records their code logs on the root logger
(ExecuTorch's ``logging.warning(...)``, printed as ``WARNING:root:...``), and what their Python
code writes to ``sys.stdout`` / ``sys.stderr`` (torch.export prints the partial graph of a model
it cannot export before it raises). The command and the pytest plugin both use it. Imports
neither torch nor ExecuTorch until the block runs."""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import sys
from collections.abc import Iterator
from typing import IO, Any, final

__all__ = ["LIBRARIES", "libraries_quiet"]

LIBRARIES = ("torch", "torchao", "executorch", "coremltools")
"""Whose log lines and prints are not the user's (coremltools: imported by the CoreML recipes)."""


@contextlib.contextmanager
def libraries_quiet() -> Iterator[None]:
    """For the block: the libraries' loggers at ERROR, their records on the root logger dropped,
    their prints dropped. The user's own log lines and prints pass. Levels, filters and streams
    are restored after, so that a caller in the same process (a test) finds them as they were."""
    loggers = [logging.getLogger(name) for name in LIBRARIES]
    levels = [logger.level for logger in loggers]
    streams = sys.stdout, sys.stderr
    root_filter = _LibraryRecords(_library_folders())
    try:
        for logger in loggers:
            logger.setLevel(logging.ERROR)
        import torch  # noqa: F401  (its first import resets its loggers' levels: set them again after)

        for logger in loggers:
            logger.setLevel(logging.ERROR)
        logging.getLogger().addFilter(root_filter)
        sys.stdout, sys.stderr = (_WithoutLibraryPrints(stream, root_filter.folders) for stream in streams)
        yield
    finally:
        sys.stdout, sys.stderr = streams
        logging.getLogger().removeFilter(root_filter)
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def _library_folders() -> tuple[str, ...]:
    """The folders of the libraries' packages, each as code objects name it and resolved, with
    a trailing separator (``.../torch/``, not ``.../torchvision``). Found without importing."""
    folders: set[str] = set()
    for name in LIBRARIES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        for folder in (spec.submodule_search_locations or []) if spec is not None else []:
            folders |= {os.path.join(os.path.abspath(folder), ""), os.path.join(os.path.realpath(folder), "")}
    return tuple(sorted(folders))


@final
class _LibraryRecords(logging.Filter):
    """On the root logger: drops the records that the libraries' code logs there."""

    def __init__(self, folders: tuple[str, ...]) -> None:
        super().__init__()
        self.folders = folders

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.pathname.startswith(self.folders)


@final
class _WithoutLibraryPrints:
    """A text stream that drops what the libraries' Python code writes to it (``print`` calls
    ``write`` from the printing frame) and passes everything else on."""

    def __init__(self, stream: IO[str], folders: tuple[str, ...]) -> None:
        self._stream = stream
        self._folders = folders

    def write(self, text: str) -> int:
        if sys._getframe(1).f_code.co_filename.startswith(self._folders):
            return len(text)
        return self._stream.write(text)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding...: the stream's
        return getattr(self._stream, name)
