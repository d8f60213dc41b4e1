"""Each function of ``export_guards.internals`` against the installed torch, ExecuTorch and
Python: what it relies on, pinned, so that an upgrade that changes it fails here, in one known
place (fast: the compat tier runs these on every supported executorch)."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from executorch.exir.pass_base import ExportedProgramPassBase, ExportedProgramPassResult
from executorch.exir.pass_manager import ExportedProgramPassManager
from torch import nn
from torch.export import ExportedProgram
from torch.nn.utils import parametrize

from export_guards import internals


class _Linear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 2)
        self.register_buffer("scale", torch.ones(2))
        self.scale: torch.Tensor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) * self.scale + torch.tensor([1.0, 2.0])


@pytest.fixture(scope="module")
def ep() -> ExportedProgram:
    return torch.export.export(_Linear(), (torch.randn(1, 3),))


def test_program_with_parts_is_a_shallow_copy_with_those_parts(ep: ExportedProgram) -> None:
    state_dict = dict(ep.state_dict)
    constants = dict(ep.constants)
    graph_module = copy.deepcopy(ep.graph_module)
    signature = copy.deepcopy(ep.graph_signature)
    program = internals.program_with_parts(
        ep, graph_module=graph_module, graph_signature=signature, state_dict=state_dict, constants=constants
    )
    assert program is not ep
    assert program.graph_module is graph_module and program.graph is graph_module.graph
    assert program.graph_signature is signature and program.state_dict is state_dict and program.constants is constants
    assert (
        program.range_constraints is ep.range_constraints and program.verifiers is ep.verifiers
    )  # shared, as copy.copy shares them
    assert ep.graph_module is not graph_module and ep.state_dict is not state_dict  # ep as it was
    assert torch.equal(program.module()(torch.ones(1, 3)), ep.module()(torch.ones(1, 3)))


def test_replace_constants_in_place_sets_what_the_public_setters_refuse(ep: ExportedProgram) -> None:
    program = copy.copy(ep)
    with pytest.raises(RuntimeError):
        program.state_dict = {}
    state_dict, constants = dict(ep.state_dict), dict(ep.constants)
    internals.replace_constants_in_place(program, state_dict, constants)
    assert program.state_dict is state_dict and program.constants is constants
    assert ep.state_dict is not state_dict


def test_updated_program_is_what_ep_update_makes(ep: ExportedProgram) -> None:
    graph_module, signature = copy.deepcopy(ep.graph_module), copy.deepcopy(ep.graph_signature)
    state_dict = dict(ep.state_dict)
    ours = internals.updated_program(ep, graph_module, signature, state_dict=state_dict)
    theirs = ep._update(graph_module, signature, state_dict=state_dict)  # what it replaces, while torch has it
    assert type(ours) is type(theirs) is ExportedProgram
    assert ours.graph_signature is theirs.graph_signature is signature
    assert ours.state_dict is theirs.state_dict is state_dict
    assert ours.constants is theirs.constants is ep.constants
    assert ours.example_inputs is theirs.example_inputs is ep.example_inputs
    assert ours.verifiers == theirs.verifiers == ep.verifiers
    assert ours.range_constraints == theirs.range_constraints == ep.range_constraints
    assert ours.module_call_graph == theirs.module_call_graph == ep.module_call_graph
    assert ours.module_call_graph is not ep.module_call_graph  # deep-copied, as _update does
    assert str(ours.graph) == str(theirs.graph) == str(ep.graph)


def test_set_example_inputs_is_what_the_property_returns(ep: ExportedProgram) -> None:
    program = copy.copy(ep)
    inputs = ((torch.zeros(1, 3),), {})
    internals.set_example_inputs(program, inputs)
    assert program.example_inputs is inputs
    assert ep.example_inputs is not inputs


def test_set_original_program_is_what_original_module_returns(ep: ExportedProgram) -> None:
    from executorch.exir.lowered_backend_module import LoweredBackendModule

    lowered = LoweredBackendModule(ep, "SomeBackend", b"", [])
    twin = copy.copy(ep)
    internals.set_original_program(lowered, twin)
    assert lowered.original_module is twin


def test_transform_program_runs_the_passes_in_executorch_s_manager(ep: ExportedProgram) -> None:
    seen = []

    class Counting(ExportedProgramPassBase):
        def call(self, exported_program: ExportedProgram) -> ExportedProgramPassResult:
            seen.append(exported_program)
            return ExportedProgramPassResult(exported_program, False)

    program = internals.transform_program(ep, Counting())
    assert isinstance(program, ExportedProgram) and len(seen) == 1
    assert torch.equal(program.module()(torch.ones(1, 3)), ep.module()(torch.ones(1, 3)))


class _Failing(ExportedProgramPassBase):
    def call(self, exported_program: ExportedProgram) -> ExportedProgramPassResult:
        raise KeyError("the pass's own error")


def test_the_pass_manager_wraps_a_pass_s_error_in_its_cause_and_names_the_pass_by_its_class(
    ep: ExportedProgram,
) -> None:
    failing = _Failing()
    with pytest.raises(Exception, match=r"running the '_Failing' pass") as raised:
        ExportedProgramPassManager([failing])(ep)
    inner = internals.pass_error(raised.value)
    assert isinstance(inner, KeyError) and "the pass's own error" in str(inner)
    assert internals.cause_of_type(raised.value, KeyError) is inner
    assert internals.cause_of_type(inner, KeyError) is inner
    assert internals.cause_of_type(raised.value, ValueError) is None
    assert internals.cause_of_type(None, KeyError) is None
    outer = RuntimeError("outer")
    outer.__cause__ = raised.value  # a manager inside another: wrapped twice
    assert internals.cause_of_type(outer, KeyError) is inner


def test_name_pass_names_the_pass_in_the_managers_error_until_unnamed(ep: ExportedProgram) -> None:
    failing = _Failing()
    internals.name_pass(failing, "_Failing, which stopped 'weight' on trapdev:0")
    assert isinstance(failing, _Failing) and type(failing).__qualname__ == _Failing.__qualname__
    with pytest.raises(Exception, match=r"running the '_Failing, which stopped 'weight' on trapdev:0' pass"):
        ExportedProgramPassManager([failing])(ep)
    internals.name_pass(failing, "again")  # renaming a named pass names the original class again
    assert type(failing).__bases__ == (_Failing,)
    internals.unname_pass(failing)
    assert type(failing) is _Failing
    internals.unname_pass(failing)  # unnamed already: nothing
    assert type(failing) is _Failing


def test_export_recipe_of_is_the_recipe_the_session_was_made_with() -> None:
    from executorch.export import ExportRecipe, ExportSession

    recipe = ExportRecipe(name="pinned")
    session = ExportSession(model=_Linear(), example_inputs=[(torch.randn(1, 3),)], export_recipe=recipe)
    assert internals.export_recipe_of(session) is recipe
    assert internals.export_recipe_of(object()) is None


def test_forward_pre_hooks_hold_hook_based_spectral_norm() -> None:
    from torch.nn.utils.spectral_norm import SpectralNorm

    module = nn.utils.spectral_norm(nn.Linear(3, 2))
    assert any(isinstance(hook, SpectralNorm) for hook in internals.forward_pre_hooks(module))
    assert not list(internals.forward_pre_hooks(nn.Linear(3, 2)))


class _Doubled(nn.Module):
    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        return weight * 2


def test_parametrize_shares_its_class_with_copies_and_own_parametrized_class_parts_them() -> None:
    original = nn.Linear(3, 2)
    parametrize.register_parametrization(original, "weight", _Doubled())
    copied = copy.deepcopy(original)
    assert type(copied) is type(original)  # what the facade works around: one class, two modules
    internals.own_parametrized_class(copied)
    assert type(copied) is not type(original) and type(copied).__name__ == type(original).__name__
    with torch.no_grad():
        parametrize.remove_parametrizations(copied, "weight", leave_parametrized=True)
    assert not parametrize.is_parametrized(copied) and parametrize.is_parametrized(original)
    assert torch.equal(original.weight, copied.weight)  # the original still computes its weight
    assert torch.equal(original(torch.ones(1, 3)), copied(torch.ones(1, 3)))


def test_operator_schemas_lists_the_dispatcher_s_schemas() -> None:
    listed = dict(internals.operator_schemas(torch))
    assert list(listed) == sorted(listed)
    assert "Tensor" in {schema.overload_name for schema in listed["aten::add"]}
    assert all(schema.name == "aten::add" for schema in listed["aten::add"])


def test_fake_mode_of_finds_the_programs_fake_mode_and_new_fake_mode_makes_fake_values(ep: ExportedProgram) -> None:
    values = [n.meta.get("val") for n in ep.graph.nodes if n.op == "placeholder"]
    mode = internals.fake_mode_of(iter(values))
    assert mode is not None and all(v.fake_mode is mode for v in values if internals.is_fake(v))
    assert internals.fake_mode_of([torch.ones(1), None, 3]) is None
    with internals.new_fake_mode():
        made = torch.empty(2, 3)
    assert internals.is_fake(made) and made.shape == (2, 3)


def test_is_fake_tells_fake_tensors_from_real_and_meta_ones(ep: ExportedProgram) -> None:
    value = next(n.meta["val"] for n in ep.graph.nodes if n.op == "placeholder")
    assert internals.is_fake(value)
    assert not internals.is_fake(torch.ones(1)) and not internals.is_fake(torch.empty(1, device="meta"))
    assert not internals.is_fake(nn.Parameter(torch.ones(1))) and not internals.is_fake(None)


class _Wrapper(torch.Tensor):
    """The smallest traceable wrapper subclass: its data is its inner tensor, as torchao's are."""

    @staticmethod
    def __new__(cls, inner: torch.Tensor) -> _Wrapper:
        return torch.Tensor._make_wrapper_subclass(cls, inner.shape, dtype=inner.dtype, device=inner.device)

    def __init__(self, inner: torch.Tensor) -> None:
        self.inner = inner

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["inner"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict[str, torch.Tensor], meta: None, size: object, stride: object) -> _Wrapper:
        return _Wrapper(inner["inner"])

    @classmethod
    def __torch_dispatch__(
        cls, func: object, types: object, args: tuple[object, ...] = (), kwargs: object = None
    ) -> object:
        raise NotImplementedError(func)


def test_is_wrapper_subclass_tells_tensors_whose_data_are_inner_tensors() -> None:
    assert internals.is_wrapper_subclass(_Wrapper(torch.ones(2)))
    assert not internals.is_wrapper_subclass(torch.ones(2)) and not internals.is_wrapper_subclass(
        nn.Parameter(torch.ones(2))
    )


def test_warning_filters_changed_makes_an_in_place_edit_of_the_filters_count() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.resetwarnings()
        warnings.simplefilter("default")  # once per line: the line's registry remembers it

        def warn() -> None:
            warnings.warn("pinned by test_internals", UserWarning, stacklevel=1)

        warn()
        assert len(caught) == 1
        warnings.filters[:] = [("always", None, Warning, None, 0), *warnings.filters]  # edited in place, as quiet does
        warn()
        assert len(caught) == 1  # the registry, not the edited filters, answered
        internals.warning_filters_changed()
        warn()
        assert len(caught) == 2


def test_the_modules_loaded_from_the_wheel_without_torch_are_where_the_loader_looks() -> None:
    """``pte/reader/wheel.py`` loads ExecuTorch's flatbuffer readers without their packages
    (which import torch): every module it names must be a file of the installed executorch."""
    from export_guards.pte.reader import wheel

    folders = wheel.executorch_folders()
    assert folders
    for name in wheel.LIGHT_MODULES:
        assert wheel._source(name, folders) is not None, f"{name} is not a file of the installed executorch"


def test_specialization_sites_are_where_the_trace_fixed_a_dynamic_dimension() -> None:
    class Branch(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2 if x.shape[0] == 3 else x  # fixes the dimension

    with pytest.raises(Exception) as raised:  # noqa: PT011 - whatever torch raises: the test reads its chain
        torch.export.export(Branch(), (torch.randn(3, 2),), dynamic_shapes=({0: torch.export.Dim("batch")},))
    innermost = raised.value
    while innermost.__cause__ is not None or innermost.__context__ is not None:
        innermost = innermost.__cause__ or innermost.__context__
    assert type(innermost).__name__ == "ConstraintViolationError"
    assert (__file__, Branch.forward.__code__.co_firstlineno + 1, "forward") in internals.specialization_sites(
        innermost
    )
    assert internals.specialization_sites(ValueError("no trace")) == []
