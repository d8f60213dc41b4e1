"""``export-guards check``: check written ``.pte`` files (and their ``.ptd`` files), or export a
model twice and compare the bytes. Reads programs without torch (``export_guards.pte``)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import mmap
import os
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from export_guards.cli.arguments import UsageError, baseline_from, kernels_from, recipe_made_here
from export_guards.cli.console import ProgressLines, quiet_libraries
from export_guards.cli.options import CheckOptions
from export_guards.cli.outputs import Outputs
from export_guards.cli.reporting import (
    Checked,
    against_baseline,
    deliver,
    exit_code,
    merged,
    project_root,
    reported_if_failed,
)
from export_guards.cli.signals import Interrupts
from export_guards.pte.digests import ContentDigests
from export_guards.pte.reader.identity import (
    HEAD_LENGTH,
    file_kind,
    file_kind_of,
    looks_like_text,
    unreadable_program_at,
)
from export_guards.ruleset.catalog import CATALOG
from export_guards.targets import StepFailed, TargetError, check_target

if TYPE_CHECKING:
    from export_guards.pte.inventory import RuntimeInventory

__all__ = ["run"]

Program = tuple[Path, tuple[Path, ...]]  # a .pte, and the .ptd files it is checked with
HASH_CHECK = CATALOG["EG523"].code  # named-data-hash-mismatch: its hashing starts before the imports


def run(options: CheckOptions, interrupts: Interrupts) -> int:
    """Check ``options.programs`` and/or export ``options.reproducible`` twice; exit code as
    :func:`~export_guards.cli.reporting.exit_code`."""
    settings, report = options.settings, options.report
    programs = programs_to_check(options)
    against = kernels_from(options.kernels)
    try:
        source = check_target(options.reproducible) if options.reproducible is not None else None
    except TargetError as error:
        raise UsageError(str(error)) from None
    read = [path for program, data in programs for path in (program, *data)]
    outputs = Outputs(inputs=[*read, source], force=report.force, interrupts=interrupts)
    outputs.claim(report.report_file, "report", "--report-file")
    outputs.claim(report.write_baseline, "report", "--write-baseline")
    baseline = baseline_from(report.baseline)
    lines = ProgressLines(quiet=report.quiet)
    first = source or (programs[0][0] if programs else None)
    if options.inputs is not None:
        with quiet_libraries(report.verbose, load_torch=True):
            _inputs_loaded(options.inputs)
    with (
        outputs,
        quiet_libraries(report.verbose, load_torch=False),
        reported_if_failed(report, outputs, first, options.reproducible),
    ):
        digests = _hashing(programs[0]) if programs and settings.enabled(HASH_CHECK) else None
        checked = _checked_programs(options, programs, against, digests, lines)
        if options.reproducible is not None:
            checked.append(_exported_twice(options.reproducible, options, lines))
        root = project_root(first)
        checked, baselined = against_baseline(report, checked, baseline, outputs, root=root, lines=lines)
        delivered = deliver(report, checked, outputs, root=root, show_info=settings.show_info)
    failed = bool(merged(checked).at_least(settings.fail_level))
    return exit_code(report, failed=failed, complete=delivered and baselined)


def _checked_programs(
    options: CheckOptions,
    programs: list[Program],
    against: RuntimeInventory | None,
    digests: ContentDigests | None,
    lines: ProgressLines,
) -> list[Checked]:
    """Each program's report, ``options.jobs`` at once, as one timed step."""
    if not programs:
        return []
    from export_guards.pte.check import check_pte  # the rules load here, while the first program's weights hash

    def check(program: Program) -> Checked:
        path, data = program
        report = check_pte(
            path,
            data_files=data,
            config=options.settings,
            runtime=options.runtime,
            runtime_timeout_s=options.runtime_timeout_s,
            against=against,
            replay=options.replay,
            digests=digests,
            inputs=options.inputs,
        )
        return Checked(str(path), report, (f"program {path.stat().st_size:,} bytes", *_ran(options)))

    what = f"{programs[0][0]}" if len(programs) == 1 else f"{len(programs)} programs"
    with lines.timed(f"checking {what}" + (" and running each in executorch.runtime" if options.runtime else "")):
        return _each(check, programs, options.jobs)


def _exported_twice(target: str, options: CheckOptions, lines: ProgressLines) -> Checked:
    """``target`` exported twice, each in its own process, with the options' settings, and
    the report of the differences and of the first program.

    Raises:
        StepFailed: an export failed.
    """
    from export_guards.pte.check import ExportFailed, check_reproducible

    settings = options.settings
    recipe_made_here(settings)
    try:
        with lines.timed(f"exporting {target} twice, in separate processes ({settings.recipe or settings.backend})"):
            report = check_reproducible(target, config=settings)
    except ExportFailed as error:
        raise StepFailed("the reproducibility check", str(error)) from None
    return Checked(target, report, ("exported twice",))


def _ran(options: CheckOptions) -> tuple[str, ...]:
    """What the summary says of the run: on which inputs (made-up ones say so)."""
    if not options.runtime:
        return ()
    if options.inputs is not None:
        return (f"ran in executorch.runtime: forward on the inputs in {options.inputs}",)
    return ("ran in executorch.runtime on inputs it made up (--inputs FILE runs real ones)",)


def _inputs_fit(options: CheckOptions, programs: Sequence[Program]) -> None:
    """``--inputs`` goes with ``--runtime`` and one program, and names a file: else a usage error."""
    if options.inputs is None:
        return
    if not options.runtime:
        raise UsageError("--inputs are what --runtime runs the program on: add --runtime")
    if len(programs) != 1:
        raise UsageError(f"--inputs goes with one program ({len(programs)} were given): check each with its own inputs")
    _readable_file(options.inputs, "--inputs")
    _inputs_screened(options.inputs)


_SAVE_INPUTS = "expected the example inputs as a list of tensors saved with torch.save (export-guards lint FILE:factory --save-inputs PATH writes one)"


def _inputs_screened(path: Path) -> None:
    """``path`` is, by its bytes, a file ``torch.save`` wrote (a zip archive with a pickle), before
    torch loads: an inputs file that is not one is no fault of the program.

    Raises:
        UsageError: one line naming the file, what it is and what was expected.
    """
    what = None
    with open(path, "rb") as file:
        head = file.read(HEAD_LENGTH)
    if not head:
        what = "it is empty (0 bytes)"
    elif file_kind(head) is not None:
        what = f"it is an ExecuTorch {'program (.pte)' if file_kind(head) == 'program' else 'data file (.ptd)'}, not inputs"
    elif not zipfile.is_zipfile(path) and not head.startswith(
        b"\x80"
    ):  # a pickle: torch.save's legacy format, torch.load's to judge
        what = "it is a text file" if looks_like_text(head) else "it is not a torch.save file"
        what += " (truncated, or not a zip archive)" if head.startswith(b"PK") else ""
    elif zipfile.is_zipfile(path):
        try:
            with zipfile.ZipFile(path) as archive:
                pickled = [name for name in archive.namelist() if name.endswith("/data.pkl")]
                damaged = archive.testzip()
        except (zipfile.BadZipFile, OSError, EOFError) as error:
            pickled, damaged = [], str(error)
        if damaged is not None:
            what = f"it is damaged ({damaged} does not read)"
        elif not pickled:
            what = "it is a zip archive, but not one torch.save wrote"
    if what is not None:
        raise UsageError(f"--inputs {path} cannot be read as inputs: {what}; {_SAVE_INPUTS}")


def _inputs_loaded(path: Path) -> None:
    """What ``torch.save`` put in ``path`` is a list or tuple (of tensors, as the runtime takes them).

    Raises:
        UsageError: one line naming the file, what it holds and what was expected.
    """
    import pickle

    import torch

    try:
        loaded = torch.load(path, weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UsageError(
            f"--inputs {path} cannot be read as inputs: torch.load refuses it ({first}); {_SAVE_INPUTS}"
        ) from None
    if not isinstance(loaded, (list, tuple)):
        held = (
            f"a tensor of shape {tuple(loaded.shape)}"
            if isinstance(loaded, torch.Tensor)
            else f"a {type(loaded).__name__}"
        )
        raise UsageError(f"--inputs {path} holds {held}, not a list or tuple of the inputs; {_SAVE_INPUTS}")


def _hashing(program: Program) -> ContentDigests:
    """The first program's weights (and its data files'), hashing from now on in background
    threads, while the rules are imported: on a large program, the hashes (EG523) are what
    the check waits for last. Each file is mapped again by the check; the rest are hashed as
    they are checked."""
    digests = ContentDigests()
    with contextlib.ExitStack() as files:
        mapped = []
        for path in (program[0], *program[1]):
            with contextlib.suppress(OSError, ValueError):  # empty or unreadable: the check says so
                file = files.enter_context(open(path, "rb"))
                mapped.append((os.fspath(path), mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)))
        digests.start(mapped)
    return digests


def _each(check: Callable[[Program], Checked], programs: list[Program], jobs: int) -> list[Checked]:
    """Each program checked, in the order given; ``jobs`` at once (their runtime runs are child
    processes, so threads suffice). An interrupt cancels what has not started."""
    if jobs == 1 or len(programs) == 1:
        return [check(program) for program in programs]
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="export-guards check")
    try:
        return list(pool.map(check, programs))
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def programs_to_check(options: CheckOptions) -> list[Program]:
    """The programs ``options.programs`` names, each with its data files, before any import: a
    file as given (with ``--data``, when it is the only one); a folder, every ``.pte`` in it and
    below, each with the ``.ptd`` files beside it that are its own (:func:`data_beside`).

    Raises:
        UsageError: a missing or unreadable file, a ``.ptd`` given as a program, a ``.pte`` as
            ``--data``, a folder without programs, ``--data`` with several programs, or
            ``--inputs`` without ``--runtime`` or with several programs.
    """
    programs: list[Program] = []
    for given in options.programs:
        if given.is_dir():
            found = sorted(given.rglob("*.pte"))
            if not found:
                raise UsageError(f"{given} holds no .pte file: give a folder of programs, or the programs themselves")
            beside: dict[Path, list[Path]] = {}  # each folder listed once, however many programs it holds
            for path in sorted([*found, *given.rglob("*.ptd")]):
                beside.setdefault(path.parent, []).append(path)
            programs += [(path, data_beside(path, beside[path.parent])) for path in found]
            continue
        _readable_file(given, "the program")
        if file_kind_of(given) == "data":
            raise UsageError(
                f"{given} is an external data file (.ptd), not a program: pass it with --data next to its .pte"
            )
        programs.append((given, ()))
    for path, _ in programs:  # before any is checked: one that cannot be read at all is exit 2, however many are given
        _readable_program(path)
    for path in options.data:
        _readable_file(path, "--data")
        if file_kind_of(path) == "program":
            raise UsageError(f"--data {path} is a program (.pte), not a data file: give it as the program to check")
    if options.data:
        if len(programs) != 1 or options.programs[0].is_dir():
            raise UsageError(
                "--data goes with one program file; with several, give their folder: each .pte there is checked with the .ptd files beside it"
            )
        programs = [(programs[0][0], options.data)]
    for program, data in programs:
        if options.runtime and len(data) > 1:
            raise UsageError(
                f"--runtime loads one data file (executorch.runtime takes one data_path); {len(data)} were given for {program}"
            )
    _inputs_fit(options, programs)
    return programs


def data_beside(program: Path, folder: Sequence[Path]) -> tuple[Path, ...]:
    """The ``.ptd`` files beside ``program`` that are its own, given the ``.pte`` and ``.ptd``
    files of its ``folder``: those named after it (``model.pte``: ``model.ptd``,
    ``model.weights.ptd``, ``model_weights.ptd``), or, when it is the only program there, every
    ``.ptd`` (ExecuTorch names them after the data's tag, ``_default_external_constant.ptd``)."""
    ptds = tuple(sorted(p for p in folder if p.suffix == ".ptd"))
    if sum(p.suffix == ".pte" for p in folder) == 1:
        return ptds
    stem = program.stem
    return tuple(p for p in ptds if p.stem == stem or p.stem.startswith((f"{stem}.", f"{stem}_")))


def _readable_program(path: Path) -> None:
    """``path`` can be read as a program (its contents are the check's to judge).

    Raises:
        UsageError: it cannot (:func:`unreadable_program_at`), in one line.
    """
    try:
        why = unreadable_program_at(path)
    except OSError as error:
        raise UsageError(f"cannot read {path} (the program): {error.strerror or error}") from None
    if why is not None:
        raise UsageError(f"{path} cannot be read as a program: {why}")


def _readable_file(path: Path, option: str) -> None:
    if not path.exists():
        raise UsageError(f"no such file: {path} ({option})")
    if path.is_dir():
        raise UsageError(f"{path} is a folder, not a file ({option})")
    try:
        with open(path, "rb"):
            pass
    except OSError as error:
        raise UsageError(f"cannot read {path} ({option}): {error.strerror or error}") from None
