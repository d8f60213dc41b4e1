"""EG101, EG102: constants that the emitter or a delegate cannot read from host memory."""

from __future__ import annotations

from collections.abc import Iterator

from export_guards.analysis.storage import first_user, storage_problem
from export_guards.linter.context import LintContext
from export_guards.ruleset import Hit, RuleSet, rule


def _hits(context: LintContext, on_device: bool) -> Iterator[Hit]:
    for constant in context.constants.values():
        problem = storage_problem(constant.tensor)
        if problem is not None and problem.on_device is on_device:
            yield Hit(problem.said_of(constant), first_user(constant.node), constant.fqn)


@rule("EG101")
def constant_on_device(context: LintContext) -> Iterator[Hit]:
    return _hits(context, on_device=True)


@rule("EG102")
def constant_without_data(context: LintContext) -> Iterator[Hit]:
    return _hits(context, on_device=False)


PLACEMENT_RULES = RuleSet.of(constant_on_device, constant_without_data)
"""The two rules the placement guard runs on its own."""
