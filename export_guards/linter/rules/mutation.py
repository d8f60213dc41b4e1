"""EG305: a parameter written in place by the program."""

from __future__ import annotations

from collections.abc import Iterator

from export_guards.linter.context import LintContext
from export_guards.ruleset import Hit, rule


@rule("EG305")
def parameter_mutated(context: LintContext) -> Iterator[Hit]:
    parameters = set(context.program.graph_signature.parameters)
    for constant in context.constants.values():
        if constant.fqn in parameters and constant.fqn in context.mutated:
            writer = next(iter(constant.node.users), constant.node)
            yield Hit(f"parameter '{constant.fqn}' is written in place", writer, constant.fqn)
