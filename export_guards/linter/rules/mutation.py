"""EG305, EG308, EG309: what the program writes in place, and what ExecuTorch makes of it."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.export.graph_signature import OutputKind
from torch.fx import Node

from export_guards.analysis.ops import writer
from export_guards.analysis.programs import ConstantKind
from export_guards.linter.context import LintContext
from export_guards.ruleset import Hit, rule


@rule("EG305")
def parameter_mutated(context: LintContext) -> Iterator[Hit]:
    parameters = set(context.program.graph_signature.parameters)
    for constant in context.constants.values():
        if constant.fqn in parameters and constant.fqn in context.mutated:
            yield Hit(f"parameter '{constant.fqn}' is written in place", _written_by(context, constant.node), constant.fqn)


@rule("EG308")
def buffer_initial_value_dropped(context: LintContext) -> Iterator[Hit]:
    for constant in context.constants.values():
        if constant.kind is not ConstantKind.MUTABLE_BUFFER or not _has_data(constant.tensor):
            continue
        tensor = constant.tensor
        nonzero = int(torch.count_nonzero(tensor))
        if nonzero == 0:
            continue  # a cache that starts at zeros: what the program starts from too
        pattern = constant.fqn.replace(".", "_")  # a substring of its placeholder's name, as the pass matches
        yield Hit(
            f"buffer '{constant.fqn}' ({str(tensor.dtype).removeprefix('torch.')}{list(tensor.shape)}, "
            f"{nonzero} of {tensor.numel()} elements nonzero) is written in place: the program starts it from zeros",
            _written_by(context, constant.node),
            constant.fqn,
            fix=(
                "keep its value: to_executorch(ExecutorchBackendConfig(passes=[InitializedMutableBufferPass"
                f"([{pattern!r}])])) (from executorch.exir.passes.init_mutable_pass import "
                "InitializedMutableBufferPass); or start the buffer at zeros"
            ),
        )


@rule("EG309")
def input_mutated_in_place(context: LintContext) -> Iterator[Hit]:
    signature = context.program.graph_signature
    placeholders = context.placeholders
    written = {name: None for name in signature.user_inputs_to_mutate.values()}  # a functional program
    for name in signature.user_inputs:
        if name in placeholders and (node := writer(placeholders[name])) is not None:
            written[name] = node
    if not written:
        return
    results = sum(1 for spec in signature.output_specs if spec.kind is OutputKind.USER_OUTPUT)
    inputs = [name for name in signature.user_inputs if name in written]  # the method returns them first, in this order
    first = len(inputs)
    where = f"output {first}" if results == 1 else f"outputs {first} to {first + results - 1}"
    for position, name in enumerate(inputs):
        yield Hit(
            f"input '{name}' is written in place, so the method returns it as output {position}: it has "
            f"{first + results} outputs, and the model's result is {where}",
            written[name] or placeholders.get(name),
            fix=(
                f"write a copy: {name} = {name}.clone() before the in-place op, or use its out-of-place form "
                f"(torch.relu({name}), not relu({name}, inplace=True)); or read the result at {where}"
            ),
        )


def _written_by(context: LintContext, placeholder: Node) -> Node:
    """The op that writes ``placeholder``'s value (in a functional program, the value its
    mutation output returns); the placeholder itself when none is found."""
    found = writer(placeholder)
    if found is not None:
        return found
    mutations = {spec.arg.name: spec.target for spec in context.program.graph_signature.output_specs if spec.kind in _MUTATIONS}
    target = context.constants[placeholder].fqn if placeholder in context.constants else None
    output = next(n for n in reversed(context.program.graph.nodes) if n.op == "output")
    for value in output.args[0]:
        if isinstance(value, Node) and mutations.get(value.name) == target:
            return value
    return placeholder


_MUTATIONS = (OutputKind.BUFFER_MUTATION, OutputKind.PARAMETER_MUTATION)


def _has_data(tensor: torch.Tensor) -> bool:
    return tensor.device.type == "cpu" and not isinstance(tensor, torch._subclasses.FakeTensor)
