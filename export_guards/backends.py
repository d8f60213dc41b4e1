"""The one table of the backends the guards know: what each is called, how its partitioners are
made, the backend ids its partitions carry, whether it holds device memory on purpose, and
whether the partitioned-stage lint speaks of its decisions. Imports neither torch nor
ExecuTorch: the partitioners are imported only when a backend's are made."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, final

if TYPE_CHECKING:
    from executorch.exir.backend.partitioner import Partitioner

__all__ = ["BACKEND_TABLE", "BackendInfo", "backend_named", "device_backend_ids", "partitioned_lint_applies"]


@final
@dataclass(frozen=True)
class BackendInfo:
    """One backend.

    Attributes:
        name: its name in the settings (``backend = "xnnpack"``), or ``None`` for one the
            guards know but do not offer as a setting (a backend of another process's recipes).
        partitioner: ``"module:Class"`` of its partitioner; ``None`` for the portable kernels
            (no partitioner).
        backend_ids: the ``DelegationSpec.backend_id`` of its partitions.
        holds_device_memory: its ``preprocess`` reads device constants from the device itself
            (the AOTInductor backends move the program there first), so a device constant
            that only its partitions take may stay on the device.
        partitioned_lint: the partitioned-stage rules (EG4xx) explain its decisions.
        compile_specs: its partitioner is made with a list of compile specs (an empty one),
            as the AOTInductor partitioners require; otherwise with no argument.
    """

    name: str | None
    partitioner: str | None
    backend_ids: tuple[str, ...]
    holds_device_memory: bool = False
    partitioned_lint: bool = False
    compile_specs: bool = False

    def partitioners(self) -> list[Partitioner]:
        """Its partitioners, imported now (an empty list for the portable kernels)."""
        if self.partitioner is None:
            return []
        module, _, name = self.partitioner.partition(":")
        factory: Callable[..., Partitioner] = getattr(importlib.import_module(module), name)
        return [factory([]) if self.compile_specs else factory()]


BACKEND_TABLE: tuple[BackendInfo, ...] = (
    BackendInfo(
        "xnnpack",
        "executorch.backends.xnnpack.partition.xnnpack_partitioner:XnnpackPartitioner",
        ("XnnpackBackend",),
        partitioned_lint=True,
    ),
    BackendInfo("portable", None, ()),
    BackendInfo(
        "cuda",
        "executorch.backends.cuda.cuda_partitioner:CudaPartitioner",
        ("CudaBackend",),
        holds_device_memory=True,
        compile_specs=True,
    ),
    BackendInfo(
        None,
        "executorch.backends.apple.metal.metal_partitioner:MetalPartitioner",
        ("MetalBackend",),
        holds_device_memory=True,
        compile_specs=True,
    ),
)
"""Every backend the guards know; the settings offer those with a name."""


def backend_named(name: str) -> BackendInfo:
    """The backend of that settings name.

    Raises:
        ValueError: no backend of that name is offered.
    """
    for info in BACKEND_TABLE:
        if info.name == name:
            return info
    offered = ", ".join(repr(info.name) for info in BACKEND_TABLE if info.name)
    raise ValueError(f"unknown backend {name!r}; the backends are {offered}")


def device_backend_ids() -> tuple[str, ...]:
    """The backend ids trusted with device constants: those of the backends that hold device
    memory on purpose."""
    return tuple(backend_id for info in BACKEND_TABLE if info.holds_device_memory for backend_id in info.backend_ids)


def partitioned_lint_applies(backend_id: str) -> bool:
    """Whether the partitioned-stage rules explain the decisions of the backend of that id."""
    return any(info.partitioned_lint and backend_id in info.backend_ids for info in BACKEND_TABLE)
