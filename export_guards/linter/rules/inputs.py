"""EG310: the shapes, dtypes and dim orders the method will take, where they are fixed."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from export_guards.analysis.dim_orders import is_channels_last, is_contiguous
from export_guards.linter.context import LintContext
from export_guards.ruleset import Hit, rule


@rule("EG310")
def fixed_input_shapes(context: LintContext) -> Iterator[Hit]:
    placeholders = context.placeholders
    described, fixed = [], []
    for name in context.program.graph_signature.user_inputs:
        value = placeholders[name].meta.get("val") if name in placeholders else None
        if not isinstance(value, torch.Tensor):
            continue
        static = all(isinstance(size, int) for size in value.shape)
        if static:
            fixed.append(name)
        shape = ", ".join(str(size) for size in value.shape)
        described.append(f"{name}: {str(value.dtype).removeprefix('torch.')}[{shape}] {_layout(value)}")
    if fixed:
        method = f"method '{context.method}'" if context.method else "the method"
        yield Hit(
            f"{method} takes {'; '.join(described)}; every dimension of {', '.join(fixed)} is fixed",
            placeholders[fixed[0]],
        )


def _layout(value: torch.Tensor) -> str:
    try:
        order = tuple(value.dim_order())
    except (RuntimeError, ValueError):  # strides no dim order explains (a broadcast input)
        return f"(strides {list(value.stride())})"
    if is_contiguous(order):
        return "(contiguous)"
    kind = "channels-last, " if is_channels_last(order) else ""
    return f"({kind}dim order {list(order)})"
