"""Every private name and internal behaviour of torch, ExecuTorch (and Python) that
export-guards relies on, in one room: one named function per touch, each saying what it
relies on, each pinned by a test against the installed versions (``tests/test_internals.py``),
so that an upgrade breaks one known place. Imports neither torch nor ExecuTorch at import
time: it is handed what it touches, or imports it when called."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from torch import nn
    from torch.export import ExportedProgram
    from torch.export.graph_signature import ExportGraphSignature
    from torch.fx import GraphModule

__all__ = [
    "cause_of_type",
    "export_recipe_of",
    "fake_mode_of",
    "forward_pre_hooks",
    "is_fake",
    "is_wrapper_subclass",
    "name_pass",
    "new_fake_mode",
    "operator_schemas",
    "own_parametrized_class",
    "pass_error",
    "program_with_parts",
    "replace_constants_in_place",
    "set_example_inputs",
    "set_original_program",
    "specialization_sites",
    "transform_program",
    "unname_pass",
    "updated_program",
    "warning_filters_changed",
]

E = TypeVar("E", bound=BaseException)

NAMED_FROM = "_named_from"
"""The attribute of a class made by :func:`name_pass` that holds the class it was made from."""


# torch.export's ExportedProgram


def program_with_parts(
    ep: ExportedProgram,
    *,
    graph_module: GraphModule,
    graph_signature: ExportGraphSignature,
    state_dict: dict[str, Any],
    constants: dict[str, Any],
) -> ExportedProgram:
    """A shallow copy of ``ep`` (``copy.copy``) with these parts, unverified, as ExecuTorch's
    pass manager makes the programs it hands each pass. ``ep`` is not modified.

    Relies on ``ExportedProgram`` keeping them in ``_graph_module``, ``_graph_signature``,
    ``_state_dict`` and ``_constants`` (their public setters refuse), and on ``copy.copy``
    sharing everything else (range constraints, module call graph, verifiers). The public
    constructor would verify the program, which costs as much as the fold on a large model."""
    import copy

    program = copy.copy(ep)
    program._graph_module = graph_module
    program._graph_signature = graph_signature
    program._state_dict = state_dict
    program._constants = constants
    return program


def replace_constants_in_place(program: ExportedProgram, state_dict: dict[str, Any], constants: dict[str, Any]) -> None:
    """Set ``program``'s state dict and constants, in place: the program ``to_executorch``
    emits, which a pass of ``ExecutorchBackendConfig.passes`` is handed (the emit pass).

    Relies on ``ExportedProgram`` keeping them in ``_state_dict`` and ``_constants``, which
    the emitter reads (``state_dict`` and ``constants`` refuse to be set)."""
    program._state_dict = state_dict
    program._constants = constants


def updated_program(
    ep: ExportedProgram,
    graph_module: GraphModule,
    graph_signature: ExportGraphSignature,
    *,
    state_dict: dict[str, Any] | None = None,
    constants: dict[str, Any] | None = None,
) -> ExportedProgram:
    """A new, verified ``ExportedProgram``: ``ep`` with this graph module and signature (and
    state dict and constants, where given), made with torch.export's public constructor as
    ``ep._update`` makes it (the range constraints and module call graph deep-copied; the
    example inputs and verifiers shared)."""
    import copy

    from torch.export import ExportedProgram

    return ExportedProgram(
        root=graph_module,
        graph=graph_module.graph,
        graph_signature=graph_signature,
        state_dict=state_dict if state_dict is not None else ep.state_dict,
        range_constraints=copy.deepcopy(ep.range_constraints),
        module_call_graph=copy.deepcopy(ep.module_call_graph),
        example_inputs=ep.example_inputs,
        constants=constants if constants is not None else ep.constants,
        verifiers=ep.verifiers,
    )


def set_example_inputs(ep: ExportedProgram, example_inputs: Any) -> None:
    """Set ``ep``'s example inputs as they are (the host twin's: the original's, moved).

    Relies on ``ExportedProgram._example_inputs``: the public setter also checks them against
    the program's input spec, which the twin's are already."""
    ep._example_inputs = example_inputs


# ExecuTorch's programs and passes


def set_original_program(lowered: Any, program: ExportedProgram) -> None:
    """Make ``program`` the original program of ``lowered`` (a ``LoweredBackendModule``),
    which a retrace replays (its compiled blob is kept).

    Relies on ``LoweredBackendModule._original_exported_program``, which its
    ``original_module`` property returns and no setter sets."""
    lowered._original_exported_program = program


def transform_program(ep: ExportedProgram, *passes: Any) -> ExportedProgram:
    """``ep`` run through ``passes`` in ExecuTorch's ``ExportedProgramPassManager``, the new
    program verified: what ``EdgeProgramManager.transform`` does to each method.

    Relies on ``executorch.exir.program._program._transform``."""
    from executorch.exir.program._program import _transform

    return _transform(ep, *passes)


def pass_error(error: BaseException) -> BaseException | None:
    """What a pass raised, where ``error`` is ExecuTorch's pass manager's wrapping of it.

    Relies on ``ExportedProgramPassManager`` (``executorch.exir.pass_manager``) re-raising a
    pass's error as ``Exception("An error occurred when running the '<pass>' pass ...") from
    error``: the pass's error is the wrapper's ``__cause__``."""
    return error.__cause__


def cause_of_type(error: BaseException | None, cls: type[E]) -> E | None:
    """``error`` if it is a ``cls``, else the first of its causes that is (ExecuTorch's pass
    manager wraps a pass's error, :func:`pass_error`; a pass manager inside another, twice),
    or ``None``."""
    while error is not None and not isinstance(error, cls):
        error = pass_error(error)
    return error


def specialization_sites(error: BaseException) -> list[tuple[str, int, str]]:
    """Where torch.export's tracing fixed each symbolic size that ``error`` (a
    ``ConstraintViolationError``) says the code specialized: ``(file, line, function)`` of each,
    as torch recorded them, first recorded first.

    Relies on ``ShapeEnv.produce_guards_verbose`` raising the error with the ``ShapeEnv`` as its
    frame's ``self``, and on the ``ShapeEnv`` keeping, for each symbol it replaced by a constant,
    the place in ``replacements_slocs`` and, for each range it narrowed, in
    ``var_to_range_sloc`` (``SLoc.framework_loc``: a ``traceback.FrameSummary`` of the first
    frame outside torch's tracing machinery, or a string where torch knows no frame)."""
    env, tb = None, error.__traceback__
    while tb is not None:  # the innermost frame whose self is a ShapeEnv
        owner = tb.tb_frame.f_locals.get("self")
        env = owner if type(owner).__name__ == "ShapeEnv" else env
        tb = tb.tb_next
    if env is None:
        return []
    slocs = [*getattr(env, "replacements_slocs", {}).values()]
    slocs += [
        bound for ranged in getattr(env, "var_to_range_sloc", {}).values() for bound in (ranged.upper, ranged.lower)
    ]
    sites = [
        (f.filename, f.lineno or 1, f.name)
        for sloc in slocs
        if (f := getattr(sloc, "framework_loc", None)) is not None and hasattr(f, "filename")
    ]
    return list(dict.fromkeys(sites))


def name_pass(instance: object, name: str) -> None:
    """Make ExecuTorch's pass manager call ``instance`` ``name`` if it fails, until
    :func:`unname_pass`: its class becomes a subclass of its own so named (the same module
    and qualified name).

    Relies on ExecuTorch's pass manager naming a pass that is not a function by its class's
    ``__name__`` (``pass_manager._get_pass_name``), the only name its error message gives."""
    cls = getattr(type(instance), NAMED_FROM, type(instance))
    instance.__class__ = type(
        name, (cls,), {NAMED_FROM: cls, "__module__": cls.__module__, "__qualname__": cls.__qualname__}
    )


def unname_pass(instance: object) -> None:
    """Give ``instance`` back the class :func:`name_pass` made a subclass of, if it did."""
    instance.__class__ = getattr(type(instance), NAMED_FROM, type(instance))


def export_recipe_of(session: Any) -> Any:
    """The ``ExportRecipe`` an ``executorch.export.ExportSession`` was made with, or ``None``.

    Relies on ``ExportSession._export_recipe``: a session has no public getter for it."""
    return getattr(session, "_export_recipe", None)


# torch's modules and operators


def forward_pre_hooks(module: nn.Module) -> Iterable[Callable[..., Any]]:
    """The forward pre-hooks of ``module``: where hook-based ``spectral_norm`` and
    ``weight_norm`` keep their ``SpectralNorm`` / ``WeightNorm`` objects.

    Relies on ``nn.Module._forward_pre_hooks``, a dict of hook id to hook."""
    return module._forward_pre_hooks.values()


def own_parametrized_class(module: nn.Module) -> None:
    """Give ``module`` a private copy of its parametrized class, so that
    ``parametrize.remove_parametrizations`` on it leaves every other module as it was.

    Relies on ``torch.nn.utils.parametrize`` keeping each parametrized tensor's property on a
    class it makes for the module, which ``remove_parametrizations`` deletes the property
    from (or replaces by the original class), and which ``copy.deepcopy`` shares between a
    module and its copies (the caller's model, when a copy is folded)."""
    cls = type(module)
    namespace = {k: v for k, v in vars(cls).items() if k not in ("__dict__", "__weakref__")}
    module.__class__ = type(cls.__name__, cls.__bases__, namespace)


def operator_schemas(torch: Any) -> Iterator[tuple[str, list[Any]]]:
    """Each operator name torch's dispatcher knows (with those of the libraries loaded into
    ``torch``), sorted, with its ``FunctionSchema`` objects in the dispatcher's order.

    Relies on ``torch._C._jit_get_all_schemas`` and ``torch._C._jit_get_schemas_for_operator``."""
    for name in sorted({schema.name for schema in torch._C._jit_get_all_schemas()}):
        yield name, list(torch._C._jit_get_schemas_for_operator(name))


# torch's fake and wrapper tensors


def fake_mode_of(values: Iterable[object]) -> Any:
    """The ``FakeTensorMode`` the fake tensors among ``values`` belong to (a program's node
    values), or ``None`` where there are none.

    Relies on ``torch._guards.detect_fake_mode``."""
    from torch._guards import detect_fake_mode

    return detect_fake_mode(list(values))


def new_fake_mode() -> Any:
    """A new ``FakeTensorMode``, to compute a value's metadata without its data.

    Relies on ``torch._subclasses.FakeTensorMode``."""
    import torch

    return torch._subclasses.FakeTensorMode()


def is_fake(value: object) -> bool:
    """Whether ``value`` is a fake tensor: its shape, dtype and device, and no data.

    Relies on ``torch._subclasses.fake_tensor.FakeTensor``."""
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(value, FakeTensor)


def is_wrapper_subclass(value: object) -> bool:
    """Whether ``value`` is a tensor subclass whose data are inner tensors that it names
    (``__tensor_flatten__``: torchao's quantized weights), not its own storage.

    Relies on ``torch.utils._python_dispatch.is_traceable_wrapper_subclass``."""
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    return is_traceable_wrapper_subclass(value)


# Python's warnings


def warning_filters_changed() -> None:
    """Tell ``warnings`` that its filter list was edited in place (``warnings.filters[:] =
    ...``), so that a warning a removed filter ignored is shown again.

    Relies on ``warnings._filters_mutated``, which ``warnings.filterwarnings`` calls after a
    change: it invalidates the registries of warnings already seen; nothing where a Python
    lacks it."""
    getattr(warnings, "_filters_mutated", lambda: None)()
