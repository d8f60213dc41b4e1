"""The dim orders ExecuTorch's kernels take: contiguous, and channels-last for 4-D and 5-D
tensors. The lint (EG310 names an input's) and the program check (EG516, the copies' contracts)
read them here."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["is_channels_last", "is_contiguous"]

_CHANNELS_LAST = {4: (0, 2, 3, 1), 5: (0, 2, 3, 4, 1)}


def is_contiguous(order: Sequence[int]) -> bool:
    """Whether ``order`` is the contiguous dim order of its rank."""
    return tuple(order) == tuple(range(len(order)))


def is_channels_last(order: Sequence[int]) -> bool:
    """Whether ``order`` is the channels-last dim order of a 4-D or 5-D tensor."""
    return _CHANNELS_LAST.get(len(order)) == tuple(order)
