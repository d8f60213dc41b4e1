"""EG525: kernel calls with dtypes the runtime's kernel has no path for.

What each portable kernel takes is what it did when run (``pte/kernel_probe.py``: every tensor
of a one-op program's base dtype in each dtype, each ``Scalar`` an int and a float), kept by the
call's dtype signature (``reader/kernel_dtypes.py``). A call is judged only where its signature is one
the probe ran, so a mix of dtypes that no probe made (a promoted out, a float index) says
nothing, and so does an operator the probe could not call, or an ExecuTorch with no table."""

from __future__ import annotations

from collections.abc import Iterator

from export_guards.pte.context import PteContext
from export_guards.pte.reader.kernel_dtypes import installed_versions, kernel_dtypes, signature
from export_guards.pte.reader.operators import spelled
from export_guards.pte.reader.wheel import ExecutionPlan, KernelCall
from export_guards.ruleset import Hit, rule

_FAILURES = {"abort": "aborts the process", "0x12": "fails the call (0x12, InvalidArgument)"}
_FLOATS = ("float32", "float16", "bfloat16", "float64")


@rule("EG525")
def kernel_dtype_refused(context: PteContext) -> Iterator[Hit]:
    program = context.pte.program
    for plan in program.execution_plan if program is not None else ():
        seen: dict[tuple[str, str], int] = {}
        for chain in plan.chains:
            for instruction in chain.instructions:
                call = instruction.instr_args
                if isinstance(call, KernelCall) and 0 <= call.op_index < len(plan.operators):
                    found = _refused(plan, call)
                    if found is not None:
                        seen[found] = seen.get(found, 0) + 1
        for (kernel, key), count in seen.items():
            yield _hit(plan.name, kernel, key, count)


def _refused(plan: ExecutionPlan, call: KernelCall) -> tuple[str, str] | None:
    operator = plan.operators[call.op_index]
    kernel = spelled(operator.name, operator.overload)
    probed = kernel_dtypes(kernel)  # the table is read at the first kernel call
    if probed is None:
        return None
    key = signature(plan, call)
    if key is None or probed.calls.get(key, "ok") == "ok":
        return None  # a signature no probe made is not judged
    return kernel, key


def _hit(method: str, kernel: str, key: str, count: int) -> Hit:
    probed = kernel_dtypes(kernel)
    assert probed is not None  # _refused found it
    outcome = probed.calls[key]
    given = (d for part in key.split() for d in part.partition("=")[2].strip("[]").split(","))
    dtypes = list(
        dict.fromkeys(d for d in given if d and d != "None" and not d.startswith("Scalar("))
    )  # the tensors' dtypes
    version = installed_versions()["executorch"]
    takes = ", ".join(probed.takes)
    calls = f" ({count} calls)" if count > 1 else ""
    to = next((d for d in _FLOATS if d in probed.takes), probed.takes[0] if probed.takes else "float32")
    return Hit(
        f"method '{method}' calls {kernel} on {' and '.join(dtypes) or key}{calls}, which executorch {version}'s portable kernel "
        f"does not take ({key}; it takes {takes}): the runtime {_FAILURES.get(outcome, f'fails the call ({outcome})')}",
        method=method,
        node=kernel,
        fix=f"Compute in a dtype the kernel takes: cast to {to} before the op (e.g. x.to(torch.{to})) and back after it if "
        "needed; or lower the op into a delegate that takes the dtype.",
        subjects=(f"{kernel} in '{method}'",),
    )
