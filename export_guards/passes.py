"""The guards as one drop-in pass list for ``to_edge_transform_and_lower``."""

from __future__ import annotations

from executorch.exir.pass_base import ExportedProgramPassBase

from export_guards.placement import ConstantPlacementPass

__all__ = ["guard_passes"]


def guard_passes() -> list[ExportedProgramPassBase]:
    """The default guard passes, in order, for ``transform_passes=guard_passes()``.

    They run after ``to_edge`` and before any partitioner, so a constant that a delegate's
    preprocess would read from device memory is reported instead of crashing the process.
    To copy device constants to the host, apply
    ``guard_constant_placement(ep, policy="copy")`` to the torch.export program first.
    """
    return [ConstantPlacementPass("error")]
