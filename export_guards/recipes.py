"""The guards in ExecuTorch's recipe API (``executorch.export``): a guarded copy of a recipe,
the findings of a session made with it, and recipes by name."""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, final

import executorch
import torch
from executorch.exir import ExecutorchBackendConfig
from executorch.exir.backend.partitioner import Partitioner
from executorch.export import (
    ExportRecipe,
    ExportSession,
    LoweringRecipe,
    QuantizationRecipe,
    RecipeType,
    StageType,
    recipe_registry,
)
from torch import nn
from torch.export import ExportedProgram
from torch.fx import GraphModule

from export_guards.backends import partitioned_lint_applies
from export_guards.internals import export_recipe_of
from export_guards.ledger import Ledger, Recorded
from export_guards.linter import lint, lint_guarded
from export_guards.passes.defaults import guard_passes
from export_guards.passes.fold import fold_constants, fold_non_core_constants
from export_guards.passes.module_fold import is_reparametrized
from export_guards.passes.placement import (
    DEVICE_BACKENDS,
    GuardedPartitioner,
    check_policy,
    emit_passes,
    guard_partitioners,
    placement_error,
    plan_placement,
)
from export_guards.quiet import libraries_quiet
from export_guards.report import Report
from export_guards.settings import RECIPES, PlacementPolicy, Settings, with_keywords

__all__ = [
    "guard_recipe",
    "ledger_of",
    "linted_session",
    "quantizes_modules",
    "recipe_named",
    "recipe_names",
    "recipe_report",
    "recipe_type",
    "session_programs",
]

# The backends whose recipe providers register themselves when their ``recipes`` package is
# imported, by the prefix of their recipe names, with the oldest supported ExecuTorch that has
# the package; those that cannot be imported here (their SDK is missing, or this ExecuTorch
# predates them) are left out.
_RECIPE_PACKAGES: dict[str, tuple[str, str]] = {
    "xnnpack": ("executorch.backends.xnnpack.recipes", "1.4"),
    "coreml": ("executorch.backends.apple.coreml.recipes", "1.4"),
    "qnn": ("executorch.backends.qualcomm.recipes", "1.4"),
    "arm": ("executorch.backends.arm.recipes", "1.5"),
}


def guard_recipe(
    recipe: ExportRecipe,
    *,
    config: Settings | None = None,
    fold: bool | None = None,
    max_growth: float | None = None,
    placement: PlacementPolicy | None = None,
    device_backends: Iterable[str] = DEVICE_BACKENDS,
) -> ExportRecipe:
    """A copy of ``recipe`` with the guards at every stage; ``recipe`` is left as it was.

    - With ``placement="copy"``, the torch.export program becomes its host twin first (an
      ``aten_transform_passes`` entry), one ``EG103`` per copied constant, as its placement
      plan says (:func:`plan_placement`); a program that cannot be copied (a constant
      without data) is left to the next guard, which stops it.
    - With the fold on, constant-only computations that use ops outside core ATen, which
      ``to_edge`` rejects, are folded on the torch.export program (:func:`fold_non_core_constants`).
    - Every method's edge transform passes start with :func:`guard_passes` (placement, then
      the fold unless ``fold=False``), the recipe's own passes after them.
    - The recipe's partitioners are guarded (:func:`guard_partitioners`), so a constant in
      device memory is stopped where a host reader would read it.
    - A constant that no host reader can take stops the export with a
      :class:`~export_guards.ConstantPlacementError` (an ``InternalError``), raised as it is:
      before the edge passes for a constant without data, or in device memory when the
      recipe has no partitioner; by the guarded partitioner that decided, otherwise.
    - ``executorch_backend_config.passes`` ends with :func:`emit_passes`.
    - With the fold on, a PT2E quantization recipe folds constant-only computations
      (spectral / weight norm, parametrizations, weight standardization) on the captured
      graph before its quantizer sees it (a ``pre_prepare_passes`` entry): the quantizer then
      sees static weights, and its conv-batch-norm fusion, which needs a weight attribute,
      works.
    - A torchao quantization config leaves reparametrized modules (weight / spectral norm,
      parametrizations) alone: torchao cannot replace a weight that is recomputed at every
      forward and the stock recipe fails on one ("attribute 'weight' already exists"); such a
      layer is exported in float, folded and delegated. To quantize it, fold it first with
      :func:`fold_parametrizations`, as :func:`export_with_recipe` does.

    Export with it as with any recipe (``executorch.export.export(model, [inputs],
    guard_recipe(recipe))``); :func:`recipe_report` then gives the session's findings.

    Raises:
        TypeError: ``recipe`` is not an ``ExportRecipe``.
        ValueError: ``placement`` is not ``"error"`` or ``"copy"``.
    """
    if not isinstance(recipe, ExportRecipe):
        raise TypeError(f"guard_recipe takes an executorch.export.ExportRecipe, not {type(recipe).__name__}")
    if placement is not None:
        check_policy(placement)
    settings = with_keywords(config, "guard_recipe", fold=fold, fold_max_growth=max_growth, placement=placement)
    ledger = Ledger()
    early = [
        *([_CopyToHost(ledger)] if settings.placement == "copy" else []),
        *([_FoldNonCore(ledger, settings.fold_max_growth)] if settings.fold else []),
    ]
    lowering = _guarded_lowering(recipe.lowering_recipe or LoweringRecipe(), ledger, settings, device_backends)
    written = recipe.executorch_backend_config or ExecutorchBackendConfig()
    return dataclasses.replace(
        recipe,
        quantization_recipe=_guarded_quantization(recipe.quantization_recipe, ledger, settings),
        aten_transform_passes=[*(recipe.aten_transform_passes or []), *early],
        lowering_recipe=lowering,
        executorch_backend_config=dataclasses.replace(written, passes=[*written.passes, *emit_passes()]),
    )


def _guarded_lowering(
    lowering: LoweringRecipe, ledger: Ledger, settings: Settings, device_backends: Iterable[str]
) -> LoweringRecipe:
    """A copy of ``lowering`` whose partitioners are guarded and whose edge transform passes
    start with the guards, which record in ``ledger``."""
    partitioners = (
        guard_partitioners(lowering.partitioners, device_backends=device_backends) if lowering.partitioners else None
    )
    guards = _RecipeGuards(ledger, settings, partitioners)
    return dataclasses.replace(
        lowering, partitioners=partitioners, edge_transform_passes=[guards, *(lowering.edge_transform_passes or [])]
    )


def _guarded_quantization(
    quantization: QuantizationRecipe | None, ledger: Ledger, settings: Settings
) -> QuantizationRecipe | None:
    """``quantization`` sparing reparametrized modules (a torchao config), and with the fold
    on, folding constant-only computations before a PT2E quantizer sees the captured graph."""
    quantization = _sparing_reparametrized(quantization)
    if settings.fold and quantization is not None and quantization.quantizers:
        before = [*(quantization.pre_prepare_passes or []), _FoldBeforeQuantizer(ledger, settings.fold_max_growth)]
        quantization = dataclasses.replace(quantization, pre_prepare_passes=before)
    return quantization


def recipe_report(session: ExportSession, config: Settings | None = None) -> Report:
    """The findings of a session exported with a :func:`guard_recipe` recipe, as
    ``lower_with_guards`` gives them, without exporting again: the program-stage lint of each
    method's torch.export program, what the guards found and did (copies, folds), and (for
    XNNPACK) the partitioned-stage lint of the lowered program. A guarded recipe keeps the
    findings of its latest export.

    Raises:
        ValueError: the session did not export with a guarded recipe, or has not run.
    """
    recipe = export_recipe_of(session)
    if _guards_of(recipe) is None or not session_programs(session):
        raise ValueError(
            "recipe_report needs a session exported with a guarded recipe: "
            "executorch.export.export(model, [inputs], guard_recipe(recipe))"
        )
    settings = config or Settings()
    return linted_session(recipe, session, settings).report(settings)


def linted_session(recipe: ExportRecipe, session: ExportSession, settings: Settings, *, lowered: bool = True) -> Ledger:
    """The ledger of ``recipe`` (:func:`guard_recipe`'s), with the lints of what ``session``
    made with it recorded, as ``settings`` select: the program-stage lint of each method's
    torch.export program, once that stage has run, and, when ``lowered`` and a backend whose
    decisions the partitioned-stage rules explain (XNNPACK) lowered it, the partitioned lint.

    Raises:
        ValueError: ``recipe`` is not guarded.
    """
    ledger, guards = ledger_of(recipe), _guards_of(recipe)
    programs = session_programs(session)
    ledger.put_lint("program", programs, lint_guarded(programs, settings))
    if lowered and guards is not None and guards.partitioned_lint:
        edge = session.get_edge_program_manager()
        ledger.put_lint("partitioned", edge, lint(edge, settings, stage="partitioned"))
    return ledger


def ledger_of(recipe: ExportRecipe) -> Ledger:
    """The ledger of a :func:`guard_recipe` recipe: what the guards found in its latest export.

    Raises:
        ValueError: ``recipe`` is not guarded.
    """
    guards = _guards_of(recipe)
    if guards is None:
        raise ValueError("the recipe is not guarded: make it with guard_recipe(recipe)")
    return guards.ledger


def _guards_of(recipe: object) -> _RecipeGuards | None:
    lowering = recipe.lowering_recipe if isinstance(recipe, ExportRecipe) else None
    passes = (lowering.edge_transform_passes or []) if lowering is not None else []
    return next((p for p in passes if isinstance(p, _RecipeGuards)), None)


def session_programs(session: ExportSession) -> dict[str, ExportedProgram]:
    """Each method's torch.export program of ``session``, once that stage has run."""
    artifact = session.get_stage_artifacts().get(StageType.TORCH_EXPORT)
    return dict(artifact.data) if artifact is not None and artifact.data else {}


def recipe_names() -> list[str]:
    """The name of every recipe type that this ExecuTorch offers here (``"xnnpack_fp32"``, ...)."""
    return sorted(_recipe_types())


def recipe_named(name: str, **options: Any) -> ExportRecipe:
    """ExecuTorch's recipe of that name (a recipe type's value, as :func:`recipe_names`
    lists them), made with ``options`` (``group_size=...`` for the torchao ones).

    Raises:
        ValueError: no recipe of that name; the message names the closest ones.
    """
    return ExportRecipe.get_recipe(recipe_type(name), **options)


def recipe_type(name: str) -> RecipeType:
    """The recipe type of that name.

    Raises:
        ValueError: no recipe of that name; the message names the closest ones.
    """
    types = _recipe_types()
    if name in types:
        return types[name]
    if name in RECIPES:  # ExecuTorch's, but its backend's recipes do not import here
        package, since = _RECIPE_PACKAGES[name.split("_", 1)[0]]
        raise ValueError(f"recipe {name!r} cannot be made here: {package} {_import_failure(package, since)}")
    close = difflib.get_close_matches(name, types, n=3)
    hint = f"; did you mean {' or '.join(close)}?" if close else "."
    raise ValueError(f"unknown recipe {name!r}{hint} Recipes here: {', '.join(sorted(types))}")


def _recipe_types() -> dict[str, RecipeType]:
    for package, since in _RECIPE_PACKAGES.values():
        _import_failure(package, since)  # imported, its provider registers its recipes
    return {
        str(recipe_type.value): recipe_type
        for backend in recipe_registry.list_backends()
        for recipe_type in recipe_registry.get_supported_recipes(backend)
    }


@functools.cache
def _import_failure(package: str, since: str) -> str | None:
    """Why a backend's recipes package does not import here (the rest of a sentence that
    names it), or ``None`` once it has."""
    # looked up in executorch's folder first, so that a package this ExecuTorch lacks is told
    # apart from one whose backend's SDK is missing
    if not Path(executorch.__path__[0], *package.split(".")[1:]).is_dir():
        return f"is not in this ExecuTorch: it is new in executorch {since}"
    try:
        # What a backend's packages log as they import (coremltools: its macOS library missing,
        # versions it has not tested) is what this answers: whether its recipes can be made here.
        with libraries_quiet():
            importlib.import_module(package)
    except Exception as error:  # noqa: BLE001 - a backend whose SDK is not installed offers no recipe here
        return f"does not import ({type(error).__name__}: {error}): install its backend's SDK"
    return None


@final
@dataclass(frozen=True)
class _RecipeGuards:
    """A recipe's edge transform pass entry: ``(method, program) -> passes``, each recording
    into the recipe's ledger."""

    ledger: Ledger
    settings: Settings
    partitioners: Sequence[GuardedPartitioner] | Mapping[str, Sequence[GuardedPartitioner]] | None

    def __call__(self, method: str, program: ExportedProgram) -> list[Recorded]:
        own = self._own(method)
        # ExecuTorch calls this entry itself, while its pass manager would wrap a pass's error
        # in a bare Exception: what no host reader can take stops here, unwrapped.
        stops = plan_placement(method, program, defer_device_constants=bool(own)).stops
        if stops:
            raise placement_error(stops)
        # the copy policy's copy was made before to_edge (_CopyToHost): here, what is left stops
        return self.ledger.recorded(
            method,
            guard_passes(config=self.settings.updated({"placement": "error"}, "guard_recipe"), partitioner=own or None),
        )

    @property
    def partitioned_lint(self) -> bool:
        """Whether a backend whose decisions the partitioned-stage rules explain (XNNPACK)
        lowers some method."""
        lists = self.partitioners.values() if isinstance(self.partitioners, Mapping) else [self.partitioners or []]
        return any(partitioned_lint_applies(_backend_id(p.partitioner)) for parts in lists for p in parts)

    def _own(self, method: str) -> Sequence[GuardedPartitioner] | None:
        return self.partitioners.get(method) if isinstance(self.partitioners, Mapping) else self.partitioners


def quantizes_modules(recipe: ExportRecipe) -> bool:
    """Whether ``recipe`` quantizes the model's modules in place (torchao's ``quantize_``)
    before torch.export, rather than the exported graph (PT2E)."""
    return bool(recipe.quantization_recipe and recipe.quantization_recipe.ao_quantization_configs)


def _sparing_reparametrized(quantization: QuantizationRecipe | None) -> QuantizationRecipe | None:
    """``quantization`` with each torchao config's filter skipping reparametrized modules."""
    if quantization is None or not quantization.ao_quantization_configs:
        return quantization
    configs = [
        dataclasses.replace(c, filter_fn=_SkipReparametrized(c.filter_fn)) for c in quantization.ao_quantization_configs
    ]
    return dataclasses.replace(quantization, ao_quantization_configs=configs)


@final
@dataclass(frozen=True)
class _SkipReparametrized:
    """A torchao filter: the wrapped one (torchao's default, linear layers, when ``None``),
    except on reparametrized modules."""

    wrapped: Callable[[nn.Module, str], bool] | None

    def __call__(self, module: nn.Module, fqn: str) -> bool:
        if is_reparametrized(module):
            return False
        if self.wrapped is not None:
            return self.wrapped(module, fqn)
        from torchao.quantization.quant_api import _is_linear

        return _is_linear(module, fqn)


@final
@dataclass(frozen=True)
class _FoldNonCore:
    """A recipe's ``aten_transform_passes`` entry: :func:`fold_non_core_constants`."""

    ledger: Ledger
    max_growth: float

    def __call__(self, method: str, program: ExportedProgram) -> ExportedProgram:
        folded, report = fold_non_core_constants(program, max_growth=self.max_growth)
        self.ledger.put(method, "fold before to_edge", report)
        return folded


@final
@dataclass(frozen=True)
class _CopyToHost:
    """A recipe's ``aten_transform_passes`` entry, with the copy policy: the torch.export
    program's host twin, as its placement plan says. A program the plan cannot copy is left
    as it is, for the edge stage's guard to stop with the session's programs in hand."""

    ledger: Ledger

    def __call__(self, method: str, program: ExportedProgram) -> ExportedProgram:
        plan = plan_placement(method, program, "copy")
        if plan.stops:
            return program
        placed = plan.carried_out(program)
        self.ledger.put(method, "copy", placed.report)
        return placed.exported_program


@final
@dataclass(frozen=True)
class _FoldBeforeQuantizer:
    """A PT2E recipe's ``pre_prepare_passes`` entry: the captured graph, its constant-only
    computations folded (:func:`fold_constants`), so that the quantizer sees static weights.

    The captured graph is exported again on inputs made from its placeholders' metadata
    (dimensions that were symbolic stay dynamic), folded, and unlifted.
    """

    ledger: Ledger
    max_growth: float

    def __call__(self, model: GraphModule) -> GraphModule:
        values = [node.meta.get("val") for node in model.graph.find_nodes(op="placeholder")]
        inputs = tuple(_example(value) for value in values)
        dynamic = tuple(_dynamic_dims(value) for value in values)
        program = torch.export.export(model, inputs, dynamic_shapes=dynamic if any(dynamic) else None)
        folded, report = fold_constants(program, max_growth=self.max_growth)
        self.ledger.put(None, "fold before the quantizer", report)
        return folded.module() if report else model


def _example(value: object) -> object:
    """A real input like a placeholder's value: zeros of its dtype, at its sizes' hints."""
    if not isinstance(value, torch.Tensor):
        return value
    return torch.zeros([_hint(size) for size in value.shape], dtype=value.dtype)


def _hint(size: int | torch.SymInt) -> int:
    return size.node.hint if isinstance(size, torch.SymInt) else int(size)


def _dynamic_dims(value: object) -> dict[int, object] | None:
    if not isinstance(value, torch.Tensor):
        return None
    dims = {i: torch.export.Dim.AUTO for i, size in enumerate(value.shape) if isinstance(size, torch.SymInt)}
    return dims or None


def _backend_id(partitioner: Partitioner) -> str:
    spec = getattr(partitioner, "delegation_spec", None)
    return str(getattr(spec, "backend_id", ""))
