"""torchao's int8 x int8 dynamic linear (``Int8DynamicActivationInt8WeightConfig``): stock
``to_edge`` rejects its ``aten._int_mm``; every guarded path rewrites it into the 8da8w form
(EG407), which XNNPACK delegates and the portable kernels run, and the program matches the
quantized model in eager."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower
from torch import nn

import export_guards as eg
from export_guards.passes.int8_dynamic import rewrite_int8_dynamic_linears
from export_guards.targets import hint_for
from export_guards.verify import run_pte
from quantized_cases import CASES, torchao

pytestmark = [pytest.mark.slow]  # quantized models lowered and run

NOISE = 0.02
"""The most a right program's output differs from the quantized model's in eager, relative to
eager's largest value: quantization noise (XNNPACK quantizes the activation itself)."""

LINE = "return self.down(torch.relu(self.up(x)))"  # the MLP's line that calls both linears (quantized_cases.py)


class Odd(nn.Module):
    """A linear without bias, with features no power of two, on a rank-3 input."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(48, 24, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


def odd() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_

    torch.manual_seed(0)
    model = Odd().eval()
    quantize_(model, Int8DynamicActivationInt8WeightConfig())
    return model, (torch.randn(1, 5, 48),)


MODELS: dict[str, Callable[[], tuple[nn.Module, tuple[torch.Tensor, ...]]]] = {
    "mlp": CASES["torchao-int8dq"],  # two linears with bias, rank 2
    "mlp-3d": torchao("int8dq", rank3=True),
    "no-bias-3d": odd,
}
LINEARS = {"mlp": 2, "mlp-3d": 2, "no-bias-3d": 1}


@pytest.fixture(scope="module")
def built() -> dict[str, tuple[nn.Module, tuple[torch.Tensor, ...], torch.export.ExportedProgram]]:
    made = {}
    for name, make in MODELS.items():
        model, inputs = make()
        made[name] = (model, inputs, torch.export.export(model, inputs))
    return made


def relative_error(model: nn.Module, inputs: tuple[torch.Tensor, ...], pte: bytes) -> float:
    with torch.no_grad():
        expected = model(*inputs)
    (actual,) = run_pte(pte, inputs)
    return float((actual - expected).abs().max() / expected.abs().max())


def partitioners(backend: str) -> list[eg.placement.GuardedPartitioner]:
    return eg.guard_partitioners([XnnpackPartitioner()]) if backend == "xnnpack" else []


def said_on_the_users_line(report: eg.Report, linears: int, name: str) -> None:
    rewritten = report.with_code("EG407")
    assert len(rewritten) == linears and all(f.severity is eg.Severity.INFO for f in rewritten), str(report)
    assert all("'_int_mm' to_edge rejects" in f.message and "the weight stays int8" in f.message for f in rewritten)
    if name.startswith("mlp"):
        assert [f.location.code for f in rewritten if f.location is not None] == [LINE] * linears
    else:
        assert all(
            f.location is not None
            and f.location.file.endswith("test_int8_dynamic.py")
            and f.location.code == "return self.proj(x)"
            for f in rewritten
        )


def int8_weights(edge: eg.GuardedExport | object, model: nn.Module) -> None:
    """The program keeps each weight as int8 codes (no float copy of a weight's shape)."""
    program = edge.exported_program()  # type: ignore[union-attr]
    shapes = {tuple(m.weight.shape) for m in model.modules() if isinstance(m, nn.Linear)}
    held = [t for t in [*program.state_dict.values(), *program.constants.values()] if isinstance(t, torch.Tensor)]
    assert not [t for t in held if tuple(t.shape) in shapes and t.is_floating_point()]


@pytest.mark.parametrize("backend", ["xnnpack", "portable"])
@pytest.mark.parametrize("name", ["mlp", "no-bias-3d"])  # mlp-3d: the pass list's and the fixture's
def test_lower_with_guards_writes_a_right_program(built: dict, name: str, backend: str) -> None:
    model, inputs, program = built[name]
    guarded = eg.lower_with_guards(program, config=eg.Settings(backend=backend))
    assert relative_error(model, inputs, guarded.to_pte()) <= NOISE
    said_on_the_users_line(guarded.report, LINEARS[name], name)
    delegated = guarded.delegation.count("linear", "mm", "addmm")
    assert delegated == ((LINEARS[name],) * 2 if backend == "xnnpack" else (0, LINEARS[name]))
    if backend == "portable":
        int8_weights(guarded.edge, model)


def test_the_rewrite_is_made_whatever_the_fold_setting(built: dict) -> None:
    model, inputs, program = built["mlp"]
    guarded = eg.lower_with_guards(program, config=eg.Settings(fold=False))
    assert relative_error(model, inputs, guarded.to_pte()) <= NOISE and len(guarded.report.with_code("EG407")) == 2


@pytest.mark.parametrize("backend", ["xnnpack", "portable"])
def test_the_pass_list_with_its_pre_step_writes_a_right_program(built: dict, backend: str) -> None:
    model, inputs, program = built["mlp-3d"]
    partitioner = partitioners(backend)
    rewritten, report = eg.fold_non_core_constants(program, partitioner=partitioner)
    said_on_the_users_line(report, 2, "mlp-3d")
    edge = to_edge_transform_and_lower(
        rewritten, transform_passes=eg.guard_passes(partitioner=partitioner or None), partitioner=partitioner
    )
    pte = edge.to_executorch(ExecutorchBackendConfig(passes=eg.emit_passes())).buffer
    assert relative_error(model, inputs, pte) <= NOISE
    assert eg.delegation_summary(edge).count("linear", "mm", "addmm") == ((2, 2) if backend == "xnnpack" else (0, 2))


def test_a_guarded_recipe_writes_a_right_program(built: dict) -> None:
    from executorch.export import export as export_recipe

    from export_guards.recipes import recipe_named

    model, inputs, _ = built["mlp"]
    session = export_recipe(model, [inputs], eg.guard_recipe(recipe_named("xnnpack_fp32")))
    assert relative_error(model, inputs, session.get_pte_buffer()) <= NOISE
    said_on_the_users_line(eg.recipes.recipe_report(session), 2, "mlp")


def test_the_rewrite_is_the_form_8da8w_exports() -> None:
    """The same MLP quantized 8da8w (int8 weights per channel) exports the ops the rewrite makes,
    in the same order: the form XNNPACK's partitioner knows."""

    def ops(p: torch.export.ExportedProgram) -> list[str]:
        return [
            n.target.__name__
            for n in p.graph.nodes
            if n.op == "call_function" and ("torchao" in str(n.target) or "linear" in str(n.target))
        ]

    model, inputs = CASES["torchao-int8dq"]()
    rewritten, _ = rewrite_int8_dynamic_linears(torch.export.export(model, inputs))
    reference, inputs = CASES["torchao-8da8w-channel"]()
    assert ops(rewritten) == ops(torch.export.export(reference, inputs))
    assert "_int_mm" not in rewritten.graph_module.code


def test_guarded_partitioners_without_the_pre_step_name_it_and_it_works(built: dict) -> None:
    model, inputs, program = built["mlp"]
    partitioner = eg.guard_partitioners([XnnpackPartitioner()])
    with pytest.raises(eg.LoweringFailed) as stopped:
        to_edge_transform_and_lower(
            program, transform_passes=eg.guard_passes(partitioner=partitioner), partitioner=partitioner
        )
    refused = stopped.value.report.with_code("EG407")
    assert len(refused) == 2 and all(f.severity is eg.Severity.ERROR for f in refused)
    assert refused[0].location is not None and refused[0].location.code == LINE
    step = "export_guards.fold_non_core_constants(program, partitioner=partitioner)"
    assert step in str(stopped.value) and step in (refused[0].fix or "")
    # followed as it reads
    folded, _ = eg.fold_non_core_constants(program, partitioner=partitioner)
    edge = to_edge_transform_and_lower(
        folded, transform_passes=eg.guard_passes(partitioner=partitioner), partitioner=partitioner
    )
    assert (
        relative_error(model, inputs, edge.to_executorch(ExecutorchBackendConfig(passes=eg.emit_passes())).buffer)
        <= NOISE
    )


def test_the_hint_for_int_mm_followed_gives_a_right_program(built: dict) -> None:
    """Stock lowering rejects _int_mm; the hint (the lint's EG002 fix, LoweringFailed's) names
    the step that works, not the exception list that fails next."""
    model, inputs, program = built["mlp"]
    with pytest.raises(Exception, match=r"_int_mm.default is not in Core ATen") as rejected:
        to_edge_transform_and_lower(program)
    hint = hint_for(rejected.value)
    assert hint is not None and "export_guards.fold_non_core_constants(program, partitioner=partitioner)" in hint
    assert (
        "`partitioner=[]` for the portable kernels, and `to_executorch(ExecutorchBackendConfig(passes=export_guards.emit_passes()))`"
        in hint
    )
    folded, _ = eg.fold_non_core_constants(program, partitioner=[])  # the portable kernels: no partitioner above
    pte = to_edge_transform_and_lower(folded).to_executorch(ExecutorchBackendConfig(passes=eg.emit_passes())).buffer
    assert relative_error(model, inputs, pte) <= NOISE


def test_the_hints_other_fix_the_8da8w_config_gives_a_right_program() -> None:
    model, inputs = CASES["torchao-8da8w-channel"]()
    pte = (
        to_edge_transform_and_lower(torch.export.export(model, inputs), partitioner=[XnnpackPartitioner()])
        .to_executorch()
        .buffer
    )
    assert relative_error(model, inputs, pte) <= NOISE


def test_a_program_without_the_pattern_keeps_stocks_bytes() -> None:
    for case in ("torchao-8da8w-channel", "torchao-int8wo"):
        model, inputs = CASES[case]()
        program = torch.export.export(model, inputs)
        same, report = rewrite_int8_dynamic_linears(program)
        assert same is program and not report.findings
    model, inputs = CASES["torchao-8da8w-channel"]()
    program = torch.export.export(model, inputs)
    folded, report = eg.fold_non_core_constants(program)
    assert folded is program and not report.with_code("EG407")
    stock = (
        to_edge_transform_and_lower(torch.export.export(model, inputs), partitioner=[XnnpackPartitioner()])
        .to_executorch()
        .buffer
    )
    guarded = (
        to_edge_transform_and_lower(folded, transform_passes=eg.guard_passes(), partitioner=[XnnpackPartitioner()])
        .to_executorch()
        .buffer
    )
    assert guarded == stock


def test_the_callers_program_is_not_changed(built: dict) -> None:
    model, inputs = CASES["torchao-int8dq"]()
    program = torch.export.export(model, inputs)
    before = (
        program.graph_module.code,
        [(n.name, dict(n.meta.get("nn_module_stack") or {})) for n in program.graph.nodes],
        list(program.state_dict),
    )
    rewrite_int8_dynamic_linears(program)
    eg.fold_non_core_constants(program, partitioner=[])
    eg.lower_with_guards(program, config=eg.Settings(backend="portable"))
    after = (
        program.graph_module.code,
        [(n.name, dict(n.meta.get("nn_module_stack") or {})) for n in program.graph.nodes],
        list(program.state_dict),
    )
    assert after == before and "_int_mm" in program.graph_module.code


def test_the_check_export_fixture_passes(check_export: Callable[..., object], built: dict) -> None:
    model, inputs, _ = built["mlp-3d"]
    checked = check_export(model, inputs, atol=NOISE, rtol=NOISE)
    assert len(checked.report.with_code("EG407")) == 2  # type: ignore[attr-defined]
    assert relative_error(model, inputs, checked.pte) <= NOISE  # type: ignore[attr-defined]


FACTORY = (
    "import torch\n"
    "from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_\n\n"
    "def model():\n"
    "    torch.manual_seed(0)\n"
    "    net = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16)).eval()\n"
    "    quantize_(net, Int8DynamicActivationInt8WeightConfig())\n"
    "    return net, (torch.randn(2, 64),)\n"
)


@pytest.mark.runs_program
@pytest.mark.parametrize("backend", ["xnnpack", "portable"])
def test_the_lint_writes_a_program_that_matches_eager(cli: Callable[..., object], tmp_path: Path, backend: str) -> None:
    factory = tmp_path / "int8dq.py"
    factory.write_text(FACTORY)
    pte = tmp_path / "int8dq.pte"
    ran = cli("lint", f"{factory}:model", "--backend", backend, "--pte", pte, "--output-format", "json")
    findings = json.loads(ran.stdout)["findings"]  # type: ignore[attr-defined]
    assert [f["code"] for f in findings if f["code"] == "EG407"] == ["EG407"] * 2, ran.stdout
    assert not [f for f in findings if f["severity"] == "error"], ran.stdout  # it ran, and matched eager
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 16)).eval()
    quantize_(net, Int8DynamicActivationInt8WeightConfig())
    assert relative_error(net, (torch.randn(2, 64),), pte.read_bytes()) <= NOISE


@pytest.mark.parametrize("form", ["s8s8", "u8s8"])
def test_either_form_torchao_picks_for_the_cpu_is_rewritten(form: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """torchao computes the product as int8 x int8 where the CPU has AMX or lacks AVX512-VNNI,
    and as uint8 x int8 (the activation shifted by 128, the shift taken back) where it has VNNI
    without AMX: whichever this machine would pick, each form is rewritten and right."""
    from torchao.kernel import intmm

    monkeypatch.setattr(intmm, "_cpu_is_amx_tile_supported", lambda: form == "s8s8")
    monkeypatch.setattr(intmm, "_cpu_is_vnni_supported", lambda: True)
    model, inputs = MODELS["mlp"]()
    program = torch.export.export(model, inputs)
    int_mm = [n for n in program.graph.nodes if n.target is torch.ops.aten._int_mm.default]
    assert [n.args[0].meta["val"].dtype for n in int_mm] == [torch.uint8 if form == "u8s8" else torch.int8] * 2
    guarded = eg.lower_with_guards(program, config=eg.Settings(backend="portable"))
    assert relative_error(model, inputs, guarded.to_pte()) <= NOISE
    said_on_the_users_line(guarded.report, 2, "mlp")
