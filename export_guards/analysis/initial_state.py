"""Whether a written buffer's initial value changes what a program computes: the program run on
its own example inputs from the buffers' values and from zeros (where ExecuTorch starts them)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind
from torch.fx import Node

from export_guards.analysis.ops import aten_name, aten_overload, is_view
from export_guards.internals import is_fake

__all__ = ["initial_values_that_matter", "unmasked_read"]

# Ops that overwrite part of their first argument and pass the rest on unread (a KV cache's
# write): the buffer's old value flows through them to its readers, and they compute nothing from it.
_OVERWRITES = frozenset(
    {
        "index_put",
        "index_put_",
        "index_copy",
        "index_copy_",
        "copy",
        "copy_",
        "slice_scatter",
        "select_scatter",
        "diagonal_scatter",
        "as_strided_scatter",
    }
)


def initial_values_that_matter(program: ExportedProgram, buffers: Collection[str]) -> dict[str, float] | None:
    """Of ``buffers`` (FQNs of buffers ``program`` writes in place), those whose initial value
    changes the outputs of one call on the program's example inputs, each with the largest
    difference that starting it from zeros makes; ``None`` when that cannot be told (the
    program keeps no example inputs, or they or the buffers are not on the host, or the run fails).

    A stale KV cache (values left by an eager call) that the call overwrites, or reads only under
    a mask, changes nothing: zeros and the stale values give the same outputs. A buffer the call
    reads before it writes it (a running total) does."""
    if not buffers or program.example_inputs is None:
        return None
    args, kwargs = program.example_inputs
    values = {fqn: program.state_dict.get(fqn, program.constants.get(fqn)) for fqn in buffers}
    tensors = [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
    if not all(isinstance(t, torch.Tensor) and _on_host(t) for t in [*tensors, *values.values()]):
        return None
    try:
        module = program.module()
        baseline = _outputs(module, values, (), args, kwargs)
        everything = _differs(baseline, _outputs(module, values, buffers, args, kwargs))
        if not everything:
            return {}
        alone = {fqn: _differs(baseline, _outputs(module, values, (fqn,), args, kwargs)) for fqn in buffers}
    except Exception:  # noqa: BLE001 - a program that does not run here gives no evidence either way
        return None
    mattering = {fqn: difference for fqn, difference in alone.items() if difference}
    return mattering or dict.fromkeys(buffers, everything)  # only together: each one matters


def unmasked_read(program: ExportedProgram, fqn: str) -> Node | None:
    """The node of ``program``'s graph that reads buffer ``fqn``'s initial value where that
    value changes what the node computes: of the ops that read the buffer (or what a partial
    overwrite of it, ``index_put`` / ``index_copy`` / ``copy_``, or a view passes on), the first
    whose result on the example inputs differs between the buffer's value and zeros. A read under
    a mask computes the same from both and is passed over. ``None`` when that cannot be told
    (no example inputs, a run that fails) or no read differs."""
    signature = program.graph_signature
    placeholder = next(
        (n for n in program.graph.nodes if n.op == "placeholder" and signature.inputs_to_buffers.get(n.name) == fqn),
        None,
    )
    if placeholder is None or program.example_inputs is None:
        return None
    readers = _readers(placeholder)
    if not readers:
        return None
    try:
        with_value, from_zeros = (_node_results(program, fqn, readers, zeroed) for zeroed in (False, True))
    except Exception:  # noqa: BLE001 - a graph that does not run here names no read
        return None
    return next((node for node in readers if _differs([with_value[node]], [from_zeros[node]])), None)


def _readers(placeholder: Node) -> list[Node]:
    """The ops that compute from the buffer's value, in graph order: users of the placeholder,
    or of the views and partial overwrites that carry its value on (not those themselves, nor
    the output that writes it back)."""
    carried, readers, todo = {placeholder}, set(), [placeholder]
    while todo:
        for user in todo.pop().users:
            if user.op == "output" or user in carried:
                continue
            overwrites = aten_name(user.target) in _OVERWRITES and user.args and user.args[0] in carried
            if overwrites or (is_view(user.target) and not _in_place(user.target)):  # add_ computes from it: a read
                carried.add(user)
                todo.append(user)
            else:
                readers.add(user)
    order = {node: i for i, node in enumerate(placeholder.graph.nodes)}
    return sorted(readers, key=order.__getitem__)


def _in_place(target: object) -> bool:
    op = aten_overload(target)
    return op is not None and any(a.alias_info is not None and a.alias_info.is_write for a in op._schema.arguments)


def _node_results(program: ExportedProgram, fqn: str, nodes: Collection[Node], zeroed: bool) -> dict[Node, object]:
    """What ``nodes`` compute in one run of the program's graph on its example inputs, buffer
    ``fqn`` at its value or at zeros (every input a copy: the program's own stay as they are)."""
    args, kwargs = program.example_inputs
    user = iter(pytree.tree_leaves((args, kwargs)))
    flat: list[object] = []
    for spec in program.graph_signature.input_specs:
        if spec.kind is InputKind.USER_INPUT:
            value = next(user)
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            value = program.state_dict.get(spec.target, program.constants.get(spec.target))
            value = torch.zeros_like(value) if zeroed and spec.target == fqn else value
        else:
            raise ValueError(f"an input of kind {spec.kind.name} cannot be made here")
        flat.append(value.clone() if isinstance(value, torch.Tensor) else value)
    seen: dict[Node, object] = {}

    class Recording(torch.fx.Interpreter):
        def run_node(self, node: Node) -> object:
            result = super().run_node(node)
            if node in nodes:
                seen[node] = (
                    result.clone() if isinstance(result, torch.Tensor) else result
                )  # a later write must not change it
            return result

    with torch.no_grad():
        Recording(program.graph_module).run(*flat)
    return seen


def _outputs(
    module: torch.nn.Module,
    values: dict[str, torch.Tensor],
    zeroed: Collection[str],
    args: object,
    kwargs: dict[str, Any] | None,
) -> list[object]:
    """One call's outputs, flat, with the written buffers as copies (the program's own stay as
    they are): ``zeroed`` ones at zeros, the others at their values."""
    state = {fqn: torch.zeros_like(value) if fqn in zeroed else value.clone() for fqn, value in values.items()}
    with torch.no_grad():
        return pytree.tree_leaves(torch.func.functional_call(module, state, args, kwargs))


def _differs(expected: list[object], got: list[object]) -> float:
    """The largest difference between two calls' outputs (exactly: the same program on the same
    inputs computes the same values unless a buffer's value reaches them); ``inf`` where a
    shape or a non-tensor output differs."""
    if len(expected) != len(got):
        return float("inf")
    largest = 0.0
    for a, b in zip(expected, got):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            largest = largest if a == b else float("inf")
        elif a.shape != b.shape:
            largest = float("inf")
        elif not torch.equal(a, b):
            if a.is_floating_point() and bool(((a == b) | (a.isnan() & b.isnan())).all()):
                continue  # NaN where both have NaN: the same
            largest = max(largest, float((a.double() - b.double()).abs().nan_to_num(float("inf")).max()))
    return largest


def _on_host(tensor: torch.Tensor) -> bool:
    return tensor.device.type == "cpu" and not is_fake(tensor)
