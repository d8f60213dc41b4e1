"""The shapes XNNPACK gives the values of a graph when ExecuTorch's runtime runs it on the
program's tensors, and the shapes it cannot take.

Before each call the runtime reshapes every external input to the shape of the program tensor
bound to it (``XNNExecutor::prepare_args``: ``xnn_reshape_external_value``), then XNNPACK
works out every other value's shape node by node (``xnn_reshape_runtime``), and the runtime
resizes each output tensor of the program to what XNNPACK computed. So the graph's serialized
dims of inputs and intermediate values do not decide anything; the program's input tensors,
the constants and each node's parameters do. This module follows XNNPACK's reshape rules for
the nodes ExecuTorch's XNNPACK backend writes; a node of another kind leaves its outputs
unknown, and nothing is claimed from them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import zip_longest
from typing import final

from export_guards.pte.reader.xnnpack import TRANSPOSE_WEIGHTS, XnnNode, XnnPayload

__all__ = ["GraphShapes", "infer_shapes"]

Shape = tuple[int, ...]

_KEEP_DIMS = 0x40  # XNN_FLAG_KEEP_DIMS
_TENSORFLOW_RESHAPE_2D = 0x4  # XNN_FLAG_TENSORFLOW_RESHAPE_2D (fully connected)
_SAME_PADDING = 0x4  # XNN_FLAG_TENSORFLOW_SAME_PADDING (convolution, pooling)


class _Refused(Exception):
    """XNNPACK cannot reshape the node to these input shapes."""


@final
@dataclass
class GraphShapes:
    """What reshaping a graph to given input shapes gives.

    Attributes:
        shapes: each value's shape, where it is known (constants, inputs, and the outputs of
            nodes whose kind this module follows and whose inputs are known).
        refused: ``(node index, why)`` for the first node XNNPACK cannot reshape, or None.
    """

    shapes: dict[int, Shape] = field(default_factory=dict)
    refused: tuple[int, str] | None = None


def infer_shapes(payload: XnnPayload, inputs: Mapping[int, Shape]) -> GraphShapes:
    """Reshape ``payload``'s graph as the runtime does: ``inputs`` gives each external input
    value's shape (value id -> the program tensor's sizes, in memory order). Nodes are
    followed in dependency order, as XNNPACK orders them."""
    written = {value for node in payload.nodes for value in node.writes}
    # A value no node writes keeps the dims it was defined with (constants, and anything the
    # runtime does not reshape); external inputs take the program's.
    result = GraphShapes({v.value_id: v.dims for v in payload.values if v.value_id not in written})
    result.shapes.update(inputs)
    pending = list(enumerate(payload.nodes))
    while pending:
        waiting = []
        for n, node in pending:
            if not all(value in result.shapes for value in node.reads):
                waiting.append((n, node))
                continue
            rule = _RULES.get(node.kind)
            if rule is None:
                continue  # a kind not followed here: its outputs stay unknown
            try:
                outputs = rule(node, _Operands(node, result.shapes))
            except _Refused as why:
                result.refused = (n, str(why))
                return result
            except (TypeError, ValueError, IndexError):  # a field missing or out of range: EG515's, not known here
                continue
            result.shapes.update(zip(node.writes, outputs))
        if len(waiting) == len(pending):
            break  # the rest read values nothing known writes
        pending = waiting
    return result


class _Operands:
    """A node's input shapes by field (``Input1Id``); ``inputs`` lists them in field order."""

    def __init__(self, node: XnnNode, shapes: Mapping[int, Shape]) -> None:
        self.node, self.shapes = node, shapes

    def __getitem__(self, field: str) -> Shape:
        value = self.node.operand(field)
        if value is None:
            raise _Refused(f"it has no {field}")
        return self.shapes[value]

    def first(self) -> Shape:
        return self["InputId"] if self.node.operand("InputId") is not None else self["Input1Id"]

    def inputs(self) -> list[Shape]:
        return [self[f"Input{k}Id"] for k in range(1, 6) if self.node.operand(f"Input{k}Id") is not None]


def _same(node: XnnNode, shapes: _Operands) -> list[Shape]:
    return [shapes.first()] * len(node.writes)


def _broadcast(node: XnnNode, shapes: _Operands) -> list[Shape]:
    return [_broadcast_shapes(shapes["Input1Id"], shapes["Input2Id"])]


def _broadcast_shapes(a: Shape, b: Shape) -> Shape:
    out = []
    for x, y in zip_longest(reversed(a), reversed(b), fillvalue=1):
        if x != y and 1 not in (x, y):
            raise _Refused(f"its inputs of shapes {list(a)} and {list(b)} do not broadcast")
        out.append(y if x == 1 else x)
    return tuple(reversed(out))


def _fully_connected(node: XnnNode, shapes: _Operands) -> list[Shape]:
    data, weights = shapes["Input1Id"], shapes["FilterId"]
    if len(weights) != 2 or not data:
        raise _Refused(f"its input {list(data)} or filter {list(weights)} is not a matrix product's")
    inputs, outputs = (weights[0], weights[1]) if node.param("Flags") & TRANSPOSE_WEIGHTS else (weights[1], weights[0])
    if data[-1] != inputs:
        raise _Refused(f"its input {list(data)} has {data[-1]} channels; its filter {list(weights)} takes {inputs}")
    if node.param("Flags") & _TENSORFLOW_RESHAPE_2D:
        return [(math.prod(data) // inputs, outputs)]
    return [(*data[:-1], outputs)]


def _batch_matmul(node: XnnNode, shapes: _Operands) -> list[Shape]:
    a, b = shapes["Input1Id"], shapes["Input2Id"]
    if len(a) < 2 or len(b) < 2:
        raise _Refused(f"its inputs {list(a)} and {list(b)} are not batches of matrices")
    k, n = (b[-1], b[-2]) if node.param("Flags") & TRANSPOSE_WEIGHTS else (b[-2], b[-1])  # XNN_FLAG_TRANSPOSE_B
    if a[-1] != k:
        raise _Refused(f"its inputs {list(a)} and {list(b)} do not multiply ({a[-1]} against {k})")
    batch = _broadcast_shapes(a[:-2], b[:-2])
    return [(*batch, a[-2], n)]


def _spatial(node: XnnNode, shapes: _Operands) -> Shape:
    shape = shapes.first()
    if len(shape) != 4:
        raise _Refused(f"its input {list(shape)} is not 4-D (NHWC)")
    return shape


def _window(size: int, before: int, after: int, kernel: int, stride: int, dilation: int, same: bool) -> int:
    """An output dimension of a sliding window, as XNNPACK computes it."""
    if same:
        return -(-size // stride)
    effective = (max(dilation, 1)) * (kernel - 1) + 1
    return max(size + before + after - effective, 0) // max(stride, 1) + 1


def _grouped_input(node: XnnNode, shapes: _Operands) -> Shape:
    """A convolution's NHWC input, whose channels must be its groups' input channels."""
    shape = _spatial(node, shapes)
    groups, per_group = node.param("Groups"), node.param("GroupInputChannels")
    if shape[3] != groups * per_group:
        raise _Refused(f"its input {list(shape)} has {shape[3]} channels; it takes {groups} groups of {per_group}")
    return shape


def _convolution(node: XnnNode, shapes: _Operands) -> list[Shape]:
    n, h, w, _ = _grouped_input(node, shapes)
    same = bool(node.param("Flags") & _SAME_PADDING)
    height, width = (
        _window(size, node.param(f"Padding{a}"), node.param(f"Padding{b}"), node.param(f"Kernel{d}"), node.param(f"Subsampling{d}"), node.param(f"Dilation{d}"), same)
        for size, a, b, d in ((h, "Top", "Bottom", "Height"), (w, "Left", "Right", "Width"))
    )  # fmt: skip
    return [(n, height, width, node.param("Groups") * node.param("GroupOutputChannels"))]


def _transposed_convolution(node: XnnNode, shapes: _Operands) -> list[Shape]:
    n, h, w, _ = _grouped_input(node, shapes)

    def size(value: int, before: str, after: str, d: str) -> int:
        kernel = max(node.param(f"Dilation{d}"), 1) * (node.param(f"Kernel{d}") - 1) + 1
        full = node.param(f"Subsampling{d}") * (value - 1) + node.param(f"Adjustment{d}") + kernel
        return max(full - node.param(f"Padding{before}") - node.param(f"Padding{after}"), 0)

    return [
        (
            n,
            size(h, "Top", "Bottom", "Height"),
            size(w, "Left", "Right", "Width"),
            node.param("Groups") * node.param("GroupOutputChannels"),
        )
    ]


def _pooling(node: XnnNode, shapes: _Operands) -> list[Shape]:
    n, h, w, c = _spatial(node, shapes)
    same = bool(node.param("Flags") & _SAME_PADDING)
    height, width = (
        _window(size, node.param(f"Padding{a}"), node.param(f"Padding{b}"), node.param(f"Pooling{d}"), node.param(f"Stride{d}"), node.param(f"Dilation{d}"), same)
        for size, a, b, d in ((h, "Top", "Bottom", "Height"), (w, "Left", "Right", "Width"))
    )  # fmt: skip
    return [(n, height, width, c)]


def _argmax_pooling(node: XnnNode, shapes: _Operands) -> list[Shape]:
    n, h, w, c = _spatial(node, shapes)
    height = (h + node.param("PaddingTop") + node.param("PaddingBottom")) // max(node.param("PoolingHeight"), 1)
    width = (w + node.param("PaddingLeft") + node.param("PaddingRight")) // max(node.param("PoolingWidth"), 1)
    return [(n, height, width, c)] * len(node.writes)


def _global_pooling(node: XnnNode, shapes: _Operands) -> list[Shape]:
    shape = shapes.first()
    if len(shape) < 3:
        raise _Refused(f"its input {list(shape)} has no height and width")
    if node.param("Flags") & _KEEP_DIMS:
        return [(*shape[:-3], 1, 1, shape[-1])]
    return [(*shape[:-3], shape[-1])]


def _transpose(node: XnnNode, shapes: _Operands) -> list[Shape]:
    shape, perm = shapes.first(), node.param("Perm")
    if sorted(perm) != list(range(len(shape))):
        raise _Refused(f"its permutation {list(perm)} does not fit its input {list(shape)}")
    return [tuple(shape[p] for p in perm)]


def _reshape(node: XnnNode, shapes: _Operands) -> list[Shape]:
    shape, new = shapes.first(), list(node.param("NewShape"))
    known = math.prod(d for d in new if d)
    if new.count(0) == 1 and known and math.prod(shape) % known == 0:
        new[new.index(0)] = math.prod(shape) // known  # a 0 is inferred
    if 0 in new or math.prod(new) != math.prod(shape):
        raise _Refused(f"it reshapes {list(shape)} ({math.prod(shape)} elements) to {list(node.param('NewShape'))}")
    return [tuple(new)]


def _slice(node: XnnNode, shapes: _Operands) -> list[Shape]:
    shape, offsets, sizes = shapes.first(), node.param("Offsets"), node.param("Sizes")
    if not len(shape) == len(offsets) == len(sizes):
        raise _Refused(f"its offsets {list(offsets)} and sizes {list(sizes)} do not fit its input {list(shape)}")
    out = tuple(size or dim - offset for dim, offset, size in zip(shape, offsets, sizes))
    if any(offset + size > dim for dim, offset, size in zip(shape, offsets, out)):
        raise _Refused(f"it slices {list(out)} at {list(offsets)} out of its input {list(shape)}")
    return [out]


def _pad(node: XnnNode, shapes: _Operands) -> list[Shape]:
    shape, before, after = shapes.first(), node.param("PrePaddings"), node.param("PostPaddings")
    if len(before) < len(shape) or len(after) < len(shape):
        raise _Refused(f"its paddings {list(before)} and {list(after)} do not fit its input {list(shape)}")
    return [tuple(d + b + a for d, b, a in zip(shape, before, after))]


def _resize(node: XnnNode, shapes: _Operands) -> list[Shape]:
    n, _, _, c = _spatial(node, shapes)
    return [(n, node.param("NewHeight"), node.param("NewWidth"), c)]


def _concatenate(node: XnnNode, operands: _Operands) -> list[Shape]:
    shapes = operands.inputs()
    axis, first = node.param("Axis"), shapes[0]
    if axis >= len(first):
        raise _Refused(f"its axis {axis} is outside its inputs {[list(s) for s in shapes]}")
    for shape in shapes[1:]:
        if len(shape) != len(first) or any(a != b for d, (a, b) in enumerate(zip(first, shape)) if d != axis):
            raise _Refused(f"its inputs {[list(s) for s in shapes]} differ beyond axis {axis}")
    return [(*first[:axis], sum(s[axis] for s in shapes), *first[axis + 1 :])]


_UNARY = (
    "Softmax", "Sigmoid", "Clamp", "Floor", "Convert", "SquareRoot", "Ceiling", "Hardswish", "LeakyReLU", "Negate",
    "Square", "ELU", "Abs", "ReciprocalSquareRoot", "Log", "Gelu", "Tanh", "Exp", "Sin", "Copy", "Cos",
)  # fmt: skip
_RULES: dict[str, Callable[[XnnNode, _Operands], list[Shape]]] = {
    **{f"XNN{kind}": _same for kind in _UNARY},
    **{f"XNN{kind}": _broadcast for kind in ("Add", "Div", "Minimum", "Maximum", "Multiply", "Subtract")},
    "XNNPReLU": _same,
    "XNNFullyConnected": _fully_connected,
    "XNNBatchMatrixMultiply": _batch_matmul,
    "XNNConv2d": _convolution,
    "XNNDepthwiseConv2d": _convolution,
    "XNNConvTranspose2d": _transposed_convolution,
    "XNNMaxPooling2d": _pooling,
    "XNNAvgPooling2d": _pooling,
    "XNNArgMaxPooling2d": _argmax_pooling,
    "XNNGlobalAvgPooling2d": _global_pooling,
    "XNNStaticTranspose": _transpose,
    "XNNStaticReshape": _reshape,
    "XNNStaticSlice": _slice,
    "XNNStaticConstantPad": _pad,
    "XNNStaticResizeBilinear2D": _resize,
    **{f"XNNConcatenate{n}": _concatenate for n in range(2, 6)},
}
"""XNNPACK's reshape rule for each node kind ExecuTorch writes (scaled dot-product attention,
which it does not write for XNNPACK today, is left out)."""
