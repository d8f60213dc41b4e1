"""Keep what a delegate is known to compute wrong away from it, so the program computes it right.

``analysis.known_wrong`` finds each pattern; this pass rewrites the graph so that the delegate's
partitioner no longer takes it and the runtime's own kernels, which compute it right, run it.
For XNNPACK's decomposed linear whose weight is dequantized in the graph (weight-only
quantization), the dequantization leaves the linear's source partition, which is what XNNPACK
matches: the partitioner then sees a weight that is computed, not static, and leaves the linear
to the portable kernels. torchao's ``dequantize_affine``, which has no portable kernel, becomes
the core ATen ops it is defined by, and the linear's ``addmm`` a ``mm`` and an ``add`` (the
runtime's ``mm`` kernel is many times faster than its ``addmm`` on a matrix of tokens:
``benchmarks/weight_only_speed.py``). The weight stays quantized in the program.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch
from executorch.exir.backend.partitioner import PartitionResult
from executorch.exir.dialects._ops import ops as exir_ops
from executorch.exir.pass_base import ExportedProgramPassBase
from torch.export import ExportedProgram
from torch.fx import Graph, GraphModule, Node

from export_guards.analysis.known_wrong import LINEAR_SOURCES, WrongDelegation, known_wrong_in
from export_guards.analysis.known_wrong_entries import release_text
from export_guards.analysis.ops import aten_name, input_node
from export_guards.analysis.source import node_origin, node_site
from export_guards.errors import KnownWrongDelegationError
from export_guards.internals import fake_mode_of, new_fake_mode, updated_program
from export_guards.passes.result import GuardPassResult
from export_guards.report import Finding, Report, Severity
from export_guards.ruleset import CATALOG, Hit, finding

__all__ = ["KnownWrongDelegationPass", "copied_module", "decompose_dequantize", "refuse_known_wrong"]

# What a node made by the rewrite keeps of the node it replaces: the user's line and module,
# not the source partition that a partitioner matches.
_KEPT_META = ("stack_trace", "nn_module_stack", "from_node", "debug_handle")

_GUARD_FIX = (
    "Run the guard passes before the partitioners, which keep it off: "
    "to_edge_transform_and_lower(ep, transform_passes=guard_passes(partitioner=partitioner), partitioner=partitioner)"
)
"""What fixes an op taken where no guard pass ran: the finding's fix and the error's message."""


class KnownWrongDelegationPass(ExportedProgramPassBase):
    """Rewrite each pattern that a delegate of this ExecuTorch computes wrong
    (:data:`export_guards.analysis.known_wrong.KNOWN_WRONG`) so that the runtime's kernels run it,
    with one ``EG405`` warning per op kept off, naming the op, the user's line and the upstream
    report. A program without such a pattern is returned as it is.

    Runs in ``to_edge_transform_and_lower(transform_passes=...)``, before the partitioners, on an
    edge program; ``guard_passes()`` includes it. The input program is never modified.

    Args:
        backend_ids: the delegates of this lowering (``("XnnpackBackend",)``); ``None``, when
            the partitioners are not known, applies the patterns of every delegate.
    """

    changes_input = False
    """The input program is never modified."""

    def __init__(self, backend_ids: Sequence[str] | None = None) -> None:
        self.backend_ids = tuple(backend_ids) if backend_ids is not None else None

    def call(self, exported_program: ExportedProgram) -> GuardPassResult:
        matches = known_wrong_in(exported_program, self.backend_ids)
        if not matches:
            return GuardPassResult(exported_program, False)
        module, copied = copied_module(exported_program.graph_module)
        for original in dict.fromkeys(step for match in matches for step in match.path):
            _detach(copied[original])
        for original in dict.fromkeys(match.node for match in matches):
            if aten_name(original.target) == "addmm":
                _split_addmm(copied[original])
        report = Report.of([_finding(match, kept=True) for match in matches])
        return GuardPassResult(
            updated_program(exported_program, module, exported_program.graph_signature), True, report
        )


def copied_module(module: GraphModule) -> tuple[GraphModule, dict[Node, Node]]:
    """A copy of ``module``'s graph (each node's metadata a copy of its own), and each original
    node's copy."""
    graph = Graph()
    copies: dict[Node, Node] = {}
    output = graph.graph_copy(module.graph, copies)
    graph.output(output)
    for node, copy in copies.items():
        copy.name = node.name  # graph_copy renames some placeholders ("input"); the signature names them
    return GraphModule(module, graph), copies


def _detach(node: Node) -> None:
    """Take ``node`` out of its linear's source partition; a ``dequantize_affine`` becomes the
    core ATen ops that compute it."""
    _leave_linear(node)
    if aten_name(node.target) == "dequantize_affine":
        decompose_dequantize(node)


def _leave_linear(node: Node) -> None:
    """Take ``node`` out of its linear's source partition (torch's ``get_source_partitions``
    reads ``source_fn_stack``, else the innermost ``nn_module_stack`` entry's module)."""
    sources = [entry for entry in node.meta.get("source_fn_stack") or () if not _is_linear(entry[1])]
    node.meta.pop("source_fn_stack", None)
    if sources:
        node.meta["source_fn_stack"] = sources
    modules = dict(node.meta.get("nn_module_stack") or {})
    while modules and _is_linear(next(reversed(modules.values()))[1]):
        modules.popitem()
    node.meta["nn_module_stack"] = modules


def _split_addmm(node: Node) -> None:
    """``addmm(bias, x, weight)`` as ``mm(x, weight) + bias``, outside the linear's partition:
    the portable kernels' ``mm`` is a fast one, their ``addmm`` a plain loop."""
    bias, mat1, mat2 = node.args[:3]
    if node.kwargs.get("beta", 1) != 1 or node.kwargs.get("alpha", 1) != 1:
        return  # not a linear's: leave it as written
    graph = node.graph
    with graph.inserting_before(node):
        product = _call(graph, exir_ops.edge.aten.mm.default, (mat1, mat2), node)
        total = _call(graph, exir_ops.edge.aten.add.Tensor, (product, bias), node)
    for made in (product, total):
        _leave_linear(made)
    node.replace_all_uses_with(total)
    graph.erase_node(node)
    total.name = node.name  # the graph signature names it where it is an output


def _is_linear(source: object) -> bool:
    """Whether a source (a module class, its dotted name, or a function) is a linear."""
    if isinstance(source, str):
        return source in {f"{s.__module__}.{getattr(s, '__qualname__', '')}" for s in LINEAR_SOURCES}
    return source in LINEAR_SOURCES or (isinstance(source, type) and issubclass(source, torch.nn.Linear))


def decompose_dequantize(node: Node) -> None:
    """``torchao.dequantize_affine`` as torchao defines it: ``(q - zero_point) * scale`` per
    block, in the output dtype."""
    quantized, block_size, scale, zero_point, *_ = node.args
    out_dtype = cast(
        torch.dtype, node.kwargs.get("output_dtype", node.args[7] if len(node.args) > 7 else torch.float32)
    )
    shape = list(input_node(node, 0).meta["val"].shape)
    blocked, per_block = _block_shapes(cast("Sequence[int]", block_size), shape)
    graph = node.graph
    view, sub, mul = (
        exir_ops.edge.aten.view_copy.default,
        exir_ops.edge.aten.sub.Tensor,
        exir_ops.edge.aten.mul.Tensor,
    )
    with graph.inserting_before(node):
        value = _to(graph, _call(graph, view, (quantized, blocked), node), out_dtype, node)
        if zero_point is not None:
            zero = _to(graph, _call(graph, view, (zero_point, per_block), node), out_dtype, node)
            value = _call(graph, sub, (value, zero), node)
        value = _call(graph, mul, (value, _call(graph, view, (scale, per_block), node)), node)
        value = _to(graph, _call(graph, view, (value, shape), node), out_dtype, node)
    node.replace_all_uses_with(value)
    graph.erase_node(node)


def _block_shapes(block_size: Sequence[int], shape: Sequence[int]) -> tuple[list[int], list[int]]:
    """The quantized tensor's shape with each block in a dimension of its own, and the shape
    of its scale and zero point against it (torchao's ``_get_reduction_params``)."""
    blocked, per_block = [], []
    for size, block in zip(shape, block_size, strict=True):
        if 1 < block != size:
            blocked += [size // block, block]
            per_block += [size // block, 1]
        else:
            blocked.append(size)
            per_block.append(1 if block != 1 else size)
    return blocked, per_block


def _to(graph: Graph, value: Node, dtype: torch.dtype, like: Node) -> Node:
    """``value`` in ``dtype`` (itself if it is already), as the edge dialect converts."""
    if value.meta["val"].dtype == dtype:
        return value
    order = list(range(value.meta["val"].dim()))
    return _call(
        graph, exir_ops.edge.dim_order_ops._to_dim_order_copy.default, (value,), like, dtype=dtype, dim_order=order
    )


def _call(graph: Graph, op: object, args: tuple[object, ...], like: Node, **kwargs: object) -> Node:
    """A new call of ``op`` before ``like``, its value computed on fake tensors, with ``like``'s
    user line and module."""
    node = graph.call_function(op, args, kwargs)  # type: ignore[arg-type]
    values = [a.meta["val"] if isinstance(a, Node) else a for a in args]
    with fake_mode_of(values) or new_fake_mode():
        node.meta["val"] = op(*values, **kwargs)  # type: ignore[operator]
    node.meta.update({key: like.meta[key] for key in _KEPT_META if key in like.meta})
    return node


def refuse_known_wrong(result: PartitionResult) -> None:
    """Raise :class:`~export_guards.errors.KnownWrongDelegationError` if a partitioner tagged an op
    into a delegate that computes it wrong (no guard pass kept it off before partitioning)."""
    backend_of = {tag: spec.backend_id for tag, spec in result.partition_tags.items()}
    taken = [
        match
        for match in known_wrong_in(result.tagged_exported_program, tuple(set(backend_of.values())))
        if backend_of.get(match.node.meta.get("delegation_tag", "")) in match.entry.backend_ids
    ]
    if taken:
        findings = [_finding(match, kept=False) for match in taken]
        more = f" (and {len(findings) - 1} more)" if len(findings) > 1 else ""
        raise KnownWrongDelegationError(f"{findings[0].message}{more}. {_GUARD_FIX}", Report.of(findings))


def _finding(match: WrongDelegation, *, kept: bool) -> Finding:
    """The EG405 finding for one op: kept off its delegate (a warning), or taken by it when no
    guard pass ran (an error, whose fix is the guard pass)."""
    entry = match.entry
    release = release_text()
    backends = ", ".join(b.removesuffix("Backend") for b in entry.backend_ids)
    op = aten_name(match.node.target)
    wrong = f"{backends} in executorch {release} computes it wrong: {entry.summary} ({entry.report})"
    if kept:
        slower = f" ({entry.slower})" if entry.slower else ""
        message = f"kept '{op}' off {backends}, which the portable kernels run right, more slowly{slower}; {wrong}"
        hit = Hit(message, match.node, subjects=(node_origin(match.node),))
    else:
        message = f"the partitioner gave '{op}' to {backends}; {wrong}"
        hit = Hit(message, match.node, fix=_GUARD_FIX, severity=Severity.ERROR, subjects=(node_origin(match.node),))
    return finding(CATALOG["EG405"], hit, locate=node_site)
