"""Control-flow outputs given bytes of their own: a copy of each ``torch.cond`` result, made
right after the ``cond`` and before memory planning, so that the plan keeps it alive for as
long as it is read (what EG518 reports in a program written without it)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from executorch.exir.dialects._ops import ops as exir_ops
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase

from export_guards.analysis.source import node_site
from export_guards.passes.result import GuardGraphPassResult
from export_guards.report import Report
from export_guards.ruleset import CATALOG, Hit, finding

__all__ = ["ControlFlowOutputsPass", "copied_results_report", "outliving_results"]

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
        outliving = outliving_results(graph_module)
        report = copied_results_report(outliving)
        last: dict[Node, Node] = {}  # each call's results and their copies follow it, in order
        for result in outliving:
            call = result.args[0]
            assert isinstance(call, Node)  # a result is a getitem of its call
            last.get(call, call).append(result)  # the getitem first, then its copy, before anything else runs
            last[call] = _clone_after(result)
            result.replace_all_uses_with(last[call], delete_user_cb=_other_than(last[call]))
        for module in {result.graph.owning_module for result in outliving if result.graph.owning_module is not None}:
            module.recompile()
        return GuardGraphPassResult(graph_module, bool(outliving), report)


def outliving_results(graph_module: GraphModule) -> list[Node]:
    """Each ``torch.cond`` result of ``graph_module`` and of its branches that must outlive its
    branch's memory: what :class:`ControlFlowOutputsPass` copies, and what a program written
    without it computes wrong (EG518)."""
    return [
        result
        for module in list(graph_module.modules())
        if isinstance(module, GraphModule)
        for result in _outliving(module, escapes=module is not graph_module)
    ]


def copied_results_report(results: Sequence[Node]) -> Report:
    """EG406 for each of ``results`` (:func:`outliving_results`): the guards give it bytes of its
    own, which a program written without :func:`~export_guards.emit_passes` shares."""
    return Report.of(
        [
            finding(
                CATALOG["EG406"],
                Hit(
                    f"gave the torch.cond result '{result.name}' bytes of its own: it is read after another branch may "
                    "have run, and a program written without emit_passes() (a stock to_executorch()) keeps it in the "
                    "branch's memory, which that branch overwrites: wrong values, with no error (EG518)",
                    result,
                ),
                locate=node_site,
            )
            for result in results
        ]
    )


def _outliving(graph_module: GraphModule, *, escapes: bool) -> list[Node]:
    """The control-flow results of ``graph_module`` read after their branch's memory may have
    been reused, each call's in the order of its users. ``escapes``: the graph is a branch,
    whose outputs its parent reads after other branches may have run."""
    nodes = list(graph_module.graph.nodes)
    order = {node: i for i, node in enumerate(nodes)}
    calls = [order[n] for n in nodes if n.op == "call_function" and n.target in _SUBMODULE_CALLS]
    return [
        result
        for node in nodes
        if node.op == "call_function" and node.target in _CONTROL_FLOW
        for result in list(node.users)
        if isinstance(result.meta.get("val"), torch.Tensor)
        and _outlives_branch(result, order[node], order, calls, escapes=escapes)
    ]


def _outlives_branch(result: Node, made_at: int, order: dict[Node, int], calls: list[int], *, escapes: bool) -> bool:
    """Whether a result of the call at ``made_at`` is read after another submodule call may
    have reused its branch's bytes, or leaves a branch (``escapes``). A program whose results
    are read before the next such call keeps its bytes: nothing is copied."""
    last = max((order[user] for user in result.users), default=made_at)
    returned = any(user.op == "output" for user in result.users)
    return (escapes and returned) or any(made_at < call < last for call in calls)


def _other_than(clone: Node) -> Callable[[Node], bool]:
    """Whether a user of a result is to read the copy: every user but the copy itself."""
    return lambda user: user is not clone


def _clone_after(result: Node) -> Node:
    with result.graph.inserting_after(result):
        # The dim-order copy: to_edge's default dim-order mode rejects aten.clone, and nothing
        # after this stage removes it.
        clone = result.graph.call_function(exir_ops.edge.dim_order_ops._clone_dim_order.default, (result,))
    clone.meta = {key: value for key, value in result.meta.items() if key != "spec"}
    clone.meta["val"] = result.meta["val"].clone()
    return clone
