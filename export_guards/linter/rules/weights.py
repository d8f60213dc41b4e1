"""EG210-EG212: conv / linear / matmul weights that are not static parameters."""

from __future__ import annotations

import re
from collections.abc import Iterator

from export_guards.analysis.ops import aten_name
from export_guards.linter.context import LintContext
from export_guards.report import Severity
from export_guards.ruleset import Hit, rule

_FOLD_ON = "The fold is on: guard_passes() folds it into a static parameter."
_FOLD_OFF = (
    "The fold is off: enable it (guard_passes(), or export-guards lint --fold) or call "
    "fold_constants(program) / fold_parametrizations(model) before lowering."
)


@rule("EG210")
def foldable_weight(context: LintContext) -> Iterator[Hit]:
    for op, weight in context.compute_weights():
        if weight.op == "call_function" and weight in context.foldable:
            yield Hit(
                f"the weight of {aten_name(op.target)} '{op.name}' is computed at run time from "
                f"constants only (by '{weight.name}'), so XNNPACK will not delegate it. "
                + (_FOLD_ON if context.fold else _FOLD_OFF),
                op,
                severity=Severity.INFO if context.fold else None,
            )


@rule("EG211")
def input_dependent_weight(context: LintContext) -> Iterator[Hit]:
    for op, weight in context.compute_weights():
        if weight in context.reached_by_inputs:
            yield Hit(
                f"the weight of {aten_name(op.target)} '{op.name}' depends on a user input "
                f"(through '{weight.name}'): XNNPACK delegates only static weights",
                op,
            )


# parametrize's state: [module.]parametrizations.NAME.original[N] or .N.<buffer>; spectral_norm's: NAME_orig.
_PARAMETRIZED = re.compile(r"^(?:(?P<module>.+)\.)?parametrizations\.(?P<name>\w+)\.(?:original\d*|\d+\.\w+)$")
_SPECTRAL_NORMED = re.compile(r"^(?P<tensor>.+)_orig$")


@rule("EG212")
def reparametrization_leftover(context: LintContext) -> Iterator[Hit]:
    names = {c.fqn: c for c in context.constants.values()}
    tensors: dict[str, list[str]] = {}
    for fqn in names:
        if match := _PARAMETRIZED.match(fqn):
            tensor = f"{match['module']}.{match['name']}" if match["module"] else match["name"]
            tensors.setdefault(tensor, []).append(fqn)
        elif (match := _SPECTRAL_NORMED.match(fqn)) and match["tensor"] + "_u" in names:
            tensors.setdefault(match["tensor"], []).append(fqn)
    for fqn in names:  # hook-based weight_norm: a weight_g / weight_v pair
        if fqn.endswith("_g") and fqn[:-2] + "_v" in names:
            tensors.setdefault(fqn[:-2], []).extend([fqn, fqn[:-2] + "_v"])
    for tensor, state in tensors.items():
        for suffix in ("_u", "_v"):  # hook-based spectral_norm keeps u and v beside weight_orig
            if tensor + suffix in names and tensor + suffix not in state:
                state.append(tensor + suffix)
        first = names[state[0]]
        yield Hit(
            f"'{tensor}' is still reparametrized: the program carries {', '.join(map(repr, state))} "
            "and recomputes the weight at every run. "
            + (_FOLD_ON if context.fold else _FOLD_OFF),
            next(iter(first.node.users), first.node),
            tensor,
            severity=Severity.INFO if context.fold else None,
        )
