"""Which of a partitioned program's constants a delegate keeps a copy of, and whether that copy
holds the same bytes as the program's (then the written program can store them once,
``pte/store_once.py``) or other bytes (a quantized copy: PT2E's ``convert_pt2e`` gives a tied
head an int8 weight of its own while the embedding reads the float one)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import cast, final

import torch
from executorch.exir.lowered_backend_module import LoweredBackendModule
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind
from torch.fx import Node

from export_guards.analysis.ops import aten_overload

__all__ = ["DelegateCopy", "delegate_copies"]

_CONSTANT_KINDS = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)
# A quantized copy dequantizes to the float weight within its rounding: half a step, a
# fraction of the weight's range (int4 in groups: a seventh; int8: a 254th). An unrelated
# weight of the same shape is off by about its whole range.
_QUANTIZED_TOLERANCE = 0.15


@final
@dataclass(frozen=True)
class DelegateCopy:
    """A delegate's copy of a constant of the program.

    Attributes:
        backend: the delegate's backend id.
        fqn: the copy's name in the delegate's program (the constant's own, or a quantized
            weight's, ``_frozen_param14``).
        nbytes: the copy's bytes as the delegate keeps them.
        same_bytes: whether the delegate's named data holds the constant's very bytes.
        quantized_by: the op that dequantizes the copy back to the constant (a quantized copy),
            or None.
    """

    backend: str
    fqn: str
    nbytes: int
    same_bytes: bool
    quantized_by: str | None = None


def delegate_copies(program: ExportedProgram) -> Callable[[str, torch.Tensor], list[DelegateCopy]]:
    """For the partitioned ``program``: a function that gives the copies its delegates keep of
    its constant ``fqn`` (``tensor``), the same constant handed to a delegate or a quantized
    weight that dequantizes to it. The delegates' constants are read once, by the first call."""
    delegates: list[tuple[LoweredBackendModule, dict[str, tuple[str, torch.Tensor]]]] = []
    named: dict[int, frozenset[bytes]] = {}  # each delegate's named-data digests, by its position

    def copies(fqn: str, tensor: torch.Tensor) -> list[DelegateCopy]:
        if not delegates:
            delegates.extend(
                (lowered, _constant_tensors(lowered.original_module)) for lowered in _lowered_modules(program)
            )
        found: list[DelegateCopy] = []
        digest: bytes | None = None
        for position, (lowered, tensors) in enumerate(delegates):
            if fqn in tensors:
                digest = digest or _digest(tensor)
                if position not in named:
                    named[position] = _named_digests(lowered)
                found.append(DelegateCopy(lowered.backend_id, fqn, tensor.nbytes, digest in named[position]))
                continue
            for node in lowered.original_module.graph.nodes:
                copy = _quantized_copy(node, tensors, tensor)
                if copy is not None:
                    found.append(DelegateCopy(lowered.backend_id, copy[0], copy[1], False, copy[2]))
                    break
        return found

    return copies


def _lowered_modules(program: ExportedProgram) -> Iterator[LoweredBackendModule]:
    for node in program.graph.nodes:
        if node.op == "call_function" and node.target is torch.ops.higher_order.executorch_call_delegate:
            lowered = getattr(program.graph_module, str(node.args[0].target), None)
            if isinstance(lowered, LoweredBackendModule):
                yield lowered


def _constant_tensors(program: ExportedProgram) -> dict[str, tuple[str, torch.Tensor]]:
    """The program's constants, ``(name, tensor)``, by name and by placeholder name
    (``"placeholder:p_output_weight"``)."""
    found: dict[str, tuple[str, torch.Tensor]] = {}
    for spec in program.graph_signature.input_specs:
        if spec.kind in _CONSTANT_KINDS and spec.target:
            value = program.state_dict.get(spec.target, program.constants.get(spec.target))
            if isinstance(value, torch.Tensor):
                found[spec.target] = found[f"placeholder:{spec.arg.name}"] = (spec.target, value)
    return found


def _quantized_copy(
    node: Node, tensors: dict[str, tuple[str, torch.Tensor]], tensor: torch.Tensor
) -> tuple[str, int, str] | None:
    """``(name, bytes, op)`` when ``node`` dequantizes a constant of the delegate's program to
    ``tensor``, within its rounding."""
    if node.op != "call_function" or "dequantize" not in str(node.target) or not node.args:
        return None
    weight = node.args[0]
    if not isinstance(weight, Node) or weight.op != "placeholder" or f"placeholder:{weight.name}" not in tensors:
        return None
    name, quantized = tensors[f"placeholder:{weight.name}"]
    if quantized.shape != tensor.shape or quantized.dtype == tensor.dtype or not tensor.is_floating_point():
        return None
    try:
        args = [tensors.get(f"placeholder:{a.name}", (None, None))[1] if isinstance(a, Node) else a for a in node.args]
        if any(a is None for a in args):
            return None
        with torch.no_grad():
            dequantized = cast(Callable[..., object], node.target)(*args, **node.kwargs)
    except Exception:  # noqa: BLE001 - not an op this can call on constants alone: no evidence either way
        return None
    if not isinstance(dequantized, torch.Tensor) or dequantized.shape != tensor.shape:
        return None
    scale = tensor.abs().max().item()
    if not scale or (dequantized.float() - tensor.float()).abs().max().item() > _QUANTIZED_TOLERANCE * scale:
        return None
    op = aten_overload(node.target)
    return name, quantized.nbytes, op._schema.name if op is not None else str(node.target)


def _digest(tensor: torch.Tensor) -> bytes:
    data = tensor.detach().cpu().contiguous()
    return hashlib.sha256(data.reshape(-1).view(torch.uint8).numpy().tobytes() if data.nbytes else b"").digest()


def _named_digests(lowered: LoweredBackendModule) -> frozenset[bytes]:
    """The SHA-256 of each blob the delegate put in the program's named data."""
    output = getattr(lowered, "named_data_store_output", None)
    return frozenset(
        hashlib.sha256(bytes(buffer)).digest()
        for buffer in getattr(output, "buffers", None) or ()
        if isinstance(buffer, (bytes, bytearray))
    )
