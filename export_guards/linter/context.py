"""What the graph rules read: one method's program, and facts about it computed once, on demand."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field

from torch.export import ExportedProgram
from torch.fx import Node

from export_guards.analysis.fold_plan import plan_fold
from export_guards.analysis.ops import call_nodes, compute_op_name, static_operand
from export_guards.analysis.programs import ProgramConstant, iter_constants, mutated_constants

__all__ = ["LintContext"]


@dataclass
class LintContext:
    """One method of a program, as the rules see it.

    Attributes:
        program: the method's ``ExportedProgram``.
        method: the method's name (``None`` when a pass does not know it).
        fold: whether the guards' fold will run on it.
        reasons: for a lowered program, why the partitioner left each node out, by node name.
    """

    program: ExportedProgram
    method: str | None = "forward"
    fold: bool = True
    reasons: Mapping[str, str] = field(default_factory=dict)

    @functools.cached_property
    def constants(self) -> dict[Node, ProgramConstant]:
        """Every tensor constant, by the node that stands for it."""
        return {c.node: c for c in iter_constants(self.method, self.program)}

    @functools.cached_property
    def mutated(self) -> set[str]:
        """The FQNs of the parameters and buffers the program writes."""
        return mutated_constants(self.program)

    @functools.cached_property
    def foldable(self) -> frozenset[Node]:
        """The nodes computable from constants alone (what the fold would fold)."""
        return plan_fold(self.program).foldable

    @functools.cached_property
    def reached_by_inputs(self) -> set[Node]:
        """Every node that a user input flows into."""
        inputs = set(self.program.graph_signature.user_inputs)
        reached: set[Node] = set()
        for node in self.program.graph.nodes:
            if (node.op == "placeholder" and node.name in inputs) or any(i in reached for i in node.all_input_nodes):
                reached.add(node)
        return reached

    def call_nodes(self) -> list[Node]:
        """The op calls of the graph and of its control-flow branches, in order."""
        return [node for _, node in call_nodes(self.program.graph_module)]

    def compute_weights(self) -> list[tuple[Node, Node]]:
        """``(compute node, its weight node)`` for every conv / linear, and every mm / addmm
        (the halves of a decomposed linear)."""
        pairs = []
        for node in self.call_nodes():
            weight = static_operand(node) if compute_op_name(node) else None
            if isinstance(weight, Node):
                pairs.append((node, weight))
        return pairs
