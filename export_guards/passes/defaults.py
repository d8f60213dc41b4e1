"""The default guard passes: one drop-in for ``to_edge_transform_and_lower(transform_passes=...)``."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from executorch.exir.backend.partitioner import Partitioner
from executorch.exir.pass_base import ExportedProgramPassResult
from executorch.exir.pass_manager import ExportedProgramPassManager, PassType
from torch.export import ExportedProgram

from export_guards import progress
from export_guards.errors import GuardError
from export_guards.internals import pass_error
from export_guards.passes.fold import FoldConstantsPass
from export_guards.passes.known_wrong import KnownWrongDelegationPass
from export_guards.passes.placement import ConstantPlacementPass, GuardedPartitioner, check_policy
from export_guards.passes.quantized_embedding import QuantizedEmbeddingPass
from export_guards.settings import PlacementPolicy, Settings, with_keywords

__all__ = ["GuardPasses", "guard_passes"]


class GuardPasses(ExportedProgramPassManager):
    """The guard passes as one ExecuTorch ``ExportedProgramPassManager``, whose guard errors
    reach the caller as they were raised.

    ExecuTorch runs a *list* of transform passes in a pass manager of its own, which re-raises
    whatever a pass raises as a bare ``Exception`` ("An error occurred when running the
    'ConstantPlacementPass' pass ..."); a pass manager given as ``transform_passes`` it calls
    as it is (``EdgeProgramManager.transform``). This one runs its passes as ExecuTorch's does
    and re-raises a :class:`~export_guards.GuardError` (a ``ConstantPlacementError``, an
    ``InternalError``) unwrapped; any other error is wrapped as ExecuTorch wraps it.

    It reads as the list of its passes (``len``, iteration, indexing); add your own passes
    after the guards with ``guard_passes() + [MyPass()]``, which is again a ``GuardPasses``.
    A plain list made of its passes (``[*guard_passes(), MyPass()]``) runs in ExecuTorch's
    manager: a guard's error is then the ``__cause__`` of a bare ``Exception``.
    """

    def __call__(self, exported_program: ExportedProgram, override_verifiers: Any = None) -> ExportedProgramPassResult:
        progress.now("running the guard passes")
        try:
            return super().__call__(exported_program, override_verifiers)
        except Exception as wrapped:
            raised = pass_error(wrapped)
            if isinstance(raised, GuardError):  # ExecuTorch's wrapper: hand over what the guard raised
                raise raised from None
            raise

    def check(self, exported_program: ExportedProgram) -> None:
        """Nothing: what the guard passes are handed, ``to_edge`` has just verified, and what they
        return, ``EdgeProgramManager.transform`` verifies twice (its own verifier, then the new
        manager's). ExecuTorch's manager validates both ends once more, which on a 100M-parameter
        decoder costs as much as the guard passes do (benchmarks/llm_scale.py)."""

    def __iter__(self) -> Iterator[PassType]:
        return iter(self.passes)

    def __len__(self) -> int:
        return len(self.passes)

    def __getitem__(self, index: int) -> PassType:
        return self.passes[index]

    def __add__(self, passes: Iterable[PassType]) -> GuardPasses:
        return GuardPasses([*self.passes, *passes])

    def __repr__(self) -> str:
        return f"GuardPasses([{', '.join(type(p).__name__ for p in self.passes)}])"


def guard_passes(
    *,
    config: Settings | None = None,
    placement: PlacementPolicy | None = None,
    fold: bool | None = None,
    max_growth: float | None = None,
    partitioner: Sequence[Partitioner] | Mapping[str, Sequence[Partitioner]] | None = None,
) -> GuardPasses:
    """The default guard passes, in order, for ``transform_passes=guard_passes()``: a
    :class:`GuardPasses`, so that a guard's error reaches the caller unwrapped
    (``except ConstantPlacementError``, or ``except InternalError``), with or without
    partitioners.

    They run after ``to_edge`` and before any partitioner (what ``to_edge`` rejects, the step
    before it makes core ATen: ``fold_non_core_constants(program, partitioner=partitioner)``):
    1. ``ConstantPlacementPass(placement)``: a constant that a delegate's preprocess or the
       emitter would read from device memory is reported instead of crashing the process; with
       ``"copy"`` the method becomes its host twin, whose ``.pte`` is the CPU export's (EG103).
    2. ``FoldConstantsPass`` with the fold on: weights computed from constants only become
       static parameters that delegates such as XNNPACK take.
    3. ``QuantizedEmbeddingPass``: a torchao-quantized embedding runs on ExecuTorch's kernel (EG408).
    4. ``KnownWrongDelegationPass``: what a delegate is known to compute wrong is left to the
       runtime's kernels (EG405), their backends' patterns with guarded partitioners, else all.

    Before partitioning, nobody knows which backend will read a constant, so step 1 rejects
    every constant in device memory. A backend that reads device memory itself (the CUDA
    backend) needs the partitioners guarded, which check each constant once their
    partitioner has decided; hand them here too and step 1 leaves device constants to them.
    With ``placement="copy"`` this hands them the copy too (their ``placement``): they copy
    before ``to_edge_transform_and_lower`` decomposes the program (executorch 1.5), so that
    attention decomposes as on the CPU and the ``.pte`` is the CPU export's::

        partitioner = guard_partitioners([CudaPartitioner(specs)])
        to_edge_transform_and_lower(ep, transform_passes=guard_passes(partitioner=partitioner), partitioner=partitioner)

    Args:
        config: the settings whose ``placement``, ``fold`` and ``fold_max_growth`` apply
            (default ``Settings()``: ``"error"``, on, the default budget): the one way to pass them.
        placement, fold, max_growth: deprecated (each call that gives one warns); where given,
            they apply over ``config`` (``max_growth`` is ``fold_max_growth``).
        partitioner: the partitioners of this lowering, as given to
            ``to_edge_transform_and_lower``, each from :func:`guard_partitioners`.

    Raises:
        TypeError: a partitioner is not guarded.
        ValueError: ``partitioner`` holds no partitioner for some method (nothing would check
            what its backends or the emitter read), or ``placement`` is not a policy.
    """
    if placement is not None:
        check_policy(placement)
    settings = with_keywords(config, "guard_passes", placement=placement, fold=fold, fold_max_growth=max_growth)
    lists = _partitioner_lists(partitioner)
    if settings.placement == "copy":
        _hand_the_copy_to(lists)
    fold_pass = [FoldConstantsPass(max_growth=settings.fold_max_growth)] if settings.fold else []
    placement_pass = ConstantPlacementPass(settings.placement, defer_device_constants=bool(lists))
    return GuardPasses(
        [placement_pass, *fold_pass, QuantizedEmbeddingPass(), KnownWrongDelegationPass(_backend_ids(lists))]
    )


def _partitioner_lists(
    partitioner: Sequence[Partitioner] | Mapping[str, Sequence[Partitioner]] | None,
) -> list[Sequence[Partitioner]]:
    """Each method's list of ``partitioner`` (one list for all methods, when it is a list).

    Raises:
        TypeError: a partitioner is not guarded.
        ValueError: a list is empty.
    """
    lists = (
        list(partitioner.values())
        if isinstance(partitioner, Mapping)
        else [partitioner]
        if partitioner is not None
        else []
    )
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
    return lists


def _hand_the_copy_to(lists: list[Sequence[Partitioner]]) -> None:
    """Set ``placement="copy"`` on each guarded partitioner: the copy before decomposition is
    theirs, as ExecuTorch hands the program to them alone then, and the caller hands these
    same objects to ``to_edge_transform_and_lower``."""
    for parts in lists:
        for part in parts:
            part.placement = "copy"


def _backend_ids(lists: list[Sequence[Partitioner]]) -> list[str] | None:
    """The backend ids the partitioners delegate to; ``None`` when not all say (or none are given)."""
    specs = [getattr(part, "delegation_spec", None) for parts in lists for part in parts]
    if not specs or any(spec is None for spec in specs):
        return None
    return [spec.backend_id for spec in specs if spec is not None]
