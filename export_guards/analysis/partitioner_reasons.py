"""Why a partitioner left a node out: the reasons partitioners give, at DEBUG level, for each
node they leave out; and, for a node XNNPACK has no config for, that it has none."""

from __future__ import annotations

import contextlib
import functools
import logging
import re
from collections.abc import Iterator

import torch
from torch.fx import Node
from torch.fx.experimental.symbolic_shapes import has_free_unbacked_symbols

from export_guards.analysis.ops import aten_overload, inserted_by_quantizer, val_tensors

__all__ = ["capture_partitioner_reasons", "true_reason", "xnnpack_takes"]

# ExecuTorch's WhyNoPartition logs "WhyNoPartition: Node {node} was not partitioned because {reason}."
_WHY = re.compile(r"Node (?P<node>\S+) was not partitioned because (?P<reason>.*?)\.?$", re.DOTALL)


class _ReasonHandler(logging.Handler):
    def __init__(self, reasons: dict[str, str]) -> None:
        super().__init__(logging.DEBUG)
        self.reasons = reasons

    def emit(self, record: logging.LogRecord) -> None:
        match = _WHY.search(record.getMessage())
        if match:  # the first reason given for a node is the one that decided
            self.reasons.setdefault(match["node"], match["reason"])


@contextlib.contextmanager
def capture_partitioner_reasons(logger_name: str = "executorch") -> Iterator[dict[str, str]]:
    """Within the block, record each node's reason for not being partitioned, by node name.

    Partitioners log these through ExecuTorch's ``WhyNoPartition`` at DEBUG level, which is
    normally discarded; the logger's level is raised only for the block and nothing is printed.
    """
    reasons: dict[str, str] = {}
    logger = logging.getLogger(logger_name)
    handler = _ReasonHandler(reasons)
    level, propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False  # keep the DEBUG flood away from the root logger's handlers
    try:
        yield reasons
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


def xnnpack_takes(node: Node) -> bool:
    """Whether XNNPACK's partitioner has a config for ``node``'s op (whatever it then decides).
    It says nothing of the ops it has none for: such an op is left out silently."""
    op = aten_overload(node.target)
    return op is not None and f"{op._schema.name.split('::')[-1]}.{op._overloadname}" in _xnnpack_targets()


@functools.cache
def _xnnpack_targets() -> frozenset[str]:
    from executorch.backends.xnnpack.partition.config import ALL_PARTITIONER_CONFIGS

    return frozenset(config.target_name for config in ALL_PARTITIONER_CONFIGS)


# XNNPACK's dtypes for its float ops (bfloat16 only where the partitioner enables it).
_XNNPACK_FLOATS = (torch.float32, torch.float16)


def true_reason(node: Node, reason: str) -> str | None:
    """``reason``, the partitioner's for leaving ``node`` out, where it holds as said; else the
    true one, or ``None`` where it does not hold and nothing truer is known. XNNPACK says
    "invalid dtype" for every operand its dtype check refuses: one of a dtype it does not take
    (named here), but also one that is no tensor (a symbolic size: a view to a dynamic shape) or
    an empty one, whose float32 tensors it would take."""
    if reason != "invalid dtype" or inserted_by_quantizer(node):  # a quantizer's op takes integers: its check differs
        return reason
    tensors = [*val_tensors(node), *(t for operand in node.all_input_nodes for t in val_tensors(operand))]
    dtypes = sorted({str(t.dtype).removeprefix("torch.") for t in tensors if t.dtype not in _XNNPACK_FLOATS})
    if dtypes:
        return f"its dtype, {', '.join(dtypes)}, is not one XNNPACK takes (float32 and float16)"
    values = [operand.meta.get("val") for operand in node.all_input_nodes]
    if any(isinstance(value, torch.SymInt) for value in values):
        return "a size it takes is symbolic (a dynamic dimension), which XNNPACK does not take for this op"
    if any(isinstance(value, (torch.SymFloat, torch.SymBool, int, float, bool)) for value in values):
        return "an operand is a scalar computed in the graph, not a tensor, which XNNPACK does not take for this op"
    if any(has_free_unbacked_symbols(t) or t.numel() == 0 for t in tensors):
        return "a tensor it reads is empty or of a data-dependent size, which XNNPACK does not take"
    return None
