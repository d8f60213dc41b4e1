"""EG520: a method whose compute runs on portable kernels because nothing was delegated."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from export_guards.pte.context import PteContext
from export_guards.pte.reader.operators import COMPUTE
from export_guards.pte.reader.wheel import DelegateCall, ExecutionPlan, KernelCall, Tensor
from export_guards.ruleset import Hit, rule


@rule("EG520")
def compute_on_portable_kernels(context: PteContext) -> Iterator[Hit]:
    program = context.pte.program
    for plan in program.execution_plan if program is not None else ():
        calls = [i.instr_args for chain in plan.chains for i in chain.instructions]
        if any(isinstance(call, DelegateCall) for call in calls):
            continue
        names = [
            plan.operators[call.op_index].name
            for call in calls
            if isinstance(call, KernelCall) and 0 <= call.op_index < len(plan.operators) and _delegable(plan, call)
        ]
        compute = Counter(name for name in names if name in COMPUTE)
        if compute:
            counts = ", ".join(f"{count} {name}" for name, count in sorted(compute.items()))
            total = sum(compute.values())
            yield Hit(
                f"method '{plan.name}' has no delegate: its {total} convolution and matrix-product call"
                f"{'s run' if total != 1 else ' runs'} on portable kernels ({counts})",
                method=plan.name,
            )


def _delegable(plan: ExecutionPlan, call: KernelCall) -> bool:
    """Whether a delegate the fix names (XNNPACK) takes the call: not a 3-D convolution (a 5-D
    input), which XNNPACK declines ("Only support 1D + 2D Conv"): advising it there is wrong."""
    if (
        plan.operators[call.op_index].name != "aten::convolution"
        or not call.args
        or not 0 <= call.args[0] < len(plan.values)
    ):
        return True
    given = plan.values[call.args[0]].val
    return not isinstance(given, Tensor) or len(given.sizes) in (3, 4)
