"""The default guard passes: one drop-in list for ``to_edge_transform_and_lower``."""

from __future__ import annotations

from executorch.exir.pass_base import ExportedProgramPassBase

from export_guards.passes.fold import FoldConstantsPass
from export_guards.passes.placement import ConstantPlacementPass

__all__ = ["guard_passes"]


def guard_passes(*, fold: bool = True, max_growth: float = 2.0) -> list[ExportedProgramPassBase]:
    """The default guard passes, in order, for ``transform_passes=guard_passes()``.

    They run after ``to_edge`` and before any partitioner:

    1. ``ConstantPlacementPass("error")``: a constant that a delegate's preprocess or the
       emitter would read from device memory is reported instead of crashing the process
       (it runs first, so that nothing is evaluated on such a constant). To copy device
       constants to the host, apply ``guard_constant_placement(ep, policy="copy")`` to the
       torch.export program first.
    2. ``FoldConstantsPass(max_growth=max_growth)`` unless ``fold=False``: weights computed
       from constants only (spectral norm, weight norm, parametrizations, user code) become
       static parameters that delegates such as XNNPACK take.
    """
    passes: list[ExportedProgramPassBase] = [ConstantPlacementPass("error")]
    if fold:
        passes.append(FoldConstantsPass(max_growth=max_growth))
    return passes
