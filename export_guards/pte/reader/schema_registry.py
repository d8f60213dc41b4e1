"""torch's live operator registry, read into the table ``reader/schemas.py`` serves: what makes
the shipped table (``make operator-table``), what the test compares it with, and what builds a
table for a torch or ExecuTorch version other than the shipped one's (once: the user's cache).

Imports torch and ``executorch.exir`` (seconds): never on the way of a check that finds the
shipped or cached table."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from export_guards.internals import operator_schemas

if TYPE_CHECKING:
    from types import ModuleType

    import torch

__all__ = ["META_KEYS", "REPLAYED_NAMESPACES", "live_table", "torch_with_executorch_operators"]

REPLAYED_NAMESPACES = ("aten", "dim_order_ops")
"""The namespaces whose calls EG519 replays on meta tensors."""

META_KEYS = ("Meta", "CompositeExplicitAutograd", "CompositeImplicitAutograd")
"""The dispatch keys of a kernel that runs on meta tensors: a meta kernel of its own, or an
``out`` variant that calls its functional form (convolution, the normalisations, upsampling);
the last, ``dim_order_ops``' Python forms."""


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


def live_table() -> dict[str, list[object]]:
    """Every operator torch knows here (with ExecuTorch's), by ``name.overload`` as a program
    stores it (``aten::add.out``; ``aten::relu.`` for a default overload): ``[arguments,
    returns, meta]``, each argument ``[name, type, element type when optional else None,
    written, keyword-only]``, each return ``[type, element type]``, and whether EG519 can
    replay it on meta tensors. The first schema of a name and overload wins, as torch's
    ``dispatcher lists them (``internals.operator_schemas``)."""
    torch = torch_with_executorch_operators()
    table: dict[str, list[object]] = {}
    for name, schemas in operator_schemas(torch):
        for schema in schemas:
            key = f"{name}.{schema.overload_name}"
            if key in table:
                continue
            arguments = [
                [
                    a.name,
                    str(a.type),
                    _element(torch, a.type),
                    a.alias_info is not None and a.alias_info.is_write,
                    a.kwarg_only,
                ]
                for a in schema.arguments
            ]
            returns = [[str(r.type), _element(torch, r.type)] for r in schema.returns]
            table[key] = [arguments, returns, _replayable(torch, name, schema.overload_name)]
    return table


def _element(torch: ModuleType, schema_type: torch._C.JitType) -> str | None:
    return str(schema_type.getElementType()) if isinstance(schema_type, torch._C.OptionalType) else None


def _replayable(torch: ModuleType, name: str, overload: str) -> bool:
    """Whether ``torch.ops`` has the operator and a kernel of it runs on meta tensors."""
    namespace, _, op_name = name.partition("::")
    if namespace not in REPLAYED_NAMESPACES:
        return False
    packet = getattr(getattr(torch.ops, namespace), op_name, None)
    op = getattr(packet, overload or "default", None) if packet is not None else None
    try:
        return op is not None and any(
            torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), key) for key in META_KEYS
        )
    except RuntimeError:  # an operator of TorchScript's alone (aten::Bool.Tensor): no kernel to dispatch to
        return False
