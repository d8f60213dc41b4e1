"""EG521: operator kernels and delegate backends that the runtime at hand does not have."""

from __future__ import annotations

from collections.abc import Iterator

from export_guards.pte.context import PteContext
from export_guards.ruleset import Hit, rule


@rule("EG521")
def runtime_lacks_kernel(context: PteContext) -> Iterator[Hit]:
    runtime, program = context.runtime, context.pte.program
    if runtime is None or program is None:
        return  # nothing to compare with: the file alone says nothing about a runtime
    for plan in program.execution_plan:
        for operator in plan.operators:
            if not runtime.has_kernel(operator.name, operator.overload):
                spelled = f"{operator.name}.{operator.overload}" if operator.overload else operator.name
                yield Hit(
                    f"method '{plan.name}' calls {spelled}, for which {runtime.name} has no kernel: loading the "
                    f"method fails there (OperatorMissing)",
                    method=plan.name,
                )
        if runtime.backends is None:
            continue
        for index, delegate in enumerate(plan.delegates):
            if delegate.id not in runtime.backends:
                known = ", ".join(sorted(runtime.backends)) or "none"
                yield Hit(
                    f"delegate {index} of method '{plan.name}' is for backend '{delegate.id}', which {runtime.name} does "
                    f"not register (it has {known}): loading the method fails there",
                    method=plan.name,
                )
