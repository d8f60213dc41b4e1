"""The guards in ExecuTorch's recipe API (``executorch.export``): a guarded copy of a recipe,
the findings of a session made with it, and recipes by name."""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, final

from executorch.exir import ExecutorchBackendConfig
from executorch.exir.backend.partitioner import Partitioner
from executorch.export import ExportRecipe, ExportSession, LoweringRecipe, QuantizationRecipe, RecipeType, StageType, recipe_registry
from torch import nn
from torch.export import ExportedProgram

from export_guards.linter import LINT_RULES, lint
from export_guards.linter.rules.placement import PLACEMENT_RULES
from export_guards.passes.defaults import guard_passes
from export_guards.passes.emit import emit_passes
from export_guards.passes.fold import fold_non_core_constants
from export_guards.passes.module_fold import is_reparametrized
from export_guards.passes.partitioner import DEVICE_BACKENDS, GuardedPartitioner, guard_partitioners
from export_guards.passes.placement import check_policy, guard_constant_placement
from export_guards.passes.result import Recorded, recorded
from export_guards.report import Finding, Report
from export_guards.ruleset import settle
from export_guards.settings import PlacementPolicy, Settings

__all__ = ["guard_recipe", "quantizes_modules", "recipe_named", "recipe_names", "recipe_report", "recipe_type"]

# The backends whose recipe providers register themselves when their ``recipes`` package is
# imported; those that cannot be imported here (their SDK is missing) are left out.
_RECIPE_PACKAGES = (
    "executorch.backends.xnnpack.recipes",
    "executorch.backends.apple.coreml.recipes",
    "executorch.backends.qualcomm.recipes",
    "executorch.backends.arm.recipes",
)


def guard_recipe(
    recipe: ExportRecipe,
    *,
    fold: bool = True,
    max_growth: float = 2.0,
    placement: PlacementPolicy = "error",
    device_backends: Iterable[str] = DEVICE_BACKENDS,
) -> ExportRecipe:
    """A copy of ``recipe`` with the guards at every stage; ``recipe`` is left as it was.

    - With ``placement="copy"``, the torch.export program's device constants are copied to
      the host first (an ``aten_transform_passes`` entry: the one place where that is exact).
    - With the fold on, constant-only computations that use ops outside core ATen, which
      ``to_edge`` rejects, are folded on the torch.export program (:func:`fold_non_core_constants`).
    - Every method's edge transform passes start with :func:`guard_passes` (placement, then
      the fold unless ``fold=False``), the recipe's own passes after them.
    - The recipe's partitioners are guarded (:func:`guard_partitioners`), so a constant in
      device memory is stopped where a host reader would read it.
    - ``executorch_backend_config.passes`` ends with :func:`emit_passes`.
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
    check_policy(placement)
    early = [*([_copy_to_host] if placement == "copy" else []), *([_FoldNonCore(max_growth)] if fold else [])]
    lowering = recipe.lowering_recipe or LoweringRecipe()
    partitioners = guard_partitioners(lowering.partitioners, device_backends=device_backends) if lowering.partitioners else None
    guards = _RecipeGuards(fold, max_growth, partitioners)
    config = recipe.executorch_backend_config or ExecutorchBackendConfig()
    return dataclasses.replace(
        recipe,
        quantization_recipe=_sparing_reparametrized(recipe.quantization_recipe),
        aten_transform_passes=[*(recipe.aten_transform_passes or []), *early],
        lowering_recipe=dataclasses.replace(
            lowering, partitioners=partitioners, edge_transform_passes=[guards, *(lowering.edge_transform_passes or [])]
        ),
        executorch_backend_config=dataclasses.replace(config, passes=[*config.passes, *emit_passes()]),
    )


def recipe_report(session: ExportSession, config: Settings | None = None) -> Report:
    """The findings of a session exported with a :func:`guard_recipe` recipe, as
    ``lower_with_guards`` gives them, without exporting again: the program-stage lint of each
    method's torch.export program, the fold's findings, and (for XNNPACK) the
    partitioned-stage lint of the lowered program.

    Raises:
        ValueError: the session did not export with a guarded recipe, or has not run.
    """
    settings = config or Settings()
    artifact = session.get_stage_artifacts().get(StageType.TORCH_EXPORT)
    programs: dict[str, ExportedProgram] = dict(artifact.data) if artifact is not None and artifact.data else {}
    records = {name: _RECORDS.get(program) for name, program in programs.items()}
    early = [f for program in programs.values() for f in _EARLY_FOLDS.get(program, ())]
    if not programs or not any(records.values()):
        raise ValueError(
            "recipe_report needs a session exported with a guarded recipe: "
            "executorch.export.export(model, [inputs], guard_recipe(recipe))"
        )
    report = lint(programs, settings, rules=LINT_RULES.without(PLACEMENT_RULES))  # placement stopped the export or was fine
    report += settle([*early, *(f for record in records.values() if record for f in record.findings())], settings)
    if any(record and record.xnnpack for record in records.values()):  # the partitioned-stage rules speak of XNNPACK
        report += lint(session.get_edge_program_manager(), settings, stage="partitioned")
    return report


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
    if name not in types:
        close = difflib.get_close_matches(name, types, n=3)
        hint = f"; did you mean {' or '.join(close)}?" if close else "."
        raise ValueError(f"unknown recipe {name!r}{hint} Recipes here: {', '.join(sorted(types))}")
    return types[name]


def _recipe_types() -> dict[str, RecipeType]:
    for package in _RECIPE_PACKAGES:
        try:
            importlib.import_module(package)
        except Exception:  # noqa: BLE001 - a backend whose SDK is not installed offers no recipe here
            continue
    return {
        str(recipe_type.value): recipe_type
        for backend in recipe_registry.list_backends()
        for recipe_type in recipe_registry.get_supported_recipes(backend)
    }


@final
@dataclass(frozen=True)
class _Record:
    """The guard passes made for one method of one export, and whether XNNPACK lowers it."""

    method: str
    passes: list[Recorded]
    xnnpack: bool

    def findings(self) -> list[Finding]:
        """What the passes found, each naming the method."""
        return _in_method((f for guard in self.passes for found in guard.reports for f in found), self.method)


# What each guarded export recorded, by the torch.export program it lowered: kept as long as
# that program (the session's artifact) is, never longer.
_RECORDS: weakref.WeakKeyDictionary[ExportedProgram, _Record] = weakref.WeakKeyDictionary()


@final
@dataclass(frozen=True)
class _RecipeGuards:
    """A recipe's edge transform pass entry: ``(method, program) -> passes``."""

    fold: bool
    max_growth: float
    partitioners: Sequence[GuardedPartitioner] | Mapping[str, Sequence[GuardedPartitioner]] | None

    def __call__(self, method: str, program: ExportedProgram) -> list[Recorded]:
        own = self.partitioners.get(method) if isinstance(self.partitioners, Mapping) else self.partitioners
        passes = [recorded(guard) for guard in guard_passes(fold=self.fold, max_growth=self.max_growth, partitioner=own or None)]
        _RECORDS[program] = _Record(method, passes, any(_is_xnnpack(p.partitioner) for p in own or ()))
        return passes


def quantizes_modules(recipe: ExportRecipe) -> bool:
    """Whether ``recipe`` quantizes the model's modules in place (torchao's ``quantize_``)
    before torch.export, rather than the exported graph (PT2E)."""
    return bool(recipe.quantization_recipe and recipe.quantization_recipe.ao_quantization_configs)


def _sparing_reparametrized(quantization: QuantizationRecipe | None) -> QuantizationRecipe | None:
    """``quantization`` with each torchao config's filter skipping reparametrized modules."""
    if quantization is None or not quantization.ao_quantization_configs:
        return quantization
    configs = [dataclasses.replace(c, filter_fn=_SkipReparametrized(c.filter_fn)) for c in quantization.ao_quantization_configs]
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


# The findings of the fold made before to_edge, by the program it made.
_EARLY_FOLDS: weakref.WeakKeyDictionary[ExportedProgram, Report] = weakref.WeakKeyDictionary()


@final
@dataclass(frozen=True)
class _FoldNonCore:
    """A recipe's ``aten_transform_passes`` entry: :func:`fold_non_core_constants`."""

    max_growth: float

    def __call__(self, method: str, program: ExportedProgram) -> ExportedProgram:
        folded, report = fold_non_core_constants(program, max_growth=self.max_growth)
        if report:
            _EARLY_FOLDS[folded] = Report.of(_in_method(report, method))
        return folded


def _in_method(findings: Iterable[Finding], method: str) -> list[Finding]:
    """``findings``, each naming ``method`` (a pass sees a program, not its method's name)."""
    return [f if f.method else dataclasses.replace(f, method=method) for f in findings]


def _copy_to_host(method: str, program: ExportedProgram) -> ExportedProgram:
    return guard_constant_placement(program, policy="copy")


def _is_xnnpack(partitioner: Partitioner) -> bool:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    return isinstance(partitioner, XnnpackPartitioner)

