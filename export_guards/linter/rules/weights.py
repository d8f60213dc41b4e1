"""EG210-EG212: conv / linear / matmul weights that are not static parameters."""

from __future__ import annotations

from collections.abc import Iterator

from export_guards.analysis.ops import aten_name
from export_guards.linter.context import LintContext
from export_guards.ruleset import Hit, rule

# With the fold on (guard_passes(), lower_with_guards, the command), EG210 and EG212 are not
# problems: the fold fixes them and reports each weight it folded once, as EG201. What it could
# not fix shows after partitioning, as EG401 with the reason.
_FOLD_OFF = (
    "The fold is off: enable it (guard_passes(), or export-guards lint --fold) or call "
    "fold_constants(program) / fold_parametrizations(model) before lowering."
)


@rule("EG210")
def foldable_weight(context: LintContext) -> Iterator[Hit]:
    if context.fold:
        return
    reparametrized = {fqn for state in context.reparametrized.values() for fqn in state}
    for op, weight in context.compute_weights():
        if weight.op != "call_function" or weight not in context.foldable:
            continue
        if context.sources(weight) & reparametrized:
            continue  # EG212 reports it, once, for the reparametrized tensor
        yield Hit(
            f"the weight of {aten_name(op.target)} '{op.name}' is computed at run time from "
            f"constants only (by '{weight.name}'), so XNNPACK will not delegate it. {_FOLD_OFF}",
            op,
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


@rule("EG212")
def reparametrization_leftover(context: LintContext) -> Iterator[Hit]:
    if context.fold:
        return
    names = {c.fqn: c for c in context.constants.values()}
    for tensor, state in context.reparametrized.items():
        if not any(names[fqn].node.users for fqn in state):
            continue  # the state is not read: something already made the weight (convert_pt2e's frozen copy)
        first = names[state[0]]
        yield Hit(
            f"'{tensor}' is still reparametrized: the program carries {', '.join(map(repr, state))} "
            f"and recomputes the weight at every run, so a delegate cannot take it as a static weight. {_FOLD_OFF}",
            next(iter(first.node.users), first.node),
            tensor,
        )
