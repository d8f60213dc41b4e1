"""What the command line asks for, as frozen values: one per command, each with the ``Settings``
that ``[tool.export-guards]`` and the options make, built once where the parse ends
(:func:`export_guards.cli.arguments.options_from`). Nothing past the parse reads argparse."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import final

from export_guards.settings import Settings

__all__ = [
    "CheckOptions",
    "CommandOptions",
    "DiffOptions",
    "ExplainOptions",
    "LintOptions",
    "ReportOptions",
    "RulesOptions",
]


@final
@dataclass(frozen=True)
class ReportOptions:
    """How a run that checks something reports, and what it may write: the options that
    ``lint``, ``check`` and ``diff`` share.

    Attributes:
        output_format: ``text``, ``json``, ``sarif`` or ``github``.
        statistics: count the findings per code instead of listing them.
        report_file: write the report here instead of stdout.
        baseline: leave out the findings this baseline holds.
        write_baseline: write the run's findings here as a baseline.
        exit_zero: exit 0 even when findings reach the fail level.
        force: replace a file at an output path that is not of the tool's kind.
        quiet: print no progress (``-q``).
        verbose: show the libraries' noise and full tracebacks (``-v``).
    """

    output_format: str = "text"
    statistics: bool = False
    report_file: Path | None = None
    baseline: Path | None = None
    write_baseline: Path | None = None
    exit_zero: bool = False
    force: bool = False
    quiet: bool = False
    verbose: bool = False


@final
@dataclass(frozen=True)
class LintOptions:
    """``export-guards lint``.

    Attributes:
        targets: ``path/to/file.py:factory`` or ``package.module:factory``, as given.
        arguments: the factory's ``--arg NAME=VALUE``, as given.
        pte: where to write the program (``--pte``).
        former_pte: ``--output``, the former name of ``--pte``.
        save_inputs: where to write the example inputs (``--save-inputs``).
        kernels: the runtime's kernel list (``--kernels``).
        run: run the written program in executorch.runtime (no ``--no-run``).
    """

    targets: tuple[str, ...]
    settings: Settings
    report: ReportOptions
    arguments: tuple[str, ...] = ()
    pte: Path | None = None
    former_pte: Path | None = None
    save_inputs: Path | None = None
    kernels: Path | None = None
    run: bool = True

    @property
    def runs_program(self) -> bool:
        """Whether the written program runs here: not one for another runtime (``--kernels``),
        which this one's run does not judge."""
        return self.run and self.kernels is None


@final
@dataclass(frozen=True)
class CheckOptions:
    """``export-guards check``.

    Attributes:
        programs: the ``.pte`` files and folders, as given.
        data: the ``.ptd`` files of the one program given (``--data``).
        jobs: programs checked at once.
        runtime: also run each method in executorch.runtime.
        runtime_timeout_s: how long each program's run may take.
        replay: also replay each kernel call on meta tensors (EG519).
        inputs: ``forward``'s inputs for the runtime run (``--inputs``).
        kernels: the runtime's kernel list (``--kernels``).
        reproducible: a target to export twice and compare.
    """

    settings: Settings
    report: ReportOptions
    programs: tuple[Path, ...] = ()
    data: tuple[Path, ...] = ()
    jobs: int = 1
    runtime: bool = False
    runtime_timeout_s: float = 120.0
    replay: bool = False
    inputs: Path | None = None
    kernels: Path | None = None
    reproducible: str | None = None


@final
@dataclass(frozen=True)
class DiffOptions:
    """``export-guards diff OLD NEW``: the shipped program and its new build."""

    old: Path
    new: Path
    settings: Settings
    report: ReportOptions


@final
@dataclass(frozen=True)
class RulesOptions:
    """``export-guards rules``: ``text`` or ``json``."""

    output_format: str = "text"


@final
@dataclass(frozen=True)
class ExplainOptions:
    """``export-guards explain CODE``: the code as given."""

    code: str


CommandOptions = LintOptions | CheckOptions | DiffOptions | RulesOptions | ExplainOptions
"""What one run of the command was asked to do."""
