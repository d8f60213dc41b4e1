"""The placement guard at partitioning: after a partitioner decides, before any preprocess reads.

Only there is it known who reads a constant from host memory. A constant that a partitioner
tags into one of its partitions is read by that backend's ``preprocess``: from the host by
XNNPACK, Vulkan, CoreML, QNN and the like, from its own device by the CUDA (AOTInductor)
backends, which move the program to their device themselves. A constant that no partition
takes stays in the top-level program, whose constants the emitter copies from host memory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, overload

import torch
from executorch.exir.backend.partitioner import Partitioner, PartitionResult
from torch.export import ExportedProgram

from export_guards import progress
from export_guards.backends import device_backend_ids
from export_guards.passes.int8_dynamic import refuse_int8_dynamic_linears
from export_guards.passes.known_wrong import refuse_known_wrong
from export_guards.passes.placement.messages import placement_error
from export_guards.passes.placement.plan import check_policy, plan_partition, plan_placement
from export_guards.settings import PlacementPolicy

__all__ = ["DEVICE_BACKENDS", "GuardedPartitioner", "guard_partitioners"]

DEVICE_BACKENDS: tuple[str, ...] = device_backend_ids()
"""Backends (``DelegationSpec.backend_id``) that read device constants from their own device:
the AOTInductor backends (``CudaBackend``, ``MetalBackend``), whose ``preprocess`` moves the
program to the device it compiles for (``backends.BACKEND_TABLE``)."""


class GuardedPartitioner(Partitioner):
    """A partitioner whose decision is checked before its backend's ``preprocess`` runs.

    Each constant in device memory that it tags for a backend not in ``device_backends``
    raises :class:`~export_guards.ConstantPlacementError` (``EG101``: the constant, its
    device, the backend that would read it and the user's source line) instead of crashing
    in that backend's ``preprocess``. With ``last=True`` (the last partitioner of a method),
    a device constant that no partition took raises too: the emitter would read it, unless
    ``emitter="copy"`` says that ``to_executorch`` will copy it
    (``ExecutorchBackendConfig(passes=emit_passes("copy"))``, which checks it then).

    With ``placement="copy"`` (which ``guard_passes(config=Settings(placement="copy"), partitioner=...)``
    hands it), its pre-decomposition transform, which ``to_edge_transform_and_lower`` calls
    on the torch.export program before decomposing it (executorch 1.5), returns that
    program's host twin: the graph is decomposed on the CPU, as the CPU export's is. A copy
    made after decomposing keeps what the device chose (the kernel of
    ``scaled_dot_product_attention``: docs/placement.md).

    An op it tags into a delegate that is known to compute it wrong (EG405), which
    ``guard_passes(partitioner=...)`` keeps off before partitioning, raises
    :class:`~export_guards.errors.KnownWrongDelegationError` when no guard pass ran. A linear of torchao's
    ``Int8DynamicActivationInt8WeightConfig`` that reaches it before decomposition (no
    ``fold_non_core_constants`` ran, which rewrites it: EG407) raises
    :class:`~export_guards.LoweringFailed` naming that step, where ``to_edge`` would reject its
    ``_int_mm`` with no fix named.

    Everything else (``ops_to_not_decompose``, the wrapped partitioner's own pre-decomposition
    transform, run after the copy, the spec, any other attribute) is the wrapped partitioner's
    own. The program it is handed is not modified.

    Args:
        partitioner: the partitioner to guard.
        device_backends: the backend ids trusted to read device constants.
        last: whether no partitioner runs after this one on the same method.
        emitter: ``"error"``, or ``"copy"`` when ``to_executorch`` runs ``emit_passes("copy")``.
        placement: ``"copy"`` to copy device constants to the host before decomposition;
            ``"error"`` (the default) leaves them to the checks.
    """

    def __init__(
        self,
        partitioner: Partitioner,
        device_backends: Iterable[str] = DEVICE_BACKENDS,
        *,
        last: bool = True,
        emitter: PlacementPolicy = "error",
        placement: PlacementPolicy = "error",
    ) -> None:
        check_policy(emitter)
        check_policy(placement)
        if isinstance(partitioner, GuardedPartitioner):
            partitioner = partitioner.partitioner
        if not isinstance(partitioner, Partitioner):
            raise TypeError(
                f"guard_partitioners takes ExecuTorch Partitioner instances, not {type(partitioner).__name__}"
            )
        super().__init__()  # the spec is read from the wrapped one: some never set theirs
        self.partitioner: Partitioner = partitioner
        self.device_backends = frozenset(device_backends)
        self.last = last
        self.emitter: PlacementPolicy = emitter
        self.placement: PlacementPolicy = placement

    def partition(self, exported_program: ExportedProgram) -> PartitionResult:
        progress.now(f"partitioning ({type(self.partitioner).__name__})")
        result = self.partitioner.partition(exported_program)
        stops = plan_partition(result, self.device_backends, emitter=self.emitter if self.last else None).stops
        if stops:
            raise placement_error(stops)
        refuse_known_wrong(result)
        backends = sorted({spec.backend_id for spec in result.partition_tags.values()})
        progress.now(
            f"compiling {len(result.partition_tags)} delegate{'s' if len(result.partition_tags) != 1 else ''} ({', '.join(backends) or 'none'})"
        )
        return result

    @property
    def spec(self) -> Mapping[str | int | float | bool, object]:
        return self.partitioner.spec

    def ops_to_not_decompose(
        self, ep: ExportedProgram
    ) -> tuple[list[torch._ops.OpOverload], Callable[[torch.fx.Node], bool] | None]:
        return self.partitioner.ops_to_not_decompose(ep)

    def transform_for_pre_decomposition(self, exported_program: ExportedProgram) -> ExportedProgram:
        refuse_int8_dynamic_linears(exported_program)  # to_edge would reject it, naming no fix
        if self.placement == "copy":
            # Constants without data stop nothing here: the transform passes stop them, naming
            # the method, as without this copy.
            plan = plan_placement(None, exported_program, "copy")
            if plan.to_copy and not plan.stops:
                exported_program = plan.carried_out(exported_program).exported_program
        return self.partitioner.transform_for_pre_decomposition(exported_program)

    def __getattr__(self, name: str) -> Any:  # only for names this class does not have
        try:
            wrapped = self.__dict__["partitioner"]
        except KeyError:  # not initialised yet (copy, unpickling)
            raise AttributeError(name) from None
        return getattr(wrapped, name)

    def __repr__(self) -> str:
        return f"GuardedPartitioner({self.partitioner!r})"


@overload
def guard_partitioners(
    partitioners: Sequence[Partitioner],
    *,
    device_backends: Iterable[str] = ...,
    emitter: PlacementPolicy = ...,
    placement: PlacementPolicy = ...,
) -> list[GuardedPartitioner]: ...
@overload
def guard_partitioners(
    partitioners: Mapping[str, Sequence[Partitioner]],
    *,
    device_backends: Iterable[str] = ...,
    emitter: PlacementPolicy = ...,
    placement: PlacementPolicy = ...,
) -> dict[str, list[GuardedPartitioner]]: ...
def guard_partitioners(
    partitioners: Sequence[Partitioner] | Mapping[str, Sequence[Partitioner]],
    *,
    device_backends: Iterable[str] = DEVICE_BACKENDS,
    emitter: PlacementPolicy = "error",
    placement: PlacementPolicy = "error",
) -> list[GuardedPartitioner] | dict[str, list[GuardedPartitioner]]:
    """``partitioners`` (a list, or a dict of method name to list, as
    ``to_edge_transform_and_lower`` takes them), each wrapped in a :class:`GuardedPartitioner`;
    the last of each list also checks what no partition took.

    Pair them with ``guard_passes(partitioner=...)``, which then leaves device constants to
    them::

        partitioner = eg.guard_partitioners([CudaPartitioner(specs)])
        to_edge_transform_and_lower(ep, transform_passes=eg.guard_passes(partitioner=partitioner), partitioner=partitioner)

    Args:
        partitioners: ExecuTorch partitioners, in the order they will run.
        device_backends: backend ids trusted to read device constants themselves;
            :data:`DEVICE_BACKENDS` by default. Add your own backend's id to trust it.
        emitter: ``"copy"`` when the device constants that no partition takes will be copied
            at emission (``to_executorch(ExecutorchBackendConfig(passes=emit_passes("copy")))``),
            as a backend that keeps some ops on the device wants; ``"error"`` (the default)
            stops them here.
        placement: ``"copy"`` to copy the program's device constants to the host before
            ``to_edge_transform_and_lower`` decomposes it, so that it decomposes as on the
            CPU (``guard_passes(config=Settings(placement="copy"), partitioner=...)`` sets it).

    Raises:
        TypeError: an element is not an ExecuTorch ``Partitioner``, or a backend id is not a string.
        ValueError: ``emitter`` or ``placement`` is not ``"error"`` or ``"copy"``.
    """
    trusted = (device_backends,) if isinstance(device_backends, str) else tuple(device_backends)
    if isinstance(device_backends, str) or not all(isinstance(b, str) for b in trusted):
        raise TypeError(f"device_backends must be backend id strings such as 'CudaBackend', not {device_backends!r}")
    if isinstance(partitioners, Mapping):
        return {name: _guarded(list(parts), trusted, emitter, placement) for name, parts in partitioners.items()}
    return _guarded(list(partitioners), trusted, emitter, placement)


def _guarded(
    partitioners: list[Partitioner], trusted: tuple[str, ...], emitter: PlacementPolicy, placement: PlacementPolicy
) -> list[GuardedPartitioner]:
    last = len(partitioners) - 1
    return [
        GuardedPartitioner(p, trusted, last=i == last, emitter=emitter, placement=placement)
        for i, p in enumerate(partitioners)
    ]
