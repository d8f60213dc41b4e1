"""What the program side knows about ExecuTorch's kernels, by operator name (``aten::mm``, as
the ``.pte``'s operator table spells it): the program-side counterpart of ``analysis/ops.py``.
Each set says what a kernel does that its schema does not show, and who relies on it."""

from __future__ import annotations

__all__ = ["BYTE_COPIES", "COMPUTE", "DIM_ORDER_BLIND", "ONE_DTYPE", "VIEWS", "is_aten"]

COMPUTE = frozenset(
    f"aten::{name}" for name in ("convolution", "_convolution", "linear", "addmm", "mm", "bmm", "baddbmm", "matmul")
)
"""The convolutions and matrix products: the compute a delegate runs tens of times faster than
the portable kernels (EG520)."""

VIEWS = frozenset({"executorch_prim::et_view"})
"""Kernels whose out shares its input's memory (``(self, sizes, out)``; memory planning places
the out on its base): the dataflow reads them as views, not writes."""

BYTE_COPIES = frozenset(
    {"aten::view_copy", "aten::squeeze_copy", "aten::unsqueeze_copy", "aten::clone", "aten::alias_copy", "aten::slice_copy"}
)
"""Copies that write their input's leading bytes unchanged (a contiguous tensor's view, squeeze,
clone, or a slice of leading elements): placed at their input's offset they change nothing, so
EG518 does not call that overlap."""

DIM_ORDER_BLIND = frozenset({"aten::mm", "aten::bmm", "aten::exp", "aten::gelu", "aten::native_layer_norm"})
"""ATen kernels that neither check nor use a tensor's dim order: the optimized kernels that
executorch.runtime links for these read and write the bytes as contiguous. (Their portable
kernels, and ExecuTorch's other kernels, refuse the call. A method input is no exception: the
runtime copies the caller's bytes into the method's tensor, which keeps its dim order.) Proved
operator by operator in tests/test_pte_runtime_agreement.py; EG516 reads it."""

ONE_DTYPE = frozenset(
    f"aten::{name}"
    for name in (
        "convolution", "addmm", "mm", "bmm", "linear", "native_layer_norm", "native_group_norm",
        "_native_batch_norm_legit_no_training", "permute_copy", "view_copy", "expand_copy", "slice_copy",
        "select_copy", "transpose_copy", "squeeze_copy", "unsqueeze_copy", "clone", "constant_pad_nd",
        "_softmax", "_log_softmax", "avg_pool2d", "max_pool2d_with_indices",
    )
)  # fmt: skip
"""Kernels that take every tensor in one dtype (they check ``tensors_have_same_dtype`` and
refuse the call) where torch's meta kernels do not check: matrix products, convolutions,
normalisations, and the copies that only move elements. EG519 reads it."""


def is_aten(name: str) -> bool:
    """Whether ``name`` is an ATen operator's (ExecuTorch's kernel library implements it)."""
    return name.startswith("aten::")
