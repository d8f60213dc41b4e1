"""What the rules read: one method's program, and facts about it computed once, on demand."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
from torch.export import ExportedProgram
from torch.fx import Node

from export_guards.constant_fold import foldable_nodes
from export_guards.delegation import COMPUTE_OPS
from export_guards.ops import aten_name, aten_overload
from export_guards.programs import ProgramConstant, iter_constants, mutated_constants

__all__ = ["LintContext"]

# The operand that a delegate needs static: conv and linear weights, and mm / addmm's second
# operand (a decomposed linear). Batched matmuls (attention) take two dynamic operands.
_STATIC_OPERAND = {"mm": "mat2", "addmm": "mat2"}


@dataclass
class LintContext:
    """One method of a program, as the rules see it.

    Attributes:
        program: the method's ``ExportedProgram``.
        method: the method's name.
        fold: whether the guards' fold will run on it.
        reasons: for a lowered program, why the partitioner left each node out, by node name.
    """

    program: ExportedProgram
    method: str = "forward"
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
        return foldable_nodes(self.program)

    @functools.cached_property
    def reached_by_inputs(self) -> set[Node]:
        """Every node that a user input flows into."""
        inputs = set(self.program.graph_signature.user_inputs)
        reached: set[Node] = set()
        for node in self.program.graph.nodes:
            if (node.op == "placeholder" and node.name in inputs) or any(
                i in reached for i in node.all_input_nodes
            ):
                reached.add(node)
        return reached

    def call_nodes(self) -> list[Node]:
        """The op calls of the graph and of its control-flow branches, in order."""
        return [
            n
            for module in self.program.graph_module.modules()
            if isinstance(module, torch.fx.GraphModule)
            for n in module.graph.nodes
            if n.op == "call_function"
        ]

    def compute_weights(self) -> list[tuple[Node, Node]]:
        """``(compute node, its weight node)`` for every conv / linear, and every mm / addmm
        (the halves of a decomposed linear)."""
        pairs = []
        for node in self.call_nodes():
            name = aten_name(node.target)
            if name not in COMPUTE_OPS:
                continue
            weight = argument(node, _STATIC_OPERAND.get(name, "weight"))
            if isinstance(weight, Node):
                pairs.append((node, weight))
        return pairs


def argument(node: Node, *names: str) -> object:
    """The value ``node`` passes for the first of ``names`` that its op's schema has."""
    op = aten_overload(node.target)
    if op is None:
        return None
    for index, schema_argument in enumerate(op._schema.arguments):
        if schema_argument.name in names:
            if schema_argument.name in node.kwargs:
                return node.kwargs[schema_argument.name]
            return node.args[index] if index < len(node.args) else schema_argument.default_value
    return None


def val_tensors(node: Node) -> list[torch.Tensor]:
    """The tensors of ``node``'s traced value."""
    value = node.meta.get("val")
    values = value if isinstance(value, (tuple, list)) else [value]
    return [v for v in values if isinstance(v, torch.Tensor)]
