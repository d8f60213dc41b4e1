"""The fixtures take the whole lowering (issue 63): ``check_export(exportable)``, or a model with
``lowering=`` an ``Exportable`` or its ``Lowering``, quantizes a copy of the model with the
factory's quantize step and writes the program ``export-guards lint`` writes for that factory,
byte for byte; the float model is not what they test, and the caller's model is left as it was."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

import export_guards as eg
import fixture_lowering_models as models
from conftest import Ran
from export_guards.analysis.ops import inserted_by_quantizer

pytestmark = pytest.mark.slow
MODELS = Path(__file__).parent / "fixture_lowering_models.py"


def untouched(model: nn.Module) -> bool:
    """Whether ``model`` is still the factory's float model: plain parameters, the same values."""
    fresh = models.tagger().state_dict()
    state = model.state_dict()
    plain = all(type(p) is nn.Parameter for p in model.parameters())
    return plain and state.keys() == fresh.keys() and all(torch.equal(state[k], fresh[k]) for k in fresh)


# Each way of handing the fixtures the lowering, one factory each (an export is seconds): the
# Exportable first, the documented line (its Lowering), the Exportable as lowering=, and
# export_with_guards with its Lowering (docs/lint.md's line).
WAYS: dict[str, Callable[..., tuple[tuple[bytes, torch.export.ExportedProgram], ...]]] = {
    "xnnpack_8da4w": lambda made, check_export: (
        written(check_export(made)),
        written(check_export(made.model, made.inputs, lowering=made.lowering)),
    ),
    "portable_int8": lambda made, check_export: (
        written(check_export(made.model, made.inputs, lowering=made)),
        written(eg.export_with_guards(made.model, made.inputs, lowering=made.lowering)),
    ),
}


def written(done: object) -> tuple[bytes, torch.export.ExportedProgram]:
    """A fixture's (an ``ExportCheck``) or ``export_with_guards``'s program: its bytes, and its torch.export program."""
    export = getattr(done, "export", done)
    return (done.pte if export is not done else export.to_pte()), export.program  # type: ignore[attr-defined]


@pytest.mark.parametrize("factory", sorted(WAYS))
def test_the_fixtures_write_the_lints_quantized_program_byte_for_byte(
    factory: str,
    cli: Callable[..., Ran],
    check_export: Callable[..., object],
    guarded_export: Callable[..., eg.GuardedExport],
    tmp_path: Path,
) -> None:
    linted = tmp_path / "lint.pte"
    done = cli("lint", f"{MODELS}:{factory}", "--pte", str(linted))
    assert done.returncode == 0, done.stderr[-2000:]
    made = getattr(models, factory)()  # as a user's test calls the factory: a float model and its quantize step

    programs = WAYS[factory](made, check_export)
    assert all(pte == linted.read_bytes() for pte, _ in programs)
    assert untouched(made.model)  # each quantized a copy

    # the quantized program, not the float one: torchao's ops in it, and fewer bytes than the float program's
    assert all(any(inserted_by_quantizer(node) for node in program.graph.nodes) for _, program in programs)
    floating = guarded_export(made.model, made.inputs, lowering=made.lowering.after_quantize).to_pte()
    assert len(linted.read_bytes()) < len(floating)


def test_a_value_given_twice_or_a_quantize_step_that_returns_no_model_fails_in_one_line(
    check_export: Callable[..., object], cli: Callable[..., Ran]
) -> None:
    made = models.xnnpack_8da4w()
    for given in ({"example_inputs": made.inputs}, {"lowering": eg.Lowering(partitioners=[])}):
        with pytest.raises(pytest.fail.Exception, match=f"given {next(iter(given))} twice"):
            check_export(made, **given)

    with pytest.raises(pytest.fail.Exception) as failed:
        check_export(models.returns_none())
    said = str(failed.value)
    assert (
        "quantizing the model failed: the quantize step must return the quantized nn.Module; it returned a NoneType"
        in said
    )
    assert "return the model after it" in said and "Traceback" not in said and "lowering.py" not in said
    done = cli("lint", f"{MODELS}:returns_none")
    assert done.returncode != 0 and "return the model after it" in done.stderr and "lowering.py" not in done.stderr


def test_a_lowering_with_a_quantize_step_is_refused_where_the_model_is_already_exported() -> None:
    program = torch.export.export(nn.Linear(4, 2).eval(), (torch.randn(1, 4),))
    with pytest.raises(ValueError, match="run the lowering's quantize step on the model before exporting it"):
        eg.lower_with_guards(program, lowering=models.xnnpack_8da4w().lowering)
    with pytest.raises(TypeError, match="quantize must be a callable"):
        eg.Lowering(quantize=3)  # type: ignore[arg-type]


def test_torchaos_8da4w_lowers_as_docs_exporters_md_says() -> None:
    """docs/exporters.md: the default XNNPACK partitioner lowers 8da4w whole; ExecuTorch's own
    lowering for the portable kernels stops at the quantize ops' missing out variants, and the
    guarded one writes a program that runs as eager does."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    from export_guards.verify import LoadedMethod

    made = models.xnnpack_8da4w()
    model = made.lowering.quantized(made.model, made.inputs)
    assert (
        to_edge_transform_and_lower(torch.export.export(model, made.inputs), partitioner=[XnnpackPartitioner()])
        .to_executorch()
        .buffer
    )
    with pytest.raises(RuntimeError, match="Missing out variants") as stopped:
        to_edge_transform_and_lower(torch.export.export(model, made.inputs), partitioner=[]).to_executorch()
    assert all(
        op in str(stopped.value)
        for op in ("torchao::choose_qparams_affine", "torchao::quantize_affine", "torchao::dequantize_affine")
    )
    pte = eg.export_with_guards(model, made.inputs, lowering=eg.Lowering(partitioners=[])).to_pte()
    (out,) = LoadedMethod(pte)(made.inputs)
    torch.testing.assert_close(
        out, model(*made.inputs), atol=1e-1, rtol=1e-1
    )  # the lint's tolerance for a quantized program


def test_an_exportable_given_whole_keeps_its_dynamic_shapes_and_partitioners(
    guarded_export: Callable[..., eg.GuardedExport],
) -> None:
    batch = torch.export.Dim("batch", min=2, max=8)
    made = eg.Exportable(nn.Linear(4, 2).eval(), (torch.randn(3, 4),), ({0: batch},), strict=True, partitioners=[])
    export = guarded_export(made)
    (x,) = [
        n
        for n in export.program.graph.nodes
        if n.op == "placeholder" and n.name in export.program.graph_signature.user_inputs
    ]
    assert isinstance(x.meta["val"].shape[0], torch.SymInt)  # the batch stays dynamic
    assert (
        export.delegation is not None and export.delegation.fraction_delegated == 0
    )  # partitioners=[]: the portable kernels
