"""How the user's own script lowers, when it says more than a backend's name: its partitioners
(with their options), its ``EdgeCompileConfig`` and its ``ExecutorchBackendConfig``. The guarded
export lowers with exactly these, the guards added, so that the lint judges the program the
user ships."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, final

if TYPE_CHECKING:
    from executorch.exir import EdgeCompileConfig, ExecutorchBackendConfig
    from executorch.exir.backend.partitioner import Partitioner

__all__ = ["Lowering"]


@final
@dataclass(frozen=True)
class Lowering:
    """What ``to_edge_transform_and_lower`` and ``to_executorch`` are given, as the user's script
    gives them; ``None`` where it leaves ExecuTorch's default.

    Attributes:
        partitioners: the partitioners, as ``to_edge_transform_and_lower(partitioner=...)``
            takes them for one method, options and all (``[XnnpackPartitioner(...)]``), instead
            of the ``backend`` setting's default one; ``[]`` for the portable kernels alone.
            The guarded export wraps each in a ``GuardedPartitioner``.
        compile_config: the ``EdgeCompileConfig`` (``_core_aten_ops_exception_list``,
            ``_check_ir_validity``, ...).
        backend_config: the ``ExecutorchBackendConfig`` of ``to_executorch``; the guards'
            emit passes run after its own ``passes``.
    """

    partitioners: Sequence[Partitioner] | None = None
    compile_config: EdgeCompileConfig | None = None
    backend_config: ExecutorchBackendConfig | None = None

    def __post_init__(self) -> None:
        from executorch.exir import EdgeCompileConfig, ExecutorchBackendConfig
        from executorch.exir.backend.partitioner import Partitioner

        if self.partitioners is not None:
            if not isinstance(self.partitioners, (list, tuple)) or not all(isinstance(p, Partitioner) for p in self.partitioners):
                raise TypeError(
                    f"partitioners must be a list of ExecuTorch Partitioner instances, as to_edge_transform_and_lower takes for one "
                    f"method (such as [XnnpackPartitioner()]), not {_described(self.partitioners)}"
                )
            object.__setattr__(self, "partitioners", tuple(self.partitioners))
        if self.compile_config is not None and not isinstance(self.compile_config, EdgeCompileConfig):
            raise TypeError(f"compile_config must be an executorch.exir.EdgeCompileConfig, not {_described(self.compile_config)}")
        if self.backend_config is not None and not isinstance(self.backend_config, ExecutorchBackendConfig):
            raise TypeError(f"backend_config must be an executorch.exir.ExecutorchBackendConfig, not {_described(self.backend_config)}")

    @property
    def chosen(self) -> bool:
        """Whether the user chose anything here (else the guarded export's defaults stand)."""
        return self.partitioners is not None or self.compile_config is not None or self.backend_config is not None

    def refuse_recipe(self, recipe: str | None) -> None:
        """Nothing, unless ``recipe`` is named as well as a chosen lowering.

        Raises:
            ValueError: both are named: a recipe lowers with its own partitioners and configs.
        """
        if recipe is not None and self.chosen:
            raise ValueError(
                f"the recipe {recipe} lowers with its own partitioners and configs: name either the recipe or the lowering "
                "(partitioners, compile_config, backend_config), not both"
            )

    def emit_config(self, passes: Sequence[Any]) -> ExecutorchBackendConfig:
        """The ``ExecutorchBackendConfig`` to write the program with: the user's, with ``passes``
        (the guards' emit passes) after its own; or ExecuTorch's default with ``passes``."""
        from executorch.exir import ExecutorchBackendConfig

        if self.backend_config is None:
            return ExecutorchBackendConfig(passes=list(passes))
        return dataclasses.replace(self.backend_config, passes=[*self.backend_config.passes, *passes])


def _described(value: object) -> str:
    return f"a {type(value).__name__}"
