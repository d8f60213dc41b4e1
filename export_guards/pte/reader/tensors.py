"""A program tensor's size in bytes and its one-line description, for the rules' messages."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from export_guards.pte.reader.wheel import ScalarType, Tensor

__all__ = ["DTYPES", "describe_layout", "describe_tensor", "dtype_name", "element_bytes", "has_dtype", "tensor_nbytes"]

DTYPES: Mapping[ScalarType, tuple[str, int]] = MappingProxyType({
    ScalarType.BYTE: ("uint8", 1),
    ScalarType.CHAR: ("int8", 1),
    ScalarType.SHORT: ("int16", 2),
    ScalarType.INT: ("int32", 4),
    ScalarType.LONG: ("int64", 8),
    ScalarType.HALF: ("float16", 2),
    ScalarType.FLOAT: ("float32", 4),
    ScalarType.DOUBLE: ("float64", 8),
    ScalarType.COMPLEX32: ("complex32", 4),
    ScalarType.COMPLEX64: ("complex64", 8),
    ScalarType.COMPLEX128: ("complex128", 16),
    ScalarType.BOOL: ("bool", 1),
    ScalarType.QINT8: ("qint8", 1),
    ScalarType.QUINT8: ("quint8", 1),
    ScalarType.QINT32: ("qint32", 4),
    ScalarType.BFLOAT16: ("bfloat16", 2),
    ScalarType.QUINT4x2: ("quint4x2", 1),
    ScalarType.FLOAT8E5M2: ("float8_e5m2", 1),
    ScalarType.FLOAT8E4M3FN: ("float8_e4m3fn", 1),
    ScalarType.UINT16: ("uint16", 2),
    ScalarType.UINT32: ("uint32", 4),
})  # fmt: skip
"""Each scalar type ExecuTorch maps to a torch dtype (``executorch.exir.tensor.get_scalar_type``,
which imports torch): the dtype's name as torch spells it, and its ``itemsize``. The others
(``BITS16``, ``QUINT2x4``, ``UINT64``, the FNUZ floats) have none there, so none here.
``tests/test_pte_without_torch.py`` compares the two."""


def _dtype(scalar_type: object) -> tuple[str, int] | None:
    try:
        return DTYPES.get(ScalarType(scalar_type))
    except (KeyError, ValueError, TypeError):
        return None


def element_bytes(tensor: Tensor) -> int | None:
    """Bytes of one element of a program tensor's dtype (None for an invalid dtype)."""
    dtype = _dtype(tensor.scalar_type)
    return dtype[1] if dtype is not None else None


def tensor_nbytes(tensor: Tensor) -> int | None:
    """Bytes of a program tensor: its sizes times its dtype's size (None if either is invalid)."""
    element = element_bytes(tensor)
    if element is None:
        return None
    sizes = list(tensor.sizes)
    return None if any(s < 0 for s in sizes) else math.prod(sizes) * element


def describe_tensor(tensor: Tensor) -> str:
    """``float32[8, 3, 3, 3]``."""
    return describe_layout(tensor.scalar_type, tensor.sizes)


def describe_layout(scalar_type: int, sizes: Sequence[int]) -> str:
    """``float32[8, 3, 3, 3]`` for an ExecuTorch scalar type and sizes."""
    return f"{dtype_name(scalar_type)}{list(sizes)}"


def dtype_name(scalar_type: int) -> str:
    """``float32`` for an ExecuTorch scalar type, as torch names it; ``scalar type 99`` for none."""
    dtype = _dtype(scalar_type)
    return dtype[0] if dtype is not None else f"scalar type {scalar_type}"


def has_dtype(scalar_type: int) -> bool:
    """Whether ExecuTorch maps the scalar type to a torch dtype."""
    return _dtype(scalar_type) is not None
