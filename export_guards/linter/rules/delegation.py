"""EG401-EG404: after partitioning, what was left out of the delegates (XNNPACK's: the
partitioned-stage rules explain its decisions)."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from executorch.exir.lowered_backend_module import LoweredBackendModule
from torch.export.graph_signature import InputKind
from torch.fx import Node

from export_guards.analysis.delegation import delegation_summary
from export_guards.analysis.ops import compute_op_name, kernel_op_name, static_operand
from export_guards.analysis.partitioner_reasons import true_reason, xnnpack_takes
from export_guards.analysis.source import node_origin
from export_guards.analysis.storage import describe
from export_guards.linter.context import LintContext
from export_guards.ruleset import Hit, rule

# An op whose weight is not a static parameter is a symptom: its cause, the weight, is EG210,
# EG211 or EG212 before lowering. The hit names its op by origin as its subject, so the report keeps
# only the cause where the lint before lowering reported it (the fold off); otherwise (that
# rule ignored, or what the fold could not fix) this finding names the cause itself.
_WEIGHT_RULES = ("EG210", "EG211", "EG212", "EG405")  # EG405: a guard kept it off on purpose
_FOLD_THE_QUANTIZE = (
    "Store the weight as int8: keep export-guards' fold on (it folds the quantize of a constant), "
    "or convert with convert_pt2e(prepared) (fold_quantize=True, the default)."
)
# After partitioning, a weight computed inside a delegate comes out of a call that may also take
# an input: whether it depends on one is for EG211 to say, before lowering. One fix covers both.
_STATIC_WEIGHT = (
    "Make the weight a static parameter: compute it from parameters only (no input), and fold it "
    "before to_edge with fold_non_core_constants(program)."
)


@rule("EG401")
def compute_not_delegated(context: LintContext) -> Iterator[Hit]:
    for node in context.call_nodes():
        name = compute_op_name(node)
        if name is None:
            continue
        because = _because(context, node)
        weight = static_operand(node)
        if not isinstance(weight, Node) or weight.op == "placeholder":  # a static weight: the reason is another
            yield Hit(f"{name} '{node.name}' was not delegated{because}", node)
            continue
        if context.quantized_in_graph(node):
            message, fix = f"{name} '{node.name}' was not delegated: its weight is quantized by an op in the graph", _FOLD_THE_QUANTIZE
        else:
            message, fix = f"{name} '{node.name}' was not delegated{because}", _STATIC_WEIGHT
        yield Hit(message, node, fix=fix, subjects=(node_origin(node),), symptom_of=_WEIGHT_RULES)


@rule("EG402")
def delegation_coverage(context: LintContext) -> Iterator[Hit]:
    summary = delegation_summary(context.program)
    stated = summary.stated()  # stated all the same without compute ops: what the delegates took is the question
    if summary.other_portable:
        left = ", ".join(f"{op} x{count}" for op, count in sorted(summary.other_portable.items()))
        stated += f": {left} (EG403)"
    yield Hit(stated)


@rule("EG404")
def constant_stored_twice(context: LintContext) -> Iterator[Hit]:
    """A constant that a delegate holds a copy of (its lowered program's own parameter, which
    the backend serializes into its data) while ops outside the delegate read the program's."""
    copied_by: dict[str, list[str]] = {}
    for node in context.call_nodes():
        if node.target is not torch.ops.higher_order.executorch_call_delegate:
            continue
        lowered = getattr(context.program.graph_module, str(node.args[0].target), None)
        if not isinstance(lowered, LoweredBackendModule):
            continue  # inside a control-flow branch: not read here
        for spec in lowered.original_module.graph_signature.input_specs:
            if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR) and spec.target:
                copied_by.setdefault(spec.target, []).append(lowered.backend_id)
    for constant in context.constants.values():
        readers = [u for u in constant.node.users if kernel_op_name(u)]
        if constant.fqn not in copied_by or not readers:
            continue
        kernels = ", ".join(dict.fromkeys(str(kernel_op_name(u)) for u in readers))
        backends = ", ".join(sorted(set(copied_by[constant.fqn])))
        yield Hit(
            f"{describe(constant)} is stored twice: {backends} keeps a copy in its delegate data, and {kernels} "
            f"on the runtime's kernels read{'s' if len(readers) == 1 else ''} the program's ({constant.tensor.nbytes:,} bytes more)",
            readers[0],
            constant.fqn,
        )


@rule("EG403")
def op_not_delegated(context: LintContext) -> Iterator[Hit]:
    for node in context.call_nodes():
        if compute_op_name(node) is None and (name := kernel_op_name(node)) is not None:
            yield Hit(f"{name} '{node.name}' was left outside every delegate{_because(context, node)}", node)


def _because(context: LintContext, node: Node) -> str:
    """Why the partitioner left ``node`` out, as the end of a sentence."""
    given = context.reasons.get(node.name)
    if given and (reason := true_reason(node, given)):
        return f": the partitioner says {reason}" if reason == given else f": {reason}"
    if not xnnpack_takes(node):
        return ": XNNPACK has no support for this op"
    if given:  # a reason that does not hold (XNNPACK's "invalid dtype" of a float32 op): not repeated
        return " with its neighbours (the partitioner's reason, that its dtype is invalid, does not hold)"
    return " (the partitioner gave no reason)"
