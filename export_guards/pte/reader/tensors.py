"""A program tensor's size in bytes and its one-line description, for the rules' messages."""

from __future__ import annotations

import math
from collections.abc import Sequence

from executorch.exir.schema import ScalarType, Tensor
from executorch.exir.tensor import get_scalar_type

__all__ = ["describe_layout", "describe_tensor", "dtype_name", "element_bytes", "tensor_nbytes"]


def element_bytes(tensor: Tensor) -> int | None:
    """Bytes of one element of a program tensor's dtype (None for an invalid dtype)."""
    try:
        return get_scalar_type(ScalarType(tensor.scalar_type)).itemsize
    except (KeyError, ValueError, TypeError):
        return None


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
    try:
        return str(get_scalar_type(ScalarType(scalar_type))).removeprefix("torch.")
    except (KeyError, ValueError, TypeError):
        return f"scalar type {scalar_type}"
