"""Collect the reasons partitioners give, at DEBUG level, for each node they leave out."""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator

__all__ = ["capture_partitioner_reasons"]

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
