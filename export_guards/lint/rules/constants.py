"""EG306, EG307: constants stored twice, and constants never used."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

import torch

from export_guards.lint.context import LintContext
from export_guards.lint.registry import Hit, rule
from export_guards.programs import ProgramConstant
from export_guards.report import Severity

_MIN_WASTE = 1024  # duplicates wasting less than this (zero biases, say) are not worth a line


@rule(
    "EG306",
    "duplicate-constant",
    Severity.INFO,
    "The same bytes are stored as several constants (at least 1 KiB wasted).",
    "Tie the tensors (assign one module's parameter to the other) or build one from the other.",
)
def duplicate_constant(context: LintContext) -> Iterator[Hit]:
    groups: dict[tuple[object, ...], list[ProgramConstant]] = defaultdict(list)
    for constant in context.constants.values():
        tensor = constant.tensor
        if tensor.device.type == "cpu" and tensor.numel() and tensor.layout == torch.strided:
            groups[(tensor.dtype, tuple(tensor.shape))].append(constant)
    for candidates in groups.values():
        while len(candidates) > 1:
            first, rest = candidates[0], candidates[1:]
            same = [c for c in rest if _same_bytes(first.tensor, c.tensor)]
            candidates = [c for c in rest if c not in same]
            wasted = sum(c.tensor.nbytes for c in same)
            if same and wasted >= _MIN_WASTE:
                names = ", ".join(repr(c.fqn) for c in [first, *same])
                yield Hit(
                    f"{names} hold the same {first.tensor.nbytes:,} bytes ({wasted:,} bytes stored twice)",
                    next(iter(same[0].node.users), same[0].node),
                    same[0].fqn,
                )


def _same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr() and a.stride() == b.stride():
        return False  # one tensor, tied: stored once already
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


@rule(
    "EG307",
    "unused-constant",
    Severity.WARNING,
    "A constant that the graph never reads still ships in the program.",
    "Delete the unused parameter or buffer from the module, or use it.",
)
def unused_constant(context: LintContext) -> Iterator[Hit]:
    for constant in context.constants.values():
        if constant.node.op == "placeholder" and not constant.node.users:
            yield Hit(
                f"{constant.kind.value} '{constant.fqn}' ({constant.tensor.nbytes:,} bytes) is never used",
                constant.node,
                constant.fqn,
            )
