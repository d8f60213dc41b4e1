"""The terminal side of the command: progress on stderr (a line per step, timed), stdout kept
for the report alone, colour where a person reads it, the libraries' own warnings, log lines and
prints kept quiet, and a reader that goes away (``| head``)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TextIO, final

from export_guards.progress import shown_by
from export_guards.quiet import libraries_quiet, show_known_noise

__all__ = [
    "ProgressLines",
    "colour_report",
    "colours",
    "problem",
    "quiet_libraries",
    "stdout_to_stderr",
    "write_stdout",
]


_ERASE = "\r\x1b[K"  # back to the line's start, and clear it: a terminal's live line goes
LONG_RUN_S = 2.0  # a run this long gets a line per step: a shorter one is over before anyone waits
LONG_PART_S = 1.0  # a part of a step this long gets its own line: a quicker one is noise in a log


@final
class ProgressLines:
    """What one run says of its own progress on stderr (never its problems: :func:`problem`),
    nothing with ``-q``: a line when asked (:meth:`say`), and a timed line per step
    (:meth:`timed`).

    A step that ends once the run has taken :data:`LONG_RUN_S` or more prints one line,
    ``export-guards: torch.export took 3.1 s`` (earlier, quicker ones print nothing: the run may
    be over before anyone waits). A step that says what it is doing now
    (:func:`export_guards.progress.now`: decomposing, partitioning, compiling N delegates)
    prints a line for each such part of :data:`LONG_PART_S` or more as it ends, under the same
    rule: ``export-guards: linting and lowering (xnnpack): compiling 87 delegates
    (XnnpackBackend) took 41.2 s``. On a terminal the step, or its part, under way shows too, as
    a line that its end line replaces (a carriage return, on a terminal only: a CI log gets the
    end lines alone)."""

    def __init__(
        self, *, quiet: bool, clock: Callable[[], float] = time.monotonic, stream: IO[str] | None = None
    ) -> None:
        self._quiet = quiet
        self._clock = clock
        self._stream = stream
        self._started = clock()

    def say(self, message: str, *, ongoing: bool = True) -> None:
        """One line, ``export-guards: {message}...`` (``.`` when not ``ongoing``)."""
        if not self._quiet:
            print(f"export-guards: {message}{'...' if ongoing else '.'}", file=sys.stderr, flush=True)

    @contextlib.contextmanager
    def timed(self, doing: str, *, always: bool = False) -> Iterator[None]:
        """Time the step ``doing`` (``"torch.export"``); ``always``: print its line however
        short the run."""
        stream = self._stream or sys.stderr
        live = not self._quiet and _terminal(stream)
        part: list[tuple[str, float]] = []  # the part under way, and when it began

        def show(text: str, *, replacing: bool = True) -> None:
            if live:
                stream.write(f"{_ERASE if replacing else ''}{text}...")  # replaces the line under way
                stream.flush()

        def end_part() -> None:
            if part:
                what, began = part.pop()
                if self._clock() - began >= LONG_PART_S:
                    self._ended(f"{doing}: {what}", began, stream, always=False, live=live)

        def now(what: str) -> None:
            end_part()
            part.append((what, self._clock()))
            show(f"export-guards: {doing}: {what}")

        show(f"export-guards: {doing}", replacing=False)
        began = self._clock()
        try:
            with shown_by(now):
                yield
            end_part()  # a failed step's part gets no line, as the step gets none
        finally:
            if live:
                stream.write(_ERASE)  # the live line goes, whatever came after it on that line
                stream.flush()
        self._ended(doing, began, stream, always=always, live=False)

    def _ended(self, doing: str, began: float, stream: IO[str], *, always: bool, live: bool) -> None:
        """The line of a step, or part, that began at ``began`` and ends now."""
        ended = self._clock()
        if not self._quiet and (always or ended - self._started >= LONG_RUN_S):
            if live:
                stream.write(_ERASE)
            print(f"export-guards: {doing} took {ended - began:.1f} s", file=stream, flush=True)


def problem(label: str, detail: str) -> None:
    """One problem line on stderr, never silenced: ``export-guards: error: detail``, the label
    in bold red (``warning``: yellow) where stderr shows colour (:func:`colours`)."""
    colour = _BOLD_YELLOW if label == "warning" else _BOLD_RED
    shown = f"{colour}{label}:{_RESET}" if colours(sys.stderr) else f"{label}:"
    print(f"export-guards: {shown} {detail}", file=sys.stderr, flush=True)


def colours(stream: IO[str]) -> bool:
    """Whether to colour what goes to ``stream``, as ruff decides: ``FORCE_COLOR`` set to
    anything (not empty) colours even a file or a pipe; else ``NO_COLOR`` set to anything
    turns colour off; else colour on a terminal only."""
    if os.environ.get("FORCE_COLOR"):
        return True
    if os.environ.get("NO_COLOR"):
        return False
    return _terminal(stream)


def _terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or fake stream
        return False


_RESET, _BOLD, _BOLD_RED, _BOLD_YELLOW = "\x1b[0m", "\x1b[1m", "\x1b[1;31m", "\x1b[1;33m"
_SEVERITY_COLOURS = {"error": "\x1b[31m", "warning": "\x1b[33m", "info": "\x1b[36m"}
# ``CODE [severity]`` as the text renderer writes it: on a finding's line and an info count.
_FINDING = re.compile(r"\b([A-Z][A-Z0-9]*[0-9]{3}) \[(error|warning|info)\]")


def colour_report(text: str) -> str:
    """A text report, already rendered, with each code in bold and each severity in its colour
    (red errors, yellow warnings, cyan infos): for a terminal, never for a file or a machine
    format."""
    return _FINDING.sub(lambda m: f"{_BOLD}{m[1]}{_RESET} [{_SEVERITY_COLOURS[m[2]]}{m[2]}{_RESET}]", text)


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
def quiet_libraries(verbose: bool, *, load_torch: bool = True) -> Iterator[None]:
    """Keep torch's, torchao's and ExecuTorch's warnings, log lines and prints off the terminal
    for the block (they are not the user's problems; ``export_guards.quiet``); ``-v`` shows
    them. The user's own warnings, log lines and prints still show. The warning hook is
    restored after, so that a caller in the same process (a test) finds it as it was.
    ``load_torch=False`` for a block that may need no torch (``export_guards.quiet``)."""
    if verbose:
        show_known_noise()
        yield
        return
    original = warnings.showwarning
    roots = (*(str(Path(p).resolve()) for p in sys.path if "-packages" in p), os.path.dirname(os.__file__))

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        if not str(Path(filename).resolve()).startswith(roots):  # the user's code warned
            original(message, category, filename, lineno, file, line)

    try:
        with libraries_quiet(load_torch=load_torch):
            warnings.showwarning = show
            yield
    finally:
        warnings.showwarning = original


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
