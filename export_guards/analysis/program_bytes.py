"""What a graph node or a constant costs in the written ``.pte`` program: the estimate by which
the fold judges whether folding makes the written program smaller.

ExecuTorch writes each op left in the program as an instruction (a ``KernelCall`` with its
argument EValues) whose result is a planned tensor (an EValue ``Tensor`` with its sizes and dim
order), and each constant as an EValue ``Tensor`` plus its bytes in the constant segment, each
aligned to 16. The figures below were calibrated on programs written by ExecuTorch 1.5.1's
``to_executorch()`` (the program's flatbuffer size from the file's extended header, one op or
constant added at a time; ``tests/test_fold_written.py`` checks the verdicts they give against
written programs):

- an instruction with a planned result of rank ``r``: 92 + 6 r bytes, plus 4 per tensor argument
  (an index to an existing EValue), 28 per scalar argument (an ``Int`` / ``Double`` / ``Bool``
  EValue of its own) and 24 + 8 per element for a list argument (``IntList``);
- a constant of rank ``r``: 66 + 6 r bytes of EValue, plus its bytes rounded up to 16;
- the operator table's entry of an op no other node uses (40 to 64 bytes) is not counted: the
  estimate of what a fold saves errs low, never high.

The file rounds the flatbuffer up to 128 bytes before its segments, so one written program can
differ from the estimate by up to that much; the verdicts that matter differ by more.
"""

from __future__ import annotations

import operator

import torch
from torch.fx import Node

from export_guards.analysis.ops import aten_overload

__all__ = ["CONSTANT_ALIGNMENT", "constant_cost", "instruction_cost"]

CONSTANT_ALIGNMENT = 16
"""ExecuTorch's default ``constant_tensor_alignment``: each constant starts at a multiple."""

_INSTRUCTION = 92
_PER_DIM = 6
_TENSOR_ARGUMENT = 4
_SCALAR_ARGUMENT = 28
_LIST = 24
_LIST_ELEMENT = 8
_CONSTANT = 66


def instruction_cost(node: Node) -> int:
    """The bytes ``node`` takes in the written program when it runs there: its instruction,
    its argument EValues and its planned result. 0 for what writes no instruction (a
    ``getitem`` of a result, an assertion that ``to_edge`` drops)."""
    op = aten_overload(node.target)
    if node.target is operator.getitem or op is None or not op._schema.returns:
        return 0
    cost = _INSTRUCTION + sum(_PER_DIM * len(value.shape) for value in _tensors(node.meta.get("val")))
    for argument in [*node.args, *node.kwargs.values()]:
        cost += _argument_cost(argument)
    return cost


def constant_cost(value: object) -> int:
    """The bytes a constant holding ``value`` (a tensor, or its traced fake) takes in the
    written program: its EValue and its data, aligned as the constant segment aligns it."""
    cost = 0
    for tensor in _tensors(value):
        data = tensor.numel() * tensor.element_size()
        cost += _CONSTANT + _PER_DIM * len(tensor.shape) + -(-data // CONSTANT_ALIGNMENT) * CONSTANT_ALIGNMENT
    return cost


def _argument_cost(argument: object) -> int:
    if isinstance(argument, Node):
        return _TENSOR_ARGUMENT
    if isinstance(argument, (list, tuple)):
        if any(isinstance(a, Node) for a in argument):  # a tensor list: its EValues exist
            return _LIST + _TENSOR_ARGUMENT * len(argument)
        return _LIST + _LIST_ELEMENT * len(argument)
    return _SCALAR_ARGUMENT  # int, float, bool, None, dtype, layout, device: an EValue each


def _tensors(value: object) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [v for v in value if isinstance(v, torch.Tensor)]
    return []
