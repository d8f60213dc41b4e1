"""``export-guards check``: check written ``.pte`` files (and their ``.ptd`` files), or export a
model twice and compare the bytes. Reads programs without torch (``export_guards.pte``)."""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import mmap
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from export_guards.cli.arguments import UsageError, baseline_from, kernels_from, recipe_made_here, settings_from
from export_guards.cli.console import Stages, quiet_libraries
from export_guards.cli.outputs import Outputs
from export_guards.cli.reporting import Checked, against_baseline, deliver, exit_code, merged, project_root, reported_if_failed
from export_guards.cli.signals import Interrupts
from export_guards.compat import runtime_mismatch
from export_guards.pte.digests import ContentDigests
from export_guards.pte.reader.identity import file_kind_of
from export_guards.ruleset import Stage
from export_guards.ruleset.catalog import CATALOG
from export_guards.targets import StepFailed, TargetError, check_target

__all__ = ["run"]

Program = tuple[Path, tuple[Path, ...]]  # a .pte, and the .ptd files it is checked with
HASH_CHECK = CATALOG["EG523"].code  # named-data-hash-mismatch: its hashing starts before the imports


def run(args: argparse.Namespace, interrupts: Interrupts) -> int:
    """Check ``args.programs`` and/or ``args.reproducible``; exit code as
    :func:`~export_guards.cli.reporting.exit_code`."""
    if not args.programs and args.reproducible is None:
        raise UsageError("give .pte files or folders to check, or --reproducible path/to/file.py:factory")
    if args.jobs < 1:
        raise UsageError(f"--jobs takes a number of programs to check at once, 1 or more; not {args.jobs}")
    if args.runtime and (mismatch := runtime_mismatch()) is not None:  # every run would fail with a C++ trace
        raise UsageError(f"--runtime cannot run here: {mismatch}")
    stages: tuple[Stage, ...] = ("pte", "runtime", "engine") if args.runtime else ("pte", "engine")
    settings = settings_from(args, stages + (("reproducible",) if args.reproducible else ()))
    programs = programs_to_check(args)
    against = kernels_from(args)
    try:
        source = check_target(args.reproducible) if args.reproducible is not None else None
    except TargetError as error:
        raise UsageError(str(error)) from None
    read = [path for program, data in programs for path in (program, *data)]
    outputs = Outputs(inputs=[*read, source], force=args.force, interrupts=interrupts)
    outputs.claim(args.report_file, "report", "--report-file")
    outputs.claim(args.write_baseline, "report", "--write-baseline")
    baseline = baseline_from(args)
    steps = Stages(args)
    first = source or (programs[0][0] if programs else None)
    with outputs, quiet_libraries(args.verbose, load_torch=False), reported_if_failed(args, outputs, first, args.reproducible):
        digests = _hashing(programs[0]) if programs and settings.enabled(HASH_CHECK) else None
        from export_guards.pte.check import ExportFailed, check_pte, check_reproducible

        def check(program: Program) -> Checked:
            path, data = program
            report = check_pte(
                path, data_files=data, config=settings, runtime=args.runtime, against=against, replay=args.replay, digests=digests, inputs=args.inputs
            )
            return Checked(str(path), report, (f"program {path.stat().st_size:,} bytes", *_ran(args)))

        checked: list[Checked] = []
        if programs:
            what = f"{programs[0][0]}" if len(programs) == 1 else f"{len(programs)} programs"
            with steps(f"checking {what}" + (" and running each in executorch.runtime" if args.runtime else "")):
                checked += _each(check, programs, args.jobs)
        if args.reproducible is not None:
            recipe_made_here(settings)
            try:
                with steps(f"exporting {args.reproducible} twice, in separate processes ({settings.recipe or settings.backend})"):
                    report = check_reproducible(
                        args.reproducible,
                        backend=settings.backend,
                        placement=settings.placement,
                        fold=settings.fold,
                        recipe=settings.recipe,
                        config=settings,
                    )
                    checked.append(Checked(args.reproducible, report, ("exported twice",)))
            except ExportFailed as error:
                raise StepFailed("the reproducibility check", str(error)) from None
        root = project_root(first)
        checked, baselined = against_baseline(args, checked, baseline, outputs, root=root)
        delivered = deliver(args, checked, outputs, root=root, show_info=settings.show_info)
    failed = bool(merged(checked).at_least(settings.fail_level))
    return exit_code(args, failed=failed, complete=delivered and baselined)


def _ran(args: argparse.Namespace) -> tuple[str, ...]:
    """What the summary says of the run: on which inputs (made-up ones say so)."""
    if not args.runtime:
        return ()
    return (f"ran in executorch.runtime: forward on the inputs in {args.inputs}" if args.inputs is not None else "ran in executorch.runtime on inputs it made up (--inputs FILE runs real ones)",)


def _inputs_fit(args: argparse.Namespace, programs: Sequence[Program]) -> None:
    """``--inputs`` goes with ``--runtime`` and one program, and names a file: else a usage error."""
    if args.inputs is None:
        return
    if not args.runtime:
        raise UsageError("--inputs are what --runtime runs the program on: add --runtime")
    if len(programs) != 1:
        raise UsageError(f"--inputs goes with one program ({len(programs)} were given): check each with its own inputs")
    _readable_file(args.inputs, "--inputs")


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


def programs_to_check(args: argparse.Namespace) -> list[Program]:
    """The programs ``args.programs`` names, each with its data files, before any import: a
    file as given (with ``--data``, when it is the only one); a folder, every ``.pte`` in it and
    below, each with the ``.ptd`` files beside it that are its own (:func:`data_beside`).

    Raises:
        UsageError: a missing or unreadable file, a ``.ptd`` given as a program, a ``.pte`` as
            ``--data``, a folder without programs, ``--data`` with several programs, or
            ``--inputs`` without ``--runtime`` or with several programs.
    """
    programs: list[Program] = []
    for given in args.programs:
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
            raise UsageError(f"{given} is an external data file (.ptd), not a program: pass it with --data next to its .pte")
        programs.append((given, ()))
    for path in args.data:
        _readable_file(path, "--data")
        if file_kind_of(path) == "program":
            raise UsageError(f"--data {path} is a program (.pte), not a data file: give it as the program to check")
    if args.data:
        if len(programs) != 1 or args.programs[0].is_dir():
            raise UsageError("--data goes with one program file; with several, give their folder: each .pte there is checked with the .ptd files beside it")
        programs = [(programs[0][0], tuple(args.data))]
    for program, data in programs:
        if args.runtime and len(data) > 1:
            raise UsageError(f"--runtime loads one data file (executorch.runtime takes one data_path); {len(data)} were given for {program}")
    _inputs_fit(args, programs)
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
