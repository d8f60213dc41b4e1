"""What a delegate of the installed ExecuTorch computes wrong never ships from a guarded path:
each known-wrong entry proved by running stock (wrong, on the releases the entry names) and every
guarded flow (right) against eager; a program without the pattern is left as it is."""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from executorch.export import export as export_recipe
from torch.export import ExportedProgram

import export_guards as eg
from export_guards.analysis.known_wrong import XNNPACK_LINEAR_WEIGHT_MATH, known_wrong_in
from export_guards.passes.known_wrong import KnownWrongDelegationPass
from export_guards.recipes import recipe_named
from export_guards.verify import run_pte
from quantized_cases import CASES, as_partitioned

pytestmark = [pytest.mark.slow]  # quantized models lowered stock and guarded, and run

WRONG = 1e-2
"""Past this, relative to eager's largest value, a program is wrong (not rounding)."""

WEIGHT_ONLY = ["torchao-int8wo", "torchao-intx8wo-channel", "torchao-intx4wo-group32", "torchao-int8wo-3d"]
"""The cases XNNPACK computes wrong (benchmarks/delegate_numerics.py): torchao's weight-only linears."""

RIGHT = ["torchao-8da4w-group32", "torchao-8da8w-channel", "pt2e-static-channel-linear", "pt2e-dynamic-channel-linear"]
"""Quantized linears XNNPACK computes right: the guards leave them as stock lowers them."""


def relative_error(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], pte: bytes) -> float:
    with torch.no_grad():
        expected = model(*inputs)
    (actual,) = run_pte(pte, inputs)
    return float((actual - expected).abs().max() / expected.abs().max())


# Each case's model, stock program, partitioned program and guarded programs are made once per
# process and shared by the tests that read them: the models are only run (without grad) and
# exported, the programs are bytes and reports; a test that runs a pass on the partitioned
# program gets its own copy of it (``partitioned``).


@functools.cache
def built(case: str) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """``CASES[case]()``, once: callers run and export the model, never change it."""
    return CASES[case]()


@functools.cache
def stock(case: str) -> bytes:
    """The case as stock ExecuTorch lowers it to XNNPACK, unguarded."""
    model, inputs = built(case)
    return (
        to_edge_transform_and_lower(torch.export.export(model, inputs), partitioner=[XnnpackPartitioner()])
        .to_executorch()
        .buffer
    )


@functools.cache
def _partitioned(case: str) -> ExportedProgram:
    return as_partitioned(*built(case))


def partitioned(case: str) -> ExportedProgram:
    """The edge program XNNPACK's partitioner is handed for the case: a copy of its own for each caller."""
    return copy.deepcopy(_partitioned(case))


GUARDED_FLOWS: dict[str, Callable[[str], tuple[bytes, eg.Report]]] = {}


def flow(function: Callable[[str], tuple[bytes, eg.Report]]) -> None:
    GUARDED_FLOWS[function.__name__] = function


@functools.cache
def guarded(flow_name: str, case: str) -> tuple[bytes, eg.Report]:
    """What the guarded flow ``flow_name`` writes for the case, and its report (once)."""
    return GUARDED_FLOWS[flow_name](case)


@flow
def pass_list(case: str) -> tuple[bytes, eg.Report]:
    """guard_passes() beside the user's own, unguarded partitioner."""
    model, inputs = built(case)
    passes = eg.guard_passes()
    edge = to_edge_transform_and_lower(
        torch.export.export(model, inputs), transform_passes=passes, partitioner=[XnnpackPartitioner()]
    )
    ran = KnownWrongDelegationPass()(partitioned(case))
    return edge.to_executorch().buffer, ran.report


@flow
def guarded_partitioners(case: str) -> tuple[bytes, eg.Report]:
    model, inputs = built(case)
    partitioner = eg.guard_partitioners([XnnpackPartitioner()])
    passes = eg.guard_passes(partitioner=partitioner)
    edge = to_edge_transform_and_lower(
        torch.export.export(model, inputs), transform_passes=passes, partitioner=partitioner
    )
    ran = KnownWrongDelegationPass(("XnnpackBackend",))(partitioned(case))
    return edge.to_executorch().buffer, ran.report


@flow
def lower_with_guards(case: str) -> tuple[bytes, eg.Report]:
    model, inputs = built(case)
    result = eg.lower_with_guards(torch.export.export(model, inputs))
    return result.to_pte(), result.report


@flow
def recipe(case: str) -> tuple[bytes, eg.Report]:
    model, inputs = built(case)
    session = export_recipe(model, [inputs], eg.guard_recipe(recipe_named("xnnpack_fp32")))
    return session.get_pte_buffer(), eg.recipes.recipe_report(session)


def is_right_and_said(
    name: str, pte: bytes, report: eg.Report, model: torch.nn.Module, inputs: tuple[torch.Tensor, ...]
) -> None:
    assert relative_error(model, inputs, pte) < 1e-4, name
    kept = report.with_code("EG405")
    assert len(kept) == 2, (name, str(report))  # the MLP's two linears
    assert all(XNNPACK_LINEAR_WEIGHT_MATH.report in f.message and f.severity is eg.Severity.WARNING for f in kept)
    lines = sorted(f.location.code for f in kept if f.location is not None)
    assert lines == ["return self.down(torch.relu(self.up(x)))"] * 2, name  # the user's line


@pytest.mark.parametrize("case", WEIGHT_ONLY)
def test_a_weight_only_linear_is_wrong_on_stock_xnnpack_and_right_through_the_guards(case: str) -> None:
    model, inputs = built(case)
    # Keyed to the releases: when a release computes it right, this fails until the entry's
    # fixed_in says so, and the entry then stops applying.
    assert (relative_error(model, inputs, stock(case)) > WRONG) == XNNPACK_LINEAR_WEIGHT_MATH.applies()
    is_right_and_said(case, *guarded("pass_list", case), model, inputs)


def test_every_guarded_flow_keeps_a_weight_only_linear_off_xnnpack() -> None:
    model, inputs = built("torchao-intx4wo-group32")
    for name in GUARDED_FLOWS:
        is_right_and_said(name, *guarded(name, "torchao-intx4wo-group32"), model, inputs)


@pytest.mark.parametrize("case", RIGHT)
def test_a_quantized_linear_xnnpack_computes_right_is_left_as_stock_lowers_it(case: str) -> None:
    edge = partitioned(case)
    assert not known_wrong_in(edge)
    result = KnownWrongDelegationPass()(edge)
    assert result.exported_program is edge and not result.modified and not result.report.findings
    pte, report = guarded("pass_list", case)
    assert pte == stock(case) and not report.with_code("EG405")


def test_the_pass_leaves_its_input_program_as_it_was() -> None:
    edge = partitioned("torchao-intx4wo-group32")
    before = [(n.name, str(n.target), dict(n.meta.get("nn_module_stack") or {})) for n in edge.graph.nodes]
    result = KnownWrongDelegationPass()(edge)
    assert result.modified and result.exported_program is not edge
    assert [(n.name, str(n.target), dict(n.meta.get("nn_module_stack") or {})) for n in edge.graph.nodes] == before
    assert known_wrong_in(edge) and not known_wrong_in(result.exported_program)
    # torchao's dequantize_affine, which no portable kernel runs, became core ATen ops
    assert not [n for n in result.exported_program.graph.nodes if "dequantize_affine" in str(n.target)]


class Unseen(torch.nn.Module):
    """Linears of shapes no case has, with and without a bias, the last one the output."""

    def __init__(self) -> None:
        super().__init__()
        self.up, self.mid, self.down = (
            torch.nn.Linear(48, 80),
            torch.nn.Linear(80, 48, bias=False),
            torch.nn.Linear(48, 24),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.mid(torch.relu(self.up(x))))


@pytest.mark.parametrize("config", ["int4-group16", "int8-channel"])
def test_a_kept_linear_runs_as_the_portable_mm_and_matches_eager_on_any_shape(config: str) -> None:
    from torchao.quantization import IntxWeightOnlyConfig, quantize_
    from torchao.quantization.granularity import PerAxis, PerGroup

    torch.manual_seed(0)
    model, inputs = Unseen().eval(), (torch.randn(2, 5, 48),)  # rank 3
    width, granularity = (torch.int4, PerGroup(16)) if config == "int4-group16" else (torch.int8, PerAxis(0))  # type: ignore[attr-defined]  # torch's stubs lack the sub-byte dtypes
    quantize_(model, IntxWeightOnlyConfig(weight_dtype=width, granularity=granularity))
    result = eg.lower_with_guards(torch.export.export(model, inputs))
    assert len(result.report.with_code("EG405")) == 3
    # each biased linear's addmm became a mm and an add: the portable addmm is many times slower
    assert result.delegation is not None and result.delegation.portable == {"mm": 3}
    assert relative_error(model, inputs, result.to_pte()) < 1e-4


def test_other_backends_patterns_do_not_apply() -> None:
    edge = partitioned("torchao-int8wo")
    assert known_wrong_in(edge, ("XnnpackBackend",)) and not known_wrong_in(edge, ("CudaBackend",))
    assert KnownWrongDelegationPass(("CudaBackend",))(edge).exported_program is edge


@pytest.mark.runs_program
def test_the_lint_keeps_a_weight_only_linear_off_xnnpack_and_its_program_matches_eager(
    cli: Callable[..., object], tmp_path: Path
) -> None:
    factory = tmp_path / "weight_only.py"
    factory.write_text(
        "import torch\n"
        "from torchao.quantization import Int8WeightOnlyConfig, quantize_\n\n"
        "def model():\n"
        "    torch.manual_seed(0)\n"
        "    net = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16)).eval()\n"
        "    quantize_(net, Int8WeightOnlyConfig())\n"
        "    return net, (torch.randn(2, 64),)\n"
    )
    pte = tmp_path / "weight_only.pte"
    ran = cli("lint", f"{factory}:model", "--pte", pte, "--output-format", "json")
    codes = [f["code"] for f in json.loads(ran.stdout)["findings"]]  # type: ignore[attr-defined]
    assert "EG405" in codes and "EG522" not in codes, ran.stdout
    assert pte.stat().st_size > 0


def test_guarded_partitioners_without_the_guard_passes_stop_before_writing() -> None:
    """The guarded partitioner cannot change the graph (ExecuTorch checks), so where no guard
    pass kept the linear off it stops, naming the op and the pass list that fixes it."""
    model, inputs = built("torchao-int8wo")
    partitioner = eg.guard_partitioners([XnnpackPartitioner()])
    with pytest.raises(eg.errors.KnownWrongDelegationError) as stopped:
        to_edge_transform_and_lower(torch.export.export(model, inputs), partitioner=partitioner)
    refused = stopped.value.report.with_code("EG405")
    assert len(refused) == 2 and all(
        f.severity is eg.Severity.ERROR and "guard_passes(partitioner=partitioner)" in (f.fix or "") for f in refused
    )
    assert str(stopped.value).startswith("the partitioner gave 'mm' to Xnnpack; Xnnpack in executorch ")
    # The message itself names the fix; followed as it reads, the export goes through and computes right.
    fix = "to_edge_transform_and_lower(ep, transform_passes=guard_passes(partitioner=partitioner), partitioner=partitioner)"
    assert fix in str(stopped.value)
    edge = to_edge_transform_and_lower(
        torch.export.export(model, inputs),
        transform_passes=eg.guard_passes(partitioner=partitioner),
        partitioner=partitioner,
    )
    pte = edge.to_executorch().buffer
    assert relative_error(model, inputs, pte) < 1e-4
    assert not eg.check_pte(pte).with_code("EG524")  # and the written program's check agrees
