"""The schema torch knows for an operator a program calls, by the name and overload the program
stores (``aten::add``, ``out``), for the rules that read what an instruction passes."""

from __future__ import annotations

import functools

import torch

__all__ = ["operator_schema"]


@functools.cache
def operator_schema(name: str, overload: str) -> torch._C.FunctionSchema | None:
    """The schema of ``name.overload``, or None where torch does not know the operator here."""
    try:
        schemas = torch._C._jit_get_schemas_for_operator(name)
    except RuntimeError:
        return None
    return next((s for s in schemas if s.overload_name == overload), None)
