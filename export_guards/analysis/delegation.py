"""Which compute ops a partitioner delegated, and which it left in the portable graph."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import final

import torch
from executorch.exir.lowered_backend_module import LoweredBackendModule

from export_guards.analysis.kernels import kernel_ops
from export_guards.analysis.ops import call_nodes, compute_op_name, input_node
from export_guards.analysis.programs import Program, methods_of

__all__ = ["DelegationSummary", "delegation_summary"]


@final
@dataclass(frozen=True)
class DelegationSummary:
    """Compute ops per op name: inside delegates (by backend) and left in the portable graph;
    and the other ops left in the portable graph that the runtime runs with a kernel of its own
    once emitted, by qualified name (``aten::sort``; :func:`kernel_ops`: a buffer's write-back
    ``aten::copy_`` counted, a ``view_copy`` that becomes a view not)."""

    delegated: Counter[str]
    portable: Counter[str]
    backends: Counter[str]
    other_portable: Counter[str] = field(default_factory=Counter)

    @property
    def fraction_delegated(self) -> float:
        """Delegated compute ops over all compute ops (1.0 when there are none)."""
        total = sum(self.delegated.values()) + sum(self.portable.values())
        return sum(self.delegated.values()) / total if total else 1.0

    def stated(self) -> str:
        """``12 of 12 compute ops delegated (100%) to XnnpackBackend (conv / linear /
        matmul); 44 other ops on the runtime's kernels``, or ``no conv / linear / matmul to delegate (no delegate)``: as
        EG402 and the lint's summary line say it. The other ops are counted, so that a fully
        delegated matmul count never reads as a fully delegated program."""
        delegated = sum(self.delegated.values())
        total = delegated + sum(self.portable.values())
        backends = ", ".join(sorted(self.backends)) or "no delegate"
        others = sum(self.other_portable.values())
        rest = f"; {others} other op{'s' if others != 1 else ''} on the runtime's kernels" if others else ""
        if (
            total
        ):  # the other ops are of another kind: said so, lest "35 of 35" beside "100 other" read as a contradiction
            kind = " (conv / linear / matmul)" if others else ""
            return f"{delegated} of {total} compute ops delegated ({self.fraction_delegated:.0%}) to {backends}{kind}{rest}"
        return f"no conv / linear / matmul to delegate ({backends}){rest}"

    def count(self, *names: str) -> tuple[int, int]:
        """``(delegated, total)`` for the given op names, e.g. ``count("convolution")``."""
        delegated = sum(self.delegated[n] for n in names)
        return delegated, delegated + sum(self.portable[n] for n in names)


def delegation_summary(program: Program) -> DelegationSummary:
    """Count the compute ops of every method of a lowered ``program``."""
    delegated: Counter[str] = Counter()
    portable: Counter[str] = Counter()
    backends: Counter[str] = Counter()
    others: Counter[str] = Counter()
    for ep in methods_of(program).values():
        others += kernel_ops(ep)
        for graph_module, node in call_nodes(ep.graph_module):
            if node.target is torch.ops.higher_order.executorch_call_delegate:
                lowered = getattr(graph_module, str(input_node(node, 0).target))
                assert isinstance(lowered, LoweredBackendModule)
                backends[lowered.backend_id] += 1
                for inner in lowered.original_module.graph.nodes:
                    if (name := compute_op_name(inner)) is not None:
                        delegated[name] += 1
            elif (name := compute_op_name(node)) is not None:
                portable[name] += 1
    return DelegationSummary(delegated, portable, backends, others)
