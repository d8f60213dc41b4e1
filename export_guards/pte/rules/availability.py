"""EG521: operator kernels and delegate backends that the runtime at hand does not have."""

from __future__ import annotations

from collections.abc import Iterator

from export_guards.pte.context import PteContext
from export_guards.pte.inventory import RuntimeInventory
from export_guards.pte.reader.backend_ids import KNOWN_BACKEND_IDS, closest_backend_id
from export_guards.pte.reader.operators import spelled
from export_guards.report import Severity
from export_guards.ruleset import Hit, rule

KERNEL_LIBRARIES: dict[str, tuple[str, str]] = {
    "quantized_decomposed": (
        "ExecuTorch's quantized kernel library",
        "Register ExecuTorch's quantized kernels in the runtime that loads the program: in Python, `import "
        "executorch.kernels.quantized` before loading it (executorch.runtime has them then); in C++, link "
        "quantized_ops_lib (built with EXECUTORCH_BUILD_KERNELS_QUANTIZED=ON). Or lower the quantized ops into a "
        "delegate (XNNPACK takes a PT2E-quantized model's).",
    ),
}
"""The library that provides an operator namespace's kernels, by namespace: what it is, and how a
runtime gets it (proved in ``tests/test_kernel_contracts.py``)."""


@rule("EG521")
def runtime_lacks_kernel(context: PteContext) -> Iterator[Hit]:
    runtime, program = context.runtime, context.pte.program
    if runtime is None or program is None:
        return  # nothing to compare with: the file alone says nothing about a runtime
    for plan in program.execution_plan:
        for operator in plan.operators:
            if not runtime.has_kernel(operator.name, operator.overload):
                kernel = spelled(operator.name, operator.overload)
                library = KERNEL_LIBRARIES.get(operator.name.partition("::")[0])
                yield Hit(  # the node is the operator: a check that knows the graph places it on the user's line
                    f"method '{plan.name}' calls {kernel}, for which {runtime.name} has no kernel: loading the "
                    f"method fails there (OperatorMissing)" + (f"; {library[0]} provides it" if library else ""),
                    node=kernel,
                    method=plan.name,
                    fix=library[1] if library else None,
                )
        if runtime.backends is None:
            continue
        for index, delegate in enumerate(plan.delegates):
            if delegate.id and delegate.id not in runtime.backends:  # an empty id is EG506's, file or no runtime
                yield _backend_lacking(runtime, plan.name, index, delegate.id)


def _backend_lacking(runtime: RuntimeInventory, method: str, index: int, backend_id: str) -> Hit:
    """The runtime lacks the backend: a build option away when another build has it (a warning),
    a damaged or foreign file when no ExecuTorch build registers that id (an error)."""
    where = f"delegate {index} of method '{method}' is for backend '{backend_id}'"
    known = ", ".join(sorted(runtime.backends or ())) or "none"
    if backend_id in KNOWN_BACKEND_IDS:
        option = KNOWN_BACKEND_IDS[backend_id]
        build = f"a runtime built with {option}=ON" if option else f"a runtime built with {backend_id}"
        return Hit(
            f"{where}, which {runtime.name} does not register (it has {known}): loading the method fails there; "
            f"it loads in {build}",
            severity=Severity.WARNING,
            fix=f"Run it on {build}, or export for a backend {runtime.name} has ({known}).",
            method=method,
        )
    guess = closest_backend_id(backend_id)
    return Hit(
        f"{where}, which no ExecuTorch build registers ({runtime.name} has {known}"
        f"{f'; did you mean {guess!r}?' if guess else ''}): loading the method fails (NotFound) on every runtime",
        fix="The delegate's backend id is damaged or not ExecuTorch's: re-export the model with the backend's partitioner.",
        method=method,
    )
