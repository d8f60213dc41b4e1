"""What a test's output shows of the libraries the fixtures run: not their warnings (placed in
their modules), log lines or prints, nor torch's structured-trace logger; the test's and the
model's own, always."""

from __future__ import annotations

import contextlib
import logging
import re
import sys
import warnings
from collections.abc import Generator, Iterator
from typing import final

import pytest

from export_guards.quiet import LIBRARIES, libraries_quiet

__all__ = [
    "import_runtime",
    "is_library_module",
    "libraries_kept_quiet",
    "pytest_runtest_call",
    "pytest_runtest_setup",
    "pytest_runtest_teardown",
]


# pytest (9.2+) also hands its log capture to loggers that do not propagate. torch's
# structured-trace logger ``torch.__trace`` is one: always at DEBUG, with empty messages meant
# for tlparse, so every failure report grew ~25 empty "DEBUG torch.__trace" lines (and torch
# built each trace payload for them). Each test phase detaches from it the handlers it shares
# with the root logger (pytest's); torch's own ``TORCH_TRACE`` handler stays, and no other
# logger is touched. ``trylast``: runs inside pytest's logging wrapper, after it attached.
@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    __tracebackhide__ = True
    _detach_torch_trace()
    return (yield)


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    __tracebackhide__ = True
    _detach_torch_trace()
    return (yield)


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    __tracebackhide__ = True
    _detach_torch_trace()
    return (yield)


def _detach_torch_trace() -> None:
    trace = logging.Logger.manager.loggerDict.get("torch.__trace")  # never imports torch
    if isinstance(trace, logging.Logger):
        for handler in set(trace.handlers) & set(logging.getLogger().handlers):
            trace.removeHandler(handler)


# Whose warnings are the fixtures' own: the libraries they run, and the standard library that
# those call (``importlib.resources``, ``copyreg``: where a library's warning may be placed).
_LIBRARY_MODULES = (
    "torch",
    "torchao",
    "executorch",
    "coremltools",
    "export_guards",
    "numpy",
    "sympy",
    *(sys.stdlib_module_names - {"test"}),
)


_LIBRARY_MODULE = r"(" + "|".join(re.escape(name) for name in sorted(_LIBRARY_MODULES)) + r")(\.|$)"


def is_library_module(module: str) -> bool:
    return re.match(_LIBRARY_MODULE, module) is not None


@contextlib.contextmanager
def libraries_kept_quiet() -> Iterator[None]:
    """Ignore, for the block, the warnings placed in the libraries' modules (torch's and
    ExecuTorch's deprecations, raised by the fixture's export, lowering and runtime): not the
    test's to act on, and ``-W error`` must not turn them into its failure. A warning placed in
    the model's or the test's code (``warnings.warn`` in ``forward``) is reported as always.
    The libraries' log lines and prints stay out of the test's captured output too
    (``export_guards.quiet``)."""
    with warnings.catch_warnings(), libraries_quiet(), _library_errors_held():
        warnings.filterwarnings("ignore", module=_LIBRARY_MODULE)
        yield


@contextlib.contextmanager
def _library_errors_held() -> Iterator[None]:
    """Hold the libraries' ERROR records for the block: where it raises, they are dropped, as
    the error says what they said (torch's fake tensors log the very error they raise, traceback
    and all, which reached a test's failure twice: torch's own handler and pytest's log
    capture); where it ends, they are logged as they were."""
    held = _HeldErrors()
    loggers = [
        logging.getLogger(),
        *(logger for name, logger in logging.Logger.manager.loggerDict.items() if _is_library_logger(name)),
    ]
    handlers = {
        handler for logger in loggers if isinstance(logger, logging.Logger) for handler in logger.handlers
    }  # torch gives many of its loggers their own
    for handler in handlers:
        handler.addFilter(held)
    try:
        yield
    except BaseException:
        held.records.clear()
        raise
    finally:
        for handler in handlers:
            handler.removeFilter(held)
        for record in held.records.values():
            logging.getLogger(record.name).handle(record)


def _is_library_logger(name: str) -> bool:
    return name.partition(".")[0] in LIBRARIES


@final
class _HeldErrors(logging.Filter):
    """On each handler: keeps back the libraries' ERROR records (each once), which the block's end decides on."""

    def __init__(self) -> None:
        super().__init__()
        self.records: dict[int, logging.LogRecord] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR or not _is_library_logger(record.name):
            return True
        self.records.setdefault(id(record), record)
        return False


def import_runtime() -> None:
    """Import ``executorch.runtime`` without the ``ExperimentalWarning`` its bindings give on
    import: ExecuTorch's note on its own API, nothing a test can act on. Under pytest-xdist it
    also cost ~5 s a run: the controller rebuilds each worker's warning from its class, so it
    imported ExecuTorch for it, while every worker waited for its next test."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "This API is experimental", DeprecationWarning, r"executorch\.")
        import executorch.runtime  # noqa: F401
