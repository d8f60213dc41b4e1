"""EG305, EG308, EG309: what the program writes in place, and what ExecuTorch makes of it."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.export.graph_signature import OutputKind
from torch.fx import Node

from export_guards.analysis.initial_state import initial_values_that_matter, unmasked_read
from export_guards.analysis.ops import writer
from export_guards.analysis.programs import ConstantKind
from export_guards.internals import is_fake
from export_guards.linter.context import LintContext
from export_guards.ruleset import Hit, rule


@rule("EG305")
def parameter_mutated(context: LintContext) -> Iterator[Hit]:
    parameters = set(context.program.graph_signature.parameters)
    for constant in context.constants.values():
        if constant.fqn in parameters and constant.fqn in context.mutated:
            yield Hit(
                f"parameter '{constant.fqn}' is written in place", _written_by(context, constant.node), constant.fqn
            )


@rule("EG308")
def buffer_initial_value_dropped(context: LintContext) -> Iterator[Hit]:
    started = {
        constant.fqn: constant
        for constant in context.constants.values()
        if constant.kind is ConstantKind.MUTABLE_BUFFER
        and _has_data(constant.tensor)
        and bool(torch.count_nonzero(constant.tensor))
    }  # a cache that starts at zeros is what the program starts from too
    if not started:
        return
    # Only where the value changes what the program computes: a stale cache that the call
    # overwrites, or reads only under a mask, gives the same outputs from zeros.
    evidence = initial_values_that_matter(context.program, started)
    for fqn, constant in started.items():
        if evidence is not None and fqn not in evidence:
            continue
        tensor = constant.tensor
        said = (
            f"on the example inputs its outputs differ from eager's by up to {evidence[fqn]:.3g}"
            if evidence is not None
            else "its first calls may differ from eager's (the program keeps no example inputs to tell)"
        )
        read = unmasked_read(context.program, fqn) if evidence is not None else None
        yield Hit(
            f"buffer '{fqn}' ({str(tensor.dtype).removeprefix('torch.')}{list(tensor.shape)}, "
            f"{int(torch.count_nonzero(tensor))} of {tensor.numel()} elements nonzero) is written in place, and the "
            f"program drops that value (it starts the buffer from zeros): {said}"
            + (", through this read of it, which no mask covers" if read is not None else ""),
            read if read is not None else _written_by(context, constant.node),
            fqn,
            fix=(
                f"mask the read: have each call write the part of '{fqn}' it reads first, or read only what "
                "this call wrote (a KV cache read under its causal mask); or start the buffer at zeros. Last, only "
                f"when the program must start from this value: to_executorch(ExecutorchBackendConfig(passes=[keep_initial_values({fqn!r})])) "
                "(from export_guards.passes import keep_initial_values), which bakes the value into the program: a cache "
                "left over from an eager call (a sanity call, calibration) then ships in it, and every load starts from it"
            ),
        )


@rule("EG309")
def input_mutated_in_place(context: LintContext) -> Iterator[Hit]:
    signature = context.program.graph_signature
    placeholders = context.placeholders
    written = dict.fromkeys(signature.user_inputs_to_mutate.values())  # a functional program
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
    mutations = {
        spec.arg.name: spec.target for spec in context.program.graph_signature.output_specs if spec.kind in _MUTATIONS
    }
    target = context.constants[placeholder].fqn if placeholder in context.constants else None
    output = next(n for n in reversed(context.program.graph.nodes) if n.op == "output")
    for value in output.args[0]:
        if isinstance(value, Node) and mutations.get(value.name) == target:
            return value
    return placeholder


_MUTATIONS = (OutputKind.BUFFER_MUTATION, OutputKind.PARAMETER_MUTATION)


def _has_data(tensor: torch.Tensor) -> bool:
    return tensor.device.type == "cpu" and not is_fake(tensor)
