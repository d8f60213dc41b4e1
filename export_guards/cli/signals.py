"""The signals that stop the command (SIGINT, SIGTERM, SIGHUP), turned into one exception that
the command answers with exit code 128+N, one line, and no artifact left behind."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType, TracebackType
from typing import Any, final

__all__ = ["Interrupted", "Interrupts"]

_HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """A signal asked the command to stop. A ``KeyboardInterrupt``, so that code that cleans
    up after Ctrl-C does so after SIGTERM and SIGHUP too.

    Attributes:
        signum: the signal's number.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def name(self) -> str:
        """``"SIGTERM"``."""
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        """128+N, as a shell reports a command that a signal ended."""
        return 128 + self.signum


@final
class Interrupts:
    """While entered, each handled signal raises :class:`Interrupted` in the main thread and is
    remembered, so that a library that swallows the exception cannot let the run go on as if
    nothing had happened: :meth:`check` raises it again.

    Handlers are installed at the very start of the command, before torch loads. SIGINT is
    handled even where the command started with it ignored: a background job of a
    non-interactive shell inherits SIGINT ignored, and there an interrupt was lost. SIGHUP stays
    ignored where ``nohup`` ignores it, as asked.

    Attributes:
        received: the first signal received, or ``None``.
    """

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
            return self
        for signum in _HANDLED:
            if signum == signal.SIGHUP and signal.getsignal(signum) == signal.SIG_IGN:
                continue
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def check(self) -> None:
        """Raise :class:`Interrupted` if a signal was received, even one whose exception
        some code swallowed."""
        if self.received is not None:
            raise Interrupted(self.received)

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """Hold the handled signals back for the block (a clean-up that must finish); one that
        arrives meanwhile is delivered when the block ends."""
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _HANDLED)
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signum
        raise Interrupted(signum)
