"""EG210-EG212: conv / linear / matmul weights that are not static parameters."""

from __future__ import annotations

from collections.abc import Iterator

from export_guards.analysis.ops import aten_name
from export_guards.analysis.source import node_origin
from export_guards.linter.context import LintContext
from export_guards.ruleset import Hit, rule

# With the fold on (guard_passes(), lower_with_guards, the command), EG210 and EG212 are not
# problems: the fold fixes them and reports each weight it folded once, as EG201. What it could
# not fix shows after partitioning, as EG401 with the reason. Each hit names its ops (by origin)
# as its subjects: the EG401 that the same weight causes after partitioning is dropped for it.


@rule("EG210")
def foldable_weight(context: LintContext) -> Iterator[Hit]:
    if context.fold:
        return
    for op, weight in context.compute_weights():
        if weight.op != "call_function" or weight not in context.computable:
            continue
        if context.weight_tensor(weight) is not None:
            continue  # EG212 reports it, once, for the reparametrized tensor
        yield Hit(
            f"the weight of {aten_name(op.target)} '{op.name}' is computed at run time from constants only "
            f"(by '{weight.name}'): XNNPACK will not delegate it",
            op,
            subjects=(node_origin(op),),
        )


@rule("EG211")
def input_dependent_weight(context: LintContext) -> Iterator[Hit]:
    for op, weight in context.compute_weights():
        if weight in context.reached_by_inputs:
            yield Hit(
                f"the weight of {aten_name(op.target)} '{op.name}' depends on a user input "
                f"(through '{weight.name}'): XNNPACK delegates only static weights",
                op,
                subjects=(node_origin(op),),
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
        ops = tuple(
            node_origin(op) for op, weight in context.compute_weights() if context.weight_tensor(weight) == tensor
        )
        yield Hit(
            f"'{tensor}' is still reparametrized: recomputed at every run, so XNNPACK will not delegate its op",
            next(iter(first.node.users), first.node),
            tensor,
            subjects=ops,
        )
