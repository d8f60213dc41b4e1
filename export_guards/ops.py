"""What an FX node's call target is in ATen terms, in ATen and edge dialect alike."""

from __future__ import annotations

import torch

__all__ = ["aten_name", "aten_overload"]


def aten_overload(target: object) -> torch._ops.OpOverload | None:
    """The ATen ``OpOverload`` behind a call target; an edge op wraps one as ``_op``."""
    if isinstance(target, torch._ops.OpOverload):
        return target
    wrapped = getattr(target, "_op", None)
    return wrapped if isinstance(wrapped, torch._ops.OpOverload) else None


def aten_name(target: object) -> str | None:
    """The op's name without namespace or overload (``"convolution"``), if it is an op."""
    op = aten_overload(target)
    return op._schema.name.split("::")[-1] if op is not None else None
