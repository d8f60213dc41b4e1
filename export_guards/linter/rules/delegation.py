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
        if _quantized_in_the_graph(node, context.foldable):
            yield Hit(f"{name} '{node.name}' was not delegated{because}. {_QUANTIZED_WEIGHT}", node, fix=_FOLD_THE_QUANTIZE)
        else:
            yield Hit(f"{name} '{node.name}' was not delegated{because}", node)


_QUANTIZED_WEIGHT = (
    "Its weight is quantized by an op in the graph (quantize of a float constant), not stored as "
    "int8: XNNPACK takes only int8 constant weights"
)
_FOLD_THE_QUANTIZE = (
    "Store the weight as int8: keep export-guards' fold on (it folds a quantize of a constant, "
    "and the reparametrization before it, into an int8 weight), or convert with "
    "convert_pt2e(prepared), whose fold_quantize=True (the default) does the same at export."
)


def _quantized_in_the_graph(node: Node, foldable: frozenset[Node]) -> bool:
    """Whether ``node``'s weight is ``dequantize(quantize(w))`` where ``w`` is computed from
    constants alone (``foldable``): a float weight that the program quantizes at run time
    (``convert_pt2e(..., fold_quantize=False)``, or a parametrization quantized unfolded)."""
    dequantize = _dequantize_of(static_operand(node))
    quantize = dequantize.args[0] if dequantize is not None and dequantize.args else None
    return isinstance(quantize, Node) and _is_quantization(quantize, "quantize_") and quantize in foldable


def _dequantize_of(value: object) -> Node | None:
    return value if isinstance(value, Node) and _is_quantization(value, "dequantize_") else None


def _is_quantization(node: Node, prefix: str) -> bool:
    """``dequantize_per_*`` / ``dequantize_affine`` (prefix ``"dequantize_"``), or the quantize ones."""
    return (aten_name(node.target) or "").startswith(prefix)


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
