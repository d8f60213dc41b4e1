"""How the user's own script lowers, when it says more than a backend's name: its quantization
step, its partitioners (with their options), its ``EdgeCompileConfig`` and its
``ExecutorchBackendConfig``. The guarded export lowers with exactly these, the guards added, so
that the lint and the fixtures judge the program the user ships."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, final

from export_guards.errors import NotAModule

if TYPE_CHECKING:
    import torch
    from executorch.exir import EdgeCompileConfig, ExecutorchBackendConfig
    from executorch.exir.backend.partitioner import Partitioner

__all__ = ["Lowering", "NotAModule"]


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
        quantize: the user's quantization step, ``quantize(model, inputs) -> model`` (torchao's
            ``quantize_``, PT2E's prepare, calibrate and convert), run on a copy of the model
            before torch.export by what exports a model (``export_with_guards``, the fixtures;
            the lint runs a factory's on the model it builds): :meth:`quantized`.
            ``lower_with_guards`` takes a program already exported, and refuses one.
    """

    partitioners: Sequence[Partitioner] | None = None
    compile_config: EdgeCompileConfig | None = None
    backend_config: ExecutorchBackendConfig | None = None
    quantize: Callable[[Any, tuple[Any, ...]], Any] | None = None

    def __post_init__(self) -> None:
        from executorch.exir import EdgeCompileConfig, ExecutorchBackendConfig
        from executorch.exir.backend.partitioner import Partitioner

        if self.partitioners is not None:
            if not isinstance(self.partitioners, (list, tuple)) or not all(
                isinstance(p, Partitioner) for p in self.partitioners
            ):
                raise TypeError(
                    f"partitioners must be a list of ExecuTorch Partitioner instances, as to_edge_transform_and_lower takes for one "
                    f"method (such as [XnnpackPartitioner()]), not {_described(self.partitioners)}"
                )
            object.__setattr__(self, "partitioners", tuple(self.partitioners))
        if self.compile_config is not None and not isinstance(self.compile_config, EdgeCompileConfig):
            raise TypeError(
                f"compile_config must be an executorch.exir.EdgeCompileConfig, not {_described(self.compile_config)}"
            )
        if self.backend_config is not None and not isinstance(self.backend_config, ExecutorchBackendConfig):
            raise TypeError(
                f"backend_config must be an executorch.exir.ExecutorchBackendConfig, not {_described(self.backend_config)}"
            )
        if self.quantize is not None and not callable(self.quantize):
            raise TypeError(
                f"quantize must be a callable, quantize(model, inputs) -> model, not {_described(self.quantize)}"
            )

    @property
    def chosen(self) -> bool:
        """Whether the user chose how to lower (partitioners or configs; else the guarded
        export's defaults stand). The quantize step runs before any lowering, a recipe's too."""
        return self.partitioners is not None or self.compile_config is not None or self.backend_config is not None

    @property
    def after_quantize(self) -> Lowering:
        """This lowering for the model its quantize step made: the same, less the step."""
        return self if self.quantize is None else dataclasses.replace(self, quantize=None)

    def quantized(self, model: torch.nn.Module, inputs: tuple[Any, ...], *, copied: bool = True) -> torch.nn.Module:
        """``model`` as the quantize step makes it from ``inputs`` (``model`` itself without
        one): run on a deep copy, so that the caller's model is left as it was; ``copied=False``
        for a model made for this export alone (the lint's factory's). The lint, the fixtures
        and ``export_with_guards`` quantize here.

        Raises:
            NotAModule: the step returned something else than an ``nn.Module``.
        """
        import torch

        if self.quantize is None:
            return model
        made = self.quantize(copy.deepcopy(model) if copied else model, inputs)
        if not isinstance(made, torch.nn.Module):
            raise NotAModule(
                f"the quantize step must return the quantized nn.Module; it returned {_described(made)}"
                + (
                    " (torchao's quantize_ changes the model in place and returns None: return the model after it)"
                    if made is None
                    else ""
                )
            )
        return made

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

    def for_exported(self, taker: str) -> Lowering:
        """This lowering, for ``taker``, which takes a program already exported.

        Raises:
            ValueError: it has a quantize step, which runs on the model, before torch.export.
        """
        if self.quantize is not None:
            raise ValueError(
                f"{taker} takes a program torch.export already made: run the lowering's quantize step on the model before "
                "exporting it (export_with_guards and the fixtures run it), and pass lowering.after_quantize"
            )
        return self

    def emit_config(self, passes: Sequence[Any]) -> ExecutorchBackendConfig:
        """The ``ExecutorchBackendConfig`` to write the program with: the user's, with ``passes``
        (the guards' emit passes) after its own; or ExecuTorch's default with ``passes``."""
        from executorch.exir import ExecutorchBackendConfig

        if self.backend_config is None:
            return ExecutorchBackendConfig(passes=list(passes))
        return dataclasses.replace(self.backend_config, passes=[*self.backend_config.passes, *passes])


def _described(value: object) -> str:
    return f"a {type(value).__name__}"
