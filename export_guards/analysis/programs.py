"""The program forms the guards accept, and the constants that each method of them holds."""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TypeAlias, final

import torch
from executorch.exir import EdgeProgramManager
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind

from export_guards.analysis.ops import is_written

__all__ = [
    "ConstantKind",
    "Program",
    "ProgramConstant",
    "iter_constants",
    "methods_of",
    "mutated_constants",
]

Program: TypeAlias = ExportedProgram | Mapping[str, ExportedProgram] | EdgeProgramManager
"""What a guard takes: one ``ExportedProgram`` (the method ``"forward"``), a mapping of method
names to programs (as ``to_edge`` takes), or an ``EdgeProgramManager``."""


class ConstantKind(str, enum.Enum):
    """Where a constant comes from in the program's signature."""

    PARAMETER = "parameter"
    BUFFER = "buffer"
    MUTABLE_BUFFER = "mutable buffer"
    TENSOR_CONSTANT = "lifted tensor constant"
    GRAPH_ATTRIBUTE = "graph attribute"


@final
@dataclass(frozen=True)
class ProgramConstant:
    """A tensor that the emitter or a delegate reads from host memory.

    Attributes:
        method: the program method that holds it, when known.
        fqn: its fully-qualified name in the model (``"decoder.0.weight"``).
        kind: where it comes from.
        tensor: the tensor itself (never copied).
        node: the graph node that stands for it (a placeholder or a ``get_attr``).
    """

    method: str | None
    fqn: str
    kind: ConstantKind
    tensor: torch.Tensor
    node: torch.fx.Node


def methods_of(program: Program) -> dict[str, ExportedProgram]:
    """The programs of each method of ``program``, by method name.

    Raises:
        TypeError: ``program`` is none of the accepted forms.
    """
    if isinstance(program, ExportedProgram):
        return {"forward": program}
    if isinstance(program, EdgeProgramManager):
        return {name: program.exported_program(name) for name in program.methods}
    if isinstance(program, Mapping) and all(isinstance(p, ExportedProgram) for p in program.values()):
        return dict(program)
    raise TypeError(
        "export-guards takes a torch.export ExportedProgram, a dict of method name to "
        f"ExportedProgram, or an EdgeProgramManager; got {type(program).__name__}. "
        "Apply the guard before to_executorch(), not to its result."
    )


_SIGNATURE_KINDS = {
    InputKind.PARAMETER: ConstantKind.PARAMETER,
    InputKind.BUFFER: ConstantKind.BUFFER,
    InputKind.CONSTANT_TENSOR: ConstantKind.TENSOR_CONSTANT,
}


def iter_constants(method: str | None, ep: ExportedProgram) -> Iterator[ProgramConstant]:
    """Every tensor constant of ``ep``: parameters, buffers (mutable ones included), lifted
    tensor constants, and tensors still held as attributes of the graph module."""
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    mutated = mutated_constants(ep)
    for spec in ep.graph_signature.input_specs:
        kind = _SIGNATURE_KINDS.get(spec.kind)
        if kind is None or spec.target is None:
            continue
        # Non-persistent buffers live in ``constants``, not in the state dict.
        tensor = ep.state_dict.get(spec.target, ep.constants.get(spec.target))
        if not isinstance(tensor, torch.Tensor):
            continue
        if kind is ConstantKind.BUFFER and spec.target in mutated:
            kind = ConstantKind.MUTABLE_BUFFER
        yield ProgramConstant(method, spec.target, kind, tensor, placeholders[spec.arg.name])
    for gm in ep.graph_module.modules():
        if not isinstance(gm, torch.fx.GraphModule):
            continue
        for node in gm.graph.nodes:
            if node.op != "get_attr":
                continue
            tensor = _resolve_attr(gm, node.target)
            if isinstance(tensor, torch.Tensor):
                yield ProgramConstant(method, str(node.target), ConstantKind.GRAPH_ATTRIBUTE, tensor, node)


def mutated_constants(ep: ExportedProgram) -> set[str]:
    """The FQNs of the parameters and buffers that ``ep`` writes: those its signature lists
    as mutation outputs (a functional program) and those an in-place op writes, directly or
    through a view (a training-dialect program, where mutations are still in-place ops)."""
    signature = ep.graph_signature
    mutated = {
        spec.target
        for spec in signature.output_specs
        if spec.kind in (OutputKind.BUFFER_MUTATION, OutputKind.PARAMETER_MUTATION) and spec.target
    }
    targets = {**signature.inputs_to_parameters, **signature.inputs_to_buffers}
    for node in ep.graph.nodes:
        if node.op == "placeholder" and node.name in targets and is_written(node):
            mutated.add(targets[node.name])
    return mutated


def _resolve_attr(module: torch.nn.Module, target: object) -> object:
    value: object = module
    for part in str(target).split("."):
        value = getattr(value, part, None)
    return value
