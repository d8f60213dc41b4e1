"""The most elements a kernel whose result's size depends on the data can write, computed from its
inputs' sizes (a dynamic tensor's sizes are its upper bounds) without torch: one rule per
operator, each following its portable kernel in ExecuTorch's ``kernels/portable/cpu/``. Each
kernel counts what it selects, then resizes its out to the count (``resize_tensor``), which
fails the run where the count exceeds the out's planned capacity (``Attempted to resize a
bounded tensor with a maximum capacity of 48 elements to 288 elements``; EG526 compares).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from math import prod
from typing import NamedTuple

from export_guards.pte.reader.kernel_contracts import CallArguments
from export_guards.pte.reader.wheel import ExecutionPlan, OptionalTensorList, ScalarType, Tensor, TensorList

__all__ = ["BOUNDS", "Largest", "largest_result"]


class Largest(NamedTuple):
    """The most elements a call can write into one out, and from what, in the user's words."""

    out: str
    elements: int
    why: str


Bound = Callable[[CallArguments], Largest | None]


def largest_result(plan: ExecutionPlan, operator: str, arguments: Mapping[str, int]) -> Largest | None:
    """The largest result the call (schema name -> value index) of ``operator`` can write, where
    its rule reaches; None for an operator whose result does not depend on the data, or
    arguments the rule cannot read (inputs the kernel refuses are EG519's)."""
    bound = BOUNDS.get(operator)
    return bound(CallArguments(plan, operator, arguments)) if bound is not None else None


def _sizes(call: CallArguments, name: str) -> tuple[int, ...] | None:
    tensor = call.tensor(name)
    return tuple(tensor.sizes) if tensor is not None else None


def _broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...] | None:
    """broadcast_util.cpp, get_broadcast_target_size; None where they do not broadcast."""
    rank = max((len(shape) for shape in shapes), default=0)
    result = []
    for k in range(-rank, 0):
        sizes = {shape[k] for shape in shapes if -k <= len(shape)} - {1}
        if len(sizes) > 1:
            return None
        result.append(sizes.pop() if sizes else 1)
    return tuple(result)


def _masked_select(call: CallArguments) -> Largest | None:
    # op_masked_select.cpp: mask_true_count * (broadcast_numel / mask.numel()) elements, every
    # element of the broadcast shape where the mask is all true (torch.export bounds it by the
    # input's elements alone: pytorch/executorch#13585)
    given, mask = _sizes(call, "self"), _sizes(call, "mask")
    if given is None or mask is None:
        return None
    shape = _broadcast(given, mask)
    if shape is None:
        return None
    elements = 0 if 0 in (prod(given), prod(mask)) else prod(shape)
    return Largest(
        "out", elements, f"self {list(given)} broadcast with mask {list(mask)} to {list(shape)}, the mask all true"
    )


def _nonzero(call: CallArguments) -> Largest | None:
    # op_nonzero.cpp: one row of self.dim() indices per non-zero element, resized to [count, dim]
    given = _sizes(call, "self")
    if given is None:
        return None
    return Largest(
        "out",
        prod(given) * len(given),
        f"a row of {len(given)} indices for each of self {list(given)}'s {prod(given)} elements",
    )


def _index(call: CallArguments) -> Largest | None:
    """advanced_index_util.cpp, get_index_out_target_size: the input's dims that no index takes,
    and the indices' broadcast shape, where a boolean (or uint8) mask counts as a 1-D index of
    its true elements (at most all of them); integral indices alone do not depend on the data."""
    given, listed = _sizes(call, "self"), call.value("indices")
    if given is None or not isinstance(listed, (OptionalTensorList, TensorList)):
        return None
    values = call.plan.values
    indices = [
        values[i].val if 0 <= i < len(values) and isinstance(values[i].val, Tensor) else None for i in listed.items
    ]
    masks = [tuple(t.sizes) for t in indices if t is not None and t.scalar_type in _MASKS]
    if not masks:
        return None
    widths = [1 if t is None or t.scalar_type not in _MASKS else len(t.sizes) for t in indices]
    if sum(widths) > len(given):
        return None  # "Indexing too many dimensions": the kernel refuses the call
    kept = [n for t, at, width in zip(indices, _starts(widths), widths) if t is None for n in given[at : at + width]]
    kept += given[sum(widths) :]
    shapes = [tuple(t.sizes) for t in indices if t is not None and t.scalar_type not in _MASKS]
    integral = _broadcast(*shapes) if shapes else ()
    if integral is None:
        return None  # "Broadcast of index failed": the kernel refuses the call
    # a mask's count broadcasts into the last dim: it is that dim's size, or the kernel refuses it
    counted = integral[-1] if integral and integral[-1] != 1 else max(prod(m) for m in masks)
    listed_masks = ", ".join(str(list(m)) for m in masks)
    return Largest(
        "out",
        prod(kept) * prod(integral[:-1]) * counted,
        f"self {list(given)} indexed by boolean mask {listed_masks}, every element true",
    )


def _starts(widths: list[int]) -> list[int]:
    """Where each index's dims begin in the input."""
    return [sum(widths[:k]) for k in range(len(widths))]


_MASKS = frozenset({ScalarType.BOOL, ScalarType.BYTE})  # advanced_index_util.cpp, is_mask_index

BOUNDS: Mapping[str, Bound] = {
    "aten::masked_select": _masked_select,
    "aten::nonzero": _nonzero,
    "aten::index": _index,
}
"""Each operator whose kernel sizes its result by counting the data: how many elements it can
write at most. ``_unique2`` and ``unique_dim`` have no portable kernel (EG521 says so where the
runtime lacks one); ``repeat_interleave``'s result depends on the repeats' values, with no bound
in their sizes."""
