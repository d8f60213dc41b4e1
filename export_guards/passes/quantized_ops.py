"""Quantize and dequantize ops that no delegate takes: give them kernels, or say how to.

A quantized program leaves some of its quantize ops to the runtime's own kernels: all of them on
the portable kernels, and on XNNPACK what its partitioner does not match. Two families reach
``to_executorch`` there:

- ExecuTorch's ``quantized_decomposed`` ops (PT2E's, a dynamically quantized linear's
  ``choose_qparams``): their out variants and kernels are ExecuTorch's quantized kernel library,
  which ``to_executorch`` needs registered ("Missing out variants" otherwise) and which
  ``executorch.kernels.quantized`` registers, as ExecuTorch's own LLM exporter does.
- torchao's ``choose_qparams_affine`` / ``quantize_affine`` / ``dequantize_affine``: no kernel
  exists for them. torchao defines each by core ATen math. A ``dequantize_affine`` that reaches
  ``to_executorch`` becomes that math there, in any path (an embedding's table goes to
  ExecuTorch's quantized embedding kernel before, EG408). ``choose_qparams_affine`` and
  ``quantize_affine`` (a dynamically quantized activation) must be decomposed before ``to_edge``
  for the portable kernels, by torchao's own definitions: the pass list's pre-``to_edge`` step
  does it (``fold_non_core_constants(program, partitioner=[])``), and ``to_executorch`` stops,
  naming that step, where it was not taken. Either way the program computes what the quantized
  model computes in eager.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch.export import ExportedProgram
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from export_guards.analysis.ops import aten_name, aten_overload, value_dtype
from export_guards.analysis.source import node_location
from export_guards.errors import LoweringFailed
from export_guards.passes.int8_dynamic import PRE_STEP
from export_guards.passes.known_wrong import decompose_dequantize
from export_guards.report import Report, SourceLocation
from export_guards.targets import QUANTIZATION_THAT_WORKS

__all__ = ["QuantizedKernelsPass", "decompose_torchao_quantize_ops", "float8_refusal", "torchao_quantize_ops"]

_TORCHAO_QUANTIZE_OPS = ("choose_qparams_affine", "quantize_affine", "dequantize_affine")
"""torchao's quantize ops that ExecuTorch has no kernel for, by name."""


def float8_refusal(program: ExportedProgram) -> tuple[str, SourceLocation | None, str] | None:
    """Why ``program`` cannot be lowered, where and what works, if it holds float8 values
    (torchao's float8 configurations): no ExecuTorch kernel nor delegate takes float8, and
    ``to_edge`` would stop on "mismatched dtypes" without saying so. ``None`` otherwise."""
    float8 = next((node for node in program.graph.nodes if value_dtype(node) in _FLOAT8), None)
    if float8 is None:
        return None
    message = (
        f"'{float8.name}' is {value_dtype(float8)} (a float8 quantization: torchao's Float8WeightOnlyConfig, "
        f"Float8DynamicActivationFloat8WeightConfig), and neither ExecuTorch's kernels nor its delegates compute float8"
    )
    return message, node_location(float8), f"quantize with {QUANTIZATION_THAT_WORKS}"


_FLOAT8 = {getattr(torch, name) for name in dir(torch) if name.startswith("float8_")}


def torchao_quantize_ops(nodes: Iterable[Node]) -> list[Node]:
    """The calls of torchao's quantize ops among ``nodes`` (aten or edge dialect)."""
    return [node for node in nodes if _namespace(node) == "torchao" and aten_name(node.target) in _TORCHAO_QUANTIZE_OPS]


def _namespace(node: Node) -> str | None:
    """The namespace of the op ``node`` calls (``"quantized_decomposed"``), if it calls one."""
    op = aten_overload(node.target) if node.op == "call_function" else None
    return op.namespace if op is not None else None


def decompose_torchao_quantize_ops(program: ExportedProgram) -> ExportedProgram:
    """``program`` with torchao's ``choose_qparams_affine`` and ``quantize_affine`` decomposed
    into core ATen by torchao's own definitions (``program`` itself when it calls neither): for a
    lowering that leaves them to the portable kernels, which have neither. Apply it before
    ``to_edge``; a delegate that matches them (XNNPACK's quantized linears) must see them whole,
    so only where none takes them. ``dequantize_affine`` is left for later: an embedding's goes to
    its kernel (EG408), any other becomes core ATen at emission (:class:`QuantizedKernelsPass`)."""
    found = {
        node.target for node in torchao_quantize_ops(program.graph.nodes) if aten_name(node.target) in _BEFORE_TO_EDGE
    }
    if not found:
        return program
    from torch._inductor.decomposition import decompositions  # torchao registers its definitions here

    return program.run_decompositions({op: decompositions[op] for op in found if op in decompositions})


_BEFORE_TO_EDGE = ("choose_qparams_affine", "quantize_affine")
"""torchao's quantize ops that only a decomposition before ``to_edge`` can make core ATen."""


class QuantizedKernelsPass(PassBase):
    """In ``to_executorch``, before its out-variant pass, for the quantize ops left outside the
    delegates: registers ExecuTorch's quantized kernels where the program calls a
    ``quantized_decomposed`` op (as ``import executorch.kernels.quantized`` does); computes each
    torchao ``dequantize_affine`` as the core ATen ops torchao defines it by; and stops, naming
    the step that works, on torchao's ``choose_qparams_affine`` or ``quantize_affine``, which
    only a decomposition before ``to_edge`` makes core ATen. A program without any is left as
    it is. One of :func:`~export_guards.emit_passes`."""

    def call(self, graph_module: GraphModule) -> PassResult:
        modules = [module for module in graph_module.modules() if isinstance(module, GraphModule)]
        nodes = [node for module in modules for node in module.graph.nodes]
        if any(_namespace(node) == "quantized_decomposed" for node in nodes):
            import executorch.kernels.quantized  # noqa: F401 - registers the kernels and their out variants
        found = torchao_quantize_ops(nodes)
        left = [node for node in found if aten_name(node.target) in _BEFORE_TO_EDGE]
        if left:
            raise _no_kernel_error(left)
        for node in found:
            decompose_dequantize(node)
        for module in modules if found else ():
            module.recompile()
        return PassResult(graph_module, bool(found))


def _no_kernel_error(left: list[Node]) -> LoweringFailed:
    """The error for torchao quantize ops that reach ``to_executorch`` outside any delegate."""
    names = ", ".join(sorted({f"torchao::{aten_name(node.target)}" for node in left}))
    site = node_location(left[0])
    where = f" (the first made at {site})" if site is not None else ""
    hint = (
        "lower with a partitioner that takes the quantized ops (XnnpackPartitioner() takes torchao's "
        "dynamically quantized linears: Int8DynamicActivationIntxWeightConfig), or, for the portable kernels, "
        f"decompose them before to_edge: {PRE_STEP} (lower_with_guards(program, config=Settings(backend='portable')) does)"
    )
    return LoweringFailed(
        f"{names} {'is' if len(left) == 1 else 'are'} left outside every delegate{where}, and ExecuTorch has no kernel for them",
        Report(),
        site,
        hint,
    )
