"""Which ops of an edge program the runtime runs as kernels once ``to_executorch`` emits it: the
same answer before emission and after (``to_executorch`` edits the edge program it is given)."""

from __future__ import annotations

from collections import Counter

from torch.export import ExportedProgram
from torch.export.graph_signature import OutputKind
from torch.fx import Node

from export_guards.analysis.ops import call_nodes, compute_op_name, is_written, kernel_op_name

__all__ = ["kernel_ops", "runs_as_kernel", "write_backs"]

_WRITE_BACK = "aten::copy_"
_MUTATIONS = (OutputKind.BUFFER_MUTATION, OutputKind.USER_INPUT_MUTATION)


def runs_as_kernel(node: Node) -> str | None:
    """The qualified name of ``node``'s op (``"aten::sort"``) if the runtime runs it with a kernel
    of its own, else None: bookkeeping (``kernel_op_name``), and a ``view_copy`` that ExecuTorch
    turns into a view of its input (every one but an output's: ``ReplaceViewCopyWithViewPass``)."""
    name = kernel_op_name(node)
    if name == "aten::view_copy" and all(user.op != "output" for user in node.users):
        return None
    return name


def write_backs(program: ExportedProgram) -> int:
    """How many ``aten::copy_`` kernels ``to_executorch`` adds to ``program``: one per buffer (or
    input) the program writes that no op writes in place yet (its
    ``insert_write_back_for_buffers_pass``). After emission each has its ``copy_`` in the graph,
    writing it in place: then none is still to add."""
    signature = program.graph_signature
    placeholder_of = {fqn: name for name, fqn in signature.inputs_to_buffers.items()} | {
        name: name for name in signature.user_inputs
    }
    placeholders = {node.name: node for node in program.graph.nodes if node.op == "placeholder"}
    return sum(
        1
        for spec in signature.output_specs
        if spec.kind in _MUTATIONS
        and (node := placeholders.get(placeholder_of.get(spec.target or "", ""))) is not None
        and not is_written(node)
    )


def kernel_ops(program: ExportedProgram) -> Counter[str]:
    """The ops outside the delegates, other than conv / linear / matmul, that the runtime runs as
    kernels once ``program`` is emitted, by qualified name: EG402's count and the lint's summary."""
    kernels = Counter(
        name
        for _, node in call_nodes(program.graph_module)
        if compute_op_name(node) is None and (name := runs_as_kernel(node)) is not None
    )
    if added := write_backs(program):
        kernels[_WRITE_BACK] += added
    return kernels
