"""Control-flow outputs given bytes of their own: a copy of each ``torch.cond`` result, made
right after the ``cond`` and before memory planning, so that the plan keeps it alive for as
long as it is read (what EG518 reports in a program written without it)."""

from __future__ import annotations

import torch
from executorch.exir.dialects._ops import ops as exir_ops
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase

from export_guards.passes.result import GuardGraphPassResult

__all__ = ["ControlFlowOutputsPass"]

_CONTROL_FLOW = (torch.ops.higher_order.cond,)
"""What ExecuTorch 1.5 emits with ``MoveCall``s of its branches' outputs: a ``map`` writes its
result into its parent's tensor with ``et_copy_index`` (a copy of the bytes), and the emitter
refuses ``while_loop``."""

_SUBMODULE_CALLS = (torch.ops.higher_order.cond, torch.ops.higher_order.map_impl, torch.ops.higher_order.scan)
"""Calls whose submodules the memory planner places in one region that they all reuse."""


class ControlFlowOutputsPass(PassBase):
    """Copy each result of a ``torch.cond`` into a tensor of its own, right after the ``cond``,
    as a pass of ``ExecutorchBackendConfig.passes`` (:func:`~export_guards.emit_passes` lists it).

    ExecuTorch emits a ``cond``'s branches inline and ends each with a ``MoveCall`` of its
    output onto the value the rest of the method reads. The runtime moves the tensor, not its
    bytes, so that value lives in the branch's memory, which the memory planner gives the
    branches of every other ``cond`` as well: a later ``cond`` overwrites the result while it
    is still to be read or returned (ExecuTorch issue 21490; ``check`` reports it as EG518).
    A copy made right after the ``cond``, before any other branch runs, is a tensor of the
    parent graph, planned for as long as it is read.

    It runs after partitioning, where no partitioner takes the copy into a delegate or moves
    it after the next ``cond`` (both happen to a copy made among ``transform_passes``). Branches
    that hold a ``cond`` of their own get copies too. The graph module is changed in place, as
    ExecuTorch's passes there change it (``changes_input``); a graph without ``cond`` is left as
    it is, so its program's bytes are those of a flow without this pass.
    """

    changes_input = True
    """The graph module handed to it is changed in place, where it holds a ``cond``."""

    def call(self, graph_module: GraphModule) -> GuardGraphPassResult:
        copied = 0
        for module in list(graph_module.modules()):
            if isinstance(module, GraphModule):
                copied += _copy_results(module, escapes=module is not graph_module)
        return GuardGraphPassResult(graph_module, copied > 0)


def _copy_results(graph_module: GraphModule, *, escapes: bool) -> int:
    """Read each control-flow result that must outlive its branch's memory through a copy made
    right after its call; how many. ``escapes``: the graph is a branch, whose outputs its
    parent reads after other branches may have run."""
    copied = 0
    nodes = list(graph_module.graph.nodes)
    order = {node: i for i, node in enumerate(nodes)}
    calls = [order[n] for n in nodes if n.op == "call_function" and n.target in _SUBMODULE_CALLS]
    for node in nodes:
        if node.op != "call_function" or node.target not in _CONTROL_FLOW:
            continue
        at = node
        for result in [user for user in node.users if isinstance(user.meta.get("val"), torch.Tensor)]:
            if not _outlives_branch(result, order[node], order, calls, escapes=escapes):
                continue
            at.append(result)  # the getitem first, then its copy, before anything else runs
            clone = _clone_after(result)
            result.replace_all_uses_with(clone, delete_user_cb=lambda user, clone=clone: user is not clone)
            at = clone
            copied += 1
    if copied:
        graph_module.recompile()
    return copied


def _outlives_branch(result: Node, made_at: int, order: dict[Node, int], calls: list[int], *, escapes: bool) -> bool:
    """Whether a result of the call at ``made_at`` is read after another submodule call may
    have reused its branch's bytes, or leaves a branch (``escapes``). A program whose results
    are read before the next such call keeps its bytes: nothing is copied."""
    last = max((order[user] for user in result.users), default=made_at)
    returned = any(user.op == "output" for user in result.users)
    return (escapes and returned) or any(made_at < call < last for call in calls)


def _clone_after(result: Node) -> Node:
    with result.graph.inserting_after(result):
        # The dim-order copy: to_edge's default dim-order mode rejects aten.clone, and nothing
        # after this stage removes it.
        clone = result.graph.call_function(exir_ops.edge.dim_order_ops._clone_dim_order.default, (result,))
    clone.meta = {key: value for key, value in result.meta.items() if key != "spec"}
    clone.meta["val"] = result.meta["val"].clone()
    return clone
