"""Which computations of a program depend only on constants, and which of their results a
fold stores: the plan that the fold pass carries out and that the lint's weight rules read."""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import final

import torch
from torch.export import ExportedProgram
from torch.fx import Node
from torch.fx.passes.utils.source_matcher_utils import get_source_partitions

from export_guards.analysis.ops import MATMULS, aten_name, aten_overload, is_view, is_written
from export_guards.analysis.programs import ProgramConstant, iter_constants, mutated_constants
from export_guards.analysis.storage import storage_problem

__all__ = ["FoldPlan", "plan_fold"]

# Quantization ops stay in the graph (delegates match dequantize as a pattern), except a
# quantize of a constant: that is the integer weight a delegate expects in front of its
# dequantize, which is what convert_pt2e's default fold_quantize=True stores too.
_QUANTIZATION_NAMESPACES = frozenset({"quantized_decomposed", "torchao", "quantized", "quant"})
_FOLDABLE_QUANTIZE = frozenset(
    {"quantize_per_tensor", "quantize_per_channel", "quantize_per_channel_group", "quantize_affine"}
)
_SMALL_BYTES = 4096


@final
@dataclass(frozen=True)
class FoldPlan:
    """What to fold in one program.

    Attributes:
        constants: every constant a fold may read, by its placeholder: not the mutated ones,
            nor those the host cannot compute with (device or meta storage: the placement
            guard's to report).
        foldable: the nodes computable from those constants alone.
        roots: the foldable nodes that the rest of the graph reads, in graph order: each is
            stored as a constant.
    """

    constants: Mapping[Node, ProgramConstant]
    foldable: frozenset[Node]
    roots: tuple[Node, ...]


def plan_fold(program: ExportedProgram, *, max_growth: float = 2.0) -> FoldPlan:
    """Which nodes of ``program`` a fold folds, and which of them it stores.

    A node is folded when all of its inputs are constants or folded nodes and its op is a
    pure ATen / edge op: no mutation, no random op (``nondeterministic_seeded``), no
    dequantize (a delegate matches it), no delegate call, no control flow, and of the
    quantization ops only a quantize (of constants alone, like every fold: an integer weight); and when its result is at most
    ``max_growth`` times the bytes of its tensor inputs (or at most 4 KiB), so that
    ``expand`` / ``repeat`` / ``full`` do not bloat the ``.pte``.
    """
    constants = _foldable_constants(program)
    foldable, roots = _plan(program.graph, constants, max_growth)
    return FoldPlan(constants, foldable, roots)


def _foldable_constants(ep: ExportedProgram) -> dict[Node, ProgramConstant]:
    """Placeholder -> constant, for every constant a fold may read: not the mutated ones, nor
    those the host cannot compute with (device or meta storage: the placement guard's)."""
    mutated = mutated_constants(ep)
    return {
        c.node: c
        for c in iter_constants(None, ep)
        if c.node.op == "placeholder" and c.fqn not in mutated and storage_problem(c.tensor) is None
    }


def _plan(
    graph: torch.fx.Graph, constants: Mapping[Node, ProgramConstant], max_growth: float
) -> tuple[frozenset[Node], tuple[Node, ...]]:
    """Which nodes to fold, and which of them to store as constants (the roots).

    A root must be a tensor and must not be a program output (an output cannot be a
    constant placeholder); a foldable node that would be a root but cannot be one is left
    computed, and the plan is made again without it, so that its inputs become roots.
    """
    excluded: set[Node] = set()
    linear_patterns = _linear_pattern_nodes(graph)
    while True:
        foldable, reads_constant = _foldable_nodes(graph, constants, max_growth, excluded)
        outputs = set(graph.output_node().all_input_nodes)
        read_outside = [
            n for n in graph.nodes
            if n in foldable and n in reads_constant and any(u not in foldable for u in n.users)
        ]
        unstorable = {
            n for n in read_outside
            if n in outputs
            or not isinstance(n.meta.get("val"), torch.Tensor)
            or _transposes_a_linear_weight(n, linear_patterns)
        }
        if not unstorable:
            return frozenset(foldable), tuple(read_outside)
        excluded |= unstorable


def _linear_pattern_nodes(graph: torch.fx.Graph) -> set[Node]:
    """The nodes that make up a decomposed ``nn.Linear`` / ``F.linear``, as partitioners
    find them (torch.fx's source partitions)."""
    partitions = get_source_partitions(graph, [torch.nn.Linear, torch.nn.functional.linear])
    return {node for group in partitions.values() for p in group for node in p.nodes}


def _transposes_a_linear_weight(node: Node, linear_patterns: set[Node]) -> bool:
    """A view of a weight that a decomposed linear's matmul reads.

    Partitioners rebuild the linear from the pattern (XNNPACK from ``permute_copy`` +
    ``addmm`` of one ``nn.Linear``), so the view stays and its input is stored. Outside
    such a pattern the view is folded too: the matmul then reads a static weight directly.
    """
    return (
        node in linear_patterns
        and is_view(node.target)
        and any(u in linear_patterns and aten_name(u.target) in MATMULS for u in node.users)
    )


def _foldable_nodes(
    graph: torch.fx.Graph,
    constants: Mapping[Node, ProgramConstant],
    max_growth: float,
    excluded: set[Node],
) -> tuple[set[Node], set[Node]]:
    """The nodes computable from constants alone, and those of them that read a constant
    (the rest compute from literals only, like ``full``, and are never stored on their own)."""
    foldable: set[Node] = set()
    reads_constant: set[Node] = set(constants)
    for node in graph.nodes:
        if node.op != "call_function" or node in excluded or not _is_pure(node.target):
            continue
        inputs = node.all_input_nodes
        if not all(i in constants or i in foldable for i in inputs):
            continue
        if is_written(node):  # an in-place op changes it later (training dialect): not a constant
            continue
        if node.target is not operator.getitem and not _small_enough(node, inputs, max_growth):
            continue
        foldable.add(node)
        if any(i in reads_constant for i in inputs):
            reads_constant.add(node)
    return foldable, reads_constant


def _is_pure(target: object) -> bool:
    if target is operator.getitem:
        return True
    op = aten_overload(target)
    if op is None:
        return False
    if op.namespace in _QUANTIZATION_NAMESPACES:
        return aten_name(op) in _FOLDABLE_QUANTIZE
    if torch.Tag.nondeterministic_seeded in op.tags:
        return False
    schema = op._schema
    if schema.is_mutable:
        return False
    if not schema.returns:  # an assertion on constants (_assert_tensor_metadata): checked once, here
        return "_assert" in schema.name
    return all(isinstance(r.type, torch.TensorType) for r in schema.returns)


def _small_enough(node: Node, inputs: Iterable[Node], max_growth: float) -> bool:
    out_bytes = _val_bytes(node.meta.get("val"))
    if out_bytes is None:  # only an assertion, which returns nothing, may have no value
        return node.meta.get("val") is None and not aten_overload(node.target)._schema.returns
    in_bytes = sum(_val_bytes(i.meta.get("val")) or 0 for i in inputs)
    return out_bytes <= max(max_growth * in_bytes, _SMALL_BYTES)


def _val_bytes(val: object) -> int | None:
    if isinstance(val, torch.Tensor):
        return val.numel() * val.element_size()
    if isinstance(val, (tuple, list)) and all(isinstance(v, torch.Tensor) for v in val):
        return sum(v.numel() * v.element_size() for v in val)
    return None
