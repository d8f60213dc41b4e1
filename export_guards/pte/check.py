"""``check_pte``: run the program-file rules over a written ``.pte`` (and its ``.ptd`` files)."""

from __future__ import annotations

import contextlib
import functools
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from export_guards.compat import RuntimeMismatch, runtime_mismatch
from export_guards.pte.context import Need, PteContext, needs_of
from export_guards.pte.digests import ContentDigests
from export_guards.pte.inventory import RuntimeInventory
from export_guards.pte.reader.external import PtdFile
from export_guards.pte.reader.file import PteFile, open_bytes
from export_guards.pte.reader.flatc import DecodeError
from export_guards.pte.reader.identity import HEAD_LENGTH, unreadable_program
from export_guards.pte.reproducible import ExportFailed, ExportPair, export_twice
from export_guards.pte.rules import PTE_RULES, structure
from export_guards.pte.rules.kernels import replay_calls
from export_guards.pte.smoke import SmokeInputs, SmokeWorker, StartedSmoke, input_specs
from export_guards.pte.weight_cache import CacheDiff, ProgramUpdate, diff_weights
from export_guards.report import Report
from export_guards.ruleset import Locate, RuleSet, run, with_project_rules
from export_guards.settings import Settings, with_keywords

__all__ = ["ExportFailed", "check_pte", "check_reproducible", "compare_pte", "diff_pte", "read_update", "update_report"]

PathOrBytes = str | os.PathLike[str] | bytes | bytearray | memoryview


def check_pte(
    program: PathOrBytes,
    *,
    data_files: Iterable[str | os.PathLike[str]] = (),
    config: Settings | None = None,
    runtime: bool = False,
    runtime_timeout_s: float = 120.0,
    against: RuntimeInventory | None = None,
    locate: Locate | None = None,
    rules: RuleSet | None = None,
    replay: bool = False,
    digests: ContentDigests | None = None,
    inputs: str | os.PathLike[str] | None = None,
) -> Report:
    """Check a written ExecuTorch program, read with ExecuTorch's own deserializer and not run
    (unless ``runtime``), with the program-file rules (docs/check.md says what each checks; what
    the runtime ignores is at most a warning). Only headers, flatbuffer and payloads are read.

    Args:
        program: the ``.pte`` path, or its bytes.
        data_files: the external data files (``.ptd``) the program is run with (one, with ``runtime``).
        config: which rules run and their severities (default: all).
        runtime: also load the program in ``executorch.runtime`` in a child process and run
            each method once on inputs it makes up (EG511); a crash is reported, never raised.
        runtime_timeout_s: how long that child may take.
        inputs: with ``runtime``, the inputs to run ``forward`` on instead of made-up ones (a
            ``torch.save`` file: the list of the method's inputs, ``None`` for an input given
            as ``None``). A failure on made-up inputs that may be their fault is a warning.
        against: the runtime whose kernels and backends the program must find (EG521); with
            ``runtime``, by default the installed one (as its child finds it).
        locate: places a finding about an operator (``"aten::sort.values"``) on the user's
            line, where the caller has the program's graph (``export_guards.verify.check_program``).
        rules: the rule set to run (default ``PTE_RULES`` and the installed project rules).
        replay: also replay each ATen call that writes a tensor on torch's meta tensors (EG519),
            which imports torch; with ``runtime``, always, in the runtime's child, not here.
        digests: the weights' hashes (EG523) where the caller started them already
            (``ContentDigests.start``); those it lacks are started here.

    Raises:
        OSError: ``program`` or a data file is not a readable file (missing, a directory).
            A malformed file is never an exception: it is a finding.
        ValueError: ``runtime`` with more than one data file, or ``inputs`` without ``runtime``.
        RuntimeMismatch: ``runtime``, and executorch's runtime cannot run with the installed
            torch: the one line says which it needs.
    """
    config = config or Settings()
    program, data_files = _normalized(program, data_files)
    _check_arguments(runtime, inputs, data_files)
    pte, ptds = _opened(program, data_files)
    rules = rules or with_project_rules(PTE_RULES)
    needed = needs_of(rules, config)
    context = functools.partial(
        PteContext, pte, ptds, against, replay=replay and not runtime, digests=digests or ContentDigests(), needs=needed
    )
    found = functools.partial(
        run, rules, settings=config, name=pte.name, artifact=None if isinstance(program, bytes) else pte.name
    )
    if not runtime:
        return found("pte", context(), locate=locate)
    with SmokeWorker() as worker, _as_file(program) as path:  # the child imports the runtime meanwhile
        calls = replay_calls(pte) if Need.REPLAYED in needed else []
        started = _started(worker, path, pte, ptds, runtime_timeout_s, inputs, inventory=against is None, replay=calls)
        report = found("pte", context(answers=started, replay_calls=calls), locate=locate)
        return report + found("runtime", started.result())


def _started(
    worker: SmokeWorker,
    path: str,
    pte: PteFile,
    ptds: tuple[PtdFile, ...],
    timeout_s: float,
    inputs: str | os.PathLike[str] | None,
    *,
    inventory: bool,
    replay: list[object],
) -> StartedSmoke:
    """The runtime's child handed the program, even one with structural errors (whether the
    runtime survives them is the question). It started first, and imports the runtime (most
    of the run's cost) while this process reads the program; it also answers what needs the
    runtime or torch (the inventory, EG519's replay), so that this process loads neither."""
    runs = (
        [SmokeInputs(os.fspath(inputs), os.devnull, f"{pte.name} on the inputs in {os.fspath(inputs)}")]
        if inputs is not None
        else []
    )
    made_up = (
        input_specs(pte.program) if pte.program is not None else None
    )  # parsed here already: the child need not parse it
    return worker.start(
        path,
        [p.name for p in ptds],
        timeout_s,
        name=pte.name,
        runs=runs,
        inventory=inventory,
        replay=replay,
        made_up=made_up,
    )


def _normalized(
    program: PathOrBytes, data_files: Iterable[str | os.PathLike[str]]
) -> tuple[PathOrBytes, tuple[str | os.PathLike[str], ...]]:
    """``program`` as a path or ``bytes``, and the data files as a tuple (one path alone too)."""
    if isinstance(program, (bytearray, memoryview)):
        program = bytes(program)
    if isinstance(data_files, (str, os.PathLike)):
        data_files = (data_files,)
    return program, tuple(data_files)


def _opened(
    program: PathOrBytes, data_files: tuple[str | os.PathLike[str], ...]
) -> tuple[PteFile, tuple[PtdFile, ...]]:
    """The program file and its data files, memory-mapped (a program given as bytes, as they are)."""
    pte = (
        PteFile(program, "<bytes>") if isinstance(program, bytes) else PteFile(open_bytes(program), os.fspath(program))
    )
    return pte, tuple(PtdFile(open_bytes(path), os.fspath(path)) for path in data_files)


def _check_arguments(runtime: bool, inputs: object, data_files: tuple[object, ...]) -> None:
    """Raise for what ``check_pte`` cannot do with these arguments (its Raises)."""
    if runtime and (mismatch := runtime_mismatch()) is not None:
        raise RuntimeMismatch(mismatch)
    if inputs is not None and not runtime:
        raise ValueError("inputs are what the runtime run takes: pass runtime=True with them")
    if runtime and len(data_files) > 1:
        raise ValueError(
            f"the runtime smoke run loads one data file (executorch.runtime takes one data_path); {len(data_files)} were given"
        )


@contextlib.contextmanager
def _as_file(program: PathOrBytes) -> Iterator[str]:
    if not isinstance(program, bytes):
        yield os.fspath(program)
        return
    with tempfile.TemporaryDirectory(prefix="export-guards-") as scratch:
        path = os.path.join(scratch, "program.pte")
        with open(path, "wb") as file:
            file.write(program)
        yield path


def check_reproducible(
    target: str,
    *,
    backend: str | None = None,
    placement: str | None = None,
    fold: bool | None = None,
    recipe: str | None = None,
    config: Settings | None = None,
    timeout_s: float = 900.0,
) -> Report:
    """Export ``target`` (``path/to/file.py:factory``) twice with the guarded pipeline and
    ``config`` (every setting, handed to each child whole; ``backend``, ``placement``, ``fold``
    and ``recipe``, when given, applied over it), each in a fresh process, and
    report every difference in the program's terms (EG510), then check the first program's
    structure.

    Raises:
        ExportFailed: an export failed or ran past ``timeout_s``, saying how.
    """
    config = with_keywords(config, "check_reproducible", backend=backend, placement=placement, fold=fold, recipe=recipe)
    pair = export_twice(target, config, timeout_s=timeout_s)
    return run(with_project_rules(PTE_RULES), "reproducible", pair, config, name=pair.target) + check_pte(
        pair.first, config=config
    )


def compare_pte(first: PathOrBytes, second: PathOrBytes, *, config: Settings | None = None) -> Report:
    """EG510 for two programs you exported yourself: each difference named by method, delegate,
    constant and named-data key. Clean when the bytes are equal."""
    first_bytes, second_bytes = (
        bytes(p) if isinstance(p, (bytes, bytearray, memoryview)) else Path(p).read_bytes() for p in (first, second)
    )
    pair = ExportPair(f"{_name(first)} and {_name(second)}", first_bytes, second_bytes, {})
    return run(with_project_rules(PTE_RULES), "reproducible", pair, config or Settings(), name=pair.target)


def _name(program: PathOrBytes) -> str:
    return "<bytes>" if isinstance(program, (bytes, bytearray, memoryview)) else os.fspath(program)


def diff_pte(old: PathOrBytes, new: PathOrBytes, *, config: Settings | None = None) -> Report:
    """What shipping ``new`` as an update of ``old`` does to XNNPACK's packed-weight cache,
    weight by weight (EG530-EG535): reused, re-packed (with why: a changed source, or the same
    source in other bytes, an error) or orphaned, with the bytes of each and in total.

    Raises:
        OSError: a path that cannot be opened as a file.
        ValueError: a file that is not an ExecuTorch program, or one too damaged to read,
            saying which and why.
    """
    return update_report(read_update(old, new), config)


def read_update(old: PathOrBytes, new: PathOrBytes) -> CacheDiff:
    """The two programs' weights, paired, as ``diff_pte`` reports them.

    Raises:
        OSError: a path that cannot be opened as a file.
        ValueError: a file that is not an ExecuTorch program, or one too damaged to read.
    """
    programs: list[PteFile] = []
    for given, role in ((old, "the shipped program"), (new, "the new build")):
        if programs and _same_path(old, new):
            programs.append(programs[0])  # diff A A: the file read, parsed and checked once
            break
        data = bytes(given) if isinstance(given, (bytes, bytearray, memoryview)) else open_bytes(given)
        pte = PteFile(data, _name(given))
        why = unreadable_program(data[:HEAD_LENGTH], len(data))
        if why is not None:  # the sentence the command answers with
            raise ValueError(f"{pte.name} ({role}) cannot be read as a program: {why}")
        if pte.program is None:
            why = "; ".join(pte.problems) or "it is not an ExecuTorch program"
            raise ValueError(f"{pte.name} ({role}) cannot be read as an ExecuTorch program: {why}")
        _refuse_damaged(pte, role)
        programs.append(pte)
    try:
        return diff_weights(ProgramUpdate(programs[0], programs[1]))
    except DecodeError as error:
        raise ValueError(f"an XNNPACK delegate cannot be read: {error}") from None


def _same_path(old: PathOrBytes, new: PathOrBytes) -> bool:
    return (
        not isinstance(old, (bytes, bytearray, memoryview))
        and not isinstance(new, (bytes, bytearray, memoryview))
        and os.fspath(old) == os.fspath(new)
    )


def _refuse_damaged(pte: PteFile, role: str) -> None:
    """A program whose file is damaged where its weights lie (truncated, segments out of bounds)
    has no weights to compare: the diff would call them all reused.

    Raises:
        ValueError: naming the damage and what was expected.
    """
    damaged = run(RuleSet.of(structure), "pte", PteContext(pte, (), None), settings=Settings(), name=pte.name).errors
    if damaged:
        more = f" (and {len(damaged) - 1} more)" if len(damaged) > 1 else ""
        raise ValueError(f"{pte.name} ({role}) is damaged: {damaged[0].message}{more}")


def update_report(diff: CacheDiff, config: Settings | None = None) -> Report:
    """The findings of :func:`read_update`'s account (stage ``update``)."""
    return run(with_project_rules(PTE_RULES), "update", diff, config or Settings(), name=f"{diff.old} and {diff.new}")
