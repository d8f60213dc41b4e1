"""EG401, EG402: after partitioning, compute ops left out of the delegates."""

from __future__ import annotations

from collections.abc import Iterator

from torch.fx import Node

from export_guards.analysis.delegation import delegation_summary
from export_guards.analysis.ops import aten_name, compute_op_name, static_operand
from export_guards.linter.context import LintContext
from export_guards.ruleset import Hit, rule


@rule("EG401")
def compute_not_delegated(context: LintContext) -> Iterator[Hit]:
    for node in context.call_nodes():
        name = compute_op_name(node)
        if name is None:
            continue
        reason = context.reasons.get(node.name)
        because = f": the partitioner says {reason}" if reason else " (the partitioner gave no reason)"
        if _quantized_in_the_graph(node):
            yield Hit(f"{name} '{node.name}' was not delegated{because}. {_QUANTIZED_WEIGHT}", node, fix=_FOLD_BEFORE_QUANTIZING)
        else:
            yield Hit(f"{name} '{node.name}' was not delegated{because}", node)


_QUANTIZED_WEIGHT = (
    "Its weight is quantized by an op in the graph (quantize of a float constant), not stored as "
    "int8: XNNPACK takes only int8 constant weights"
)
_FOLD_BEFORE_QUANTIZING = (
    "Store the weight as int8: convert with convert_pt2e(prepared), whose fold_quantize=True (the "
    "default) quantizes constant weights at export; and fold a reparametrized weight before "
    "quantizing: model, _ = export_guards.fold_parametrizations(model) before prepare_pt2e."
)


def _quantized_in_the_graph(node: Node) -> bool:
    """Whether ``node``'s weight is ``dequantize(quantize(constant))``: a float weight that the
    program quantizes at run time (``convert_pt2e(..., fold_quantize=False)``, or a
    parametrization that was quantized before anything folded it)."""
    weight = static_operand(node)
    if not isinstance(weight, Node) or not (aten_name(weight.target) or "").startswith("dequantize_per"):
        return False
    quantize = weight.args[0] if weight.args else None
    if not isinstance(quantize, Node) or not (aten_name(quantize.target) or "").startswith("quantize_per"):
        return False
    source = quantize.args[0] if quantize.args else None
    return isinstance(source, Node) and source.op in ("placeholder", "get_attr")


@rule("EG402")
def delegation_coverage(context: LintContext) -> Iterator[Hit]:
    summary = delegation_summary(context.program)
    delegated = sum(summary.delegated.values())
    total = delegated + sum(summary.portable.values())
    if total:
        backends = ", ".join(sorted(summary.backends)) or "no delegate"
        yield Hit(
            f"{delegated} of {total} compute ops delegated ({summary.fraction_delegated:.0%}) to {backends}"
        )
