"""What the program side knows about ExecuTorch's kernels, by operator name (``aten::mm``, as
the ``.pte``'s operator table spells it): the program-side counterpart of ``analysis/ops.py``.
Each set says what a kernel does that its schema does not show, and who relies on it."""

from __future__ import annotations

from types import MappingProxyType

__all__ = [
    "BYTE_COPIES",
    "COMPUTE",
    "DIM_ORDER_BLIND",
    "DISJOINT_POOLS",
    "ELEMENTWISE",
    "INNER_REDUCTIONS",
    "ONE_DTYPE",
    "RIGHT_MATRIX",
    "SCALAR_HOISTING",
    "SELF_COPIED_FIRST",
    "VIEWS",
    "is_aten",
    "spelled",
]

COMPUTE = frozenset(
    f"aten::{name}" for name in ("convolution", "_convolution", "linear", "addmm", "mm", "bmm", "baddbmm", "matmul")
)
"""The convolutions and matrix products: the compute a delegate runs tens of times faster than
the portable kernels (EG520)."""

VIEWS = frozenset({"executorch_prim::et_view"})
"""Kernels whose out shares its input's memory (``(self, sizes, out)``; memory planning places
the out on its base): the dataflow reads them as views, not writes."""

BYTE_COPIES = frozenset(
    {
        "aten::view_copy",
        "aten::squeeze_copy",
        "aten::unsqueeze_copy",
        "aten::clone",
        "aten::alias_copy",
        "aten::slice_copy",
    }
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
        "_softmax", "_log_softmax", "avg_pool2d", "max_pool2d_with_indices", "index", "index_put",
    )
)  # fmt: skip
"""Kernels that take every tensor in one dtype (they check ``tensors_have_same_dtype`` and
refuse the call) where torch's meta kernels do not check: matrix products, convolutions,
normalisations, the copies that only move elements, and advanced indexing (op_index.cpp,
op_index_put.cpp: self, values and out; the index tensors have dtypes of their own). EG519
reads it."""


ELEMENTWISE = frozenset(
    f"aten::{name}"
    for name in (
        "add", "sub", "rsub", "mul", "div", "pow", "neg", "abs", "relu", "sigmoid", "tanh", "gelu", "silu",
        "hardtanh", "hardswish", "hardsigmoid", "leaky_relu", "elu", "clamp", "exp", "log", "sqrt", "rsqrt",
        "sin", "cos", "erf", "reciprocal", "where", "masked_fill", "_to_copy", "copy", "logical_not",
        "_native_batch_norm_legit_no_training",
    )
) | {"dim_order_ops::_to_dim_order_copy", "dim_order_ops::_clone_dim_order"}  # fmt: skip
"""Kernels that compute each element of their out from the same element of their inputs (and,
for batch norm, its channel's parameters), reading it before writing it: an out placed on such
an input from its first byte, of its shape and of elements no wider, is computed right. Any other kernel may read an input after writing its out (a matrix product reads
every row for every column), so EG518 calls an out that shares an input's bytes within the call
an overlap."""


SELF_COPIED_FIRST = frozenset({"aten::index_put"})
"""Kernels that copy their ``self`` into their out before anything else, then write other
values into the out at given places (op_index_put.cpp): an out placed exactly on ``self`` (same
bytes, dtype, shape and dim order) copies it onto itself and the call runs as in place (EG518)."""


INNER_REDUCTIONS = frozenset({"aten::mean", "aten::sum", "aten::amax", "aten::amin", "aten::prod"})
"""Kernels that, reducing a tensor's inner dims, make each out element from one run of input
elements and write it after reading them: an out over that input from its first byte is
computed right (EG518)."""


DISJOINT_POOLS = MappingProxyType({"aten::max_pool2d_with_indices": 5, "aten::avg_pool2d": 4})
"""2-D pools by the position of their ``ceil_mode`` argument (``(self, kernel_size, stride,
padding, [dilation,] ceil_mode, ...)``): with disjoint windows each out element is written after
its window is read and behind the windows still to read (EG518)."""

RIGHT_MATRIX = MappingProxyType({"aten::mm": 1, "aten::bmm": 1, "aten::addmm": 2})
"""Matrix products by the position of their right-hand matrix: a one-row out over it from its
first byte writes element j after its last read of column j (EG518)."""

SCALAR_HOISTING = frozenset({"aten::add", "aten::sub", "aten::mul", "aten::div"})
"""Arithmetic kernels whose optimized forms (those executorch.runtime links) read a one-element
input once, as a scalar, before writing anything; the portable forms read it for each element
(EG518 warns of an out written over such an input)."""


def is_aten(name: str) -> bool:
    """Whether ``name`` is an ATen operator's (ExecuTorch's kernel library implements it)."""
    return name.startswith("aten::")


def spelled(name: str, overload: str) -> str:
    """An operator as the runtime's kernel registry names it: ``aten::mm.out``, or ``aten::copy_``
    for a default overload (an empty one in the program's operator table)."""
    return f"{name}.{overload}" if overload else name
