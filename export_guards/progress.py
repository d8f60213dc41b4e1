"""What a long step is doing now: the parts of an export that take minutes on a large model
(decomposing, partitioning, compiling delegates, writing, running) say when each begins, and
whoever shows progress (the command's step lines) shows it. Nobody shows it by default: a
library call prints nothing."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar

__all__ = ["now", "shown_by"]

_show: ContextVar[Callable[[str], None] | None] = ContextVar("export_guards_progress", default=None)


def now(doing: str) -> None:
    """Say that the step under way is now ``doing`` (``"partitioning for xnnpack"``), until the
    next call or the step's end; nothing where nobody shows progress."""
    show = _show.get()
    if show is not None:
        show(doing)


@contextlib.contextmanager
def shown_by(show: Callable[[str], None]) -> Iterator[None]:
    """Within this block, each :func:`now` calls ``show`` with what it says."""
    token = _show.set(show)
    try:
        yield
    finally:
        _show.reset(token)
