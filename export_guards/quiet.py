"""Torch's, torchao's, ExecuTorch's and coremltools' log lines and prints kept quiet while
export-guards runs them: their loggers, the records their code logs on the root logger
(ExecuTorch's ``logging.warning(...)``, printed as ``WARNING:root:...``), and what their Python
code writes to ``sys.stdout`` / ``sys.stderr`` (torch.export prints the partial graph of a model
it cannot export before it raises). The command and the pytest plugin both use it. Imports
neither torch nor ExecuTorch until the block runs.

Outside any block, ``import export_guards`` filters the libraries' few known lines that no user
can act on (:data:`KNOWN_NOISE`), each at its source: the one logger and module that emits it,
the one warning category and message. Anything else a library says still reaches the user.
``EXPORT_GUARDS_LIBRARY_NOISE=1`` (and the command's ``-v``) lets them through."""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import re
import sys
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any, final

from export_guards.internals import warning_filters_changed

__all__ = [
    "BUFFER_WARNING", "CPU_PROBE", "KNOWN_NOISE", "LIBRARIES", "TOKENIZER_REGISTRATION", "KnownLine", "buffer_warning_answered", "filter_known_noise", "libraries_quiet",
    "runtime_chatter_dropped", "show_known_noise",
]  # fmt: skip

LIBRARIES = ("torch", "torchao", "executorch", "coremltools")
"""Whose log lines and prints are not the user's (coremltools: imported by the CoreML recipes)."""


@contextlib.contextmanager
def libraries_quiet(*, load_torch: bool = True) -> Iterator[None]:
    """For the block: the libraries' loggers at ERROR, their records on the root logger dropped,
    their prints dropped. The user's own log lines and prints pass. Levels, filters and streams
    are restored after, so that a caller in the same process (a test) finds them as they were.
    ``load_torch=False``: for a block that may need no torch at all (the program check), torch
    is not imported here; if the block imports it, torch's loggers are at its own levels."""
    loggers = [logging.getLogger(name) for name in LIBRARIES]
    levels = [logger.level for logger in loggers]
    streams = sys.stdout, sys.stderr
    root_filter = _LibraryRecords(_library_folders())
    try:
        for logger in loggers:
            logger.setLevel(logging.ERROR)
        if load_torch:
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


@final
@dataclass(frozen=True)
class KnownLine:
    """A line a library prints that says nothing a user can act on, named at its source.

    Attributes:
        source: the logger that logs it (``"torchao"``), or the category of the warning.
        message: a regular expression that the start of its message matches.
        why: why it is noise, for the docs and the next reader of this table.
        module: for a log line, the module (a path ending: ``"torchao/__init__.py"``) that logs it.
    """

    source: str | type[Warning]
    message: str
    why: str
    module: str = ""


KNOWN_NOISE: tuple[KnownLine, ...] = (
    KnownLine(
        "torchao", r"Failed to load .*_C\w*\.(abi3|cpython)",
        "torchao's optional CUDA kernels (mxfp8, cutlass): a CPU build of torch cannot load them and needs none",
        "torchao/__init__.py",
    ),
    KnownLine(
        "torchao", r"Skipping import of cpp extensions",
        "torchao's optional kernels, skipped on a torch they were not built for: its Python code works",
        "torchao/__init__.py",
    ),
    KnownLine(
        "torch.utils._pytree", r"<enum '\w+'> is an Enum subclass and is now natively supported",
        "torchao registers its enums as pytree constants, which torch now deprecates: torchao's to change",
        "torch/utils/_pytree.py",
    ),
    KnownLine(
        "torchao.kernel.intmm", r"Warning: Detected no triton",
        "torchao's Triton int-matmul kernels, for CUDA: a CPU build has no Triton and needs none",
        "torchao/kernel/intmm.py",
    ),
    KnownLine(
        "root", r"Disabled validating the partitioner\.$",
        "ExecuTorch's recipe stages turn the check of each partitioner off themselves (executorch/export/stages.py, "
        "validation_disabled) and log it on the root logger at every lowering: nothing for the user to do",
        "executorch/exir/backend/backend_api.py",
    ),
    KnownLine(
        FutureWarning, r"`isinstance\(treespec, LeafSpec\)` is deprecated",
        "torch.export's own copies of its graphs (copy.deepcopy) make LeafSpecs: torch's to change",
    ),
    KnownLine(
        FutureWarning, r"_check_is_size will be removed",
        "ExecuTorch's LLM custom ops (its KV-cache update and SDPA) call torch's deprecated _check_is_size at "
        "every trace: ExecuTorch's to change",
    ),
)  # fmt: skip
"""The lines :func:`filter_known_noise` keeps off the terminal, each at its source."""


@final
class _KnownRecords(logging.Filter):
    """On one library's logger: drops its records that :data:`KNOWN_NOISE` names."""

    def __init__(self, lines: list[KnownLine]) -> None:
        super().__init__()
        self.lines = [(line.module, re.compile(line.message)) for line in lines]

    def filter(self, record: logging.LogRecord) -> bool:
        path = record.pathname.replace(os.sep, "/")
        return not any(path.endswith(module) and pattern.match(record.getMessage()) for module, pattern in self.lines)


_installed: list[tuple[logging.Logger, _KnownRecords]] = []


def filter_known_noise() -> None:
    """Keep :data:`KNOWN_NOISE` off the terminal from now on (``import export_guards`` calls
    it; calling it again changes nothing). Does nothing when ``EXPORT_GUARDS_LIBRARY_NOISE`` is
    set (to anything but ``0``). Imports neither torch nor ExecuTorch."""
    if _installed or os.environ.get("EXPORT_GUARDS_LIBRARY_NOISE", "0") not in ("", "0"):
        return
    for name in sorted({line.source for line in KNOWN_NOISE if isinstance(line.source, str)}):
        logger = logging.getLogger(name)
        dropping = _KnownRecords([line for line in KNOWN_NOISE if line.source == name])
        logger.addFilter(dropping)
        _installed.append((logger, dropping))
    for line in KNOWN_NOISE:
        if not isinstance(line.source, str):
            warnings.filterwarnings("ignore", line.message, line.source)


def show_known_noise() -> None:
    """Let :data:`KNOWN_NOISE` through again (the command's ``-v``)."""
    while _installed:
        logger, dropping = _installed.pop()
        logger.removeFilter(dropping)
    ours = {(line.message, line.source) for line in KNOWN_NOISE if not isinstance(line.source, str)}
    kept = [f for f in warnings.filters if not (f[0] == "ignore" and f[1] is not None and (f[1].pattern, f[2]) in ours)]
    warnings.filters[:] = kept  # type: ignore[index]  # typeshed: a Sequence; it is the module's list
    warning_filters_changed()


BUFFER_WARNING = r"Mutation on a buffer in the model is detected"
"""How the emitter's warning starts that a buffer the program writes in place keeps only its
shape and dtype (``executorch/exir/emit/_emitter.py``)."""


@contextlib.contextmanager
def buffer_warning_answered() -> Iterator[None]:
    """For a guarded export's emission: the emitter's warning about every buffer written in place
    (:data:`BUFFER_WARNING`) is dropped, since the export's own lint reports the one case where
    it matters, a buffer that starts from a value other than zeros, naming it and the fix (its
    rule, buffer-initial-value-dropped). A KV cache that starts at zeros is no problem at all."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", BUFFER_WARNING, UserWarning)
        yield


CPU_PROBE = "[cpuinfo_utils.cpp:"
"""How the runtime's CPU probe starts its lines (five, when the first XNNPACK program loads:
files of ARM machines it looks for, on any other machine). They say nothing about the program."""

TOKENIZER_REGISTRATION = "I tokenizers:regex.cpp:"
"""How the line starts that ``pytorch_tokenizers``' native module logs as it is imported (by
ExecuTorch's LLM exporter): a fallback it registers, nothing about the model or the program."""


@contextlib.contextmanager
def runtime_chatter_dropped() -> Iterator[None]:
    """For the block: what native code writes to file descriptor 2 (``executorch.runtime``'s
    log) goes on to stderr line by line as it comes, except the CPU probe's lines
    (:data:`CPU_PROBE`) and the tokenizers' registration line (:data:`TOKENIZER_REGISTRATION`).
    Every other line, an error above all, still reaches the user. For an in-process run of the
    runtime or the LLM exporter (the examples); a child process's log is read by its parent."""
    dropped = (CPU_PROBE.encode(), TOKENIZER_REGISTRATION.encode())
    sys.stderr.flush()
    saved = os.dup(2)
    reading, writing = os.pipe()
    os.dup2(writing, 2)
    os.close(writing)

    def forward() -> None:
        with os.fdopen(reading, "rb") as pipe:
            for line in pipe:
                if not line.startswith(dropped):
                    os.write(saved, line)

    forwarder = threading.Thread(target=forward, name="export-guards stderr", daemon=True)
    forwarder.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)  # the pipe's last writer closes: the forwarder reads to its end
        forwarder.join()
        os.close(saved)
