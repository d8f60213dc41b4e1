"""What the graph's calls are in ATen terms, in ATen and edge dialect alike: op names, the
op sets the guards care about, the arguments a node passes, views and in-place writes."""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Iterator
from typing import cast

import torch
from torch.fx import Node

__all__ = [
    "COMPUTE_OPS",
    "MATMULS",
    "QUANTIZATION_NAMESPACES",
    "ancestors",
    "argument",
    "argument_name",
    "aten_name",
    "aten_overload",
    "call_nodes",
    "compute_op_name",
    "inserted_by_quantizer",
    "is_view",
    "is_written",
    "kernel_op_name",
    "schema_arguments",
    "static_operand",
    "val_tensors",
    "value_dtype",
    "writer",
]

COMPUTE_OPS = frozenset(
    {"convolution", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
     "conv_transpose3d", "linear", "addmm", "mm", "bmm", "matmul", "baddbmm"}
)  # fmt: skip
"""The ATen op names (without overload) counted as compute ops."""

MATMULS = frozenset({"mm", "addmm", "bmm", "matmul", "linear"})
"""The matrix products, of which a decomposed ``nn.Linear`` is one."""

QUANTIZATION_NAMESPACES = frozenset({"quantized_decomposed", "torchao", "quantized", "quant"})
"""The namespaces of the ops that quantizers insert (PT2E's ``quantized_decomposed``, torchao's)."""

# The operand that a delegate needs static: conv and linear weights, and mm / addmm's second
# operand (a decomposed linear). Batched matmuls (attention) take two dynamic operands.
_STATIC_OPERAND = {"mm": "mat2", "addmm": "mat2"}


def aten_overload(target: object) -> torch._ops.OpOverload | None:
    """The ATen ``OpOverload`` behind a call target; an edge op wraps one as ``_op``."""
    if isinstance(target, torch._ops.OpOverload):
        return target
    wrapped = getattr(target, "_op", None)
    return wrapped if isinstance(wrapped, torch._ops.OpOverload) else None


def aten_name(target: object) -> str | None:
    """The op's name without namespace or overload (``"convolution"``), if it is an op."""
    op = aten_overload(target)
    return op._schema.name.split("::")[-1] if op is not None else None


def inserted_by_quantizer(node: Node) -> bool:
    """Whether ``node`` is an op that a quantizer inserts (``choose_qparams``, ``quantize_*``,
    ``dequantize_*``), not one the user's code calls."""
    op = aten_overload(node.target) if node.op == "call_function" else None
    return op is not None and op.namespace in QUANTIZATION_NAMESPACES


def compute_op_name(node: Node) -> str | None:
    """The ATen name of ``node``'s op (``"convolution"``) if it is a compute op, else None."""
    name = aten_name(node.target) if node.op == "call_function" else None
    return name if name in COMPUTE_OPS else None


def kernel_op_name(node: Node) -> str | None:
    """The qualified name of ``node``'s op (``"aten::sort"``) if the runtime runs it with a kernel
    of its own once emitted (any op but bookkeeping: ``getitem``, symbolic sizes, asserts), else
    None."""
    op = aten_overload(node.target) if node.op == "call_function" else None
    if op is None:
        return None
    name = op._schema.name
    return None if name.split("::")[-1].startswith(("_assert", "sym_")) else name


def static_operand(node: Node) -> object:
    """What a compute op passes as the operand a delegate needs static (its weight)."""
    return argument(node, _STATIC_OPERAND.get(aten_name(node.target) or "", "weight"))


def schema_arguments(node: Node) -> Iterator[tuple[torch._C.Argument, object]]:
    """Each argument of ``node``'s op schema with the value ``node`` passes for it (the
    schema's default where it passes none). Nothing for a call that is not an ATen op."""
    op = aten_overload(node.target)
    if op is None:
        return
    for index, schema_argument in enumerate(op._schema.arguments):
        if schema_argument.name in node.kwargs:
            yield schema_argument, node.kwargs[schema_argument.name]
        elif index < len(node.args):
            yield schema_argument, node.args[index]
        else:
            yield schema_argument, schema_argument.default_value


def input_node(node: Node, index: int) -> Node:
    """``node``'s positional input ``index``, read as the node it is (the matchers check the op
    first: torch.fx types an input as any argument)."""
    return cast(Node, node.args[index])


def argument(node: Node, *names: str) -> object:
    """The value ``node`` passes for the first of ``names`` that its op's schema has."""
    return next((value for a, value in schema_arguments(node) if a.name in names), None)


def argument_name(consumer: Node, value: Node) -> str | None:
    """The name of the schema argument for which ``consumer`` passes ``value``."""
    return next((a.name for a, passed in schema_arguments(consumer) if passed is value), None)


def is_view(target: object) -> bool:
    """Whether the op returns a view of (or a view-copy standing for) its input."""
    op = aten_overload(target)
    if op is None:
        return False
    return torch.Tag.view_copy in op.tags or any(r.alias_info is not None for r in op._schema.returns)


def is_written(node: Node) -> bool:
    """Whether an op writes ``node``'s value in place, directly or through a view of it
    (``view``, ``select``, the pieces of ``split`` / ``unbind`` / ``chunk``)."""
    return writer(node) is not None


def writer(node: Node) -> Node | None:
    """The first op that writes ``node``'s value in place, directly or through a view of it
    (as :func:`is_written`), or ``None``."""
    for user in node.users:
        if user.target is operator.getitem:  # a piece of a split: an alias too
            if (found := writer(user)) is not None:
                return found
            continue
        op = aten_overload(user.target)
        if op is None or not _aliases_an_argument(op):  # most ops: nothing to read in their arguments
            continue
        for schema_argument, value in schema_arguments(user):
            passed = value is node or (isinstance(value, (list, tuple)) and any(v is node for v in value))
            if not passed or schema_argument.alias_info is None:
                continue
            if schema_argument.alias_info.is_write:
                return user
            if (found := writer(user)) is not None:  # else ``user`` is a view of ``node``
                return found
    return None


@functools.cache
def _aliases_an_argument(op: torch._ops.OpOverload) -> bool:
    return any(a.alias_info is not None for a in op._schema.arguments)


def ancestors(node: Node, through: Callable[[Node], bool] = lambda _: True) -> set[Node]:
    """``node`` and the nodes it is computed from, following only inputs that ``through`` accepts."""
    seen: set[Node] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        if current not in seen:
            seen.add(current)
            stack.extend(i for i in current.all_input_nodes if through(i))
    return seen


def call_nodes(root: torch.fx.GraphModule) -> list[tuple[torch.fx.GraphModule, Node]]:
    """Every op call of ``root`` and of its control-flow branches (not inside delegates),
    with the graph module that holds it, in order."""
    return [
        (module, node)
        for module in root.modules()
        if isinstance(module, torch.fx.GraphModule)
        for node in module.graph.nodes
        if node.op == "call_function"
    ]


def value_dtype(node: object) -> torch.dtype | None:
    """The dtype of the tensor ``node`` computes (its traced value), if it is a node that computes one."""
    value = node.meta.get("val") if isinstance(node, Node) else None
    return value.dtype if isinstance(value, torch.Tensor) else None


def val_tensors(node: Node) -> list[torch.Tensor]:
    """The tensors of ``node``'s traced value."""
    value = node.meta.get("val")
    values = value if isinstance(value, (tuple, list)) else [value]
    return [v for v in values if isinstance(v, torch.Tensor)]
