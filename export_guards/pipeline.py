"""The whole guarded export in one call: placement, lint, fold, lowering, partitioned lint."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, final

import torch
from executorch.exir import EdgeProgramManager, to_edge_transform_and_lower
from executorch.exir.backend.partitioner import Partitioner
from executorch.export import ExportRecipe
from torch.export import ExportedProgram

from export_guards import progress
from export_guards.analysis.delegation import DelegationSummary, delegation_summary
from export_guards.analysis.fold_plan import plan_fold
from export_guards.analysis.partitioner_reasons import capture_partitioner_reasons
from export_guards.analysis.programs import mutated_constants
from export_guards.analysis.source import location_named_in, node_location, operator_sites
from export_guards.backends import backend_named, device_backend_ids, partitioned_lint_applies
from export_guards.errors import (
    ConstantPlacementError,
    GradModeWriteError,
    GuardError,
    LoweringFailed,
    ProgramRefused,
    SharedMemoryError,
)
from export_guards.internals import cause_of_type
from export_guards.ledger import Ledger
from export_guards.linter import lint, lint_guarded
from export_guards.lowering import Lowering
from export_guards.passes.control_flow import copied_results_report, outliving_results
from export_guards.passes.defaults import GuardPasses
from export_guards.passes.fold import FoldConstantsPass, fold_outside_core
from export_guards.passes.int8_dynamic import rewrite_int8_dynamic_linears
from export_guards.passes.known_wrong import KnownWrongDelegationPass
from export_guards.passes.module_fold import fold_parametrizations
from export_guards.passes.placement import emit_passes, guard_partitioners, plan_placement
from export_guards.passes.quantized_embedding import QuantizedEmbeddingPass
from export_guards.passes.quantized_ops import decompose_torchao_quantize_ops, float8_refusal
from export_guards.pte.check import check_pte
from export_guards.pte.rules.values import arena_overlap
from export_guards.pte.store_once import store_once
from export_guards.quiet import buffer_warning_answered
from export_guards.recipes import (
    guard_recipe,
    ledger_of,
    linted_session,
    quantizes_modules,
    recipe_named,
    recipe_report,
)
from export_guards.report import Finding, Report, SourceLocation
from export_guards.ruleset import RuleSet, describe_error
from export_guards.settings import Backend, PlacementPolicy, Settings, with_keywords
from export_guards.targets import hint_for, load_target, quantized, step, step_report, target_file

__all__ = [
    "Backend",
    "GuardedExport",
    "export_in_steps",
    "export_target",
    "export_with_guards",
    "export_with_recipe",
    "lower_with_guards",
]


EachStep = Callable[
    [str], AbstractContextManager[object]
]  # wraps each step, given what it does (the command times them)


@final
@dataclass(frozen=True)
class GuardedExport:
    """The outcome of a guarded export.

    Attributes:
        program: the torch.export program (on the host when the copy policy moved it; folded
            when it held weight math outside core ATen, which ``to_edge`` rejects).
        edge: the lowered program, or ``None`` when a constant the host cannot read stopped
            the export before lowering (lowering would have crashed).
        report: every finding: placement, lint before and after partitioning, folds.
        pte: the written program, when the export already wrote it (a recipe's session does).
        lowering: how it was lowered where the user chose (its ``backend_config`` writes it).
    """

    program: ExportedProgram
    edge: EdgeProgramManager | None
    report: Report
    pte: bytes | None = None
    lowering: Lowering = Lowering()

    @property
    def delegation(self) -> DelegationSummary | None:
        """Compute ops delegated and left portable (``None`` if not lowered)."""
        return delegation_summary(self.edge) if self.edge is not None else None

    def to_pte(self, *, refuse: bool = True) -> bytes:
        """The ``.pte`` bytes (``to_executorch()``, with :func:`emit_passes` guarding the
        emitter's reads), with the bytes a delegate's named data repeats from the program's
        constants stored once (:func:`~export_guards.program.store_once`: a tied embedding and head),
        checked as ``check_pte`` checks a file: a program it finds errors in is not handed out.

        Args:
            refuse: raise on those errors; ``False`` for a caller that checks the program itself
                and reports what it finds (``export-guards lint``, the ``check_export`` fixture).

        Raises:
            ConstantPlacementError: the export stopped before lowering (a constant that a host
                reader would read is not in host memory); ``report`` says why.
            ProgramRefused: ``check_pte`` finds errors in the written program (one the runtime
                refuses or computes wrong); its ``report`` holds them, on the user's lines.
            SharedMemoryError: a ``ProgramRefused``: the program has control flow, and two of its
                values alive at once share planned bytes, which the guards could not separate (EG518).
        """
        if self.edge is None:  # only the placement guard stops an export before lowering
            raise ConstantPlacementError(
                "the export stopped before lowering:\n" + str(Report.of(self.report.errors)), self.report
            )
        if self.pte is None:
            try:
                with buffer_warning_answered():
                    progress.now("emitting the program")
                    written = self.edge.to_executorch(self.lowering.emit_config(emit_passes()))
                    progress.now("serializing the program, each weight stored once")
                    pte = store_once(written)  # written once, rewritten in place: never held twice
            except RuntimeError as error:
                named = grad_mode_write(error, self.edge.exported_program())
                if named is None:
                    raise
                raise named from error
        else:
            pte = store_once(self.pte)
        if refuse:
            refuse_misrun(pte, self.edge)
        return pte


def _control_flow_calls(edge: EdgeProgramManager) -> list[torch.fx.Node]:
    """Every ``torch.cond`` call of every method (in a branch too): the programs whose memory
    plan the guards' copies must have separated (a program without one is not read again)."""
    return [
        node
        for name in edge.methods
        for module in edge.exported_program(name).graph_module.modules()
        if isinstance(module, torch.fx.GraphModule)
        for node in module.graph.nodes
        if node.target is torch.ops.higher_order.cond
    ]


_LEAF_WRITTEN = "a leaf Variable that requires grad is being used in an in-place operation"


def grad_mode_write(error: RuntimeError, program: ExportedProgram) -> GradModeWriteError | None:
    """``error``, torch's refusal of an in-place write in grad mode, restated with what
    ``program`` writes in place: a buffer (a KV cache) once ExecuTorch's passes replay its
    write-back while the model's parameters require grad, or a parameter. ``None`` for another
    error, or a program that writes nothing in place."""
    if _LEAF_WRITTEN not in str(error):
        return None
    written = mutated_constants(program)
    parameters = sorted(written & set(program.graph_signature.parameters))
    buffers = sorted(written - set(parameters))
    if not (parameters or buffers):
        return None
    if parameters:  # a parameter changed in place is the cause itself, whatever else is written
        what = f"changes the parameter{'s' if len(parameters) > 1 else ''} {_quoted(parameters)} in place, and it requires grad"
    else:
        what = f"writes the buffer{'s' if len(buffers) > 1 else ''} {_quoted(buffers)} in place while the model's parameters require grad"
    return GradModeWriteError(
        f"to_executorch failed: the program {what}, which torch refuses in grad mode",
        f"grad mode: the program {what}. Call `model.requires_grad_(False)` before torch.export "
        "(in the factory, for export-guards lint), or export under `with torch.no_grad():`.",
        _written_at(program, (parameters or buffers)[0]),
    )


def _written_at(program: ExportedProgram, fqn: str) -> SourceLocation | None:
    """The user's line that computes the value written into the constant ``fqn``: what the
    write-back ``copy_`` (which ``to_executorch`` adds before it fails) copies into it."""
    names = {**program.graph_signature.inputs_to_parameters, **program.graph_signature.inputs_to_buffers}
    for node in program.graph.nodes:
        if node.op == "placeholder" and names.get(node.name) == fqn:
            copied = [u.args[1] for u in node.users if u.target is torch.ops.aten.copy_.default]
            return next(
                (site for value in copied if isinstance(value, torch.fx.Node) and (site := node_location(value))), None
            )
    return None


def _quoted(names: Sequence[str]) -> str:
    return ", ".join(f"'{name}'" for name in names)


_REFUSED = Settings(ignore=("EG520", "EG523"))
"""What ``to_pte`` checks its program for: every error of ``check_pte``'s, but for the hashes the
writer has just made (EG523) and the portable-compute warning (EG520), which refuses nothing."""


def refuse_misrun(pte: bytes, edge: EdgeProgramManager) -> None:
    """Stop before a program is handed out that ``check_pte`` (the pass list's check) finds
    errors in: the same verdict on every guarded path, each error on the user's line.

    Raises:
        SharedMemoryError: values alive at once share planned bytes (EG518).
        ProgramRefused: any other error.
    """
    errors = check_pte(pte, config=_REFUSED, locate=operator_sites(edge)).errors
    shared = [f for f in errors if f.code == arena_overlap.code]
    if shared:  # the errors found here, not a second check: said as the control flow's
        raise _shared_memory_error(pte, shared, _control_flow_calls(edge), Report.of(errors))
    if errors:
        said = "; ".join(f"{f.code} {f.message}" + (f" ({f.location})" if f.location else "") for f in errors[:3])
        more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
        raise ProgramRefused(
            f"the written program is one the runtime refuses or computes wrong: {said}{more}. Fix: {errors[0].fix}",
            Report.of(errors),
            pte,
        )


def refuse_shared_memory(pte: bytes, calls: Sequence[torch.fx.Node] = ()) -> None:
    """Stop before a program is written whose values alive at once share planned bytes;
    ``calls``, the program's ``torch.cond`` calls, place the error on the user's lines.

    Raises:
        SharedMemoryError: naming both values of each pair and the operators that write them.
    """
    errors = check_pte(pte, rules=RuleSet.of(arena_overlap)).errors
    if errors:
        raise _shared_memory_error(pte, errors, calls, Report.of(errors))


def _shared_memory_error(
    pte: bytes, shared: Sequence[Finding], calls: Sequence[torch.fx.Node], report: Report
) -> SharedMemoryError:
    """The error for ``shared`` (EG518's findings), on the lines of ``calls``; ``report``: every
    error of the program."""
    lines = sorted({str(site) for site in map(node_location, calls) if site is not None})
    where = f" (the model's torch.cond calls: {', '.join(lines)})" if lines else ""
    return SharedMemoryError(
        "the program would compute wrong values: "
        + "; ".join(f.message for f in shared)
        + where
        + ". The guards copy each torch.cond result that outlives its branch (emit_passes()); copy the one "
        "named here in the model, right after its torch.cond (.clone()), and report the case to export-guards",
        report,
        pte,
    )


def export_with_guards(
    model: torch.nn.Module,
    example_inputs: Sequence[object],
    *,
    backend: Backend | None = None,
    placement: PlacementPolicy | None = None,
    fold: bool | None = None,
    config: Settings | None = None,
    dynamic_shapes: Any = None,
    strict: bool | None = None,
    lowering: Lowering | None = None,
) -> GuardedExport:
    """``torch.export`` ``model`` on ``example_inputs`` (with ``dynamic_shapes`` and
    ``strict`` as torch.export takes them), then :func:`lower_with_guards` (with ``lowering``,
    the user's own partitioners and configs, its quantize step run on a copy of ``model`` first);
    or, when ``config`` names a recipe, :func:`export_with_recipe`.

    Raises:
        ValueError: both a recipe and a ``lowering`` are named.
        NotAModule: ``lowering``'s quantize step returned something else than an ``nn.Module``.
    """
    lowering = lowering or Lowering()
    if config is not None and config.recipe is not None:
        lowering.refuse_recipe(config.recipe)
        settings = with_keywords(config, "export_with_guards", placement=placement, fold=fold)
        model = lowering.quantized(model, tuple(example_inputs))
        return export_with_recipe(
            model, example_inputs, config.recipe, config=settings, dynamic_shapes=dynamic_shapes, strict=strict
        )
    settings = with_keywords(config, "export_with_guards", backend=backend, placement=placement, fold=fold)
    program = _torch_export(
        lowering.quantized(model, tuple(example_inputs)), tuple(example_inputs), dynamic_shapes, strict
    )
    return lower_with_guards(program, config=settings, lowering=lowering.after_quantize)


def export_target(
    target: str,
    arguments: Mapping[str, Any] | None = None,
    *,
    config: Settings | None = None,
    each_step: EachStep | None = None,
) -> GuardedExport:
    """The guarded export of a model named ``path/to/file.py:factory`` (or
    ``package.module:factory``), called with ``arguments``, one step at a time
    (:func:`export_in_steps`), each inside ``each_step(what it does)`` when given.

    Raises:
        TargetError: the target names no file, module or callable.
        StepFailed: building the model, ``torch.export`` or lowering failed; the message names
            the step, the exception and the line of the target's file it went through.
    """
    with (each_step or _as_is)("building the model"):
        made = load_target(target, arguments)
    return export_in_steps(
        made.model,
        made.inputs,
        config=config,
        source=target_file(target),
        each_step=each_step,
        dynamic_shapes=made.dynamic_shapes,
        strict=made.strict,
        lowering=made.lowering,
    )


def export_in_steps(
    model: torch.nn.Module,
    example_inputs: Sequence[object],
    *,
    config: Settings | None = None,
    source: Path | None = None,
    each_step: EachStep | None = None,
    dynamic_shapes: Any = None,
    strict: bool | None = None,
    lowering: Lowering | None = None,
) -> GuardedExport:
    """:func:`export_with_guards`, one step at a time, each inside ``each_step(what it does)``
    when given (``"torch.export"``); ``lowering``: the user's own (:class:`Lowering`), its
    quantize step run on a copy of ``model`` first.

    Raises:
        StepFailed: quantizing, ``torch.export`` or lowering failed; the message names the step, the
            innermost cause and the line of ``source`` (the model's file) it went through.
    """
    settings = config or Settings()
    timed = each_step or _as_is
    inputs = tuple(example_inputs)
    lowering = lowering or Lowering()
    if lowering.quantize is not None:
        with timed("quantizing the model"):
            model = quantized(lowering, model, inputs, source)
        lowering = lowering.after_quantize
    if settings.recipe is not None:
        with (
            timed(f"exporting, linting and lowering with the recipe {settings.recipe}"),
            step(f"exporting with the recipe {settings.recipe}", source),
        ):
            lowering.refuse_recipe(settings.recipe)
            return export_with_recipe(
                model, inputs, settings.recipe, config=settings, dynamic_shapes=dynamic_shapes, strict=strict
            )
    with timed("torch.export"), step("torch.export", source):
        program = _torch_export(model, inputs, dynamic_shapes, strict)
    named = (
        settings.backend
        if lowering.partitioners is None
        else ", ".join(type(p).__name__ for p in lowering.partitioners) or "portable"
    )
    with timed(f"linting and lowering ({named})"), step(f"lowering ({named})", source):
        return lower_with_guards(program, config=settings, lowering=lowering)


def _as_is(doing: str) -> AbstractContextManager[object]:
    return contextlib.nullcontext()


def _torch_export(
    model: torch.nn.Module, inputs: tuple[object, ...], dynamic_shapes: Any, strict: bool | None
) -> ExportedProgram:
    """``torch.export.export`` as the user's own code calls it: torch's default ``strict``
    unless one is given."""
    if strict is None:
        return torch.export.export(model, inputs, dynamic_shapes=dynamic_shapes)
    return torch.export.export(model, inputs, dynamic_shapes=dynamic_shapes, strict=strict)


def export_with_recipe(
    model: torch.nn.Module,
    example_inputs: Sequence[object],
    recipe: ExportRecipe | str,
    *,
    config: Settings | None = None,
    dynamic_shapes: Any = None,
    strict: bool | None = None,
) -> GuardedExport:
    """Export ``model`` with ExecuTorch's recipe API and the guards (:func:`guard_recipe`).

    ``recipe`` is an ``ExportRecipe`` or a recipe name (``"xnnpack_fp32"``). ``config``'s
    placement and fold apply; its backend does not (the recipe names its partitioners). The
    ``example_inputs`` also calibrate a recipe that quantizes statically. Before a recipe that
    quantizes modules (torchao), a copy of ``model`` has its reparametrized weights folded
    (EG202), so that they are quantized too; ``model`` is left as it was. As with
    :func:`lower_with_guards`, a constant that a host reader would read from device memory
    stops the export with ``edge=None`` and the findings, instead of raising. ``dynamic_shapes``
    go to the session as torch.export takes them; ``strict``, when given, replaces the recipe's.

    Raises:
        ValueError: an unknown recipe name.
        LoweringFailed: the recipe's export failed; its ``report`` holds what the lint of the
            torch.export program found, when it got that far.
    """
    from executorch.export import ExportSession

    settings = config or Settings()
    chosen = recipe_named(recipe) if isinstance(recipe, str) else recipe
    if strict is not None:
        chosen = dataclasses.replace(chosen, strict=strict)
    guarded = guard_recipe(chosen, config=settings)
    ledger = ledger_of(guarded)
    if quantizes_modules(chosen) and settings.fold:  # torchao cannot quantize a reparametrized module: fold it first
        model, folded = fold_parametrizations(model)
        ledger.put(None, "fold parametrizations", folded)
    # The session reads a dict as shapes per method: torch.export's dict (by argument) is the forward's.
    shapes = None if dynamic_shapes is None else {"forward": dynamic_shapes}
    session = ExportSession(
        model=model, example_inputs=[tuple(example_inputs)], export_recipe=guarded, dynamic_shapes=shapes
    )
    try:
        with buffer_warning_answered():
            session.export()
    except Exception as error:
        stopped = cause_of_type(
            error, ConstantPlacementError
        )  # ExecuTorch re-raises a transform pass's error as a plain Exception caused by it
        if (
            stopped is not None
        ):  # a host reader would have read a constant it cannot: stopped, as lower_with_guards stops
            linted_session(guarded, session, settings, lowered=False).stop(stopped.report)
            return GuardedExport(session.get_exported_program(), None, ledger.report(settings))
        if isinstance(error, GuardError):
            raise
        found = linted_session(guarded, session, settings, lowered=False).report(
            settings
        )  # keep what the lint found: it often says why
        raise LoweringFailed(f"the recipe's export failed: {describe_error(error)}", found) from error
    report = recipe_report(session, settings)
    return GuardedExport(
        session.get_exported_program(), session.get_edge_program_manager(), report, session.get_pte_buffer()
    )


def lower_with_guards(
    program: ExportedProgram,
    *,
    backend: Backend | None = None,
    placement: PlacementPolicy | None = None,
    fold: bool | None = None,
    config: Settings | None = None,
    lowering: Lowering | None = None,
) -> GuardedExport:
    """Guard, lint and lower a torch.export program; never crashes on a device constant.

    ``config``'s backend, placement and fold apply (``"xnnpack"``, ``"error"``, on; the keywords
    ``backend``, ``placement`` and ``fold`` are deprecated, and warn); ``lowering``: the user's own partitioners and configs (:class:`Lowering`), lowered with
    instead of ``backend``'s. In order: the placement plan (:func:`plan_placement`: a constant the
    host cannot read stops the export here, ``edge=None``, or is copied with ``placement="copy"``;
    a backend that holds device constants on purpose defers to its guarded partitioner); the
    quantization in a form this lowering computes (torchao's int8 x int8 dynamic linears
    rewritten, EG407; torchao's quantize ops decomposed for the portable kernels; float8 refused);
    the fold of weight math ``to_edge`` would reject (:func:`fold_non_core_constants`); the
    program-stage lint; ``to_edge_transform_and_lower`` with the fold pass, :class:`QuantizedEmbeddingPass`
    (EG408), :class:`KnownWrongDelegationPass` (EG405) and the guarded partitioners (:func:`guard_partitioners`); the partitioned-stage lint
    where its rules apply (XNNPACK). ``GuardedExport.to_pte`` emits with :func:`emit_passes`. The
    lint does not raise: compare ``report`` with a fail level, as the command line does.

    Raises:
        ValueError: an unknown backend or placement policy, or a ``lowering`` with a quantize step.
        LoweringFailed: ExecuTorch could not lower the program; its ``report`` holds the
            lint's findings, which often say why.
    """
    settings = with_keywords(config, "lower_with_guards", backend=backend, placement=placement, fold=fold)
    ledger = Ledger()
    lowering = (lowering or Lowering()).for_exported("lower_with_guards")
    chosen = _backend_of(settings.backend, lowering)
    # Placement is decided once, here: a constant no host reader can take stops the export before
    # lowering would crash; the guarded partitioners see only the device constants left to them.
    progress.now("planning where constants live and what folds")
    plan = plan_placement("forward", program, settings.placement, defer_device_constants=chosen.holds_device_memory)
    if plan.stops:
        ledger.put_lint("program", program, lint_guarded(program, settings))
        ledger.stop(plan.stops)
        return GuardedExport(program, None, ledger.report(settings), lowering=lowering)
    placed = plan.carried_out(program)
    ledger.put(None, "copy", placed.report)
    program = _folded_and_linted(_quantized_for(placed.exported_program, chosen, settings, ledger), settings, ledger)
    progress.now(f"decomposing {sum(n.op == 'call_function' for n in program.graph.nodes):,} ops to the edge dialect")
    try:
        edge, reasons = _lowered(program, settings, chosen, lowering, ledger)
    except ConstantPlacementError as error:  # a partition would have read device memory
        ledger.stop(error.report)
        return GuardedExport(program, None, ledger.report(settings), lowering=lowering)
    except GuardError:
        raise
    except Exception as error:  # keep what the lint found: it often says why, in the user's terms
        cause, location, hint = describe_error(error), location_named_in(program.graph, str(error)), hint_for(error)
        failed = step_report("to_edge_transform_and_lower", cause, location, hint)  # the hint as the lint gives it
        raise LoweringFailed(
            f"to_edge_transform_and_lower failed: {cause}", ledger.report(settings) + failed, location, hint
        ) from error
    if chosen.partitioned_lint:
        progress.now("linting the partitioned program")
        ledger.put_lint("partitioned", edge, lint(edge, settings, stage="partitioned", reasons={"forward": reasons}))
    return GuardedExport(program, edge, ledger.report(settings), lowering=lowering)


def _quantized_for(program: ExportedProgram, chosen: _Backend, settings: Settings, ledger: Ledger) -> ExportedProgram:
    """``program``'s quantization in a form this lowering computes, whatever the fold setting:
    torchao's int8 x int8 dynamic linears, whose ``_int_mm`` ``to_edge`` rejects, rewritten into
    the 8da8w form (EG407, recorded in ``ledger``); torchao's quantize ops decomposed for the
    portable kernels, which have none of them (their definitions are core ATen); a float8 one,
    which nothing computes, refused naming what works."""
    refused = float8_refusal(program)
    if refused is not None:  # to_edge would stop on "mismatched dtypes", which says neither why nor what works
        cause, location, hint = refused
        report = ledger.report(settings) + step_report("to_edge_transform_and_lower", cause, location, hint)
        raise LoweringFailed(f"to_edge_transform_and_lower would fail: {cause}", report, location, hint)
    program, rewritten = rewrite_int8_dynamic_linears(program)
    ledger.put(None, "rewrite before to_edge", rewritten)
    return program if chosen.partitioners else decompose_torchao_quantize_ops(program)


def _folded_and_linted(program: ExportedProgram, settings: Settings, ledger: Ledger) -> ExportedProgram:
    """``program`` with what ``to_edge`` would reject (weight math outside core ATen) folded
    first, where the fold is on, and linted at the program stage (with the fold plan, unless the
    early fold made a new program): each recorded in ``ledger``."""
    fold_plan = None
    if settings.fold:
        fold_plan = plan_fold(program, max_growth=settings.fold_max_growth)
        folded, early = fold_outside_core(program, fold_plan)  # rewritten for to_edge already (_quantized_for)
        program, fold_plan = folded, fold_plan if folded is program else None
        ledger.put(None, "fold before to_edge", early)
    progress.now("linting the program")
    ledger.put_lint(
        "program", program, lint_guarded(program, settings, fold_plans={"forward": fold_plan} if fold_plan else None)
    )
    return program


def _lowered(
    program: ExportedProgram, settings: Settings, chosen: _Backend, lowering: Lowering, ledger: Ledger
) -> tuple[EdgeProgramManager, Mapping[str, str]]:
    """``to_edge_transform_and_lower`` with the fold pass, the quantized embedding and known-wrong passes (each call's
    report recorded in ``ledger``, as are the torch.cond results that ``to_pte`` will copy: EG406)
    and the guarded partitioners; and the partitioners' reason for each node they left out."""
    fold_pass = [FoldConstantsPass(max_growth=settings.fold_max_growth)] if settings.fold else []
    passes = GuardPasses(
        ledger.recorded(None, [*fold_pass, QuantizedEmbeddingPass(), KnownWrongDelegationPass(chosen.backend_ids)])
    )
    with capture_partitioner_reasons() as reasons:
        edge = to_edge_transform_and_lower(
            program,
            transform_passes=passes,
            partitioner=guard_partitioners(list(chosen.partitioners)),
            compile_config=lowering.compile_config,
        )
    for method in edge.methods:  # what to_pte's emit_passes() will mend, said where the lint is read
        ledger.put(
            method,
            "control flow outputs",
            copied_results_report(outliving_results(edge.exported_program(method).graph_module)),
        )
    return edge, reasons


class _Backend(NamedTuple):
    """What the guarded lowering lowers with: the partitioners (unguarded), their backend ids,
    whether those hold device constants on purpose, and whether the partitioned-stage rules
    explain their decisions."""

    partitioners: Sequence[Partitioner]
    backend_ids: tuple[str, ...] | None  # None: not all say which (the known-wrong patterns of every backend apply)
    holds_device_memory: bool
    partitioned_lint: bool


def _backend_of(name: str, lowering: Lowering) -> _Backend:
    """The user's own partitioners where ``lowering`` names them, else the ``backend`` setting's."""
    if lowering.partitioners is None:
        info = backend_named(name)
        return _Backend(info.partitioners(), info.backend_ids, info.holds_device_memory, info.partitioned_lint)
    specs = [getattr(p, "delegation_spec", None) for p in lowering.partitioners]
    ids = tuple(dict.fromkeys(str(spec.backend_id) for spec in specs if spec is not None))
    said = ids if all(spec is not None for spec in specs) else None
    return _Backend(
        lowering.partitioners,
        said,
        any(i in device_backend_ids() for i in ids),
        any(partitioned_lint_applies(i) for i in ids),
    )
