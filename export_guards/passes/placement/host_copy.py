"""The one host copy: a program's twin on the CPU, as if it had been exported there.

Moving the constants is not enough once a graph was traced on a device: each node's metadata
(out shapes, strides, dtypes) was computed by the device's kernels, and ExecuTorch sizes its
out tensors from it. ``_native_batch_norm_legit_no_training`` is the known case: its stats
outs are ``[C]`` on a device and ``[0]`` on the CPU, and ExecuTorch's kernel refuses ``[C]``.
So the twin's graph is retraced on the host with ExecuTorch's own ``ExportPass``, which
recomputes every node's metadata from inputs on the CPU; its ``.pte`` is the CPU export's,
byte for byte, at whatever stage it is made (torch.export, edge, inside ``to_executorch``).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from executorch.exir.lowered_backend_module import LoweredBackendModule
from executorch.exir.pass_base import ExportPass
from torch.export import ExportedProgram
from torch.export.graph_signature import ExportGraphSignature, TensorArgument
from torch.fx import GraphModule
from torch.utils import _pytree as pytree

from export_guards.analysis.programs import ConstantKind, ProgramConstant
from export_guards.analysis.storage import unreadable_constants
from export_guards.internals import set_example_inputs, set_original_program, transform_program, updated_program

__all__ = ["host_constants", "host_graph", "host_twin"]


def host_twin(ep: ExportedProgram, moving: Sequence[ProgramConstant]) -> ExportedProgram:
    """A new program: ``ep`` on the CPU, its metadata recomputed there. ``ep`` is untouched.

    ``moving`` are ``ep``'s constants in device memory (the placement plan's copies). Each
    constant of the state dict and the constants is copied to the host once, one at a time;
    the example inputs are moved too.
    """
    state_dict, constants = host_constants(ep)
    moved = updated_program(
        ep,
        _moved_graph(ep.graph_module, moving),
        copy.deepcopy(ep.graph_signature),
        state_dict=state_dict,
        constants=constants,
    )
    twin = transform_program(moved, ExportPass())  # the retrace, and the signature that follows its names
    _keep_input_names(ep.graph_module, twin.graph_module, twin.graph_signature)
    _keep_requires_grad(ep.graph_module, twin.graph_module)
    if ep.example_inputs is not None:
        set_example_inputs(twin, pytree.tree_map_only(torch.Tensor, _on_host, ep.example_inputs))
    return twin


def host_constants(ep: ExportedProgram) -> tuple[dict[str, torch.Tensor], dict[str, object]]:
    """New state-dict and constants dicts of ``ep``, each device tensor copied to the host
    once, one at a time."""
    copies: dict[int, torch.Tensor] = {}  # a tensor under two names (a tied weight) is one tensor on the host too

    def host(tensor: torch.Tensor) -> torch.Tensor:
        if id(tensor) not in copies:
            copies[id(tensor)] = _on_host(tensor)
        return copies[id(tensor)]

    state_dict = {name: host(tensor) for name, tensor in ep.state_dict.items()}
    constants = {
        name: host(value) if isinstance(value, torch.Tensor) else value for name, value in ep.constants.items()
    }
    return state_dict, constants


def host_graph(graph_module: GraphModule, moving: Sequence[ProgramConstant]) -> GraphModule:
    """A copy of ``graph_module`` (a program's, or one that a pass made of it; ``moving``,
    that program's constants in device memory) retraced on the CPU, its input names kept: for
    a graph that no longer makes a valid ``ExportedProgram`` (``to_executorch``'s, after its
    buffer write-backs)."""
    retraced = ExportPass()(_moved_graph(graph_module, moving)).graph_module
    _keep_input_names(graph_module, retraced)
    _keep_requires_grad(graph_module, retraced)
    return retraced


def _moved_graph(graph_module: GraphModule, moving: Sequence[ProgramConstant]) -> GraphModule:
    """A copy of ``graph_module`` whose inputs' metadata, device arguments, graph attributes
    (of ``moving``) and delegates' original programs (which a retrace replays; their compiled
    blobs stay as they are) are on the host; the other nodes' metadata is left for a retrace."""
    graph = copy.deepcopy(graph_module)
    _keep_input_names(graph_module, graph)
    for constant in moving:
        if constant.kind is ConstantKind.GRAPH_ATTRIBUTE:
            owner, _, name = str(constant.node.target).rpartition(".")
            setattr(graph.get_submodule(owner) if owner else graph, name, _on_host(constant.tensor))
    for module in graph.modules():
        if isinstance(module, LoweredBackendModule) and _traced_on_device(module.original_module):
            inner = module.original_module
            on_device = [c for c, problem in unreadable_constants(None, inner) if problem.on_device]
            set_original_program(module, host_twin(inner, on_device))
    for node in graph.graph.nodes:
        if "device" in node.kwargs:
            node.kwargs = {**node.kwargs, "device": torch.device("cpu")}
        if node.op == "placeholder":
            node.meta["val"] = pytree.tree_map_only(torch.Tensor, lambda value: value.to("cpu"), node.meta.get("val"))
    return graph


def _traced_on_device(ep: ExportedProgram) -> bool:
    """Whether ``ep``'s inputs are on a device (its constants, or its metadata)."""
    values = pytree.tree_leaves([node.meta.get("val") for node in ep.graph.find_nodes(op="placeholder")])
    return any(isinstance(v, torch.Tensor) and v.device.type != "cpu" for v in values)


def _keep_input_names(
    source: GraphModule, retraced: GraphModule, signature: ExportGraphSignature | None = None
) -> None:
    """Give ``retraced``'s inputs (and ``signature``'s) ``source``'s names: a retrace and a
    deepcopy rename a keyword (``input`` becomes ``input_1``), which a CPU export keeps."""
    renamed = {}
    for before, after in zip(
        source.graph.find_nodes(op="placeholder"), retraced.graph.find_nodes(op="placeholder"), strict=True
    ):
        if after.name != before.name:
            renamed[after.name], after.name = before.name, before.name
    if not renamed:
        return
    for spec in signature.input_specs if signature is not None else ():
        if isinstance(spec.arg, TensorArgument) and spec.arg.name in renamed:
            spec.arg = TensorArgument(name=renamed[spec.arg.name])
    retraced.recompile()


def _keep_requires_grad(source: GraphModule, retraced: GraphModule) -> None:
    """Give each node of ``retraced`` (and of its subgraphs) the ``requires_grad`` of
    ``source``'s node of that name, which the retrace keeps. A retrace propagates the flag from
    the parameters' placeholders to every node computed from them (and, through an in-place
    write, to a buffer's placeholder), where torch.export and to_edge left it off; the emitter
    writes it into the program table, so a folded parameter or a planned tensor made from
    such a node would differ from the CPU export's."""
    sources = {path: module for path, module in source.named_modules() if isinstance(module, GraphModule)}
    for path, module in retraced.named_modules():
        if not isinstance(module, GraphModule) or path not in sources:
            continue
        before = {node.name: node.meta.get("val") for node in sources[path].graph.nodes}
        for node in module.graph.nodes:
            values, spec = pytree.tree_flatten(node.meta.get("val"))
            was = pytree.tree_leaves(before.get(node.name))
            if len(values) != len(was):
                continue
            kept = [_with_requires_grad(value, old) for value, old in zip(values, was, strict=True)]
            if any(k is not v for k, v in zip(kept, values, strict=True)):
                node.meta["val"] = pytree.tree_unflatten(kept, spec)


def _with_requires_grad(value: object, source: object) -> object:
    """``value``, or a detached alias of it with ``source``'s ``requires_grad`` where the two differ."""
    if (
        isinstance(value, torch.Tensor)
        and isinstance(source, torch.Tensor)
        and value.requires_grad != source.requires_grad
    ):
        return value.detach().requires_grad_(source.requires_grad)
    return value


def _on_host(tensor: torch.Tensor) -> torch.Tensor:
    """A host copy of ``tensor`` (``tensor`` itself when it is there), a ``Parameter``
    again if it was one."""
    if tensor.device.type == "cpu":
        return tensor
    host = tensor.detach().to("cpu")
    if isinstance(tensor, torch.nn.Parameter):
        return torch.nn.Parameter(host, requires_grad=tensor.requires_grad)
    return host
