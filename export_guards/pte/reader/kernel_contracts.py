"""What ExecuTorch's portable kernels require of a call that torch's meta kernels do not check:
the shapes they resize outputs to, the ranks they take parameters in, the dtypes of indices,
the dim orders they copy by. Each entry follows one kernel of ExecuTorch's
``kernels/portable/cpu/`` (named beside it); EG519 asks here after replaying the call on meta
tensors.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NamedTuple

from export_guards.analysis.dim_orders import is_channels_last, is_contiguous
from export_guards.pte.reader.tensors import dtype_name
from export_guards.pte.reader.wheel import (
    Bool,
    Double,
    ExecutionPlan,
    Int,
    IntList,
    Null,
    OptionalTensorList,
    ScalarType,
    String,
    Tensor,
    TensorList,
)

__all__ = ["ONE_DIM_ORDER", "OUT_SHAPES", "RANKS", "CallArguments", "Refused", "refusal"]

# An out that ExecuTorch's kernel resizes to a shape of its own, not the one torch computes: a
# static tensor of any other shape fails the resize (``InvalidArgument``).
OUT_SHAPES: Mapping[tuple[str, str], tuple[int, ...]] = {
    # op_native_batch_norm.cpp: the inference form leaves its mean and invstd empty
    ("aten::_native_batch_norm_legit_no_training", "out1"): (0,),
    ("aten::_native_batch_norm_legit_no_training", "out2"): (0,),
}


class _Call:
    """One kernel call's arguments by schema name, read from the method's values."""

    def __init__(self, plan: ExecutionPlan, operator: str, arguments: Mapping[str, int]) -> None:
        self.plan, self.operator, self.arguments = plan, operator, arguments

    def value(self, name: str) -> object:
        index = self.arguments.get(name)
        return self.plan.values[index].val if index is not None and 0 <= index < len(self.plan.values) else None

    def tensor(self, name: str) -> Tensor | None:
        value = self.value(name)
        return value if isinstance(value, Tensor) else None

    def ints(self, name: str) -> list[int] | None:
        value = self.value(name)
        if not isinstance(value, IntList):
            return None
        items = [self.plan.values[i].val if 0 <= i < len(self.plan.values) else None for i in value.items]
        return [item.int_val for item in items] if all(isinstance(item, Int) for item in items) else None

    def tensors(self) -> list[tuple[str, Tensor]]:
        """The call's tensors by schema name, in order, a list's as ``name[i]``."""
        found: list[tuple[str, Tensor]] = []
        for name in self.arguments:
            value = self.value(name)
            if isinstance(value, Tensor):
                found.append((name, value))
            elif isinstance(value, TensorList):
                items = [self.plan.values[i].val if 0 <= i < len(self.plan.values) else None for i in value.items]
                found.extend((f"{name}[{k}]", item) for k, item in enumerate(items) if isinstance(item, Tensor))
        return found

    def blocking(self) -> str | None:
        flag = self.value("non_blocking")
        return (
            "non_blocking=True, which ExecuTorch's copies do not take"
            if isinstance(flag, Bool) and flag.bool_val
            else None
        )


CallArguments = _Call  # what reader/out_shapes.py reads a call's values with


class Refused(NamedTuple):
    """A call ExecuTorch's portable kernel refuses for a cause in the user's model (a rank, a pad,
    a layout), where torch's meta kernel takes it: EG519 places it on the user's line and gives
    the fix of that cause, not its general one (re-export)."""

    reason: str
    fix: str


def refusal(plan: ExecutionPlan, operator: str, arguments: Mapping[str, int]) -> str | Refused | None:
    """Why ExecuTorch's kernel for ``operator`` refuses a call whose arguments (schema name ->
    value index) torch's meta kernel accepted, or None: a ``Refused`` where the cause is the
    model's, a text where the program itself is inconsistent."""
    for check in (
        _CONTRACTS.get(operator),
        _rank if operator in RANKS else None,
        _one_dim_order if operator in ONE_DIM_ORDER else None,
    ):
        found = check(_Call(plan, operator, arguments)) if check is not None else None
        if found is not None:
            return found
    return None


def _constant_pad(call: _Call) -> Refused | None:
    # kernel_ops_util.cpp, check_constant_pad_args: pads in pairs, at most one pair per dimension,
    # none negative ("Padding values must be non-negative, but got pad[1] = -1"); torch's meta
    # kernel takes a negative pad (a crop), and XNNPACK declines it, so it reaches this kernel
    pad, given = call.ints("pad"), call.tensor("self")
    if pad is None or given is None:
        return None
    if len(pad) % 2 or len(pad) // 2 > len(given.sizes):
        return Refused(f"pad {pad} is not one pair per dimension of a rank-{len(given.sizes)} input", _PAD_FIX)
    negative = next((i for i, p in enumerate(pad) if p < 0), None)
    if negative is not None:
        return Refused(
            f"pad {pad} is negative (pad[{negative}] = {pad[negative]}): it pads and never crops, and fails the run",
            _PAD_FIX,
        )
    return None


_PAD_FIX = (
    "Crop with slicing instead of a negative pad (x[..., :-1] for pad (0, -1)), and pad only with non-negative "
    "amounts: ExecuTorch's kernel pads and never crops."
)


class _Ranks(NamedTuple):
    argument: str
    ranks: frozenset[int]
    what: str  # what the ranks mean to the user
    fix: str


RANKS: Mapping[str, _Ranks] = {
    # kernel_ops_util.cpp, check_convolution_args: "Expect input tensor to be 3-D or 4-D"; torch
    # takes 5-D (Conv3d, ConvTranspose3d), and XNNPACK declines them ("Only support 1D + 2D Conv")
    "aten::convolution": _Ranks(
        "input",
        frozenset({3, 4}),
        "1-D and 2-D convolutions only",
        "ExecuTorch has no 3-D convolution kernel, and XNNPACK declines Conv3d: express it as 2-D convolutions "
        "(a Conv3d is the sum, over its kernel's depth, of Conv2d on the input's depth slices, with the depth "
        "folded into the batch: x.transpose(1, 2).flatten(0, 1)), or compute the 3-D part outside the exported "
        "model.",
    ),
}
"""The ranks a portable kernel takes one argument in, where torch's meta kernel takes more: each
entry proved against the runtime (a program at each refused rank fails its run, one at each
taken rank runs) in ``tests/test_kernel_contracts.py``."""


def _rank(call: _Call) -> Refused | None:
    contract = RANKS[call.operator]
    given = call.tensor(contract.argument)
    if given is None or len(given.sizes) in contract.ranks:
        return None
    taken = " or ".join(f"{r}-D" for r in sorted(contract.ranks))
    return Refused(
        f"{contract.argument} of rank {len(given.sizes)} ({list(given.sizes)}): its portable kernel takes {taken} "
        f"({contract.what}) and fails the run",
        contract.fix,
    )


ONE_DIM_ORDER: frozenset[str] = frozenset({
    # op_add.cpp, op_sub.cpp, op_mul.cpp, op_div.cpp, op_pow.cpp, op_fmod.cpp, op_remainder.cpp,
    # op_maximum.cpp, op_minimum.cpp, op_atan2.cpp: tensors_have_same_dim_order(a, b, out)
    "aten::add", "aten::sub", "aten::mul", "aten::div", "aten::pow", "aten::fmod", "aten::remainder",
    "aten::maximum", "aten::minimum", "aten::atan2",
    # comparison_op.h, logical_op.h, bitwise_op.h: the same check, for each operator they make
    "aten::eq", "aten::ne", "aten::lt", "aten::le", "aten::gt", "aten::ge",
    "aten::logical_and", "aten::logical_or", "aten::logical_xor",
    "aten::bitwise_and", "aten::bitwise_or", "aten::bitwise_xor",
    # op_where.cpp (cond, a, b, out); op_clamp.cpp (in, min, max, out); copy_ops_util.cpp (cat: each tensor, out)
    "aten::where", "aten::clamp", "aten::cat",
})  # fmt: skip
"""Operators whose portable kernel takes all its tensors, out included, in one dim order: all
contiguous or all channels-last (``tensors_have_same_dim_order``: "3 input tensors have different
dim orders"); a tensor of fewer than 4 dimensions (a 0-d scalar operand) is contiguous only.
torch's kernels take any mix (a channels-last input times a scalar, plus a contiguous one). Each
proved against the runtime in ``tests/test_kernel_contracts.py``."""


def _one_dim_order(call: _Call) -> Refused | None:
    tensors = call.tensors()
    orders = [list(tensor.dim_order) for _, tensor in tensors]
    if len(tensors) < 2 or all(map(is_contiguous, orders)) or all(map(is_channels_last, orders)):
        return None
    listed = ", ".join(f"{name} {_layout(tensor)}" for name, tensor in tensors)
    return Refused(
        f"its tensors are in different dim orders ({listed}): its portable kernel takes them all in one dim "
        f"order, all contiguous or all channels-last, and fails the run",
        _DIM_ORDER_FIX,
    )


def _layout(tensor: Tensor) -> str:
    order = list(tensor.dim_order)
    kind = (
        "contiguous" if is_contiguous(order) else "channels-last" if is_channels_last(order) else f"dim order {order}"
    )
    return f"{list(tensor.sizes)} {kind}"


_DIM_ORDER_FIX = (
    "Give the op's tensors one memory format: .contiguous() the channels-last tensor before the op (a scalar or "
    "a tensor of fewer than 4 dimensions is contiguous only), or pass the model's inputs contiguous "
    "(x.contiguous() instead of x.to(memory_format=torch.channels_last)); or lower the op into a delegate that "
    "takes it."
)


def _batch_norm(call: _Call) -> str | None:
    # normalization_ops_util.cpp, check_batch_norm_args: each parameter one value per channel
    given = call.tensor("input")
    if given is None:
        return None
    channels = given.sizes[1] if len(given.sizes) >= 2 else (given.sizes[0] if given.sizes else 1)
    for name in ("weight", "bias", "running_mean", "running_var"):
        tensor = call.tensor(name)
        if tensor is not None and list(tensor.sizes) != [channels]:
            return f"with {name} of shape {list(tensor.sizes)}: ExecuTorch's kernel takes it as [{channels}], one value per channel of the input"
    return None


def _dim_order_copy(call: _Call) -> str | None:
    # copy_ops_util.cpp, check__to_dim_order_copy_args
    source, out = call.tensor("self"), call.tensor("out")
    if source is None or out is None:
        return call.blocking()
    asked = call.ints("dim_order")
    if asked is None and not isinstance(call.value("dim_order"), Null):
        return None  # not a list of ints: EG512's
    rank = len(source.sizes)
    if asked is not None and (len(asked) != rank or not (is_contiguous(asked) or is_channels_last(asked))):
        return f"with dim_order {asked}, which is neither contiguous nor channels-last for rank {rank}: ExecuTorch's kernel refuses it"
    wanted = asked if asked is not None else list(source.dim_order)
    if list(out.dim_order) != wanted:
        return (
            f"with an out of dim order {list(out.dim_order)}, but it copies into dim order {wanted}: ExecuTorch's kernel "
            f"refuses the call"
        )
    return call.blocking()


def _copy(call: _Call) -> str | None:
    # op_copy.cpp: copy_ and copy.out take the source in the destination's dim order and dtype
    destination, source, out = call.tensor("self"), call.tensor("src"), call.tensor("out")
    if out is not None and destination is not None and out.scalar_type != destination.scalar_type:
        return "with an out of another dtype than self: ExecuTorch's kernel refuses the call"
    if out is not None and destination is not None and list(out.dim_order) != list(destination.dim_order):
        return f"with self in dim order {list(destination.dim_order)} and out in {list(out.dim_order)}: ExecuTorch's kernel refuses the call"
    if (
        out is None
        and destination is not None
        and source is not None
        and list(destination.dim_order) != list(source.dim_order)
    ):
        return f"with self in dim order {list(destination.dim_order)} and src in {list(source.dim_order)}: ExecuTorch's kernel refuses the call"
    return call.blocking()


def _pool_indices(call: _Call) -> str | None:
    # op_max_pool2d_with_indices.cpp, check_max_pool2d_with_indices_args: the indices out is int64
    indices = call.tensor("indices")
    if indices is not None and indices.scalar_type != ScalarType.LONG:
        return f"with an indices out of dtype {dtype_name(indices.scalar_type)}: ExecuTorch's kernel writes int64 indices and refuses the call"
    return None


def _index_dtypes(call: _Call) -> str | None:
    # advanced_index_util.cpp, check_indices_dtypes: each index tensor int64, int32, uint8 or bool
    listed = call.value("indices")
    if not isinstance(listed, (TensorList, OptionalTensorList)):
        return None
    for item in listed.items:
        tensor = call.plan.values[item].val if 0 <= item < len(call.plan.values) else None
        if isinstance(tensor, Tensor) and tensor.scalar_type not in _INDEX_DTYPES:
            return (
                f"with index tensor value {item} of dtype {dtype_name(tensor.scalar_type)}: ExecuTorch's kernel takes indices of dtype int64, "
                f"int32, uint8 or bool and refuses the call"
            )
    return None


_INDEX_DTYPES = frozenset({ScalarType.LONG, ScalarType.INT, ScalarType.BYTE, ScalarType.BOOL})


# The kinds of dtype canCast and promoteTypes tell apart (scalar_type_util.h), in promotion order:
# a common dtype is of the highest kind among its operands'.
_BOOL, _INTEGRAL, _FLOATING, _COMPLEX = range(4)
_KINDS = {
    ScalarType.BOOL: _BOOL,
    **dict.fromkeys((ScalarType.BYTE, ScalarType.CHAR, ScalarType.SHORT, ScalarType.INT, ScalarType.LONG), _INTEGRAL),
    **dict.fromkeys((ScalarType.UINT16, ScalarType.UINT32, ScalarType.UINT64), _INTEGRAL),
    **dict.fromkeys((ScalarType.HALF, ScalarType.FLOAT, ScalarType.DOUBLE, ScalarType.BFLOAT16), _FLOATING),
    **dict.fromkeys((ScalarType.COMPLEX32, ScalarType.COMPLEX64, ScalarType.COMPLEX128), _COMPLEX),
}
_SCALAR_KINDS = {Bool: _BOOL, Int: _INTEGRAL, Double: _FLOATING}  # utils::get_scalar_dtype: Bool, Long, Double
_KIND_NAMES = ("bool", "integral", "floating-point", "complex")


def _can_cast(kind: int, to: int) -> bool:
    """canCast (scalar_type_util.h): no complex to non-complex, no floating point to an integral
    dtype, nothing but bool to bool."""
    return (
        not (kind == _COMPLEX and to != _COMPLEX)
        and not (kind == _FLOATING and to == _INTEGRAL)
        and not (kind != _BOOL and to == _BOOL)
    )


def _operand_kind(call: _Call, name: str) -> int | None:
    value = call.value(name)
    return _KINDS.get(value.scalar_type) if isinstance(value, Tensor) else _SCALAR_KINDS.get(type(value))


def _common_dtype(*operands: str, rounded: bool = False) -> Callable[[_Call], str | None]:
    """op_add.cpp, op_sub.cpp, op_mul.cpp, op_maximum.cpp, op_pow.cpp, ...: the operands'
    common dtype (promoteTypes, or promote_type_with_scalar for a scalar operand) must cast to
    the out's (canCast, "Check Common Dtype"), and add's and sub's alpha to the common dtype
    (check_alpha_type); ``rounded``: only with a rounding mode (op_div.cpp: true division
    computes in a floating-point dtype of its own). torch's meta kernels check the same; without
    torch, this is the check."""

    def check(call: _Call) -> str | None:
        out = call.tensor("out")
        if rounded and not isinstance(call.value("rounding_mode"), String):
            return None
        kinds = [_operand_kind(call, name) for name in operands]
        if out is None or out.scalar_type not in _KINDS or None in kinds:
            return None  # a quantized dtype, an operand of another kind: out of reach
        common, to = max(kinds), _KINDS[out.scalar_type]  # type: ignore[type-var]
        if not _can_cast(common, to):
            listed = ", ".join(f"{name} {_described(call, name)}" for name in operands)
            return (
                f"with an out of dtype {dtype_name(out.scalar_type)} for operands ({listed}) of a {_KIND_NAMES[common]} "
                f"common dtype, which does not cast to it: ExecuTorch's kernel refuses the call"
            )
        alpha = _SCALAR_KINDS.get(type(call.value("alpha")))
        if alpha is not None and not (_can_cast(alpha, common) or (common == _BOOL and alpha != _FLOATING)):
            return f"with an alpha of a {_KIND_NAMES[alpha]} kind for operands of a {_KIND_NAMES[common]} common dtype: ExecuTorch's kernel refuses the call"
        return None

    return check


def _described(call: _Call, name: str) -> str:
    value = call.value(name)
    return dtype_name(value.scalar_type) if isinstance(value, Tensor) else f"a {type(value).__name__} scalar"


_CAST_CHECKED = (
    "add", "sub", "mul", "maximum", "minimum", "fmod", "remainder",
    "bitwise_and", "bitwise_or", "bitwise_xor",
)  # fmt: skip


_CONTRACTS: Mapping[str, Callable[[_Call], str | None]] = {
    **{f"aten::{name}": _common_dtype("self", "other") for name in _CAST_CHECKED},
    "aten::pow": _common_dtype("self", "exponent"),
    "aten::div": _common_dtype("self", "other", rounded=True),
    "aten::constant_pad_nd": _constant_pad,
    "aten::max_pool2d_with_indices": _pool_indices,
    "aten::index_put": _index_dtypes,
    "aten::index": _index_dtypes,
    "aten::_native_batch_norm_legit_no_training": _batch_norm,
    "aten::_native_batch_norm_legit": _batch_norm,
    "dim_order_ops::_to_dim_order_copy": _dim_order_copy,
    "dim_order_ops::_clone_dim_order": _dim_order_copy,
    "aten::copy": _copy,
    "aten::copy_": _copy,
}
