"""The shapes ExecuTorch's kernels resize their outs to, computed from a call's values without
torch: one rule per operator family. A static out of another shape fails the kernel's resize
(``InvalidArgument``: the runtime's ``resize_tensor(mean_out, {0})``); EG519 compares, as the
replay on meta tensors does with torch, and says it in the replay's words. Inputs from which a
rule computes no shape (operands that do not broadcast, matrices whose inner sizes differ, a view
of another number of elements) are the kernel's refusal of the call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from math import prod

from export_guards.pte.reader.kernel_contracts import OUT_SHAPES, CallArguments
from export_guards.pte.reader.wheel import Bool, ExecutionPlan, Int, Null, TensorList, TensorShapeDynamism

__all__ = ["RULES", "resized_out"]

Shapes = dict[str, tuple[int, ...]]
"""What a rule computes: the shape of each out it knows, by schema name."""
Rule = Callable[[CallArguments], Shapes | str | None]
"""An operator family's rule: the outs' shapes, the text of why the inputs give none, or None
where it cannot read the call."""


def resized_out(
    plan: ExecutionPlan, operator: str, arguments: Mapping[str, int]
) -> tuple[str, int, tuple[int, ...]] | str | None:
    """The first out of the call (schema name -> value index) whose planned shape is not the one
    ExecuTorch's kernel resizes it to, as (its name, its value index, that shape); or why the
    call's inputs give no shape; None where they agree or no rule reaches (an operator with no
    rule, a dynamic shape, arguments a rule cannot read)."""
    rule = RULES.get(operator)
    if rule is None:
        return None
    call = CallArguments(plan, operator, arguments)
    tensors = call.tensors()
    if any(t.shape_dynamism != TensorShapeDynamism.STATIC for _, t in tensors):
        return None  # sizes are bounds: the kernel resizes within them
    shapes = rule(call) or {}
    if isinstance(shapes, str):
        return shapes
    shapes.update({out: shape for (name, out), shape in OUT_SHAPES.items() if name == operator})
    for name, tensor in tensors:
        if name in shapes and tuple(tensor.sizes) != shapes[name]:
            return name, _value_index(call, name), shapes[name]
    return None


def _value_index(call: CallArguments, name: str) -> int:
    """The value index of a tensor ``call.tensors()`` names: an argument, or ``name[k]`` of a list."""
    listed, _, item = name.partition("[")
    return call.value(listed).items[int(item.rstrip("]"))] if item else call.arguments[name]


def _sizes(call: CallArguments, name: str) -> tuple[int, ...] | None:
    tensor = call.tensor(name)
    return tuple(tensor.sizes) if tensor is not None else None


def _int(call: CallArguments, name: str, default: int | None = None) -> int | None:
    value = call.value(name)
    return value.int_val if isinstance(value, Int) else default if isinstance(value, Null) else None


def _dim(dim: int, rank: int) -> int | None:
    """A dim as the kernel reads it (negative from the end), or None out of range
    (tensor_has_dim: a 0-d tensor has dim 0, or -1)."""
    rank = max(rank, 1)
    return dim + rank if -rank <= dim < 0 else dim if 0 <= dim < rank else None


def _dims(asked: list[int], rank: int, name: str, source: str) -> list[int] | str:
    """``asked`` (of the argument ``name``) as the kernel reads them, or why it refuses them: a dim out of range
    (tensor_has_dim, dim_is_valid), or one named twice (check_dim_list_is_valid,
    check_permute_copy_args). ``source`` says whose dims they are."""
    dims = [_dim(d, rank) for d in asked]
    if None in dims:
        given, top = asked[dims.index(None)], max(rank, 1)
        listed = f" (of {name} {asked})" if name != "dim" or len(asked) > 1 else ""
        return f"dim {given}{listed} is out of range for {source} (a {rank}-D tensor has dims {-top} to {top - 1})"
    twice = next((d for k, d in enumerate(dims) if d in dims[:k]), None)
    if twice is not None:
        return f"{name} {asked} names dim {twice} twice"
    return dims  # type: ignore[return-value]


def _same(source: str, *outs: str) -> Rule:
    """Outs of the source's shape: activations, softmax, copies, a normalisation's result."""

    def rule(call: CallArguments) -> Shapes | str | None:
        sizes = _sizes(call, source)
        return dict.fromkeys(outs, sizes) if sizes is not None else None

    return rule


def _broadcast(*sources: str) -> Rule:
    """An out of the sources' broadcast shape (a scalar operand is no tensor and takes no part)."""

    def rule(call: CallArguments) -> Shapes | str | None:
        named = [(name, shape) for name in sources if (shape := _sizes(call, name)) is not None]
        rank = max((len(shape) for _, shape in named), default=0)
        result = []
        for k in range(-rank, 0):
            sizes = {shape[k] for _, shape in named if -k <= len(shape)} - {1}
            if len(sizes) > 1:
                listed = " and ".join(f"{name} {list(shape)}" for name, shape in named)
                return f"{listed} do not broadcast (sizes {sorted(sizes)} at dim {k})"
            result.append(sizes.pop() if sizes else 1)
        return {"out": tuple(result)} if named else None

    return rule


def _reduced(call: CallArguments) -> Shapes | str | None:
    """A reduction over ``dim`` (one dim, a list, or every dim where it is null, empty or not an
    argument), kept as 1 with ``keepdim``."""
    sizes, keep, dim = _sizes(call, "self"), call.value("keepdim"), call.value("dim")
    asked = [dim.int_val] if isinstance(dim, Int) else [] if dim is None or isinstance(dim, Null) else call.ints("dim")
    if sizes is None or asked is None or (keep is not None and not isinstance(keep, Bool)):
        return None  # a keepdim of another kind is EG512's
    listed = _dims(asked, len(sizes), "dim", f"self {list(sizes)}")
    if isinstance(listed, str):
        return listed
    dims = set(listed) if asked else set(range(len(sizes)))
    if isinstance(keep, Bool) and keep.bool_val:
        return {"out": tuple(1 if k in dims else n for k, n in enumerate(sizes))}
    return {"out": tuple(n for k, n in enumerate(sizes) if k not in dims)}


def _product(left: str, right: str, added: str | None = None) -> Rule:
    """A matrix product (``mm``, ``addmm``) or a batch of them (``bmm``): the left's rows, the
    right's columns; ``addmm``'s added tensor broadcasts to that."""

    def rule(call: CallArguments) -> Shapes | str | None:
        a, b = _sizes(call, left), _sizes(call, right)
        if a is None or b is None or len(a) != len(b) or len(a) not in (2, 3):
            return None
        if a[-1] != b[-2] or a[:-2] != b[:-2]:
            return f"{left} {list(a)} and {right} {list(b)} cannot be multiplied"
        product, bias = a[:-1] + b[-1:], _sizes(call, added) if added else None
        if bias is not None and not _broadcasts_to(bias, product):
            return f"{added} {list(bias)} does not broadcast to the product's shape {list(product)}"
        return {"out": product}

    return rule


def _broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    return len(shape) <= len(target) and all(n in (1, t) for n, t in zip(reversed(shape), reversed(target)))


def _per_channel(call: CallArguments, shape: tuple[int, ...], *names: str) -> str | None:
    """normalization_ops_util.cpp: a normalisation's weight and bias of the shape it normalises by."""
    for name in names:
        given = _sizes(call, name)
        if given is not None and given != shape:
            return f"{name} {list(given)} is not of the normalised shape {list(shape)}"
    return None


def _permuted(call: CallArguments) -> Shapes | str | None:
    """copy_ops_util.cpp, check_permute_copy_args: one dim per dim of ``self``, each once."""
    sizes, dims = _sizes(call, "self"), call.ints("dims")
    if sizes is None or dims is None:
        return None
    if len(dims) != len(sizes):
        return f"dims {dims} is not a permutation of self {list(sizes)}'s {len(sizes)} dims"
    order = _dims(dims, len(sizes), "dims", f"self {list(sizes)}")
    return order if isinstance(order, str) else {"out": tuple(sizes[d] for d in order)}


def _viewed(call: CallArguments) -> Shapes | str | None:
    """The asked size, its one -1 inferred from the elements of ``self``."""
    sizes, asked = _sizes(call, "self"), call.ints("size")
    if sizes is None or asked is None or asked.count(-1) > 1:
        return None
    known = prod(n for n in asked if n != -1)
    if -1 in asked:
        if known == 0:
            return None
        asked = [prod(sizes) // known if n == -1 else n for n in asked] if prod(sizes) % known == 0 else asked
    if prod(asked) != prod(sizes):
        return f"size {asked} is not a view of self {list(sizes)} ({prod(sizes)} elements)"
    return {"out": tuple(asked)}


def _layer_norm(call: CallArguments) -> Shapes | str | None:
    """op_native_layer_norm.cpp: the result of the input's shape; mean and rstd of its leading
    dims, the normalised ones kept as 1."""
    sizes, normalized = _sizes(call, "input"), call.ints("normalized_shape")
    if sizes is None or normalized is None or not 0 < len(normalized) <= len(sizes):
        return None
    stats = sizes[: len(sizes) - len(normalized)] + (1,) * len(normalized)
    return _per_channel(call, tuple(normalized), "weight", "bias") or {"out0": sizes, "out1": stats, "out2": stats}


def _sliced(call: CallArguments) -> Shapes | str | None:
    """op_slice_copy.cpp: ``dim`` cut to the elements of ``range(start, end, step)``, both
    clamped; check_slice_copy_args: a dim of ``self``, a step above zero."""
    sizes, given, step = _sizes(call, "self"), _int(call, "dim"), _int(call, "step")
    if not sizes or given is None or step is None:
        return None
    dim = _dims([given], len(sizes), "dim", f"self {list(sizes)}")
    if isinstance(dim, str) or step <= 0:
        return dim if isinstance(dim, str) else f"step {step} is not above zero"
    dim = dim[0]
    start, end = _int(call, "start", 0), _int(call, "end", sizes[dim])
    if start is None or end is None:
        return None
    start, end = (min(max(n + sizes[dim] if n < 0 else n, 0), sizes[dim]) for n in (start, end))
    return {"out": (*sizes[:dim], max(0, -(-(end - start) // step)), *sizes[dim + 1 :])}


def _squeezed(call: CallArguments) -> Shapes | None:
    """The dims asked (one, a list, or every dim where ``dim`` is not an argument) dropped where
    they are 1."""
    sizes, dim = _sizes(call, "self"), call.value("dim")
    if sizes is None:
        return None
    asked = [dim.int_val] if isinstance(dim, Int) else list(range(len(sizes))) if dim is None else call.ints("dim")
    if not asked:
        return None
    dims = _dims(asked, len(sizes), "dim", f"self {list(sizes)}")
    if isinstance(dims, str):
        return dims
    return {"out": tuple(n for k, n in enumerate(sizes) if k not in dims or n != 1)}


def _windows(size: int, kernel: int, stride: int, padding: int, dilation: int, ceil: bool) -> int:
    """kernel_ops_util.cpp, calculate_kernel_output_sizes: the windows along one dim."""
    span = size + 2 * padding - dilation * (kernel - 1) - 1
    count = (span + (stride - 1 if ceil else 0)) // stride + 1
    return count - 1 if ceil and (count - 1) * stride >= size + padding else count


def _per_dim(values: list[int] | None, count: int, default: int | None = None) -> list[int] | None:
    """A kernel's per-dim list: one value for every dim, or one value per dim."""
    if not values:
        return [default] * count if default is not None else None
    return values * count if len(values) == 1 else values if len(values) == count else None


def _convolved(call: CallArguments) -> Shapes | str | None:
    """op_convolution.cpp, get_convolution_out_target_size: the batch, the weight's out channels,
    each spatial dim's windows (a transposed convolution's inverse of them)."""
    sizes, weight, groups, transposed = (
        _sizes(call, "input"),
        _sizes(call, "weight"),
        _int(call, "groups"),
        call.value("transposed"),
    )
    if (
        sizes is None
        or weight is None
        or not groups
        or not isinstance(transposed, Bool)
        or len(sizes) < 3
        or len(weight) != len(sizes)
    ):
        return None
    count = len(sizes) - 2
    stride, padding, dilation = (_per_dim(call.ints(name), count) for name in ("stride", "padding", "dilation"))
    extra = _per_dim(call.ints("output_padding"), count, 0)
    if stride is None or padding is None or dilation is None or extra is None or 0 in stride:
        return None
    taken = weight[0] if transposed.bool_val else weight[1] * groups
    if sizes[1] != taken:
        return (
            f"input {list(sizes)} has {sizes[1]} channels, and weight {list(weight)} in {groups} groups takes {taken}"
        )
    dims = list(zip(sizes[2:], weight[2:], stride, padding, dilation, extra))
    if transposed.bool_val:
        spatial = tuple((n - 1) * s - 2 * p + d * (k - 1) + e + 1 for n, k, s, p, d, e in dims)
        return {"out": (sizes[0], weight[1] * groups, *spatial)}
    spatial = tuple(_windows(n, k, s, p, d, False) for n, k, s, p, d, _ in dims)
    return {"out": (sizes[0], weight[0], *spatial)}


def _pooled(call: CallArguments) -> Shapes | None:
    """kernel_ops_util.cpp, get_max_pool2d_with_indices_out_target_size (and avg_pool2d's): the
    leading dims, then the windows of the last two; the indices of the out's shape."""
    sizes, ceil = _sizes(call, "self"), call.value("ceil_mode")
    kernel = _per_dim(call.ints("kernel_size"), 2)
    if sizes is None or kernel is None or not isinstance(ceil, Bool) or len(sizes) not in (3, 4):
        return None
    stride = _per_dim(call.ints("stride"), 2) or kernel  # an empty stride is the kernel's
    padding = _per_dim(call.ints("padding"), 2)
    dilation = _per_dim(call.ints("dilation"), 2, 1) if "dilation" in call.arguments else [1, 1]
    if padding is None or dilation is None or 0 in stride:
        return None
    spatial = tuple(
        _windows(n, k, s, p, d, ceil.bool_val) for n, k, s, p, d in zip(sizes[-2:], kernel, stride, padding, dilation)
    )
    shape = sizes[:-2] + spatial
    return {"out": shape, "indices": shape}


def _joined(call: CallArguments) -> Shapes | str | None:
    """copy_ops_util.cpp, get_cat_out_target_size: the tensors' sizes, ``dim`` summed (a legacy
    empty ``[0]`` tensor takes no part); check_cat_args: a dim of the tensors."""
    shapes = [tuple(t.sizes) for name, t in call.tensors() if name.startswith("tensors[") and list(t.sizes) != [0]]
    given = _int(call, "dim")
    if not shapes or given is None or len({len(s) for s in shapes}) != 1:
        return None
    dim = _dims([given], len(shapes[0]), "dim", f"tensors of shape {list(shapes[0])}")
    if isinstance(dim, str):
        return dim
    dim = dim[0]
    return {"out": (*shapes[0][:dim], sum(s[dim] for s in shapes), *shapes[0][dim + 1 :])}


def _embedded(call: CallArguments) -> Shapes | None:
    weight, indices = _sizes(call, "weight"), _sizes(call, "indices")
    return {"out": indices + weight[-1:]} if weight is not None and indices is not None and len(weight) == 2 else None


def _expanded(call: CallArguments) -> Shapes | str | None:
    """The asked size, a -1 keeping the source's dim; new dims lead."""
    sizes, asked = _sizes(call, "self"), call.ints("size")
    if sizes is None or asked is None or len(asked) < len(sizes):
        return None
    lead = len(asked) - len(sizes)
    if any(n == -1 for n in asked[:lead]):
        return None
    shape = tuple(sizes[k - lead] if n == -1 and k >= lead else n for k, n in enumerate(asked))
    if not _broadcasts_to(sizes, shape):
        return f"self {list(sizes)} does not expand to size {asked}"
    return {"out": shape}


def _filled(call: CallArguments) -> Shapes | None:
    asked = call.ints("size")
    return {"out": tuple(asked)} if asked is not None else None


def _group_norm(call: CallArguments) -> Shapes | str | None:
    """op_native_group_norm.cpp: the result of the input's shape; mean and rstd one per sample and group."""
    sizes, samples, channels, groups = _sizes(call, "input"), _int(call, "N"), _int(call, "C"), _int(call, "group")
    if sizes is None or samples is None or channels is None or groups is None:
        return None
    return _per_channel(call, (channels,), "weight", "bias") or {
        "out0": sizes,
        "out1": (samples, groups),
        "out2": (samples, groups),
    }


def _selected(call: CallArguments) -> Shapes | str | None:
    """copy_ops_util.cpp, check_select_copy_out_args: a dim of ``self``, an index of that dim."""
    sizes, given, index = _sizes(call, "self"), _int(call, "dim"), _int(call, "index")
    if not sizes or given is None:
        return None
    dim = _dims([given], len(sizes), "dim", f"self {list(sizes)}")
    if isinstance(dim, str):
        return dim
    dim = dim[0]
    if index is not None and not -sizes[dim] <= index < sizes[dim]:
        return f"index {index} is out of range for dim {given} of self {list(sizes)} (size {sizes[dim]})"
    return {"out": sizes[:dim] + sizes[dim + 1 :]}


def _unsqueezed(call: CallArguments) -> Shapes | str | None:
    """op_unsqueeze_copy.cpp: a dim of the out, one rank above ``self``."""
    sizes, given = _sizes(call, "self"), _int(call, "dim")
    if sizes is None or given is None:
        return None
    dim = _dims([given], len(sizes) + 1, "dim", f"the out of unsqueezing self {list(sizes)}")
    if isinstance(dim, str):
        return dim
    return {"out": (*sizes[: dim[0]], 1, *sizes[dim[0] :])}


def _copied(call: CallArguments) -> Shapes | str | None:
    """op_copy.cpp: ``src`` broadcasts to ``self``; ``copy.out``'s out of self's shape."""
    destination, source = _sizes(call, "self"), _sizes(call, "src")
    if destination is None or source is None:
        return None
    if not _broadcasts_to(source, destination):
        return f"src {list(source)} does not broadcast to self {list(destination)}"
    return {"out": destination}


def _split(call: CallArguments) -> Shapes | str | None:
    """op_split_with_sizes_copy.cpp: the sizes add up to ``dim``'s; one out per size."""
    sizes, split, given = _sizes(call, "self"), call.ints("split_sizes"), _int(call, "dim")
    if not sizes or split is None or given is None:
        return None
    dim = _dims([given], len(sizes), "dim", f"self {list(sizes)}")
    if isinstance(dim, str):
        return dim
    dim = dim[0]
    if sum(split) != sizes[dim]:
        return f"split_sizes {split} do not add up to self {list(sizes)}'s dim {given}"
    outs = call.value("out")
    if isinstance(outs, TensorList) and len(outs.items) != len(split):
        return f"split_sizes {split} make {len(split)} tensors, and out lists {len(outs.items)}"
    return {f"out[{k}]": (*sizes[:dim], n, *sizes[dim + 1 :]) for k, n in enumerate(split)}


_UNARY = (
    "abs", "neg", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "erf", "reciprocal", "sigmoid", "tanh", "relu",
    "gelu", "silu", "hardtanh", "hardswish", "hardsigmoid", "leaky_relu", "elu", "_softmax",
    "_log_softmax", "clone", "logical_not",
)  # fmt: skip
_BINARY = (
    "add", "sub", "rsub", "mul", "div", "maximum", "minimum", "atan2", "fmod", "remainder", "eq", "ne",
    "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor",
)  # fmt: skip

RULES: Mapping[str, Rule] = {
    **{f"aten::{name}": _same("self", "out") for name in _UNARY},
    **{f"aten::{name}": _broadcast("self", "other") for name in _BINARY},
    "aten::where": _broadcast("condition", "self", "other"),
    "aten::pow": _broadcast("self", "exponent"),
    "aten::clamp": _broadcast("self", "min", "max"),
    "dim_order_ops::_to_dim_order_copy": _same("self", "out"),
    "dim_order_ops::_clone_dim_order": _same("self", "out"),
    "aten::_native_batch_norm_legit_no_training": _same("input", "out0"),
    "aten::native_layer_norm": _layer_norm,
    "aten::mean": _reduced,
    "aten::sum": _reduced,
    "aten::amax": _reduced,
    "aten::amin": _reduced,
    "aten::mm": _product("self", "mat2"),
    "aten::bmm": _product("self", "mat2"),
    "aten::addmm": _product("mat1", "mat2", added="self"),
    "aten::permute_copy": _permuted,
    "aten::view_copy": _viewed,
    "aten::slice_copy": _sliced,
    "aten::squeeze_copy": _squeezed,
    "aten::index_put": _same("self", "out"),
    "aten::convolution": _convolved,
    "aten::max_pool2d_with_indices": _pooled,
    "aten::avg_pool2d": _pooled,
    "aten::any": _reduced,
    "aten::cat": _joined,
    "aten::embedding": _embedded,
    "aten::expand_copy": _expanded,
    "aten::full": _filled,
    "aten::full_like": _same("self", "out"),
    "aten::native_group_norm": _group_norm,
    "aten::select_copy": _selected,
    "aten::unsqueeze_copy": _unsqueezed,
    "aten::copy": _copied,
    "aten::copy_": _copied,
    "aten::split_with_sizes_copy": _split,
}
"""Each operator family's rule: the shape its kernel resizes each out to, as torch's meta kernel
computes it too, but for ``OUT_SHAPES``, where ExecuTorch's kernel differs (batch norm's
inference stats, ``[0]``)."""
