"""Where no right program exists for a quantization, the one error names the configuration that
works; each test follows the error's text (the configurations it names, evaluated as written) and
sees a right program."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower
from torch import nn

import export_guards as eg
import quantization_matrix as matrix
import quantized_cases
from export_guards.targets import StepFailed, step
from export_guards.verify import run_pte

pytestmark = [pytest.mark.slow]  # each test lowers a quantized model

_CONFIG = re.compile(r"\b(\w+Config)\(([^()]*(?:\([^()]*\)[^()]*)*)\)")


def configurations_named_in(text: str) -> list[str]:
    """Each torchao configuration ``text`` names, as written (``IntxWeightOnlyConfig(...)``)."""
    return [f"{name}({arguments})" for name, arguments in _CONFIG.findall(text)]


def quantized_with(spelled: str, in_features: int = 64) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The MLP quantized with a configuration as a text spells it."""
    from torchao import quantization
    from torchao.quantization.granularity import PerAxis, PerGroup

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(in_features, 128), nn.ReLU(), nn.Linear(128, 16)).eval()
    config = eval(spelled, {"torch": torch, "PerAxis": PerAxis, "PerGroup": PerGroup, **vars(quantization)})  # noqa: S307 - the error's own text
    quantization.quantize_(model, config)
    return model, (torch.randn(2, in_features),)


def assert_right(model: nn.Module, inputs: tuple[torch.Tensor, ...], backend: str = "xnnpack") -> None:
    """``model`` through ``lower_with_guards`` on ``backend``: its program matches it."""
    pte = eg.lower_with_guards(torch.export.export(model, inputs), config=eg.Settings(backend=backend)).to_pte()
    (actual,) = run_pte(pte, inputs)
    with torch.no_grad():
        expected = model(*inputs)
    assert float((actual - expected).norm() / expected.norm()) <= matrix.RIGHT


def test_float8_is_one_error_naming_what_works_and_what_it_names_works() -> None:
    model, inputs, _ = matrix.model_of("float8 weight-only")
    with pytest.raises(eg.LoweringFailed, match="float8") as raised:
        eg.lower_with_guards(torch.export.export(model, inputs))
    assert "mismatched dtypes" not in str(raised.value)  # to_edge's words, which say neither why nor what works
    named = configurations_named_in(raised.value.hint or "")
    assert len(named) >= 2, raised.value.hint
    for spelled in named:
        assert_right(*quantized_with(spelled))


def test_torchaos_cuda_only_int4_is_a_hint_that_names_what_works_and_what_it_names_works() -> None:
    """torchao's Int4WeightOnlyConfig needs a CUDA package (mslk) on a linear it quantizes; the
    lint's step says so and names configurations for ExecuTorch, which quantize and lower right."""
    with pytest.raises(StepFailed) as raised, step("quantize"):
        quantized_with("Int4WeightOnlyConfig()", in_features=256)
    if "mslk" not in str(raised.value):
        pytest.skip(f"this torchao quantizes Int4WeightOnlyConfig on the CPU: {raised.value}")
    named = configurations_named_in(raised.value.hint or "")
    assert named, raised.value
    for spelled in named:
        assert_right(*quantized_with(spelled, in_features=256), backend="xnnpack")


def test_the_pass_list_on_the_portable_kernels_without_the_pre_step_names_it_and_it_works() -> None:
    """On the portable kernels, torchao's quantize ops have no kernel: a pass list without the
    pre-``to_edge`` step stops at ``to_executorch`` with one error that names the step; with it,
    as the error writes it, the pass list writes a program that matches the quantized model."""
    model, inputs = quantized_cases.CASES["torchao-8da4w-group32"]()
    program = torch.export.export(model, inputs)
    edge = to_edge_transform_and_lower(program, transform_passes=eg.guard_passes())
    with pytest.raises(eg.LoweringFailed, match="no kernel") as raised:
        edge.to_executorch(ExecutorchBackendConfig(passes=eg.emit_passes()))
    assert "fold_non_core_constants(program, partitioner=partitioner)" in (raised.value.hint or "")
    assert "partitioner=[] for the portable kernels" in (raised.value.hint or "")
    program, _ = eg.fold_non_core_constants(program, partitioner=[])
    edge = to_edge_transform_and_lower(program, transform_passes=eg.guard_passes())
    (actual,) = run_pte(edge.to_executorch(ExecutorchBackendConfig(passes=eg.emit_passes())).buffer, inputs)
    expected = model(*inputs)
    assert float((actual - expected).norm() / expected.norm()) <= matrix.RIGHT


def test_a_pt2e_program_with_quantize_ops_left_to_the_kernels_is_written_without_an_import() -> None:
    """PT2E's dynamic per-tensor linear leaves quantize ops to the runtime's kernels; the emit
    passes register ExecuTorch's quantized kernels, which ``to_executorch`` needs ("Missing out
    variants" otherwise), and the program runs: in a fresh process that never imported them."""
    script = (
        "import sys, export_guards as eg, torch, quantized_cases, quantization_matrix as m\n"
        "assert 'executorch.kernels.quantized' not in sys.modules\n"
        "model, inputs = quantized_cases.CASES['pt2e-dynamic-tensor-linear']()\n"
        "pte = eg.lower_with_guards(torch.export.export(model, inputs)).to_pte()\n"
        "(out,) = m.run_pte(pte, inputs)\n"
        "ref = model(*inputs)\n"
        "assert float((out - ref).norm() / ref.norm()) <= m.RIGHT\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=Path(__file__).parent,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
