"""EG307: a layer whose parameters the program never reads, because it never runs."""

from __future__ import annotations

from collections.abc import Iterator

from export_guards.analysis.programs import ConstantKind, ProgramConstant
from export_guards.linter.context import LintContext
from export_guards.ruleset import Hit, rule


@rule("EG307")
def unused_parameter(context: LintContext) -> Iterator[Hit]:
    # ExecuTorch writes only the constants the graph reads, so an unused parameter costs no
    # bytes. It is worth a line when its layer never ran: a layer built and never called is
    # often a bug. A module that ran without reading a parameter (a training-only mask
    # embedding, the float originals of a PT2E-quantized layer, one name of a tied weight) is
    # fine, and so are buffers (an eval-mode BatchNorm never reads num_batches_tracked).
    ran = context.modules_run
    if not ran:  # no module metadata: nothing can tell a layer that ran from one that did not
        return
    read = {_storage(c.tensor) for c in context.constants.values() if c.node.users}
    unused: dict[str, list[ProgramConstant]] = {}
    for constant in context.constants.values():
        if constant.kind is not ConstantKind.PARAMETER or constant.node.users or constant.fqn in context.mutated:
            continue
        owner = _owner(constant.fqn)
        if owner in ran or _storage(constant.tensor) in read:
            continue
        unused.setdefault(owner, []).append(constant)
    for owner, parameters in unused.items():  # one finding per layer
        names = ", ".join(repr(p.fqn) for p in parameters)
        nbytes = sum(p.tensor.nbytes for p in parameters)
        yield Hit(
            f"layer '{owner}' never runs: its parameter{'s' if len(parameters) > 1 else ''} {names} "
            f"({nbytes:,} bytes) {'are' if len(parameters) > 1 else 'is'} never read",
            parameters[0].node,
            owner,
        )


def _owner(fqn: str) -> str:
    """The module that holds the parameter ``fqn``; for a parametrization's state
    (``conv.parametrizations.weight.original0``), the parametrized module (``conv``)."""
    if fqn.startswith("parametrizations."):
        return ""
    return fqn.split(".parametrizations.", maxsplit=1)[0] if ".parametrizations." in fqn else fqn.rpartition(".")[0]


def _storage(tensor: object) -> object:
    """What identifies a tensor's bytes: its storage's address (views and ties share it)."""
    try:
        return tensor.untyped_storage().data_ptr()  # type: ignore[attr-defined]
    except (RuntimeError, NotImplementedError, AttributeError):  # no storage (fake, meta, subclass)
        return id(tensor)
