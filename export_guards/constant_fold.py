"""Fold every computation that depends only on constants into one static constant.

A weight computed at run time (spectral norm's ``weight / sigma``, weight norm's ``g * v/|v|``,
any ``w * scale.exp()``) is a graph computation whose inputs are all parameters, buffers or
lifted constants. XNNPACK will not delegate a conv or linear whose weight is not a static
parameter, so this pass evaluates each such subgraph once, at export time, and replaces it with
its result: a parameter named after the weight it feeds.
"""

from __future__ import annotations

import operator
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import torch
from executorch.exir.pass_base import ExportedProgramPassBase, ExportedProgramPassResult
from torch._guards import detect_fake_mode
from torch.export import ExportedProgram
from torch.export.experimental import _copy_graph_module_and_signature
from torch.export.graph_signature import ExportGraphSignature, InputKind, InputSpec, TensorArgument
from torch.fx import Node
from torch.fx.passes.utils.source_matcher_utils import get_source_partitions

from export_guards.ops import aten_name, aten_overload
from export_guards.programs import iter_constants, mutated_constants
from export_guards.report import Finding, Report, Severity
from export_guards.source import node_location

__all__ = ["CONSTANT_FOLDED", "FoldConstantsPass", "fold_constants"]

CONSTANT_FOLDED = "EG201"
"""Rule code (info): a computation on constants was folded into one static constant."""

# Quantize / dequantize must stay in the graph: delegates match them as patterns.
_KEEP_NAMESPACES = frozenset({"quantized_decomposed", "torchao", "quantized", "quant"})
_SMALL_BYTES = 4096
_MATMULS = frozenset({"mm", "addmm", "bmm", "matmul", "linear"})
# How reparametrizations name their state: the tensor they compute is the name without it.
_REPARAMETRIZED = (
    (re.compile(r"\.parametrizations\.(\w+)\.original\d*$"), r".\1"),  # torch.nn.utils.parametrize
    (re.compile(r"_(orig|g|v)$"), ""),  # hook-based spectral_norm (_orig) and weight_norm (_g, _v)
)


def fold_constants(
    program: ExportedProgram, *, max_growth: float = 2.0
) -> tuple[ExportedProgram, Report]:
    """Fold ``program``'s constant-only computations; return the new program and the report.

    See :class:`FoldConstantsPass`. ``program`` itself is never modified.
    """
    fold = FoldConstantsPass(max_growth=max_growth)
    return fold(program).exported_program, fold.report


class FoldConstantsPass(ExportedProgramPassBase):
    """Evaluate every subgraph whose inputs are all constants and replace it by its result.

    Constants are parameters, buffers that the program never mutates, and lifted tensor
    constants. A node is folded when all of its inputs are constants or folded nodes and its
    op is a pure ATen / edge op: no mutation, no random op (``nondeterministic_seeded``), no
    quantize / dequantize, no delegate call, no control flow. Anything a user input or a
    mutated buffer reaches stays in the graph.

    Each result that the rest of the graph reads becomes a parameter named after the weight it
    feeds (``decoder.0.weight``: the consuming module and argument), identical results are
    stored once, and constants left unused (``weight_orig``, ``weight_u``, ``weight_v``,
    ``parametrizations.*.original*``) leave the program. The report holds one ``EG201`` info
    finding per folded constant: its name, the ops folded, and the bytes before and after.

    Works on an ATen-dialect ``ExportedProgram`` before lowering and in
    ``to_edge_transform_and_lower(..., transform_passes=[...])``. The input program is never
    modified; a new one is returned when something was folded.

    Args:
        max_growth: fold an op only if its result is at most this many times the bytes of its
            tensor inputs (or at most 4 KiB), so that ``expand`` / ``repeat`` / ``full`` do not
            bloat the ``.pte``.
    """

    def __init__(self, *, max_growth: float = 2.0) -> None:
        if not max_growth > 0:
            raise ValueError(f"max_growth must be a positive number of times, not {max_growth!r}")
        self.max_growth = max_growth
        self.report = Report()

    def call(self, exported_program: ExportedProgram) -> ExportedProgramPassResult:
        constants = _foldable_constants(exported_program)
        plan = _plan(exported_program.graph, constants, self.max_growth)
        if not plan.roots:
            self.report = Report()
            return ExportedProgramPassResult(exported_program, False)
        folded, findings = _apply(exported_program, constants, plan)
        self.report = Report.of(findings)
        return ExportedProgramPassResult(folded, True)


@dataclass(frozen=True)
class _Plan:
    foldable: frozenset[Node]
    roots: tuple[Node, ...]  # foldable nodes read by the rest of the graph, in graph order


def _foldable_constants(ep: ExportedProgram) -> dict[Node, torch.Tensor]:
    """Placeholder -> tensor for every constant a fold may read: not the mutated ones."""
    mutated = mutated_constants(ep)
    return {
        c.node: c.tensor
        for c in iter_constants(None, ep)
        if c.node.op == "placeholder" and c.fqn not in mutated
    }


def _plan(graph: torch.fx.Graph, constants: Mapping[Node, torch.Tensor], max_growth: float) -> _Plan:
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
            return _Plan(frozenset(foldable), tuple(read_outside))
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
        and _is_view(node.target)
        and any(u in linear_patterns and aten_name(u.target) in _MATMULS for u in node.users)
    )


def _is_view(target: object) -> bool:
    op = aten_overload(target)
    if op is None:
        return False
    return torch.Tag.view_copy in op.tags or any(r.alias_info is not None for r in op._schema.returns)


def _foldable_nodes(
    graph: torch.fx.Graph,
    constants: Mapping[Node, torch.Tensor],
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
    if op.namespace in _KEEP_NAMESPACES or torch.Tag.nondeterministic_seeded in op.tags:
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


def _evaluate(plan: _Plan, constants: Mapping[Node, torch.Tensor]) -> dict[Node, torch.Tensor]:
    """The value of every root, computing each foldable node once and dropping
    intermediate values as soon as their last foldable user has run."""
    needed: set[Node] = set()
    assertions = [n for n in plan.foldable if not n.users and n.target is not operator.getitem]
    stack = [*plan.roots, *assertions]
    while stack:
        node = stack.pop()
        if node in needed or node in constants:
            continue
        needed.add(node)
        stack.extend(node.all_input_nodes)
    pending = Counter(i for n in needed for i in n.all_input_nodes if i in needed)
    roots = set(plan.roots)
    values: dict[Node, object] = {}
    results: dict[Node, torch.Tensor] = {}
    order = [n for n in next(iter(plan.roots)).graph.nodes if n in needed]
    with torch.no_grad():
        for node in order:
            args, kwargs = torch.fx.node.map_arg(
                (node.args, node.kwargs), lambda n: constants[n] if n in constants else values[n]
            )
            values[node] = node.target(*args, **kwargs)
            if node in roots:
                results[node] = values[node]
            for i in node.all_input_nodes:
                if i in pending:
                    pending[i] -= 1
                    if pending[i] == 0 and i not in roots:
                        del values[i]
    return results


def _apply(
    ep: ExportedProgram, constants: Mapping[Node, torch.Tensor], plan: _Plan
) -> tuple[ExportedProgram, list[Finding]]:
    """A new program with each root replaced by a parameter holding its value."""
    values = _evaluate(plan, constants)
    graph_module, signature = _copy_graph_module_and_signature(ep)
    copy_of = dict(zip(ep.graph.nodes, graph_module.graph.nodes))
    graph = graph_module.graph
    state_dict, lifted = dict(ep.state_dict), dict(ep.constants)
    fqn_of = {c.node: c.fqn for c in iter_constants(None, ep) if c.node.op == "placeholder"}
    specs = {spec.arg.name: spec for spec in signature.input_specs}
    fake_mode = detect_fake_mode([n.meta.get("val") for n in ep.graph.nodes if n.op == "placeholder"])
    anchor = next(n for n in graph.nodes if n.op != "placeholder" or specs[n.name].kind != InputKind.PARAMETER)
    taken = set(state_dict) | set(lifted)
    stored: list[tuple[torch.Tensor, Node, str]] = []  # (value, placeholder, fqn), for de-duplication
    findings = []

    for root in plan.roots:
        value = _materialize(values[root], constants.values())
        sources, ops = _subgraph(root, plan.foldable, constants)
        consumer = next(u for u in root.users if u not in plan.foldable)
        same = next((entry for entry in stored if _same_bytes(entry[0], value)), None)
        if same is None:
            source_bytes = {fqn_of[s]: constants[s].nbytes for s in sources}
            fqn = _unique(_constant_name(root, plan.foldable, source_bytes), taken)
            taken.add(fqn)
            with graph.inserting_before(anchor):
                placeholder = graph.placeholder("p_" + fqn.replace(".", "_"))
            # Only "val", as torch.export gives parameters: the root's own metadata
            # (source_fn_stack...) would pull the placeholder into partitioners' patterns.
            placeholder.meta["val"] = fake_mode.from_tensor(value, static_shapes=True) if fake_mode else value
            state_dict[fqn] = torch.nn.Parameter(value, requires_grad=False)
            specs[placeholder.name] = InputSpec(InputKind.PARAMETER, TensorArgument(placeholder.name), fqn, None)
            stored.append((value, placeholder, fqn))
            outcome = f"into parameter '{fqn}'"
        else:
            _, placeholder, fqn = same
            outcome = f"into parameter '{fqn}' (an identical result, stored once)"
        copy_of[root].replace_all_uses_with(placeholder)
        before = sum(constants[s].nbytes for s in sources)
        findings.append(
            Finding(
                code=CONSTANT_FOLDED,
                severity=Severity.INFO,
                message=(
                    f"folded {len(ops)} op{'s' if len(ops) != 1 else ''} ({_summary(ops)}) on "
                    f"{', '.join(repr(fqn_of[s]) for s in sources)} {outcome}: "
                    f"{before:,} -> {value.nbytes:,} bytes"
                ),
                node=consumer.name,
                constant=fqn,
                location=node_location(consumer) or node_location(root),
            )
        )

    folded_copies = {copy_of[n] for n in plan.foldable}
    for node in reversed(graph.nodes):
        if node in folded_copies and not node.users:
            graph.erase_node(node)
    for original in constants:
        node = copy_of[original]
        if original.users and not node.users:  # left unused by the fold
            graph.erase_node(node)
            state_dict.pop(fqn_of[original], None)
            lifted.pop(fqn_of[original], None)
    new_signature = ExportGraphSignature(
        input_specs=[specs[n.name] for n in graph.nodes if n.op == "placeholder"],
        output_specs=signature.output_specs,
    )
    graph_module.recompile()
    return ep._update(graph_module, new_signature, state_dict=state_dict, constants=lifted), findings


def _materialize(value: torch.Tensor, constants: Iterable[torch.Tensor]) -> torch.Tensor:
    """``value`` as a dense tensor of its own: a view of a constant (``reshape`` of a weight)
    or a broadcast with zero strides is copied, since ExecuTorch stores dense constants and
    the caller's tensors must not be shared with the new program."""
    value = value.detach()
    shared = {c.untyped_storage().data_ptr() for c in constants if c.numel()}
    if value.is_contiguous() and 0 not in value.stride() and value.untyped_storage().data_ptr() not in shared:
        return value
    return value.clone(memory_format=torch.contiguous_format)


def _same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))
    )


def _subgraph(
    root: Node, foldable: frozenset[Node], constants: Mapping[Node, torch.Tensor]
) -> tuple[list[Node], list[Node]]:
    """The constants that ``root`` is computed from, and the folded ops, in graph order."""
    seen: set[Node] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            stack.extend(i for i in node.all_input_nodes if i in foldable or i in constants)
    ordered = [n for n in root.graph.nodes if n in seen]
    return [n for n in ordered if n in constants], [n for n in ordered if n in foldable]


def _summary(ops: list[Node]) -> str:
    return ", ".join(dict.fromkeys(aten_name(n.target) or "getitem" for n in ops))


def _constant_name(root: Node, readers: frozenset[Node], sources: dict[str, int]) -> str:
    """A meaningful name for the folded ``root``.

    1. The weight or bias it feeds, when a module's op reads it as ``weight`` / ``bias``
       (looking through views): ``decoder.0.weight``.
    2. Else the tensor that the largest constant it comes from reparametrizes:
       ``a.parametrizations.weight.original`` and ``a.weight_orig`` give ``a.weight``.
    3. Else that constant's name suffixed ``_folded``.

    ``sources`` maps the FQNs of the constants it is computed from to their bytes.
    """
    value, reader = root, next(u for u in root.users if u not in readers)
    while _is_view(reader.target) and len(reader.users) == 1:
        value, reader = reader, next(iter(reader.users))
    argument = _argument_name(reader, value)
    stack = reader.meta.get("nn_module_stack") or {}
    path = next(reversed(stack.values()))[0] if stack else ""
    if argument in ("weight", "bias") and path:
        return f"{path}.{argument}"
    largest = max(sources, key=sources.__getitem__)
    for pattern, replacement in _REPARAMETRIZED:
        renamed = pattern.sub(replacement, largest)
        if renamed != largest:
            return renamed
    return f"{largest}_folded"


def _argument_name(consumer: Node, value: Node) -> str | None:
    op = aten_overload(consumer.target)
    if op is None:
        return None
    schema = op._schema
    for index, arg in enumerate(consumer.args):
        if arg is value and index < len(schema.arguments):
            return schema.arguments[index].name
    return next((name for name, arg in consumer.kwargs.items() if arg is value), None)


def _unique(name: str, taken: set[str]) -> str:
    candidate, index = name, 0
    while candidate in taken:
        index += 1
        candidate = f"{name}_{index}"
    return candidate
