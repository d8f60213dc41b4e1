"""A team's own rules, as a third-party package ships them: the tests' tiny rule package.

It is declared to export-guards by ``acme_rules-0.1.dist-info/entry_points.txt`` (what pip
writes from a ``[project.entry-points."export_guards.rules"]`` table), and found once this
folder is on ``sys.path``. Imports neither torch nor ExecuTorch.
"""

from export_guards import Severity
from export_guards.ruleset import Hit, Rule

SHIPPED_KERNELS = {"aten::add.out"}
"""The portable kernels the team's app is built with (a selective build)."""


def _sigmoids(context):
    for node in context.call_nodes():
        if "sigmoid" in str(node.target):
            yield Hit(f"'{node.name}' calls sigmoid, which the team's quantizer cannot calibrate", node)


def _unshipped_kernels(context):
    program = context.pte.program
    for plan in program.execution_plan if program is not None else ():
        for operator in plan.operators:
            kernel = f"{operator.name}.{operator.overload}" if operator.overload else operator.name
            if kernel not in SHIPPED_KERNELS:
                yield Hit(
                    f"method '{plan.name}' needs the kernel {kernel}, which the app is not built with", method=plan.name
                )


NO_SIGMOID = Rule(
    "ACME001",
    "no-sigmoid",
    Severity.WARNING,
    "The model calls sigmoid, which the team's int8 quantizer cannot calibrate.",
    "Use hardsigmoid.",
    "program",
    check=_sigmoids,
    url="https://acme.example/rules#acme001",
)

UNSHIPPED_KERNEL = Rule(
    "ACME501",
    "unshipped-kernel",
    Severity.ERROR,
    "The program needs a portable kernel that the app's selective build leaves out.",
    "Lower the op to XNNPACK, or add the kernel to the app's build.",
    "pte",
    check=_unshipped_kernels,
)
