"""The terminal side of the command: progress on stderr, stdout kept for the report alone, the
libraries' own warnings and log lines kept quiet, and a reader that goes away (``| head``)."""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import logging
import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["progress", "quiet_libraries", "stdout_to_stderr", "write_stdout"]

_LIBRARIES = ("torch", "torchao", "executorch", "coremltools")  # whose warnings and logs are not the user's (coremltools: imported by the CoreML recipes)


def progress(args: argparse.Namespace, message: str, *, ongoing: bool = True) -> None:
    """One progress line on stderr, unless ``-q``."""
    if not args.quiet:
        print(f"export-guards: {message}{'...' if ongoing else '.'}", file=sys.stderr, flush=True)


def write_stdout(text: str) -> None:
    """Write ``text`` to stdout. A reader that has gone (``export-guards rules | head -1``)
    ends the output quietly: the rest goes to the null device, not into a traceback."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())  # what is still buffered is flushed there at exit
        os.close(null)


@contextlib.contextmanager
def quiet_libraries(verbose: bool) -> Iterator[None]:
    """Keep torch's, torchao's and ExecuTorch's warnings and log lines off the terminal for the
    block (they are not the user's problems); ``-v`` shows them. The user's own warnings still
    show. Levels and the warning hook are restored after, so that a caller in the same process
    (a test) finds them as they were."""
    if verbose:
        yield
        return
    loggers = [logging.getLogger(name) for name in _LIBRARIES]
    levels = [logger.level for logger in loggers]
    original = warnings.showwarning
    try:
        for logger in loggers:
            logger.setLevel(logging.ERROR)
        import torch  # noqa: F401  (its first import resets its loggers' levels: set them again after)

        for logger in loggers:
            logger.setLevel(logging.ERROR)
        roots = tuple(str(Path(p).resolve()) for p in sys.path if "-packages" in p) + (os.path.dirname(os.__file__),)

        def show(message: Warning | str, category: type[Warning], filename: str, lineno: int, *rest: Any) -> None:
            if not str(Path(filename).resolve()).startswith(roots):  # the user's code warned
                original(message, category, filename, lineno, *rest)

        warnings.showwarning = show
        yield
    finally:
        warnings.showwarning = original
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send file descriptor 1 to stderr for the block: what the model's Python code prints, and
    what native code writes to fd 1, stays out of the report on stdout."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stderr.flush()
        with contextlib.suppress(Exception):
            ctypes.CDLL(None).fflush(None)  # native code's buffered writes belong to the block
        os.dup2(saved, 1)
        os.close(saved)
