"""What the graph rules read: one method's program, and facts about it computed once, on demand."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field

from torch.export import ExportedProgram
from torch.fx import Node

from export_guards.analysis.fold_plan import FoldPlan, plan_fold
from export_guards.analysis.ops import ancestors, aten_name, call_nodes, compute_op_name, static_operand
from export_guards.analysis.programs import ProgramConstant, iter_constants, mutated_constants
from export_guards.analysis.reparametrization import reparametrized

__all__ = ["LintContext"]


@dataclass
class LintContext:
    """One method of a program, as the rules see it.

    Attributes:
        program: the method's ``ExportedProgram``.
        method: the method's name (``None`` when a pass does not know it).
        fold: whether the guards' fold will run on it.
        reasons: for a lowered program, why the partitioner left each node out, by node name.
        fold_plan: the program's fold plan, when the caller has made it already.
    """

    program: ExportedProgram
    method: str | None = "forward"
    fold: bool = True
    reasons: Mapping[str, str] = field(default_factory=dict)
    fold_plan: FoldPlan | None = None

    @functools.cached_property
    def constants(self) -> dict[Node, ProgramConstant]:
        """Every tensor constant, by the node that stands for it."""
        return {c.node: c for c in iter_constants(self.method, self.program)}

    @functools.cached_property
    def placeholders(self) -> dict[str, Node]:
        """The graph's inputs (user inputs, parameters, buffers, constants), by node name."""
        return {n.name: n for n in self.program.graph.nodes if n.op == "placeholder"}

    @functools.cached_property
    def mutated(self) -> set[str]:
        """The FQNs of the parameters and buffers the program writes."""
        return mutated_constants(self.program)

    @functools.cached_property
    def computable(self) -> frozenset[Node]:
        """The nodes computable from constants alone (what the fold may fold, within its budget)."""
        return (self.fold_plan or plan_fold(self.program)).computable

    @functools.cached_property
    def reached_by_inputs(self) -> set[Node]:
        """Every node that a user input flows into."""
        inputs = set(self.program.graph_signature.user_inputs)
        reached: set[Node] = set()
        for node in self.program.graph.nodes:
            if (node.op == "placeholder" and node.name in inputs) or any(i in reached for i in node.all_input_nodes):
                reached.add(node)
        return reached

    @functools.cached_property
    def reparametrized(self) -> dict[str, list[str]]:
        """Each tensor still computed by a reparametrization (``conv.weight``), and the FQNs of
        the state it is computed from (``analysis.reparametrization``)."""
        return reparametrized(c.fqn for c in self.constants.values())

    @functools.cached_property
    def modules_run(self) -> set[str]:
        """The paths of the modules whose forward made some node of the graph (``""`` for the
        root), from the nodes' ``nn_module_stack``: a module and every module around it."""
        ran: set[str] = set()
        for node in self.call_nodes():
            for path, _ in (node.meta.get("nn_module_stack") or {}).values():
                ran.add(path)
        return ran | {""} if ran else set()

    def sources(self, node: Node) -> set[str]:
        """The FQNs of the constants ``node`` is computed from."""
        return {self.constants[n].fqn for n in ancestors(node) if n in self.constants}

    def weight_tensor(self, weight: Node) -> str | None:
        """The reparametrized tensor (``"conv.weight"``) whose state ``weight`` is computed
        from, if any."""
        sources = self.sources(weight)
        return next((tensor for tensor, state in self.reparametrized.items() if sources.intersection(state)), None)

    def quantized_in_graph(self, op: Node) -> bool:
        """Whether ``op``'s weight is ``dequantize(quantize(w))`` with ``w`` computed from
        constants alone: a float weight that the program quantizes at run time
        (``convert_pt2e(..., fold_quantize=False)``, or a parametrization quantized unfolded)."""
        dequantize = static_operand(op)
        if not (isinstance(dequantize, Node) and _is_quantization(dequantize, "dequantize_") and dequantize.args):
            return False
        quantize = dequantize.args[0]
        return isinstance(quantize, Node) and _is_quantization(quantize, "quantize_") and quantize in self.computable

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


def _is_quantization(node: Node, prefix: str) -> bool:
    """``dequantize_per_*`` / ``dequantize_affine`` (prefix ``"dequantize_"``), or the quantize ones."""
    return (aten_name(node.target) or "").startswith(prefix)
