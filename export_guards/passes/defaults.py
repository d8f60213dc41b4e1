"""The default guard passes: one drop-in list for ``to_edge_transform_and_lower``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from executorch.exir.backend.partitioner import Partitioner
from executorch.exir.pass_base import ExportedProgramPassBase

from export_guards.passes.fold import FoldConstantsPass
from export_guards.passes.placement import ConstantPlacementPass, GuardedPartitioner
from export_guards.settings import DEFAULT_MAX_GROWTH, PlacementPolicy

__all__ = ["guard_passes"]


def guard_passes(
    *,
    placement: PlacementPolicy = "error",
    fold: bool = True,
    max_growth: float = DEFAULT_MAX_GROWTH,
    partitioner: Sequence[Partitioner] | Mapping[str, Sequence[Partitioner]] | None = None,
) -> list[ExportedProgramPassBase]:
    """The default guard passes, in order, for ``transform_passes=guard_passes()``.

    They run after ``to_edge`` and before any partitioner:

    1. ``ConstantPlacementPass(placement)``: a constant that a delegate's preprocess or the
       emitter would read from device memory is reported instead of crashing the process
       (it runs first, so that nothing is evaluated on such a constant); with
       ``placement="copy"`` the method becomes its host twin instead, whose ``.pte`` is the
       CPU export's, byte for byte (one ``EG103`` per copy).
    2. ``FoldConstantsPass(max_growth=max_growth)`` unless ``fold=False``: weights computed
       from constants only (spectral norm, weight norm, parametrizations, user code) become
       static parameters that delegates such as XNNPACK take.

    Before partitioning, nobody knows which backend will read a constant, so step 1 rejects
    every constant in device memory. A backend that reads device memory itself (the CUDA
    backend) needs the partitioners guarded, which check each constant once their
    partitioner has decided; hand them here too and step 1 leaves device constants to them::

        partitioner = guard_partitioners([CudaPartitioner(specs)])
        to_edge_transform_and_lower(ep, transform_passes=guard_passes(partitioner=partitioner), partitioner=partitioner)

    Args:
        placement: ``"error"`` or ``"copy"``, as for ``guard_constant_placement``.
        fold: run the fold.
        max_growth: the fold's budget for the whole program (see ``FoldConstantsPass``).
        partitioner: the partitioners of this lowering, as given to
            ``to_edge_transform_and_lower``, each from :func:`guard_partitioners`.

    Raises:
        TypeError: a partitioner is not guarded.
        ValueError: ``partitioner`` holds no partitioner for some method (nothing would
            check what that method's backends or the emitter read), or ``placement`` is not
            a placement policy.
    """
    lists = list(partitioner.values()) if isinstance(partitioner, Mapping) else [partitioner] if partitioner is not None else []
    for parts in lists:
        if not parts:
            raise ValueError(
                "guard_passes(partitioner=...) got an empty partitioner list: with no partitioner "
                "every constant goes to the emitter, which reads host memory; leave partitioner out"
            )
        unguarded = [type(p).__name__ for p in parts if not isinstance(p, GuardedPartitioner)]
        if unguarded:
            raise TypeError(
                f"guard_passes(partitioner=...) needs guarded partitioners, got {', '.join(unguarded)}: "
                "wrap them with guard_partitioners([...]) and pass the same list to "
                "to_edge_transform_and_lower(partitioner=...)"
            )
    passes: list[ExportedProgramPassBase] = [ConstantPlacementPass(placement, defer_device_constants=bool(lists))]
    if fold:
        passes.append(FoldConstantsPass(max_growth=max_growth))
    return passes
