"""The written program run on input sets and compared with eager: the example inputs, then the
inputs at each dynamic dimension's bounds (``export-guards lint``'s runs, in a child process, so
that a crash is a finding)."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import cast, final

import torch
import torch.utils._pytree as pytree

from export_guards import progress
from export_guards.analysis.ops import inserted_by_quantizer
from export_guards.analysis.shape_bounds import shape_bounds
from export_guards.analysis.source import operator_sites
from export_guards.pipeline import GuardedExport
from export_guards.pte.smoke import SmokeInputs, SmokeRun, SmokeWorker
from export_guards.report import Report
from export_guards.ruleset import first_line, run, with_project_rules
from export_guards.settings import Settings
from export_guards.verify.eager import EagerReference, Expected
from export_guards.verify.outputs import Tolerance, compare_outputs
from export_guards.verify.program import WRITTEN_PROGRAM_RULES

__all__ = ["InputSet", "ProgramRuns", "input_sets", "run_program"]


@final
@dataclass(frozen=True)
class ProgramRuns:
    """What :func:`run_program` found and where it ran.

    Attributes:
        report: the run's findings (EG511, EG522), each naming the shape where it happened.
        shapes: the input sets the program ran on, in order: ``"the example inputs"``, then
            each dynamic dimension's bound (``"length=64 (the upper bound)"``).
        skipped: each bound not run, and why (``"length=64 (the upper bound): eager raised ..."``).
    """

    report: Report
    shapes: tuple[str, ...]
    skipped: tuple[str, ...] = ()


@final
@dataclass(frozen=True)
class InputSet:
    """Inputs that one freshly loaded program runs on: ``steps``, called in order.

    ``bound``: which dynamic dimension's bound they are at (``length=64 (the upper bound)``),
    ``""`` for inputs the user gave."""

    steps: tuple[Sequence[object], ...]
    bound: str = ""


def input_sets(
    program: torch.export.ExportedProgram, example_inputs: Sequence[object], *, at_bounds: bool = True
) -> tuple[list[InputSet], list[str]]:
    """The example inputs, then (``at_bounds``) the inputs at each bound of ``program``'s dynamic
    dimensions (cropped or tiled along them); and each bound no inputs could be made for, and why."""
    sets = [InputSet((example_inputs,))]
    if not at_bounds:
        return sets, []
    made = shape_bounds(program, example_inputs)
    return sets + [InputSet((bound.inputs,), bound.label) for bound in made.inputs], list(made.not_made)


def expected_at(reference: EagerReference, each: InputSet) -> list[Expected] | str:
    """Eager's outputs on each step of ``each``, from the state the program starts from; for a
    bound where eager raises (its inputs break a relation between sizes that the export assumed,
    or index past a table), why, in a line: the bound is not run."""
    reference.start()
    try:
        return [reference(step) for step in each.steps]
    except Exception as error:
        if not each.bound:
            raise  # the user's own inputs: their failure is theirs to see
        return f"{each.bound}: eager raised {type(error).__name__}: {first_line(error)}"


def run_program(
    export: GuardedExport,
    pte: bytes,
    model: torch.nn.Module,
    example_inputs: Sequence[object],
    *,
    settings: Settings = Settings(),
    tolerance: Tolerance | None = None,
    timeout_s: float = 120.0,
    worker: SmokeWorker | None = None,
    at_bounds: bool = True,
) -> ProgramRuns:
    """Run ``pte``, ``export``'s written program, on ``example_inputs`` in ``executorch.runtime``,
    in a child process (a crash is a finding), and compare each output with eager's under
    ``tolerance`` (by default :meth:`Tolerance.by_dtype`, looser where the program quantizes). A
    failed run is EG511, naming the kernel that refused its call, the runtime's reason and the
    user's line that made the op; an output beyond the tolerance is EG522, with its largest
    difference and where.

    Where the export has dynamic shapes (and ``at_bounds``), the program also runs at each
    dynamic dimension's bounds (:func:`input_sets`), after the example, on the same loaded
    program in the same child, as an app calls it: each call sees the state (a KV cache) the
    calls before it left, and eager is called the same way, from the same state. A bound's
    findings are reported only where the example inputs ran clean (a program that fails on its
    example fails at its bounds for the same reason).

    Eager is ``model`` itself, the buffers the program writes put back after (:class:`EagerReference`);
    for a recipe, or a model off the host, the export's torch.export program (which a quantizing
    recipe has quantized: the reference of what the program computes). Eager runs each set
    once; where the program differs from it, eager runs the calls again, to leave out the
    outputs that it does not repeat itself (a random op). ``worker``: a child started ahead
    (:class:`SmokeWorker`, whose import of the runtime overlapped the export), else one starts now."""
    inputs = pytree.tree_map(lambda x: x.detach().cpu() if isinstance(x, torch.Tensor) else x, list(example_inputs))
    reference = EagerReference(
        _reference_model(export, model, example_inputs, settings), export.program, copy_model=False
    )
    sets, skipped = input_sets(export.program, inputs, at_bounds=at_bounds)
    progress.now(f"running eager on {len(sets)} input set{'s' if len(sets) > 1 else ''}")
    try:
        runs, failed = _in_sequence(reference, sets)
        quantized = any(inserted_by_quantizer(node) for node in export.program.graph.nodes)
        done = _in_child(pte, runs, worker, timeout_s)
        compared = _compared(reference, runs, done, tolerance or Tolerance.by_dtype(quantized=quantized))
    finally:
        reference.close()
    locate = operator_sites(export.edge) if export.edge is not None else None
    reports = [
        run(with_project_rules(WRITTEN_PROGRAM_RULES), "runtime", ran, settings, name=ran.program, locate=locate)
        for ran in compared
    ]
    report = reports[0]
    if not report:  # else the bounds fail for the example's reason: said once
        for at_bound in reports[1:]:
            report += at_bound
    shapes = ["the example inputs", *(each.bound for each, _ in runs[1:])]
    return ProgramRuns(report, tuple(shapes[: len(compared)]), tuple(skipped + failed))


def _in_sequence(
    reference: EagerReference, sets: Sequence[InputSet], *, repeat: frozenset[int] = frozenset()
) -> tuple[list[tuple[InputSet, Expected]], list[str]]:
    """Eager's outputs on each set's first step, the sets in turn from the state the program
    starts from, each from the state the sets before it left (as one loaded program runs them);
    the calls at the indices in ``repeat`` repeated (:class:`EagerReference`'s ``repeat``). A
    bound where eager raises is left out (its state as before it), with why, in a line."""
    reference.start()
    runs: list[tuple[InputSet, Expected]] = []
    failed: list[str] = []
    for index, each in enumerate(sets):
        try:
            runs.append((each, reference(each.steps[0], repeat=index in repeat)))
        except Exception as error:
            if not each.bound:
                raise  # the user's own inputs: their failure is theirs to see
            failed.append(f"{each.bound}: eager raised {type(error).__name__}: {first_line(error)}")
    return runs, failed


def _reference_model(
    export: GuardedExport, model: torch.nn.Module, example_inputs: Sequence[object], settings: Settings
) -> torch.nn.Module:
    """``model``, where it and its inputs are on the host and no recipe exported it; else the
    export's torch.export program as a module (on the host, and quantized as the recipe quantized)."""
    tensors = [*pytree.tree_leaves(list(example_inputs)), *model.parameters(), *model.buffers()]
    on_host = all(t.device.type == "cpu" for t in tensors if isinstance(t, torch.Tensor))
    return model if on_host and settings.recipe is None else export.program.module()


def _in_child(
    pte: bytes, runs: Sequence[tuple[InputSet, Expected]], worker: SmokeWorker | None, timeout_s: float
) -> list[tuple[SmokeRun, list[object] | None]]:
    """Each run's inputs through the program in one child, in turn; each run and its outputs
    (``None`` where it did not run to the end)."""
    with tempfile.TemporaryDirectory(prefix="export-guards-run-") as scratch:
        folder = Path(scratch)
        (folder / "program.pte").write_bytes(pte)
        sets = []
        for index, (each, _) in enumerate(runs):
            torch.save(pytree.tree_leaves(list(each.steps[0])), folder / f"inputs-{index}.pt")
            name = f"the written program at {each.bound}" if each.bound else "the written program"
            sets.append(SmokeInputs(str(folder / f"inputs-{index}.pt"), str(folder / f"outputs-{index}.pt"), name))
        progress.now(
            f"running the program on {len(sets)} input set{'s' if len(sets) > 1 else ''} in executorch.runtime"
        )
        with contextlib.nullcontext(worker) if worker is not None else SmokeWorker() as child:
            done = child.run_each(folder / "program.pte", sets, timeout_s=timeout_s)
        ran_to_end = ("ran forward" in ran.steps and Path(each.outputs).is_file() for ran, each in zip(done, sets))
        return [
            (ran, torch.load(each.outputs, weights_only=True) if whole else None)
            for ran, each, whole in zip(done, sets, ran_to_end)
        ]


def _compared(
    reference: EagerReference,
    runs: Sequence[tuple[InputSet, Expected]],
    done: Sequence[tuple[SmokeRun, list[object] | None]],
    tolerance: Tolerance,
) -> list[SmokeRun]:
    """Each run with the outputs that differ from eager's beyond ``tolerance``; where some do,
    eager's calls are made again, those runs' repeated, and the outputs that eager does not
    repeat itself are not compared."""
    differences = [
        compare_outputs(expected.outputs, actual, tolerance) if actual is not None else []
        for (_, expected), (_, actual) in zip(runs, done)
    ]
    differ = frozenset(index for index, found in enumerate(differences) if not all(d.within for d in found))
    if differ:
        again, _ = _in_sequence(reference, [each for each, _ in runs], repeat=differ)
        for index in differ:
            if index < len(again) and again[index][0] is runs[index][0]:  # eager raised nowhere new before it
                expected, actual = again[index][1], done[index][1]
                differences[index] = compare_outputs(
                    expected.outputs, cast("list[object]", actual), tolerance, unsteady=expected.unsteady
                )  # differ: runs with outputs
    return [
        replace(ran, mismatches=tuple(d.problem for d in found if not d.within)) if actual is not None else ran
        for (ran, actual), found in zip(done, differences)
    ]
