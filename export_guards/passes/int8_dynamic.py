"""Rewrite torchao's int8 x int8 dynamic linear into the form this ExecuTorch computes.

``Int8DynamicActivationInt8WeightConfig`` exports each linear as an ``aten._int_mm`` of the
per-token quantized activation and the int8 weight, scaled back to float: ``to_edge`` rejects
``_int_mm`` (not core ATen), and with it allowed, the activation's torchao ops have no kernel.
The same linear is ``dequantize(quantize(x)) @ dequantize(weight).T + bias`` with the same codes
and scales (the product of the codes times both scales), which is the form torchao's
``Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int8)`` (8da8w) exports: XNNPACK
delegates it as its dynamically quantized linear, and without a delegate ``to_edge`` decomposes
it into core ATen ops that the portable kernels run. The weight stays int8 in the program.
"""

from __future__ import annotations

import torch
from torch.export import ExportedProgram
from torch.fx import Graph, Node

from export_guards.analysis.int8_dynamic import INT_MM, Int8DynamicLinear, int8_dynamic_linears, is_assertion
from export_guards.analysis.ops import input_node
from export_guards.analysis.source import node_origin, node_site
from export_guards.errors import LoweringFailed
from export_guards.internals import fake_mode_of, new_fake_mode, updated_program
from export_guards.passes.known_wrong import copied_module
from export_guards.report import Finding, Report, Severity
from export_guards.ruleset import CATALOG, Hit, finding

__all__ = ["PRE_STEP", "refuse_int8_dynamic_linears", "rewrite_int8_dynamic_linears"]

PRE_STEP = (
    "program, report = export_guards.fold_non_core_constants(program, partitioner=partitioner) before "
    "to_edge_transform_and_lower (partitioner=[] for the portable kernels, and to_executorch(ExecutorchBackendConfig("
    "passes=export_guards.emit_passes())), which computes torchao's dequantize as core ATen ops)"
)
"""The step before ``to_edge`` that rewrites these linears (``lower_with_guards`` runs it)."""

# What a node made by the rewrite keeps of the linear's ``_int_mm``: the user's line and module.
_KEPT_META = ("stack_trace", "nn_module_stack", "torch_fn", "from_node")
_INNER = torch.ops.export.access_subclass_inner_tensor.default


def rewrite_int8_dynamic_linears(program: ExportedProgram) -> tuple[ExportedProgram, Report]:
    """``program`` (a torch.export program, before ``to_edge``) with each linear that torchao's
    ``Int8DynamicActivationInt8WeightConfig`` quantized computed as
    ``linear(dequantize_affine(quantize_affine(x)), dequantize_affine(weight codes), bias)``,
    on the same quantized activation and the same int8 weight, with one ``EG407`` finding per
    linear on the user's line; ``program`` itself, with an empty report, when it has none.
    ``program`` is never modified. For the portable kernels, decompose torchao's quantize ops
    after it (:func:`~export_guards.passes.quantized_ops.decompose_torchao_quantize_ops`).
    """
    found = int8_dynamic_linears(program)
    if not found:
        return program, Report()
    module, copies = copied_module(program.graph_module)
    for linear in found:
        _rewrite(linear, copies)
    module.graph.lint()
    module.recompile()
    rewritten = updated_program(program, module, program.graph_signature)
    return rewritten, Report.of(_finding(linear) for linear in found)


def refuse_int8_dynamic_linears(program: ExportedProgram) -> None:
    """Raise :class:`~export_guards.LoweringFailed` if ``program`` reaches ``to_edge`` with a
    linear that the pre-``to_edge`` step would have rewritten (``to_edge`` rejects its
    ``_int_mm``): the error names that step, on the user's line."""
    found = int8_dynamic_linears(program)
    if found:
        findings = [_finding(linear, rewritten=False) for linear in found]
        more = f" (and {len(findings) - 1} more)" if len(findings) > 1 else ""
        raise LoweringFailed(f"{findings[0].message}{more}", Report.of(findings), findings[0].location, PRE_STEP)


def _rewrite(found: Int8DynamicLinear, copies: dict[Node, Node]) -> None:
    """Replace, in the copied graph, the nodes that compute ``found`` by its 8da8w form."""
    quantized, codes, scale, weight = (copies[n] for n in (found.quantized, found.codes, found.scale, found.weight))
    result, matmul = copies[found.result], copies[found.matmul]
    graph = result.graph
    _, block, x_scale, x_zero, dtype, low, high = (*quantized.args, *(None,) * 7)[:7]
    out_dtype = input_node(quantized, 0).meta["val"].dtype
    with graph.inserting_before(result):
        activation = _call(
            graph,
            torch.ops.torchao.dequantize_affine.default,
            (quantized, block, x_scale, x_zero, dtype, low, high),
            matmul,
            output_dtype=out_dtype,
        )
        zero = _call(graph, _INNER, (weight, "zero_point"), matmul) if _has_zero_point(weight) else None
        info = torch.iinfo(torch.int8)
        weight_block = _weight_block(weight, codes)
        dequantized = _call(
            graph,
            torch.ops.torchao.dequantize_affine.default,
            (codes, weight_block, scale, zero, torch.int8, info.min, info.max),
            matmul,
            output_dtype=out_dtype,
        )
        bias = copies[found.bias] if found.bias is not None else None
        linear = _call(graph, torch.ops.aten.linear.default, (activation, dequantized, bias), matmul)
    name = result.name
    result.replace_all_uses_with(linear)
    _erase_replaced(graph, {copies[n] for n in found.computed}, keep={quantized, codes, scale, weight, x_scale, x_zero})
    linear.name = name  # the output's name, which the signature may read


def _erase_replaced(graph: Graph, computed: set[Node], keep: set[object]) -> None:
    """Erase the nodes that computed the product, and what only they read back to ``keep``,
    with the metadata assertions on them: each once no node reads it."""
    replaced: set[Node] = set()
    stack = list(computed)
    while stack:
        node = stack.pop()
        if node not in replaced and node not in keep and node.op == "call_function":
            replaced.add(node)
            stack.extend(node.all_input_nodes)
    for node in reversed(list(graph.nodes)):
        if not node.users and (node in replaced or (is_assertion(node) and node.args[0] in replaced)):
            graph.erase_node(node)


def _weight_block(weight: Node, codes: Node) -> list[int]:
    """The block each of the weight's scales applies to: the quantized weight's own
    (``block_size``: a row per output feature for per-channel scales), else a row."""
    block = getattr(weight.meta["val"], "block_size", None)
    return (
        [int(size) for size in block] if block is not None and len(block) == 2 else [1, int(codes.meta["val"].shape[1])]
    )


def _has_zero_point(weight: Node) -> bool:
    """Whether the quantized weight holds a zero point (torchao's ``Int8Tensor`` does, zeros)."""
    value = weight.meta["val"]
    names, _ = value.__tensor_flatten__()
    return "zero_point" in names and getattr(value, "zero_point", None) is not None


def _call(graph: Graph, op: object, args: tuple[object, ...], like: Node, **kwargs: object) -> Node:
    """A new call of ``op``, its value computed on fake tensors, with ``like``'s user line and
    module."""
    node = graph.call_function(op, args, kwargs)  # type: ignore[arg-type]
    values = [a.meta["val"] if isinstance(a, Node) else a for a in args]
    with fake_mode_of(v for v in values if isinstance(v, torch.Tensor)) or new_fake_mode():
        node.meta["val"] = op(*values, **kwargs)  # type: ignore[operator]
    node.meta.update({key: like.meta[key] for key in _KEPT_META if key in like.meta})
    return node


def _finding(found: Int8DynamicLinear, *, rewritten: bool = True) -> Finding:
    """The EG407 finding for one linear: rewritten (info), or reaching ``to_edge`` as it is, where
    no step rewrote it (an error, whose fix is that step)."""
    out_features, in_features = found.codes.meta["val"].shape
    linear = f"int8 x int8 dynamically quantized linear ({in_features} -> {out_features}, torchao's Int8DynamicActivationInt8WeightConfig)"
    if rewritten:
        message = (
            f"rewrote the {linear}, whose '{INT_MM}' to_edge rejects, into the form this ExecuTorch computes: "
            "linear(dequantize_affine(quantize_affine(x)), dequantize_affine(int8 weight), bias), as 8da8w exports it "
            "(XNNPACK delegates it; the portable kernels run its core ATen ops); the weight stays int8"
        )
        hit = Hit(message, found.matmul, subjects=(node_origin(found.matmul),))
    else:
        message = (
            f"the {linear} reaches to_edge as '{INT_MM}', which to_edge rejects (not core ATen): no step rewrote it"
        )
        hit = Hit(
            message,
            found.matmul,
            fix=f"Rewrite it first: {PRE_STEP}",
            severity=Severity.ERROR,
            subjects=(node_origin(found.matmul),),
        )
    return finding(CATALOG["EG407"], hit, locate=node_site)
