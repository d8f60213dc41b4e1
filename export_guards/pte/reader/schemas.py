"""The schema torch knows for an operator a program calls, by the name and overload the program
stores (``aten::add``, ``out``), for the rules that read what an instruction passes.

torch is imported here on first use, that is, only for a program with kernel calls (a program
that XNNPACK runs whole is checked without it): see :func:`torch_with_executorch_operators`."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from types import ModuleType

    import torch

__all__ = ["operator_schema", "torch_with_executorch_operators"]


@functools.cache
def torch_with_executorch_operators() -> ModuleType:
    """torch, with the operators ExecuTorch's Python registers (``dim_order_ops``,
    ``executorch_prim``, ``quantized_decomposed`` through torchao, ...) and their kernels: what
    the rules found when the check imported ``executorch.exir`` whole, so that which operators
    they know does not depend on what else the process imported (seconds, once a process)."""
    import executorch.exir  # noqa: F401  (registers ExecuTorch's operators)
    import torch
    from executorch.exir.passes import dim_order_ops_registry  # noqa: F401  (defines torch.ops.dim_order_ops)

    return torch


@functools.cache
def operator_schema(name: str, overload: str) -> torch._C.FunctionSchema | None:
    """The schema of ``name.overload``, or None where torch does not know the operator here."""
    torch = torch_with_executorch_operators()
    try:
        schemas = torch._C._jit_get_schemas_for_operator(name)
    except RuntimeError:
        return None
    return next((s for s in schemas if s.overload_name == overload), None)
