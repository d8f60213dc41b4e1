"""EG306, EG307: constants stored twice, and constants never used."""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterator

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from export_guards.analysis.programs import ProgramConstant
from export_guards.linter.context import LintContext
from export_guards.ruleset import Hit, rule

_MIN_WASTE = 1024  # duplicates wasting less than this (zero biases, say) are not worth a line


@rule("EG306")
def duplicate_constant(context: LintContext) -> Iterator[Hit]:
    groups: dict[tuple[object, ...], list[ProgramConstant]] = defaultdict(list)
    stored: set[tuple[int, int]] = set()  # (storage, offset) already seen: tied tensors are stored once
    for constant in context.constants.values():
        tensor = constant.tensor
        if tensor.device.type != "cpu" or not tensor.numel() or tensor.layout != torch.strided:
            continue
        if is_traceable_wrapper_subclass(tensor) or isinstance(tensor, FakeTensor):
            continue
        if constant.fqn in context.mutated:  # state (a KV cache, say): equal bytes by chance
            continue
        identity = (tensor.untyped_storage().data_ptr(), tensor.storage_offset())
        if identity in stored:
            continue
        stored.add(identity)
        groups[(tensor.dtype, tuple(tensor.shape), _digest(tensor))].append(constant)
    for same in groups.values():
        wasted = sum(c.tensor.nbytes for c in same[1:])
        if len(same) > 1 and wasted >= _MIN_WASTE:
            names = ", ".join(repr(c.fqn) for c in same)
            yield Hit(
                f"{names} hold the same {same[0].tensor.nbytes:,} bytes ({wasted:,} bytes stored more than once)",
                next(iter(same[1].node.users), same[1].node),
                same[1].fqn,
            )


def _digest(tensor: torch.Tensor) -> bytes:
    """A hash of the tensor's bytes: constants group by it in one pass, not pair by pair."""
    data = tensor.detach().contiguous().reshape(-1).view(torch.uint8).numpy()
    return hashlib.blake2b(memoryview(data), digest_size=16).digest()


@rule("EG307")
def unused_constant(context: LintContext) -> Iterator[Hit]:
    for constant in context.constants.values():
        if constant.fqn in context.mutated:  # written (a mutation output), so used
            continue
        if constant.node.op == "placeholder" and not constant.node.users:
            yield Hit(
                f"{constant.kind.value} '{constant.fqn}' ({constant.tensor.nbytes:,} bytes) is never used",
                constant.node,
                constant.fqn,
            )
