"""Why a partitioner left a node out: the reasons partitioners give, at DEBUG level, for each
node they leave out; and, for a node XNNPACK has no config for, that it has none."""

from __future__ import annotations

import contextlib
import functools
import logging
import re
from collections.abc import Iterator

from torch.fx import Node

from export_guards.analysis.ops import aten_overload

__all__ = ["capture_partitioner_reasons", "xnnpack_takes"]

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
