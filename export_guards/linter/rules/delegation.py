"""EG401-EG404: after partitioning, what was left out of the delegates (XNNPACK's: the
partitioned-stage rules explain its decisions)."""

from __future__ import annotations

from collections.abc import Iterator

from torch.fx import Node

from export_guards.analysis.delegate_copies import delegate_copies
from export_guards.analysis.delegation import delegation_summary
from export_guards.analysis.ops import compute_op_name, kernel_op_name, static_operand
from export_guards.analysis.partitioner_reasons import true_reason, xnnpack_takes
from export_guards.analysis.source import node_origin
from export_guards.analysis.storage import describe
from export_guards.linter.context import LintContext
from export_guards.report import Severity
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
            message, fix = (
                f"{name} '{node.name}' was not delegated: its weight is quantized by an op in the graph",
                _FOLD_THE_QUANTIZE,
            )
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
    """A constant that ops outside the delegates read from the program while a delegate keeps
    a copy of it: the same bytes (stored once by every guarded flow's program), or other bytes
    (a quantized copy), which the runtime cannot share."""
    copies_of = delegate_copies(context.program)
    for constant in context.constants.values():
        readers = [u for u in constant.node.users if kernel_op_name(u)]
        if not readers:
            continue
        copies = copies_of(constant.fqn, constant.tensor)
        if not copies:
            continue
        kernels = ", ".join(dict.fromkeys(str(kernel_op_name(u)) for u in readers))
        reads = f"{kernels} on the runtime's kernels read{'s' if len(readers) == 1 else ''} the program's copy"
        backends = ", ".join(sorted({c.backend for c in copies}))
        other = [c for c in copies if not c.same_bytes]
        if not other:
            yield Hit(
                f"{describe(constant)}: {backends} keeps a copy in its delegate data and {reads}; the bytes are "
                f"the same, so every guarded flow's program stores them once ({constant.tensor.nbytes:,} bytes "
                f"that stock ExecuTorch stores twice)",
                readers[0],
                constant.fqn,
                fix="Nothing to do: export_guards.program.store_once(...) gives the pass-list flow's program the same saving.",
            )
            continue
        copy = other[0]
        how = (
            f"a copy quantized for it ('{copy.fqn}', dequantized by {copy.quantized_by})"
            if copy.quantized_by
            else "a copy in its own layout"
        )
        yield Hit(
            f"{describe(constant)} is stored twice, in bytes that differ: {copy.backend} reads {how}, "
            f"{copy.nbytes:,} bytes, and {reads}, {constant.tensor.nbytes:,} bytes; the runtime can share only "
            f"identical bytes, so the program holds {copy.nbytes + constant.tensor.nbytes:,} bytes for this weight",
            readers[0],
            constant.fqn,
            fix=(
                "Leave the weight as the delegate takes it unchanged (a tied output head unquantized: skip 'output' "
                "in the quantizer), so that both readers read one copy, which every guarded flow stores once; or "
                "accept both copies."
            ),
            severity=Severity.WARNING,
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
