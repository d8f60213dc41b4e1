"""Whether the host can read a constant's bytes, and how to name a constant to the user.

ExecuTorch's emitter (``_tensor_spec_to_evalue``) and XNNPACK's preprocess
(``get_serialized_buffer_index``) read each constant's bytes through a raw host pointer: a
constant in device memory makes that read a segmentation fault, one without storage (meta,
fake) a NULL-pointer error.
"""

from __future__ import annotations

from typing import NamedTuple, final

import torch
from torch.export import ExportedProgram
from torch.fx import Node

from export_guards.analysis.programs import ProgramConstant, iter_constants
from export_guards.internals import is_fake, is_wrapper_subclass

__all__ = [
    "Unreadable",
    "describe",
    "device_problem",
    "first_user",
    "plain_tensors",
    "storage_problem",
    "stored_bytes",
    "unreadable_constants",
]


@final
class Unreadable(NamedTuple):
    """Why the host cannot read a tensor's bytes."""

    on_device: bool  # True: they are in device memory (a copy can fetch them); False: there are none
    why: str

    def said_of(self, constant: ProgramConstant) -> str:
        """The sentence that names ``constant`` and says why: the message of EG101 / EG102."""
        return f"{describe(constant)} {self.why}"


def storage_problem(tensor: torch.Tensor) -> Unreadable | None:
    """Why the host cannot read ``tensor``'s bytes; ``None`` if it can (zero-size included)."""
    if tensor.numel() == 0:
        return None
    if is_wrapper_subclass(tensor):
        return next((p for t in plain_tensors(tensor) if (p := storage_problem(t))), None)
    if is_fake(tensor):
        return Unreadable(False, f"is a fake tensor (device {tensor.device}) with no data")
    if tensor.device.type == "meta":
        return Unreadable(False, "is on the meta device and has no data")
    if tensor.device.type != "cpu":
        return device_problem(tensor)
    try:
        pointer = tensor.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError) as error:
        return Unreadable(False, f"has no readable storage ({error})")
    if pointer == 0:
        return Unreadable(False, "has a null data pointer")
    return None


def plain_tensors(tensor: torch.Tensor) -> list[torch.Tensor]:
    """The tensors that hold ``tensor``'s bytes: ``tensor`` itself, or for a tensor subclass
    (torchao's quantized weights) its inner tensors, asked of it (``__tensor_flatten__``),
    never its own storage, which has no data."""
    if not is_wrapper_subclass(tensor):
        return [tensor]
    inner_names, _ = tensor.__tensor_flatten__()  # type: ignore[attr-defined]
    inner = (getattr(tensor, name) for name in inner_names)
    return [plain for t in inner if isinstance(t, torch.Tensor) for plain in plain_tensors(t)]


def stored_bytes(tensor: torch.Tensor) -> int:
    """The bytes a program stores for ``tensor``: a quantized subclass's inner tensors, not the
    float tensor it stands for."""
    return sum(t.nbytes for t in plain_tensors(tensor))


def device_problem(tensor: torch.Tensor) -> Unreadable | None:
    """Why the host cannot read ``tensor`` by its device alone, for a fake copy whose tensors
    stand on the real ones' devices (what a partitioner is handed): ``None`` on the CPU, on
    the meta device and for zero-size tensors."""
    if tensor.device.type in ("cpu", "meta") or tensor.numel() == 0:
        return None
    return Unreadable(True, f"is on {tensor.device}, not in host (CPU) memory")


def unreadable_constants(method: str | None, ep: ExportedProgram) -> list[tuple[ProgramConstant, Unreadable]]:
    """Each constant of ``ep`` that the host cannot read, and why."""
    return [(c, problem) for c in iter_constants(method, ep) if (problem := storage_problem(c.tensor))]


def describe(constant: ProgramConstant) -> str:
    """``parameter 'conv.weight' (float32[8, 3, 3, 3], 864 bytes)``."""
    tensor = constant.tensor
    dtype = str(tensor.dtype).removeprefix("torch.")
    return f"{constant.kind.value} '{constant.fqn}' ({dtype}{list(tensor.shape)}, {tensor.nbytes:,} bytes)"


def first_user(node: Node) -> Node:
    """The node to point the user at: the first user with a stack trace, else ``node``."""
    traced = [user for user in node.users if user.meta.get("stack_trace")]
    return traced[0] if traced else next(iter(node.users), node)
