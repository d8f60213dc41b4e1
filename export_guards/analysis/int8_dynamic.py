"""Where a torch.export program computes a linear as torchao's int8 x int8 dynamic quantization
does (``Int8DynamicActivationInt8WeightConfig``): an ``aten._int_mm`` that ``to_edge`` rejects.

torchao's ``Int8Tensor`` linear exports as the activation quantized per token
(``choose_qparams_affine``, ``quantize_affine``), ``_int_mm(q_act.reshape(-1, K), qdata.t())``,
the int32 product converted to float, multiplied by the activation's scale and by the weight's
per-channel scale, reshaped to the linear's output (and the bias added): found here from the
``_int_mm``, with each part checked, so that what the rewrite replaces is that linear and
nothing else.

On a CPU with AVX512-VNNI but no AMX, torchao (``intmm.safe_int_mm``) computes the same
product in the u8s8 form: the activation shifted by 128 into uint8, and the shift taken back
from the product (``sub_(_int_mm(a + 128, b), b.sum(0) * 128)``): the same values, found too.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import cast, final

import torch
from torch.export import ExportedProgram
from torch.fx import Node
from typing_extensions import TypeIs

from export_guards.analysis.ops import aten_name, input_node, value_dtype

__all__ = ["INT_MM", "Int8DynamicLinear", "int8_dynamic_linears", "is_assertion", "weight_part"]

INT_MM = "_int_mm"
"""The op that ``to_edge`` rejects (not core ATen): torchao's int8 x int8 matrix product."""

# Ops that give their first input's values in another shape: a walk through them reaches the
# tensor whose values an operand is.
_RESHAPES = frozenset({"reshape", "view", "flatten", "unsqueeze", "squeeze", "_unsafe_view", "view_copy"})
_TRANSPOSES = frozenset({"t", "permute", "transpose", "numpy_T"})
_CASTS = frozenset({"to", "_to_copy"})
_ASSERT = "_assert_tensor_metadata"
_INNER = torch.ops.export.access_subclass_inner_tensor.default


@final
@dataclass(frozen=True)
class Int8DynamicLinear:
    """One linear computed as torchao's int8 x int8 dynamic quantization.

    Attributes:
        matmul: the ``aten._int_mm``.
        quantized: the activation's ``torchao.quantize_affine`` (its input, block size, scale,
            zero point and range are the activation's quantization).
        weight: the quantized weight (the parameter holding torchao's ``Int8Tensor``).
        codes: the weight's int8 codes, ``[out_features, in_features]`` (its ``qdata``).
        scale: the weight's per-channel scale (its ``scale``).
        bias: the tensor added to the product, if it is the linear's bias (``[out_features]``).
        result: the node whose value is the linear's output (with the bias, when it has one).
        computed: the nodes that compute ``result`` from the quantized activation and the
            weight's parts, which the rewrite replaces (``result`` among them).
    """

    matmul: Node
    quantized: Node
    weight: Node
    codes: Node
    scale: Node
    bias: Node | None
    result: Node
    computed: tuple[Node, ...]


def int8_dynamic_linears(program: ExportedProgram) -> list[Int8DynamicLinear]:
    """Every linear of ``program`` (a torch.export program, before ``to_edge``) computed as
    torchao's int8 x int8 dynamic quantization, in graph order; an ``_int_mm`` of another form
    is not one."""
    return [found for node in program.graph.nodes if _called(node, INT_MM) and (found := _linear_at(node)) is not None]


def weight_part(node: Node) -> tuple[Node, str] | None:
    """The quantized weight and the name of its inner tensor that ``node`` reads
    (``access_subclass_inner_tensor(p_up_weight, 'qdata')``), if it reads one."""
    if node.op == "call_function" and node.target is _INNER and isinstance(node.args[0], Node):
        return node.args[0], str(node.args[1])
    return None


def _linear_at(matmul: Node) -> Int8DynamicLinear | None:
    """The linear whose product ``matmul`` is, if each of its parts is torchao's."""
    activation, transposed = matmul.args[:2]
    unshifted = _unshifted(activation)
    quantized = _source(unshifted if unshifted is not None else activation, _RESHAPES)
    codes = _source(transposed, _TRANSPOSES) if _called(transposed, *_TRANSPOSES) else None
    part = weight_part(codes) if codes is not None else None
    if (
        not _called(quantized, "quantize_affine")
        or quantized.args[4:5] != (torch.int8,)
        or codes is None
        or part is None
        or part[1] != "qdata"
    ):
        return None
    weight = part[0]
    out_features, in_features = codes.meta["val"].shape
    activation_value = input_node(quantized, 0).meta["val"]
    shape = (*activation_value.shape[:-1], out_features)
    if activation_value.shape[-1] != in_features or tuple(input_node(matmul, 1).meta["val"].shape) != (
        in_features,
        out_features,
    ):
        return None
    found = _scaled(matmul, quantized.args[2], weight, shape, activation_value.dtype, shifted=unshifted is not None)
    if found is None:
        return None
    scale, computed = found
    bias = _bias(computed[-1], out_features)
    if bias is not None:
        computed = (*computed, cast(Node, _user(computed[-1])))  # the bias's add: _bias found it
    return Int8DynamicLinear(matmul, quantized, weight, codes, scale, bias, computed[-1], (matmul, *computed))


def _scaled(
    matmul: Node,
    activation_scale: object,
    weight: Node,
    shape: tuple[object, ...],
    dtype: torch.dtype,
    *,
    shifted: bool = False,
) -> tuple[Node, tuple[Node, ...]] | None:
    """The weight's scale and the nodes from ``matmul`` to the scaled product in the linear's
    ``shape`` and ``dtype``: casts and reshapes, and one multiplication each by the activation's
    scale and the weight's (first, where the activation was ``shifted``, the shift taken back);
    ``None`` if the product is not scaled so."""
    chain: list[Node] = []
    weight_scale: Node | None = None
    seen_activation = False
    compensated = not shifted
    last = 0  # how many nodes of the chain make the scaled product (both scales applied)
    node = matmul
    while (user := _user(node)) is not None:
        if _called(user, *_RESHAPES, *_CASTS) and user.args[0] is node:
            pass
        elif not compensated and _is_compensation(user, matmul):
            compensated = True
        elif _called(user, "mul") and len(user.args) == 2 and node in user.args:
            other = user.args[1] if user.args[0] is node else user.args[0]
            source = _source(other, _RESHAPES | _CASTS) if isinstance(other, Node) else None
            part = weight_part(source) if source is not None else None
            if source is activation_scale and not seen_activation:
                seen_activation = True
            elif part is not None and part == (weight, "scale") and weight_scale is None:
                weight_scale = source
            else:
                break
        else:
            break
        chain.append(user)
        value = user.meta.get("val")
        if (
            seen_activation
            and weight_scale is not None
            and isinstance(value, torch.Tensor)
            and tuple(value.shape) == shape
            and value.dtype == dtype
        ):
            last = len(chain)
        node = user
    if not last or weight_scale is None or not compensated:
        return None
    return weight_scale, tuple(chain[:last])


_SHIFT = 128  # torchao's u8s8 form: int8 values + 128 are uint8


def _unshifted(activation: object) -> Node | None:
    """The int8 activation that ``activation`` is shifted by 128 into uint8
    (``to(to(a, int32) + 128, uint8)``), if it is so shifted."""
    if not (_called(activation, *_CASTS) and value_dtype(activation) == torch.uint8):
        return None
    added = activation.args[0]
    if not (_called(added, "add") and len(added.args) == 2 and added.args[1] == _SHIFT):
        return None
    widened = added.args[0]
    if not (_called(widened, *_CASTS) and value_dtype(widened) == torch.int32 and isinstance(widened.args[0], Node)):
        return None
    return widened.args[0] if value_dtype(widened.args[0]) == torch.int8 else None


def _is_compensation(node: Node, matmul: Node) -> bool:
    """Whether ``node`` takes the activation's shift back from ``matmul``'s product:
    ``matmul - sum(b, [0]) * 128`` (``b`` the product's second operand)."""
    if not (_called(node, "sub", "sub_") and len(node.args) == 2 and node.args[0] is matmul):
        return False
    scaled = node.args[1]
    if not (_called(scaled, "mul") and len(scaled.args) == 2 and scaled.args[1] == _SHIFT):
        return False
    summed = scaled.args[0]
    return _called(summed, "sum") and summed.args[0] is matmul.args[1] and list(summed.args[1:2]) == [[0]]


def _bias(product: Node, out_features: int) -> Node | None:
    """The tensor that the node after ``product`` adds to it, if it is a bias (one value per
    output feature, in the product's dtype)."""
    user = _user(product)
    if user is None or not _called(user, "add", "add_") or len(user.args) != 2 or user.kwargs.get("alpha", 1) != 1:
        return None
    other = user.args[1] if user.args[0] is product else user.args[0]
    value = other.meta.get("val") if isinstance(other, Node) else None
    wanted = product.meta["val"]
    if (
        isinstance(other, Node)
        and isinstance(value, torch.Tensor)
        and tuple(value.shape) == (out_features,)
        and value.dtype == wanted.dtype
        and user.args[0] is product
    ):
        return other
    return None


def is_assertion(node: Node) -> bool:
    """Whether ``node`` only asserts its input's metadata (torch.export asserts each cast's input)."""
    return _called(node, _ASSERT)


def _user(node: Node) -> Node | None:
    """The one node that reads ``node``'s value (its metadata assertions aside), if one does."""
    users = [user for user in node.users if not _called(user, _ASSERT)]
    return users[0] if len(users) == 1 else None


def _source(node: object, through: frozenset[str]) -> Node | None:
    """The node whose values ``node`` is, walking first inputs back through ``through``."""
    while _called(node, *through):
        node = node.args[0]
    return node if isinstance(node, Node) else None


def _called(node: object, *names: str) -> TypeIs[Node]:
    return (
        isinstance(node, Node)
        and node.op == "call_function"
        and node.target is not operator.getitem
        and aten_name(node.target) in names
    )
