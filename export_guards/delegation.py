"""Which compute ops a partitioner delegated, and which it left in the portable graph."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import final

import torch
from executorch.exir.lowered_backend_module import LoweredBackendModule

from export_guards.ops import aten_name
from export_guards.programs import Program, methods_of

__all__ = ["COMPUTE_OPS", "DelegationSummary", "compute_op_name", "delegation_summary"]

COMPUTE_OPS = frozenset(
    {"convolution", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
     "conv_transpose3d", "linear", "addmm", "mm", "bmm", "matmul", "baddbmm"}
)
"""The ATen op names (without overload) counted as compute ops."""


@final
@dataclass(frozen=True)
class DelegationSummary:
    """Compute ops per op name: inside delegates (by backend) and left in the portable graph."""

    delegated: Counter[str]
    portable: Counter[str]
    backends: Counter[str]

    @property
    def fraction_delegated(self) -> float:
        """Delegated compute ops over all compute ops (1.0 when there are none)."""
        total = sum(self.delegated.values()) + sum(self.portable.values())
        return sum(self.delegated.values()) / total if total else 1.0

    def count(self, *names: str) -> tuple[int, int]:
        """``(delegated, total)`` for the given op names, e.g. ``count("convolution")``."""
        delegated = sum(self.delegated[n] for n in names)
        return delegated, delegated + sum(self.portable[n] for n in names)


def delegation_summary(program: Program) -> DelegationSummary:
    """Count the compute ops of every method of a lowered ``program``."""
    delegated: Counter[str] = Counter()
    portable: Counter[str] = Counter()
    backends: Counter[str] = Counter()
    for ep in methods_of(program).values():
        for graph_module, node in _call_nodes(ep.graph_module):
            if node.target is torch.ops.higher_order.executorch_call_delegate:
                lowered = getattr(graph_module, node.args[0].target)
                assert isinstance(lowered, LoweredBackendModule)
                backends[lowered.backend_id] += 1
                for inner in lowered.original_module.graph.nodes:
                    if (name := compute_op_name(inner)) is not None:
                        delegated[name] += 1
            elif (name := compute_op_name(node)) is not None:
                portable[name] += 1
    return DelegationSummary(delegated, portable, backends)


def _call_nodes(root: torch.fx.GraphModule) -> list[tuple[torch.fx.GraphModule, torch.fx.Node]]:
    """Every op call of ``root`` and of its control-flow branches (not inside delegates)."""
    calls = []
    for module in root.modules():
        if isinstance(module, torch.fx.GraphModule):
            calls.extend((module, n) for n in module.graph.nodes if n.op == "call_function")
    return calls


def compute_op_name(node: torch.fx.Node) -> str | None:
    """The ATen name of ``node``'s op (``"convolution"``) if it is a compute op, else None."""
    name = aten_name(node.target) if node.op == "call_function" else None
    return name if name in COMPUTE_OPS else None
