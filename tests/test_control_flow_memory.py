"""Control-flow outputs that share planned bytes (ExecuTorch #21490): the check finds them
without running the program, and the guarded flows give each its own bytes."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import pytest
import torch
from executorch.exir import ExecutorchBackendConfig
from executorch.runtime import Runtime

import export_guards as eg
from export_guards.pipeline import refuse_shared_memory
from export_guards.recipes import recipe_named
from pte_models import COND_INPUTS, CondResultReadLater, OneCond, TwoConds, control_flow_programs

MODELS = {"two conds": TwoConds(), "cond result read later": CondResultReadLater(), "one cond": OneCond()}


@pytest.fixture(scope="module")
def programs() -> Mapping[str, bytes]:
    """Each model, stock and guarded (``pte_models.control_flow_programs``), built once."""
    return MappingProxyType(control_flow_programs())


def run(pte: bytes) -> list[torch.Tensor]:
    return list(Runtime.get().load_program(pte).load_method("forward").execute(list(COND_INPUTS)))


def eager(name: str) -> list[torch.Tensor]:
    result = MODELS[name](*COND_INPUTS)
    return list(result) if isinstance(result, tuple) else [result]


def same(first: list[torch.Tensor], second: list[torch.Tensor]) -> bool:
    return len(first) == len(second) and all(torch.equal(a, b) for a, b in zip(first, second))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["two conds", "cond result read later"])
def test_stock_program_is_wrong_and_check_says_which_values_share_bytes(
    programs: Mapping[str, bytes], name: str
) -> None:
    stock = programs[f"{name}, stock"]
    assert not same(run(stock), eager(name))  # the bug itself: the second cond overwrote the first's result
    (finding,) = eg.check_pte(stock).with_code("EG518")
    assert finding.severity is eg.Severity.ERROR
    # both values the method sees, and the operators that write them
    assert "tensor value 2 (a control-flow output" in finding.message and "tensor value 16" in finding.message
    assert "aten::add.out" in finding.message and "aten::mul.out" in finding.message
    assert "MoveCall" in finding.message and "clone()" in (finding.fix or "")


@pytest.mark.parametrize("name", ["two conds", "cond result read later"])
def test_guarded_emission_matches_eager_and_checks_clean(programs: Mapping[str, bytes], name: str) -> None:
    guarded = programs[f"{name}, guarded"]
    assert same(run(guarded), eager(name))
    assert not eg.check_pte(guarded).with_code("EG518")


def test_a_right_control_flow_program_gets_no_finding_and_keeps_its_bytes(programs: Mapping[str, bytes]) -> None:
    """One cond whose result is read before anything else runs: nothing to report, nothing copied."""
    assert not eg.check_pte(programs["one cond, stock"]).errors
    assert programs["one cond, guarded"] == programs["one cond, stock"]
    assert same(run(programs["one cond, stock"]), eager("one cond"))


def test_the_guarded_pipeline_matches_eager_and_refuses_a_stock_program(programs: Mapping[str, bytes]) -> None:
    """``lower_with_guards`` (XNNPACK, which would otherwise take and move the copies) writes a
    right program; ``to_pte``'s last look refuses the stock one before it is written."""
    guarded = eg.lower_with_guards(torch.export.export(TwoConds(), COND_INPUTS))
    assert same(run(guarded.to_pte()), eager("two conds"))
    calls = [n for n in guarded.edge.exported_program().graph.nodes if n.target is torch.ops.higher_order.cond]
    with pytest.raises(eg.errors.SharedMemoryError, match=r"tensor value 2 .* and tensor value 16") as refused:
        refuse_shared_memory(programs["two conds, stock"], calls)
    assert "pte_models.py:" in str(refused.value)  # the user's torch.cond lines
    assert isinstance(refused.value, eg.GuardError) and refused.value.report.with_code("EG518")


def test_what_the_guards_mend_is_said_on_the_users_line_and_following_it_keeps_the_numbers(
    programs: Mapping[str, bytes],
) -> None:
    """Issue 61: the fix is not silent. A guarded export whose written program stock would
    share (EG518) says so (EG406, on the torch.cond's line, naming emit_passes()); a user who
    writes the program themselves with what the fix names gets the guarded bytes, right."""
    guarded = eg.lower_with_guards(torch.export.export(TwoConds(), COND_INPUTS))
    said = guarded.report.with_code("EG406")
    assert len(said) == 1 and all(
        f.severity is eg.Severity.WARNING for f in said
    )  # the first result: the second cond runs after it
    assert all("emit_passes()" in f.message and "emit_passes()" in (f.fix or "") for f in said)
    assert all(f.location is not None and f.location.file.endswith("pte_models.py") for f in said)
    one = eg.lower_with_guards(torch.export.export(OneCond(), COND_INPUTS))
    assert not one.report.with_code("EG406")  # nothing to mend, nothing said
    followed = guarded.edge.to_executorch(ExecutorchBackendConfig(passes=eg.emit_passes())).buffer
    assert not eg.check_pte(followed).with_code("EG518") and same(run(followed), eager("two conds"))


@pytest.mark.slow
def test_a_guarded_recipe_matches_eager() -> None:
    from executorch.export import export

    session = export(CondResultReadLater(), [COND_INPUTS], eg.guard_recipe(recipe_named("xnnpack_fp32")))
    assert same(run(session.get_pte_buffer()), eager("cond result read later"))
