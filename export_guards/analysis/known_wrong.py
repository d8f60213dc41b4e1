"""What a delegate of the installed ExecuTorch is known to compute wrong, found in a graph.

Each entry of ``KNOWN_WRONG`` (``known_wrong_entries.py``, torch-free, which the program check
reads too) was derived by running the delegate against eager on the quantization
configurations ExecuTorch and torchao document for it (``benchmarks/delegate_numerics.py``),
names the upstream report, and says in which ExecuTorch releases it holds: an entry stops
applying from its ``fixed_in`` release, and its test fails on a release that computes it right
until ``fixed_in`` says so. Here each entry's finder in an edge program (``FINDERS``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import final

import torch
from torch.export import ExportedProgram
from torch.fx import Node
from torch.fx.passes.utils.source_matcher_utils import SourcePartition, get_source_partitions

from export_guards.analysis.known_wrong_entries import (
    KNOWN_WRONG,
    XNNPACK_LINEAR_WEIGHT_MATH,
    KnownWrong,
    executorch_release,
)
from export_guards.analysis.ops import aten_name

__all__ = [
    "FINDERS",
    "KNOWN_WRONG",
    "LINEAR_SOURCES",
    "XNNPACK_LINEAR_WEIGHT_MATH",
    "KnownWrong",
    "WrongDelegation",
    "executorch_release",
    "known_wrong_in",
]

LINEAR_SOURCES: tuple[object, ...] = (torch.nn.Linear, torch.nn.functional.linear)
"""What XNNPACK's partitioner groups a decomposed linear's nodes by (their source partition)."""

# Edge ops that pass every value of their first input through, in another layout: a walk from
# a matmul's argument through these still reaches the tensor that the matmul reads. Not
# ``ops.is_view``: a slice, a select or an expand is a view too, and reading past one reads
# other values.
_LAYOUT_OPS = frozenset(
    {"view_copy", "permute_copy", "t_copy", "transpose_copy", "squeeze_copy", "unsqueeze_copy", "clone", "alias_copy"}
)
_TO_COPY = frozenset({"_to_copy", "_to_dim_order_copy"})


@final
@dataclass(frozen=True)
class WrongDelegation:
    """Where a graph holds a pattern of ``entry``.

    Attributes:
        entry: the pattern.
        node: the op that the delegate would compute wrong (a matmul).
        path: the nodes the delegate would read past, from the op's argument back to the
            tensor it takes instead (the weight's dequantization).
    """

    entry: KnownWrong
    node: Node
    path: tuple[Node, ...]


def known_wrong_in(program: ExportedProgram, backend_ids: tuple[str, ...] | None = None) -> list[WrongDelegation]:
    """Every pattern in ``program`` (an edge program, before partitioning) that a delegate of
    ``backend_ids`` (every delegate when ``None``: the partitioners are not known) computes wrong
    in the installed ExecuTorch."""
    return [match for entry in KNOWN_WRONG if entry.applies_to(backend_ids) for match in FINDERS[entry](program)]


def _linear_weight_math(program: ExportedProgram) -> Iterator[WrongDelegation]:
    """XNNPACK's partitioner matches a decomposed linear (``mm`` / ``addmm``) by its source
    partition and takes, for each argument, the tensor reached by walking first inputs back to
    the partition's edge. Any computation on that walk is skipped: a weight-only quantized
    linear's dequantization (``to(float32)``, torchao's ``dequantize_affine``) is dropped and the
    integer weight is read as the float one."""
    partitions = get_source_partitions(program.graph, list(LINEAR_SOURCES))
    for partition in (p for found in partitions.values() for p in found):
        for node in partition.nodes:
            if node.op == "call_function" and aten_name(node.target) in ("mm", "addmm"):
                for argument in node.all_input_nodes:
                    path = tuple(_walk(argument, partition))
                    if any(not _passes_values(step) for step in path):
                        yield WrongDelegation(XNNPACK_LINEAR_WEIGHT_MATH, node, path)


def _walk(argument: Node, partition: SourcePartition) -> Iterator[Node]:
    """The nodes XNNPACK's walk passes from ``argument`` to the partition's edge."""
    while argument.all_input_nodes and argument not in partition.input_nodes:
        yield argument
        argument = argument.all_input_nodes[0]


def _passes_values(node: Node) -> bool:
    """Whether ``node`` gives its first input's values unchanged (a view, or a copy of the
    same dtype)."""
    name = aten_name(node.target) if node.op == "call_function" else None
    if name in _LAYOUT_OPS:
        return True
    if name in _TO_COPY:
        source, result = node.all_input_nodes[0].meta.get("val"), node.meta.get("val")
        return isinstance(source, torch.Tensor) and isinstance(result, torch.Tensor) and source.dtype == result.dtype
    return False


FINDERS: dict[KnownWrong, Callable[[ExportedProgram], Iterator[WrongDelegation]]] = {
    XNNPACK_LINEAR_WEIGHT_MATH: _linear_weight_math,
}
"""Each entry of ``KNOWN_WRONG``'s matches in an edge program, before partitioning."""
