"""EG101, EG102: constants that the emitter or a delegate cannot read from host memory."""

from __future__ import annotations

from collections.abc import Iterator

from export_guards.linter.context import LintContext
from export_guards.linter.registry import Hit, rule
from export_guards.placement import (
    CONSTANT_ON_DEVICE,
    CONSTANT_WITHOUT_DATA,
    FIX_DEVICE,
    FIX_NO_DATA,
    describe,
    first_user,
    storage_problem,
)
from export_guards.report import Severity


def _hits(context: LintContext, code: str) -> Iterator[Hit]:
    for constant in context.constants.values():
        problem = storage_problem(constant.tensor)
        if problem is not None and problem[0] == code:
            yield Hit(f"{describe(constant)} {problem[1]}", first_user(constant.node), constant.fqn)


@rule(
    CONSTANT_ON_DEVICE,
    "constant-on-device",
    Severity.ERROR,
    "A constant lives in device (non-CPU) memory: the emitter or a delegate would segfault reading it.",
    FIX_DEVICE,
)
def constant_on_device(context: LintContext) -> Iterator[Hit]:
    return _hits(context, CONSTANT_ON_DEVICE)


@rule(
    CONSTANT_WITHOUT_DATA,
    "constant-without-data",
    Severity.ERROR,
    "A constant has no data (meta device, fake tensor, null pointer): there are no bytes to export.",
    FIX_NO_DATA,
)
def constant_without_data(context: LintContext) -> Iterator[Hit]:
    return _hits(context, CONSTANT_WITHOUT_DATA)
