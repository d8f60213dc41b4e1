"""A factory says how it lowers (``Exportable``'s partitioners, compile_config, backend_config and
quantize): the lint, ``check --reproducible`` and the fixtures lower exactly that, and a failed
lowering's fix names the setting that resolves it (issue 54)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower
from executorch.exir.error import InternalError
from torch import nn

import export_guards as eg
from conftest import Ran
from export_guards.pipeline import export_target
from export_guards.targets import StepFailed, load_target, step

pytestmark = pytest.mark.slow
MODELS = Path(__file__).parent / "lowering_models.py"


def stock(model: torch.nn.Module, inputs: tuple[object, ...], **lowering: object) -> bytes:
    """The user's own script: their partitioners and configs, no guards."""
    backend_config = lowering.pop("backend_config", None)
    edge = to_edge_transform_and_lower(torch.export.export(model, inputs), **lowering)
    return edge.to_executorch(backend_config).buffer


def delegates(pte: bytes) -> int:
    from export_guards.pte.reader.file import PteFile

    return len(PteFile(pte).delegates)


def test_the_lint_lowers_with_the_compile_config_the_factory_names_and_says_so_when_it_is_missing(
    cli: Callable[..., Ran], tmp_path: Path
) -> None:
    failed = cli("lint", f"{MODELS}:select_default", "--pte", str(tmp_path / "a.pte"))
    assert failed.returncode == 2
    assert (
        "not in Core ATen" in failed.stderr and "compile_config=EdgeCompileConfig(" in failed.stderr
    )  # the fix names the setting

    written = tmp_path / "b.pte"
    done = cli("lint", f"{MODELS}:select_with_config", "--pte", str(written))
    assert done.returncode == 0, done.stderr[-2000:]
    made = load_target(f"{MODELS}:select_with_config")
    mine = stock(made.model, made.inputs, compile_config=made.compile_config)
    assert b"masked_select" in written.read_bytes() and delegates(written.read_bytes()) == delegates(mine) == 0
    assert len(written.read_bytes()) <= len(mine)  # the fold stores `* 2`'s constant converted: smaller, never larger


@pytest.mark.runs_program
def test_the_lint_lowers_with_the_partitioners_and_options_the_factory_names(
    cli: Callable[..., Ran], tmp_path: Path
) -> None:
    for factory, partitioner in (("per_op", [XnnpackPartitioner(per_op_mode=True)]), ("portable_only", [])):
        written = tmp_path / f"{factory}.pte"
        done = cli("lint", f"{MODELS}:{factory}", "--pte", str(written))
        assert done.returncode == 0, done.stderr[-2000:]
        made = load_target(f"{MODELS}:{factory}")
        mine = stock(made.model, made.inputs, partitioner=partitioner)
        assert delegates(written.read_bytes()) == delegates(mine)
        assert written.read_bytes() == mine
    # per-op mode makes one delegate per linear where the default makes one for the whole chain
    assert delegates((tmp_path / "per_op.pte").read_bytes()) == 2
    assert delegates((tmp_path / "portable_only.pte").read_bytes()) == 0


def test_the_program_is_written_with_the_backend_config_the_factory_names(
    cli: Callable[..., Ran], tmp_path: Path
) -> None:
    written = tmp_path / "realigned.pte"
    done = cli("lint", f"{MODELS}:realigned", "--pte", str(written))
    assert done.returncode == 0, done.stderr[-2000:]
    made = load_target(f"{MODELS}:realigned")
    assert written.read_bytes() == stock(
        made.model,
        made.inputs,
        partitioner=[XnnpackPartitioner()],
        backend_config=ExecutorchBackendConfig(constant_tensor_alignment=256),
    )
    assert written.read_bytes() != stock(made.model, made.inputs, partitioner=[XnnpackPartitioner()])


def test_the_quantize_step_runs_before_export_each_time_the_model_is_built() -> None:
    made = load_target(f"{MODELS}:quantized")
    assert type(made.model.a.weight) is not torch.nn.Parameter  # torchao's quantized weight
    result = export_target(f"{MODELS}:quantized")
    assert result.edge is not None
    assert any("quantize" in str(node.target) for node in result.program.graph.nodes)
    assert len(result.to_pte()) < len(
        stock(*load_target(f"{MODELS}:per_op")[:2], partitioner=[XnnpackPartitioner()])
    )  # int4, not float
    # check --reproducible builds, quantizes and exports twice, each in its own process: the same bytes
    assert not eg.program.check_reproducible(f"{MODELS}:quantized").with_code("EG510")


def test_the_fixtures_lower_with_the_lowering_they_are_given(check_export: Callable[..., object]) -> None:
    made = load_target(f"{MODELS}:per_op")
    checked = check_export(made.model, made.inputs, lowering=made.lowering)
    assert delegates(checked.pte) == 2  # type: ignore[attr-defined]


def test_a_lowering_that_is_not_what_executorch_takes_is_a_clear_error(cli: Callable[..., Ran]) -> None:
    done = cli("lint", f"{MODELS}:not_a_partitioner")
    assert done.returncode == 2
    assert "partitioners must be a list of ExecuTorch Partitioner instances" in done.stderr
    both = cli("lint", f"{MODELS}:per_op", "--recipe", "xnnpack_fp32")
    assert both.returncode == 2 and "name either the recipe or the lowering" in both.stderr
    made = load_target(f"{MODELS}:per_op")
    with pytest.raises(ValueError, match="name either the recipe or the lowering"):
        eg.export_with_guards(
            made.model, made.inputs, config=eg.Settings(recipe="xnnpack_fp32"), lowering=made.lowering
        )


@pytest.mark.parametrize(
    ("raised", "setting"),
    [
        (AssertionError("expected compiled_fn to be GraphModule, got <class 'function'>"), "strict=True"),
        (RuntimeError("Missing out variants: {'torchao::dequantize_affine'}"), "partitioners=[...]"),
    ],
)
def test_a_lowering_failure_whose_cause_a_setting_resolves_names_that_setting(raised: Exception, setting: str) -> None:
    with pytest.raises(StepFailed) as failed, step("lowering (xnnpack)"):
        raise raised
    assert failed.value.hint is not None and setting in failed.value.hint
    assert setting in failed.value.report.findings[0].fix  # type: ignore[operator]


class HalfInputFloatNorm(nn.Module):
    """A float16 input into a batch norm whose parameters are float32: torch computes it,
    ExecuTorch's kernel refuses the call (EG519)."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


@pytest.mark.parametrize("backend", ["xnnpack", "portable"])
def test_to_pte_hands_out_no_program_that_check_pte_refuses(backend: str) -> None:
    """Issue 61: every guarded path gives the pass list's verdict. ``to_pte`` checks what it
    wrote as ``check_pte`` does, and a program it finds errors in is an error on the user's line
    with the fix; ``refuse=False`` hands the same bytes to a caller that reports them itself."""
    program = torch.export.export(HalfInputFloatNorm().eval(), (torch.randn(1, 4, 8, 8, dtype=torch.float16),))
    result = eg.lower_with_guards(program, config=eg.Settings(backend=backend))
    with pytest.raises(eg.ProgramRefused, match=r"EG519 .*tensors of different dtypes") as refused:
        result.to_pte()
    assert isinstance(refused.value, InternalError) and "Fix: Give the op's tensors one dtype" in str(refused.value)
    (error,) = refused.value.report.errors
    assert error.location is not None and error.location.file == __file__  # the batch norm's line
    assert {f.code for f in eg.check_pte(refused.value.pte).errors} == {"EG519"}  # the pass list's verdict
    assert eg.lower_with_guards(program, config=eg.Settings(backend=backend)).to_pte(refuse=False) == refused.value.pte


def test_lower_with_guards_says_the_compile_config_as_the_lint_does_and_following_it_lowers(
    cli: Callable[..., Ran],
) -> None:
    import lowering_models
    from export_guards.targets import hint_for

    model, inputs = lowering_models.select_default()
    with pytest.raises(eg.LoweringFailed, match="not in Core ATen") as raised:
        eg.lower_with_guards(torch.export.export(model, inputs))
    hint = raised.value.hint
    assert hint is not None and "lowering=export_guards.Lowering(compile_config=EdgeCompileConfig(...))" in hint
    assert f"hint: {hint}" in str(raised.value)
    (failed,) = raised.value.report.with_code("EG002")  # the report says it too, as the lint's failed step
    assert failed.fix == hint and failed.message.startswith("to_edge_transform_and_lower failed: SpecViolationError")
    assert hint_for(raised.value) == hint  # one function makes it: the lint's step finds the same
    linted = cli("lint", f"{MODELS}:select_default", "--no-run")
    assert linted.returncode == 2 and f"hint: {hint}" in linted.stderr and linted.stderr.count(hint) == 1, (
        linted.stderr[-3000:]
    )
    # the hint followed: the user's compile config, on the program exported again
    done = eg.lower_with_guards(
        torch.export.export(model, inputs), lowering=eg.Lowering(compile_config=lowering_models.NOT_CORE)
    )
    assert done.edge is not None and not done.report.errors and b"masked_select" in done.to_pte()
