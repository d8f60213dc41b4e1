"""EG401, EG402: after partitioning, compute ops left out of the delegates."""

from __future__ import annotations

from collections.abc import Iterator

from export_guards.analysis.delegation import delegation_summary
from export_guards.analysis.ops import compute_op_name
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
        yield Hit(f"{name} '{node.name}' was not delegated{because}", node)


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
