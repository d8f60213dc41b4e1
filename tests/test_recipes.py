"""The guards in ExecuTorch's recipe API: every recipe type this ExecuTorch offers that lowers
here, stock against guarded on the reparametrized decoder, and the recipe entry points."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from executorch.export import ExportRecipe, export
from torch import nn

import export_guards as eg
from conftest import Ran
from export_guards.recipes import recipe_named
from export_guards.verify import run_pte

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
import decoder  # noqa: E402 - examples/decoder.py
import transformer  # noqa: E402 - examples/transformer.py

pytestmark = [pytest.mark.slow]  # recipes quantize and lower real models


STOCK_AGAINST_GUARDED = ["xnnpack_pt2e_int8_static_per_channel", "xnnpack_torchao_int8da_int4w_per_channel"]
"""Stock against guarded on the decoder: PT2E's static int8, and torchao's int4 (whose stock form
fails on a reparametrized layer). Every recipe on every kind of model, guarded, is the flow
matrix's (tests/test_flow_matrix.py)."""


transformer_block = transformer.model


MODELS = {"decoder": lambda: decoder.model("mixed")}
"""Stock against guarded on the reparametrized decoder, where they differ; every recipe on every
kind of model, guarded, is the flow matrix's (tests/test_flow_matrix.py)."""


def error_against_eager(model: nn.Module, inputs: tuple[torch.Tensor, ...], pte: bytes) -> float:
    with torch.no_grad():
        expected = model(*inputs)
    (actual,) = run_pte(pte, inputs)
    return (actual - expected).abs().max().item()


def delegated(session) -> int:
    """Convs and matrix products inside a delegate."""
    return eg.delegation_summary(session.get_edge_program_manager()).count(
        "convolution", "linear", "addmm", "mm", "bmm"
    )[0]


@pytest.mark.parametrize("name", STOCK_AGAINST_GUARDED)
@pytest.mark.parametrize("model_name", MODELS)
def test_a_guarded_recipe_delegates_at_least_as_much_as_stock_runs_and_matches(name: str, model_name: str) -> None:
    model, inputs = MODELS[model_name]()
    try:
        stock = export(model, [inputs], recipe_named(name))
    except KeyError as error:  # torchao cannot quantize a reparametrized layer: the stock recipe fails
        assert "torchao" in name and "already exists" in str(error)  # noqa: PT017 - the stock recipe's known failure, then the test goes on
        stock = export(
            eg.fold.fold_parametrizations(model)[0], [inputs], recipe_named(name)
        )  # the same model, folded by hand
    model, inputs = MODELS[model_name]()  # a fresh model: some recipes transform the one they are given
    guarded = export(model, [inputs], eg.guard_recipe(recipe_named(name)))

    assert delegated(guarded) >= delegated(stock)
    stock_error = error_against_eager(model, inputs, stock.get_pte_buffer())
    guarded_error = error_against_eager(model, inputs, guarded.get_pte_buffer())
    # The recipe's own tolerance: the stock program's error on the same input (quantized
    # recipes are approximate by design), and float rounding for the float ones.
    assert guarded_error <= max(1.25 * stock_error, 1e-4), (guarded_error, stock_error)
    assert not eg.check_pte(guarded.get_pte_buffer()).errors
    report = eg.recipes.recipe_report(guarded)
    assert not report.errors, report


def test_the_fp32_recipe_leaves_reparametrized_convs_portable_and_the_guarded_one_delegates_them() -> None:
    model, inputs = decoder.model("mixed")
    stock = export(model, [inputs], recipe_named("xnnpack_fp32"))
    guarded = export(model, [inputs], eg.guard_recipe(recipe_named("xnnpack_fp32")))

    assert eg.delegation_summary(stock.get_edge_program_manager()).count("convolution") == (0, 9)
    assert eg.delegation_summary(guarded.get_edge_program_manager()).count("convolution") == (9, 9)
    assert len(guarded.get_pte_buffer()) < len(stock.get_pte_buffer())
    folds = eg.recipes.recipe_report(guarded).with_code("EG201")
    assert {f.constant for f in folds} >= {"stem.0.weight", "head.weight"}, "each folded weight is reported once"
    assert len({f.constant for f in folds}) == len(folds)


def test_the_callers_recipe_is_left_as_it_was() -> None:
    recipe = recipe_named("xnnpack_fp32")
    partitioners = list(recipe.lowering_recipe.partitioners)
    passes = list(recipe.executorch_backend_config.passes)

    guarded = eg.guard_recipe(recipe)
    assert recipe.lowering_recipe.partitioners == partitioners
    assert recipe.lowering_recipe.edge_transform_passes is None
    assert list(recipe.executorch_backend_config.passes) == passes
    assert all(isinstance(p, eg.placement.GuardedPartitioner) for p in guarded.lowering_recipe.partitioners)
    emit = [type(p) for p in eg.emit_passes()]  # the placement guard, then the copies of cond results
    assert (
        eg.placement.EmitPlacementPass in emit
        and [type(p) for p in guarded.executorch_backend_config.passes[-len(emit) :]] == emit
    )
    assert isinstance(guarded, ExportRecipe)


def test_a_multi_method_recipe_export_is_guarded_per_method() -> None:
    forward, forward_inputs = decoder.model("mixed")
    other, other_inputs = transformer_block()
    session = export(
        {"forward": forward, "other": other},
        {"forward": [forward_inputs], "other": [other_inputs]},
        eg.guard_recipe(recipe_named("xnnpack_fp32")),
    )
    pte = session.get_pte_buffer()
    for method, model, inputs in (("forward", forward, forward_inputs), ("other", other, other_inputs)):
        with torch.no_grad():
            torch.testing.assert_close(run_pte(pte, inputs, method)[0], model(*inputs), atol=1e-4, rtol=1e-4)
    assert {f.method for f in eg.recipes.recipe_report(session).with_code("EG201")} == {"forward", "other"}


def test_device_constants_are_stopped_or_copied_in_a_recipe_export(trapdev: torch.device) -> None:
    model, inputs = transformer_block()
    on_device = model.to(trapdev)
    stopped = eg.export_with_guards(
        on_device, [x.to(trapdev) for x in inputs], config=eg.Settings(recipe="xnnpack_fp32")
    )
    assert stopped.edge is None
    assert {f.code for f in stopped.report.errors} == {"EG101"}
    readers = {f.constant: f.message.rsplit("; ", 1)[-1] for f in stopped.report.errors}
    assert readers["qkv.weight"] == "XnnpackBackend's preprocess will read it from host memory"
    assert readers["norm1.weight"].startswith("no partition takes it, so the emitter will copy it")

    copied = eg.export_with_guards(
        on_device, [x.to(trapdev) for x in inputs], config=eg.Settings(placement="copy", recipe="xnnpack_fp32")
    )
    with torch.no_grad():
        expected = on_device(*(x.to(trapdev) for x in inputs)).cpu()
    torch.testing.assert_close(run_pte(copied.to_pte(), inputs)[0], expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("policy", ["error", "copy"])
def test_constants_without_data_stop_a_recipe_export_as_they_stop_lower_with_guards(policy: str) -> None:
    """The recipe's edge guard raises inside ExecuTorch's pass manager, which wraps the error:
    the export still stops with the findings, as ``lower_with_guards``' plan stops it."""
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(4, 3), nn.ReLU()).eval()
    inputs = (torch.randn(2, 4, device="meta"),)
    config = eg.Settings(placement=policy)
    by_recipe = eg.export_with_guards(model, inputs, config=config.updated({"recipe": "xnnpack_fp32"}))
    by_backend = eg.export_with_guards(model, inputs, config=config)
    assert by_recipe.edge is None and by_backend.edge is None
    stops = [[(f.code, f.constant) for f in result.report.errors] for result in (by_recipe, by_backend)]
    assert stops == [[("EG102", "0.weight"), ("EG102", "0.bias")]] * 2


def test_a_recipe_of_another_backend_that_lowers_here() -> None:
    pytest.importorskip("coremltools", reason="the CoreML recipes need coremltools")
    if "coreml_fp32" not in eg.recipes.recipe_names():
        pytest.skip("this ExecuTorch offers no CoreML recipe")
    model, inputs = decoder.model("mixed")
    stock = export(model, [inputs], recipe_named("coreml_fp32"))
    guarded = export(model, [inputs], eg.guard_recipe(recipe_named("coreml_fp32")))

    assert eg.delegation_summary(guarded.get_edge_program_manager()).backends.keys() == {"CoreMLBackend"}
    assert not eg.delegation_summary(guarded.get_edge_program_manager()).portable
    assert len(guarded.get_pte_buffer()) <= len(stock.get_pte_buffer())
    assert not eg.check_pte(guarded.get_pte_buffer()).errors
    assert eg.recipes.recipe_report(guarded).with_code("EG201")


def test_the_fixture_takes_a_recipe_by_name(check_export, assert_delegated) -> None:
    model, inputs = decoder.model("mixed")
    result = check_export(model, inputs, recipe="xnnpack_fp32", atol=1e-4, rtol=1e-4)
    assert_delegated(result)


def test_the_command_takes_a_recipe_by_name(cli: Callable[..., Ran], tmp_path: Path) -> None:
    def run(*args: str) -> Ran:
        return cli(*args, cwd=ROOT)

    out = tmp_path / "decoder.pte"
    done = run(
        "lint", "examples/decoder.py:model", "--recipe", "xnnpack_pt2e_int8_static_per_channel", "--pte", str(out)
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "xnnpack_pt2e_int8_static_per_channel" in done.stderr
    assert out.read_bytes()[4:8] == b"ET12"

    typo = run("lint", "examples/decoder.py:model", "--recipe", "xnnpack_fp33")
    assert typo.returncode == 2 and "did you mean xnnpack_fp32" in typo.stderr, typo.stderr
    assert "coremltools" not in typo.stderr, "looking the recipes up says nothing of the libraries it imports"
    both = run("lint", "examples/decoder.py:model", "--recipe", "xnnpack_fp32", "--backend", "portable")
    assert both.returncode == 2 and "not allowed with argument" in both.stderr


def test_bad_input_is_explained() -> None:
    with pytest.raises(TypeError, match="ExportRecipe"):
        eg.guard_recipe("xnnpack_fp32")
    with pytest.raises(ValueError, match="did you mean xnnpack_fp32"):
        recipe_named("xnnpack_fp33")
    with pytest.raises(ValueError, match="recipe name"):
        eg.Settings(recipe="")
    assert eg.Settings(recipe="xnnpack_fp32").updated({"backend": "portable"}).recipe is None, "the later choice wins"
    assert eg.Settings(backend="portable").updated({"recipe": "xnnpack_fp32"}).recipe == "xnnpack_fp32"
    model, inputs = transformer_block()
    with pytest.raises(ValueError, match="guarded recipe"):
        eg.recipes.recipe_report(export(model, [inputs], recipe_named("xnnpack_fp32")))
