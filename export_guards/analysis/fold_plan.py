"""Which computations of a program depend only on constants, and which of them a fold stores:
the plan that the fold pass carries out and that the lint's weight rules read.

A fold is judged on the whole program and on the program it writes, not op by op: the
computations that share constants are one fold, done when the written program is smaller (the
instructions and planned results it removes, and the constants only they read, outweigh the
constants it stores: :mod:`export_guards.analysis.program_bytes`), when ``to_edge`` could not
take its ops (outside core ATen), or when it gives a delegate the static weight it needs, as
long as all such growth stays within one budget for the whole program. Any other fold is
declined, with the reason.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import final

import torch
from torch.export import ExportedProgram
from torch.fx import Node
from torch.fx.passes.utils.source_matcher_utils import get_source_partitions

from export_guards.analysis.ops import (
    MATMULS,
    QUANTIZATION_NAMESPACES,
    ancestors,
    aten_name,
    aten_overload,
    compute_op_name,
    is_view,
    is_written,
    static_operand,
)
from export_guards.analysis.program_bytes import constant_cost, instruction_cost
from export_guards.analysis.programs import ProgramConstant, iter_constants, mutated_constants
from export_guards.analysis.storage import storage_problem, stored_bytes
from export_guards.internals import is_wrapper_subclass
from export_guards.settings import DEFAULT_MAX_GROWTH

__all__ = ["DEFAULT_MAX_GROWTH", "DeclinedFold", "FoldPlan", "outside_core_aten", "plan_fold", "written_growth"]

# Of the quantization ops, only a quantize of constants folds: that is the integer weight a
# delegate expects in front of its dequantize, which is what convert_pt2e's default
# fold_quantize=True stores too. A dequantize stays (delegates match it as a pattern).
_FOLDABLE_QUANTIZE = frozenset(
    {"quantize_per_tensor", "quantize_per_channel", "quantize_per_channel_group", "quantize_affine"}
)
# Conversions that only change a tensor's dtype or layout: with views, what a fold of no
# computation is made of (a constant reshaped or copied, not a weight computed).
_CONVERSIONS = frozenset(
    {"_to_copy", "to", "_to_dim_order_copy", "clone", "_clone_dim_order", "contiguous", "alias", "lift_fresh_copy"}
)
_SMALL_BYTES = 4096


@final
@dataclass(frozen=True)
class DeclinedFold:
    """A computation on constants that the fold leaves in the program.

    Attributes:
        roots: the nodes whose results the fold would have stored.
        growth: about how many bytes the written program would have grown by (negative:
            shrunk): see :func:`written_growth`.
        reason: why it is left, in words for the user.
    """

    roots: tuple[Node, ...]
    growth: int
    reason: str


@final
@dataclass(frozen=True)
class FoldPlan:
    """What to fold in one program.

    Attributes:
        constants: every constant a fold may read, by its placeholder: not the mutated ones,
            nor those the host cannot compute with (device or meta storage: the placement
            guard's to report), nor tensor subclasses (torchao's quantized weights, which
            ``to_edge`` unpacks into plain constants: the fold leaves them as they are).
        computable: the nodes computable from those constants alone.
        foldable: the computable nodes that the fold folds (those of the folds it does).
        roots: the foldable nodes that the rest of the graph reads, in graph order: each is
            stored as a constant.
        declined: the folds left in the program that compute something (not only views or
            copies of a constant), with the reason.
    """

    constants: Mapping[Node, ProgramConstant]
    computable: frozenset[Node]
    foldable: frozenset[Node]
    roots: tuple[Node, ...]
    declined: tuple[DeclinedFold, ...] = ()


def plan_fold(program: ExportedProgram, *, max_growth: float = DEFAULT_MAX_GROWTH) -> FoldPlan:
    """Which nodes of ``program`` a fold folds, and which of them it stores.

    A node is computable when all of its inputs are constants or computable nodes and its op
    is a pure ATen / edge op: no mutation, no random op (``nondeterministic_seeded``), no
    dequantize (a delegate matches it; an integer-to-float conversion of a constant is one
    too), no delegate call, no control flow, and of the quantization ops only a quantize.

    The computable nodes that share constants make one fold. A fold is done when it makes the
    written program smaller (:func:`written_growth`: its instructions, their planned results
    and the constants only they read, against the constants it stores), when one of its ops is
    outside core ATen (``to_edge`` must decompose or reject it), or when it gives a conv /
    linear / matmul the static weight a delegate needs; the growth of the last kind, added up
    over the whole program, stays within ``max_growth`` times the program's constant bytes (or
    4 KiB). Other folds are declined, unless ``max_growth`` is infinite: then every computation
    on constants is folded.
    """
    if not max_growth >= 1:
        raise ValueError(f"max_growth must be at least 1 (the program's size), not {max_growth!r}")
    constants = _foldable_constants(program)
    computable, candidates = _plan(program.graph, constants)
    total = sum(stored_bytes(c.tensor) for c in iter_constants(None, program))
    budget = max((max_growth - 1) * total, _SMALL_BYTES)
    foldable: set[Node] = set()
    roots: list[Node] = []
    declined: list[DeclinedFold] = []
    for fold in _folds(candidates, computable, constants):
        reason = fold.why_not(budget)
        if reason is None:
            budget -= max(fold.growth, 0)
            foldable |= fold.nodes
            roots += fold.roots
        elif fold.computes:
            declined.append(DeclinedFold(fold.roots, fold.growth, reason))
    # An assertion on constants alone is checked once, by the fold, and leaves with it.
    foldable |= {
        n for n in computable if _is_assertion(n) and all(i in foldable or i in constants for i in n.all_input_nodes)
    }
    order = {node: index for index, node in enumerate(program.graph.nodes)}
    return FoldPlan(
        constants,
        frozenset(computable),
        frozenset(foldable),
        tuple(sorted(roots, key=order.__getitem__)),
        tuple(declined),
    )


def _foldable_constants(ep: ExportedProgram) -> dict[Node, ProgramConstant]:
    """Placeholder -> constant, for every constant a fold may read: not the mutated ones, nor
    those the host cannot compute with (device or meta storage: the placement guard's), nor
    tensor subclasses (their graph reads their inner tensors, which ``to_edge`` unpacks)."""
    mutated = mutated_constants(ep)
    return {
        c.node: c
        for c in iter_constants(None, ep)
        if c.node.op == "placeholder"
        and c.fqn not in mutated
        and not is_wrapper_subclass(c.tensor)
        and storage_problem(c.tensor) is None
    }


@final
@dataclass(frozen=True)
class _Fold:
    """Computations that share constants, judged together: folding them removes the constants
    that only they read and adds their results."""

    roots: tuple[Node, ...]
    nodes: frozenset[Node]
    growth: int
    outside_core: bool
    feeds_a_weight: bool
    computes: bool

    def why_not(self, budget: float) -> str | None:
        """Why this fold is declined, with ``budget`` bytes of growth left (infinite: fold
        everything); ``None`` to do it."""
        if self.growth < 0 or self.outside_core or budget == math.inf:
            return None
        if self.feeds_a_weight:
            if self.growth <= budget:
                return None
            return (
                f"the written program would grow by about {self.growth:,} bytes, over what is left of the fold's "
                f"budget for the whole program ({max(int(budget), 0):,} bytes)"
            )
        return (
            f"the written program would not be smaller (about {self.growth:,} bytes more: the constant it stores "
            "against the instructions it removes), and no conv / linear / matmul needs its result as a static weight"
        )


def _folds(
    candidates: tuple[Node, ...], computable: set[Node], constants: Mapping[Node, ProgramConstant]
) -> list[_Fold]:
    """The candidate roots grouped into folds: roots that share a computed node or a constant
    are one fold, since a constant leaves the program only when every reader of it is folded."""
    reach = {root: ancestors(root, lambda n: n in computable or n in constants) for root in candidates}
    groups: list[tuple[list[Node], set[Node]]] = []
    for root in candidates:
        merged_roots, merged_nodes = [root], set(reach[root])
        for group in [g for g in groups if g[1] & merged_nodes]:
            groups.remove(group)
            merged_roots, merged_nodes = group[0] + merged_roots, group[1] | merged_nodes
        groups.append((merged_roots, merged_nodes))
    return [_judged(tuple(roots), nodes, computable, constants) for roots, nodes in groups]


def _judged(
    roots: tuple[Node, ...], reached: set[Node], computable: set[Node], constants: Mapping[Node, ProgramConstant]
) -> _Fold:
    nodes = frozenset(n for n in reached if n in computable)
    return _Fold(
        roots,
        nodes,
        written_growth(roots, nodes, constants),
        outside_core=any(outside_core_aten(n.target) for n in nodes),
        feeds_a_weight=any(_feeds_a_weight(r) for r in roots),
        computes=any(not _only_moves(n) for n in nodes),
    )


def written_growth(roots: Iterable[Node], nodes: Iterable[Node], constants: Mapping[Node, ProgramConstant]) -> int:
    """About how many bytes folding ``nodes`` into constants for ``roots`` adds to the written
    program (negative: removes): the constants it stores, less the instructions and planned
    results of the nodes it removes and the constants that only those nodes read
    (:mod:`export_guards.analysis.program_bytes`)."""
    roots, nodes = list(roots), set(nodes)
    removed = [n for n in nodes if n in roots or all(u in nodes for u in n.users)]
    gone = set(removed)
    leaving = {
        i
        for n in gone
        for i in n.all_input_nodes
        if i in constants and all(u in gone or _is_assertion(u) for u in i.users)
    }
    return (
        sum(constant_cost(r.meta.get("val")) for r in roots)
        - sum(instruction_cost(n) for n in removed)
        - sum(constant_cost(constants[c].tensor) for c in leaving)
    )


def _feeds_a_weight(root: Node) -> bool:
    """Whether a conv / linear / matmul reads ``root`` (through views) as the operand a delegate
    needs static, directly or through a dequantize (a quantized weight)."""
    for user in root.users:
        if compute_op_name(user) and static_operand(user) is root:
            return True
        through = is_view(user.target) or (aten_name(user.target) or "").startswith("dequantize_")
        if through and _feeds_a_weight(user):
            return True
    return False


def _is_assertion(node: Node) -> bool:
    """A check with no result (``_assert_tensor_metadata``): no value to store or read."""
    op = aten_overload(node.target)
    return op is not None and not op._schema.returns


def _only_moves(node: Node) -> bool:
    """A view, a dtype or layout conversion, or bookkeeping: no computation of a weight."""
    if node.target is operator.getitem or is_view(node.target):
        return True
    name = aten_name(node.target) or ""
    return name in _CONVERSIONS or name.startswith("_assert")


def outside_core_aten(target: object) -> bool:
    """An op that ``to_edge`` must decompose or reject. Which one it does is known only after
    its decompositions; folding either here computes with the op eager runs. Ops without
    results (graph asserts, which ``to_edge`` drops) do not count. Quantization ops are not
    core ATen either: a foldable one (a quantize of constants) counts too."""
    return (
        isinstance(target, torch._ops.OpOverload) and bool(target._schema.returns) and torch.Tag.core not in target.tags
    )


def _plan(graph: torch.fx.Graph, constants: Mapping[Node, ProgramConstant]) -> tuple[set[Node], tuple[Node, ...]]:
    """Which nodes are computable, and which of them a fold would store as constants (the
    candidate roots).

    A root must be a tensor and must not be a program output (an output cannot be a
    constant placeholder); a computable node that would be a root but cannot be one is left
    computed, and the plan is made again without it, so that its inputs become roots.
    """
    excluded: set[Node] = set()
    linear_patterns = _linear_pattern_nodes(graph)
    while True:
        computable, reads_constant = _computable_nodes(graph, constants, excluded)
        outputs = set(graph.output_node().all_input_nodes)
        read_outside = [
            n
            for n in graph.nodes
            if n in computable and n in reads_constant and any(u not in computable for u in n.users)
        ]
        unstorable = {
            n
            for n in read_outside
            if n in outputs
            or not isinstance(n.meta.get("val"), torch.Tensor)
            or _transposes_a_linear_weight(n, linear_patterns)
        }
        if not unstorable:
            return computable, tuple(read_outside)
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


def _computable_nodes(
    graph: torch.fx.Graph, constants: Mapping[Node, ProgramConstant], excluded: set[Node]
) -> tuple[set[Node], set[Node]]:
    """The nodes computable from constants alone, and those of them that read a constant
    (the rest compute from literals only, like ``full``, and are never stored on their own)."""
    computable: set[Node] = set()
    reads_constant: set[Node] = set(constants)
    for node in graph.nodes:
        if node.op != "call_function" or node in excluded or not _is_pure(node.target):
            continue
        inputs = node.all_input_nodes
        if not all(i in constants or i in computable for i in inputs):
            continue
        if is_written(node):  # an in-place op changes it later (training dialect): not a constant
            continue
        if _dequantizes(node) or not _has_value(node):
            continue
        computable.add(node)
        if any(i in reads_constant for i in inputs):
            reads_constant.add(node)
    return computable, reads_constant


def _is_pure(target: object) -> bool:
    if target is operator.getitem:
        return True
    op = aten_overload(target)
    if op is None:
        return False
    if op.namespace in QUANTIZATION_NAMESPACES:
        return aten_name(op) in _FOLDABLE_QUANTIZE
    if torch.Tag.nondeterministic_seeded in op.tags:
        return False
    schema = op._schema
    if schema.is_mutable:
        return False
    if not schema.returns:  # an assertion on constants (_assert_tensor_metadata): checked once, here
        return "_assert" in schema.name
    return all(isinstance(r.type, torch.TensorType) for r in schema.returns)


def _dequantizes(node: Node) -> bool:
    """A conversion of integer values to a wider floating point: a quantized weight's
    dequantize (torchao's int8 weight-only ``to(float32)``), which stays for the same reason a
    ``dequantize_*`` does: folded, it would store the weight unquantized. An integer as wide as
    the float or wider (the ``int64`` scalar ``3`` that ``hardsigmoid`` adds as ``float32``)
    is no quantized weight: folded, it takes fewer bytes."""
    value = node.meta.get("val")
    inputs = [i.meta.get("val") for i in node.all_input_nodes]
    return (
        aten_name(node.target) in _CONVERSIONS
        and isinstance(value, torch.Tensor)
        and value.dtype.is_floating_point
        and any(
            isinstance(i, torch.Tensor)
            and not i.dtype.is_floating_point
            and i.dtype != torch.bool
            and i.element_size() < value.element_size()
            for i in inputs
        )
    )


def _has_value(node: Node) -> bool:
    """Only an assertion, which returns nothing, may have no traced value."""
    if node.target is operator.getitem or _val_bytes(node.meta.get("val")) is not None:
        return True
    overload = aten_overload(node.target)
    return node.meta.get("val") is None and overload is not None and not overload._schema.returns


def _val_bytes(val: object) -> int | None:
    if isinstance(val, torch.Tensor):
        return val.numel() * val.element_size()
    if isinstance(val, (tuple, list)) and all(isinstance(v, torch.Tensor) for v in val):
        return sum(v.numel() * v.element_size() for v in val)
    return None
