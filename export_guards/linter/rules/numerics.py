"""EG303, EG304: random ops and float64 tensors."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from export_guards.analysis.ops import aten_name, aten_overload, inserted_by_quantizer, schema_arguments, val_tensors
from export_guards.linter.context import LintContext
from export_guards.ruleset import Hit, rule


@rule("EG303")
def random_op(context: LintContext) -> Iterator[Hit]:
    for node in context.call_nodes():
        op = aten_overload(node.target)
        if op is None or torch.Tag.nondeterministic_seeded not in op.tags:
            continue
        if "dropout" not in (aten_name(node.target) or "") and _draws_random(node):  # EG301: dropout
            yield Hit(f"{aten_name(node.target)} '{node.name}' draws random numbers", node)


def _draws_random(node: torch.fx.Node) -> bool:
    """False for an op that is random only through a dropout probability, when it is zero
    (attention in eval mode: ``scaled_dot_product_attention(..., dropout_p=0.0)``)."""
    probabilities = [value for argument, value in schema_arguments(node) if argument.name == "dropout_p"]
    return not probabilities or probabilities[0] != 0


@rule("EG304")
def float64(context: LintContext) -> Iterator[Hit]:
    for constant in context.constants.values():
        if constant.tensor.dtype == torch.float64 and constant.node.op == "placeholder":
            yield Hit(f"constant '{constant.fqn}' is float64", constant.node, constant.fqn)
    user_inputs = set(context.program.graph_signature.user_inputs)
    for node in context.program.graph.nodes:
        if node.op == "placeholder" and node.name in user_inputs and _is_float64(node):
            yield Hit(f"input '{node.name}' is float64", next(iter(node.users), node))
    for node in context.call_nodes():
        # Only where float64 starts: the ops after it follow by type promotion. Not an op a
        # quantizer inserted (PT2E's dynamic choose_qparams returns a float64 scale by design):
        # the user's line did not ask for it, and the delegate that matches it takes it whole.
        if inserted_by_quantizer(node):
            continue
        if _is_float64(node) and not any(_is_float64(i) for i in node.all_input_nodes):
            yield Hit(f"{aten_name(node.target) or node.target} '{node.name}' produces float64", node)


def _is_float64(node: torch.fx.Node) -> bool:
    return any(t.dtype == torch.float64 for t in val_tensors(node))
