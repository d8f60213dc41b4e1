"""The files the command writes: the one place that writes or removes a file a user named.

Its promises, checked before any work and kept to the end of the run:

- An output is never one of the run's inputs (the model's file, the program or data file
  being checked) nor another output: paths are compared resolved, and by file identity.
- A file already at an output path is replaced only when it is an artifact of the tool's kind
  (an ExecuTorch program for ``--pte``, an export-guards report for ``--report-file``), or with
  ``--force``. Anything else there is a usage error before the work starts.
- A run that does not write an output (findings at the fail level, a failed step, a signal)
  removes what an earlier run left at that path, so that it is not taken for this run's result
  (make's ``.DELETE_ON_ERROR``), but only a file of the tool's kind; anything else stays.
- Writes are atomic (a temporary file beside the target, flushed, renamed over it); an
  interrupted run leaves no output at all, not even a complete one.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import final

from export_guards.cli.arguments import UsageError
from export_guards.cli.signals import Interrupts
from export_guards.written import WHAT, OutputKind, is_kind, write_atomically

__all__ = ["OutputKind", "Outputs"]

_EXAMPLE_NAME = {
    "program": "model.pte",
    "report": "report.txt",
    "inputs": "inputs.pt",
}  # a file to name, where a folder was


@final
@dataclass(frozen=True)
class _Claim:
    path: Path
    kind: OutputKind
    option: str


@final
class Outputs:
    """The outputs of one run. :meth:`claim` each before any work; enter the object around the
    work; :meth:`write` each output at most once.

    Args:
        inputs: the files the run reads; none may be an output.
        force: replace a file at an output path that is not of the tool's kind.
        interrupts: the run's signals: a write after one was received raises it, and one
            received at any point removes what the run wrote.
    """

    def __init__(self, *, inputs: Iterable[Path | None], force: bool, interrupts: Interrupts) -> None:
        self._inputs = [path for path in inputs if path is not None]
        self._force = force
        self._interrupts = interrupts
        self._claims: list[_Claim] = []
        self._written: set[Path] = set()

    def claim(self, path: Path | None, kind: OutputKind, option: str) -> Path | None:
        """Check that the run may write ``path`` (given as ``option``), and create its missing
        parent folders, as ruff does for ``--output-file``. ``None`` passes through.

        Raises:
            UsageError: ``path`` is an input or another output, a folder or other non-file,
                a file not of the tool's kind (without ``force``), or its folder cannot be made.
        """
        if path is None:
            return None
        for given in self._inputs:
            if _same_file(path, given):
                raise UsageError(f"{option} {path} is {given}, which this run reads: name another file for {option}")
        for other in self._claims:
            if _same_file(path, other.path):
                raise UsageError(f"{option} {path} is also {other.option}: give each its own file")
        if path.is_dir():
            raise UsageError(f"{option} {path} is a folder: name a file (such as {path / _EXAMPLE_NAME[kind]})")
        if path.exists() and not path.is_file():
            raise UsageError(f"{option} {path} is not a regular file: name a file")
        if path.exists() and not self._force and not is_kind(path, kind):
            raise UsageError(
                f"{option} {path} exists and is not {WHAT[kind]}: export-guards does not replace it; "
                "name another file, or pass --force to replace it"
            )
        folder = next(p for p in path.absolute().parents if p.exists())
        if not folder.is_dir():
            raise UsageError(f"{option} {path}: {folder} is a file, not a folder")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise UsageError(
                f"{option} {path}: cannot make the folder {path.parent}: {error.strerror or error}"
            ) from None
        if not os.access(path.parent, os.W_OK | os.X_OK):
            raise UsageError(f"{option} {path}: the folder {path.parent} is not writable")
        self._claims.append(_Claim(path, kind, option))
        return path

    def write(self, path: Path, data: bytes) -> bool:
        """Write ``data`` to the claimed ``path`` atomically. A failure is said on stderr and
        returns ``False``: the caller still reports what it found.

        Raises:
            Interrupted: a signal was received, whether or not some code swallowed it.
        """
        assert any(claim.path == path for claim in self._claims), f"{path} was not claimed"
        self._interrupts.check()
        try:
            write_atomically(path, data)
        except OSError as error:
            print(f"export-guards: writing {path} failed: {error.strerror or error}", file=sys.stderr)
            return False
        self._written.add(path)
        return True

    def __enter__(self) -> Outputs:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        with self._interrupts.deferred():  # a second signal must not cut the clean-up short
            interrupted = self._interrupts.received is not None or isinstance(error, KeyboardInterrupt)
            for claim in self._claims:
                written = claim.path in self._written
                if written and not interrupted:
                    continue
                if written or (claim.path.is_file() and is_kind(claim.path, claim.kind)):
                    claim.path.unlink(missing_ok=True)
                    why = (
                        "the run was interrupted"
                        if interrupted
                        else "this run did not write it, so it was not this run's result"
                    )
                    print(f"export-guards: removed {claim.path}: {why}", file=sys.stderr)


def _same_file(path: Path, other: Path) -> bool:
    try:
        return os.path.samefile(path, other)
    except OSError:  # one of them does not exist (yet)
        return path.resolve() == other.resolve()
