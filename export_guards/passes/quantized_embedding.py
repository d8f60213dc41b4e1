"""Run each embedding of a torchao-quantized table on ExecuTorch's quantized embedding kernel.

``quantize_(model, IntxWeightOnlyConfig(...), filter_fn=<nn.Embedding>)`` leaves an edge program
that reads its table as ``embedding(dequantize_affine(codes, ...), indices)``, and no kernel runs
``torchao::dequantize_affine``: ``to_executorch`` stops ("Missing out variants"). This pass
replaces the two ops with the one ``quantized_decomposed::embedding_byte`` / ``embedding_4bit`` /
``embedding_2bit`` that computes them (``analysis/quantized_embedding.py``): the program stores
the quantized table (4-bit codes packed two a byte), not a float one, and computes what the
quantized model computes in eager. One EG408 per embedding.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import cast

import torch
from executorch.exir.dialects._ops import ops as exir_ops
from executorch.exir.pass_base import ExportedProgramPassBase
from torch.export import ExportedProgram
from torch.export.graph_signature import ExportGraphSignature, InputKind, InputSpec, TensorArgument
from torch.fx import Graph, GraphModule, Node
from torch.fx.node import Argument

from export_guards.analysis.ops import input_node
from export_guards.analysis.quantized_embedding import EmbeddingKernel, QuantizedEmbedding, quantized_embeddings
from export_guards.analysis.source import node_origin, node_site
from export_guards.internals import fake_mode_of, updated_program
from export_guards.passes.result import GuardPassResult
from export_guards.report import Finding, Report
from export_guards.ruleset import CATALOG, Hit, finding

__all__ = ["QuantizedEmbeddingPass"]

# What the kernel's node keeps of the embedding it replaces: the user's line and module, not
# the source partition that a partitioner matches.
_KEPT_META = ("stack_trace", "nn_module_stack", "from_node", "debug_handle")


class QuantizedEmbeddingPass(ExportedProgramPassBase):
    """Rewrite each ``embedding(dequantize_affine(...))`` of constants into ExecuTorch's
    quantized embedding kernel, with one ``EG408`` warning per embedding, naming the kernel,
    the table's bytes and the user's line. A program without one is returned as it is.

    Runs in ``to_edge_transform_and_lower(transform_passes=...)`` on an edge program;
    ``guard_passes()`` and ``lower_with_guards`` include it. The input program is never
    modified.
    """

    changes_input = False
    """The input program is never modified."""

    def call(self, exported_program: ExportedProgram) -> GuardPassResult:
        found = quantized_embeddings(exported_program)
        if not found:
            return GuardPassResult(exported_program, False)
        program = _rewritten(exported_program, found)
        return GuardPassResult(program, True, Report.of([_finding(f) for f in found]))


def _rewritten(ep: ExportedProgram, found: list[QuantizedEmbedding]) -> ExportedProgram:
    """A new program with each of ``found`` on its kernel, the new constants (packed codes, a
    zero point in the kernel's dtype) parameters after the existing ones, and the constants
    nothing reads any more dropped."""
    graph = Graph()
    copies: dict[Node, Node] = {}
    graph.output(graph.graph_copy(ep.graph, copies))
    for node, copy in copies.items():
        copy.name = node.name  # graph_copy renames some placeholders ("input"); the signature names them
    specs = {spec.arg.name: spec for spec in ep.graph_signature.input_specs}
    parameters: dict[str, torch.Tensor] = {}
    taken = set(ep.state_dict) | set(ep.constants)
    add = _adder(graph, specs, parameters, taken)
    for match in found:
        _replace(graph, copies, match, add)
    graph.eliminate_dead_code()  # the dequantizes nothing else reads; placeholders stay
    unread = [
        copies[n] for match in found for n in match.sources
        if n.op == "placeholder" and not copies[n].users and _is_constant(specs[n.name])
    ]  # fmt: skip
    dropped = {specs[n.name].target for n in unread}
    for node in dict.fromkeys(unread):
        graph.erase_node(node)
    module = GraphModule(ep.graph_module, graph)
    module.meta.update(ep.graph_module.meta)
    input_specs = [specs[n.name] for n in graph.nodes if n.op == "placeholder"]
    outputs = cast("list[Node]", graph.output_node().args[0])
    output_specs = [  # an output the embedding was is now the kernel's call
        replace(spec, arg=TensorArgument(outputs[i].name)) if isinstance(spec.arg, TensorArgument) else spec
        for i, spec in enumerate(ep.graph_signature.output_specs)
    ]
    signature = ExportGraphSignature(input_specs, output_specs)
    state_dict = {**{k: v for k, v in ep.state_dict.items() if k not in dropped}, **parameters}
    constants = {k: v for k, v in ep.constants.items() if k not in dropped}
    return updated_program(ep, module, signature, state_dict=state_dict, constants=constants)


def _is_constant(spec: InputSpec) -> bool:
    return spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)


def _adder(
    graph: Graph, specs: dict[str, InputSpec], parameters: dict[str, torch.Tensor], taken: set[str]
) -> Callable[[str, torch.Tensor], Node]:
    """A function that adds a parameter holding a tensor, after the existing parameters (the
    signature orders them first), and returns its placeholder."""
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    after = [n for n in placeholders if specs[n.name].kind == InputKind.PARAMETER]
    fake_mode = fake_mode_of(n.meta.get("val") for n in placeholders)
    names = {n.name for n in graph.nodes}

    def add(fqn: str, value: torch.Tensor) -> Node:
        fqn = _unique(fqn, taken)
        taken.add(fqn)
        anchor = after[-1] if after else placeholders[0] if placeholders else None
        with graph.inserting_after(anchor) if after else graph.inserting_before(anchor):
            node = graph.placeholder(_unique("p_" + fqn.replace(".", "_"), names))
        names.add(node.name)
        after.append(node)
        node.meta["val"] = fake_mode.from_tensor(value, static_shapes=True) if fake_mode else value
        specs[node.name] = InputSpec(InputKind.PARAMETER, TensorArgument(node.name), fqn, None)
        parameters[fqn] = torch.nn.Parameter(value, requires_grad=False)
        return node

    return add


def _replace(
    graph: Graph, copies: dict[Node, Node], match: QuantizedEmbedding, add: Callable[[str, torch.Tensor], Node]
) -> None:
    """Put the kernel's call in place of ``match``'s embedding in the copied graph."""
    kernel, dequantize = match.kernel, match.dequantize
    codes, scale = input_node(dequantize, 0), input_node(dequantize, 2)
    prefix = _table_name(match)
    codes_node = (
        copies[codes] if kernel.bits == 8 else add(f"{prefix}_{kernel.bits}bit", kernel.codes)
    )  # 8 bits: the codes as they are
    same_scale = kernel.scale.shape == match.sources[scale].tensor.shape
    scale_node = copies[scale] if same_scale else add(f"{prefix}_scale", kernel.scale.clone())
    zero_node = add(f"{prefix}_zero_point", kernel.zero_point) if kernel.zero_point is not None else None
    embedding = copies[match.embedding]
    op, kwargs = _op(kernel, match.sources[scale].tensor.dtype)
    args = (codes_node, scale_node, zero_node, kernel.quant_min, kernel.quant_max, embedding.args[1])
    with graph.inserting_before(embedding):
        call = graph.call_function(op, args, kwargs)
    call.meta["val"] = embedding.meta["val"]  # the embedding's own value: same shape and dtype
    call.meta.update({key: embedding.meta[key] for key in _KEPT_META if key in embedding.meta})
    embedding.replace_all_uses_with(call)
    graph.erase_node(embedding)


def _op(kernel: EmbeddingKernel, scale_dtype: torch.dtype) -> tuple[Callable[..., object], dict[str, Argument]]:
    """The kernel's overload: the default one computes in the scale's dtype, ``.dtype`` in another."""
    packet = getattr(exir_ops.edge.quantized_decomposed, kernel.op_name)
    return (packet.default, {}) if kernel.out_dtype == scale_dtype else (packet.dtype, {"dtype": kernel.out_dtype})


def _table_name(match: QuantizedEmbedding) -> str:
    """The table's name in the model: the embedding module's ``weight``, else the codes' name."""
    stack = match.embedding.meta.get("nn_module_stack") or {}
    path = next(reversed(stack.values()))[0] if stack else ""
    return f"{path}.weight" if path else match.sources[match.dequantize.args[0]].fqn  # type: ignore[index]


def _unique(name: str, taken: Iterable[str]) -> str:
    taken = set(taken)
    candidate, index = name, 0
    while candidate in taken:
        index += 1
        candidate = f"{name}_{index}"
    return candidate


def _finding(match: QuantizedEmbedding) -> Finding:
    """The EG408 finding for one embedding: the kernel it now runs on and the table's bytes."""
    kernel = match.kernel
    rows, columns = match.table_shape
    width = "8-bit codes" if kernel.bits == 8 else f"{kernel.bits}-bit codes packed {8 // kernel.bits} a byte"
    granularity = "one scale per row" if match.group == columns else f"a scale per {match.group} columns"
    float_bytes = rows * columns * torch.empty((), dtype=kernel.out_dtype).element_size()
    message = (
        f"ran 'embedding' of a table torchao quantized ({rows}x{columns}, {granularity}) on quantized_decomposed::"
        f"{kernel.op_name}, which reads it as {width} ({kernel.codes.nbytes:,} bytes, not the {float_bytes:,} of a "
        "float table): no ExecuTorch kernel runs the torchao::dequantize_affine a stock lowering leaves before it; "
        "the runtime must link ExecuTorch's quantized kernels"
    )
    hit = Hit(message, match.embedding, subjects=(node_origin(match.embedding),))
    return finding(CATALOG["EG408"], hit, locate=node_site)
