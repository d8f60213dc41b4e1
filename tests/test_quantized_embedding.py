"""torchao-quantized embeddings (``IntxWeightOnlyConfig`` on an ``nn.Embedding``), which stock
ExecuTorch cannot write ("Missing out variants: {'torchao::dequantize_affine'}"), come out of every
guarded path on ExecuTorch's quantized embedding kernels (EG408): the program stores the quantized
table, runs, and computes what the quantized model computes in eager."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower
from torch import nn

import export_guards as eg
from export_guards.analysis.quantized_embedding import pack_codes
from export_guards.passes.quantized_embedding import QuantizedEmbeddingPass
from export_guards.verify import run_pte
from quantized_cases import TiedHead

pytestmark = [pytest.mark.slow]  # quantized models lowered and run

ROWS, COLUMNS = 256, 64
"""The table: vocabulary and width."""


class Embed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tokens = nn.Embedding(ROWS, COLUMNS)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.tokens(ids) * 2.0


def _config(name: str) -> object:
    from torchao.quantization import IntxWeightOnlyConfig, MappingType
    from torchao.quantization.granularity import PerAxis, PerGroup

    configs: dict[str, Callable[[], object]] = {
        "int8-row": lambda: IntxWeightOnlyConfig(weight_dtype=torch.int8, granularity=PerAxis(0)),
        "int4-group32": lambda: IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(32)),  # type: ignore[attr-defined]  # torch's stubs lack the sub-byte dtypes
        "int4-group16": lambda: IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(16)),  # type: ignore[attr-defined]  # torch's stubs lack the sub-byte dtypes
        "int2-group32": lambda: IntxWeightOnlyConfig(weight_dtype=torch.int2, granularity=PerGroup(32)),  # type: ignore[attr-defined]  # torch's stubs lack the sub-byte dtypes
        "int4-group32-asymmetric": lambda: IntxWeightOnlyConfig(
            weight_dtype=torch.int4,
            granularity=PerGroup(32),
            mapping_type=MappingType.ASYMMETRIC,  # type: ignore[attr-defined]  # torch's stubs lack the sub-byte dtypes
        ),
    }
    return configs[name]()


# config -> (kernel, bits, columns a scale covers, whether zero points are stored)
CONFIGS = {
    "int8-row": ("embedding_byte", 8, COLUMNS, False),
    "int4-group32": ("embedding_4bit", 4, 32, False),
    "int4-group16": ("embedding_4bit", 4, 16, False),
    "int2-group32": ("embedding_2bit", 2, 32, False),
    "int4-group32-asymmetric": ("embedding_4bit", 4, 32, True),
}


def quantized(config: str, model: nn.Module | None = None) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    from torchao.quantization import quantize_

    torch.manual_seed(0)
    model = (model or Embed()).eval()
    rows = next(m for m in model.modules() if isinstance(m, nn.Embedding)).num_embeddings
    quantize_(model, _config(config), filter_fn=lambda module, fqn: isinstance(module, nn.Embedding))
    return model, (torch.randint(0, rows, (2, 8)),)


@pytest.fixture(scope="module")
def float_pte() -> bytes:
    torch.manual_seed(0)
    model = Embed().eval()
    return eg.lower_with_guards(torch.export.export(model, (torch.randint(0, ROWS, (2, 8)),))).to_pte()


@pytest.fixture(scope="module")
def guarded() -> dict[str, tuple[nn.Module, tuple[torch.Tensor, ...], eg.GuardedExport, bytes]]:
    """Each configuration's model, inputs, guarded export and written program, built once."""
    built = {}
    for config in CONFIGS:
        model, inputs = quantized(config)
        result = eg.lower_with_guards(torch.export.export(model, inputs))
        built[config] = (model, inputs, result, result.to_pte())
    return built


@pytest.mark.parametrize("config", CONFIGS)
def test_lower_with_guards_writes_the_quantized_table_and_matches_eager(
    config: str, guarded: dict, float_pte: bytes
) -> None:
    model, inputs, result, pte = guarded[config]
    kernel, bits, group, zero_points = CONFIGS[config]
    (said,) = result.report.with_code("EG408")
    assert f"quantized_decomposed::{kernel}" in said.message and said.severity is eg.Severity.WARNING
    assert said.location is not None and said.location.code == "return self.tokens(ids) * 2.0"  # the user's line
    table = ROWS * COLUMNS * bits // 8
    assert f"({table:,} bytes, not the {ROWS * COLUMNS * 4:,} of a float table)" in said.message
    (actual,) = run_pte(pte, inputs)
    with torch.no_grad():
        assert torch.equal(actual, model(*inputs))  # the same float32 arithmetic as dequantize_affine
    # The program holds the quantized table and its scales (and zero points) in place of the float table.
    parameters = ROWS * (COLUMNS // group) * 4 * (2 if zero_points else 1)
    # (a few hundred bytes more of flatbuffer: the kernel's call has more arguments than embedding's)
    assert 0 <= len(pte) - (len(float_pte) - ROWS * COLUMNS * 4 + table + parameters) <= 512
    assert f"quantized_decomposed::{kernel}".encode() in pte  # the operator table names it


def test_check_and_check_runtime_are_clean_on_the_programs(
    guarded: dict, cli: Callable[..., object], tmp_path: Path
) -> None:
    for config, (_, _, _, pte) in guarded.items():
        assert not eg.check_pte(pte, against=eg.program.RuntimeInventory.installed()).findings, config
    written = tmp_path / "int4.pte"
    written.write_bytes(guarded["int4-group32"][3])
    ran = cli("check", written, "--runtime")
    assert ran.returncode == 0 and "All checks passed" in ran.stdout, ran.stdout  # type: ignore[attr-defined]


def test_a_runtime_without_the_quantized_kernels_is_told_to_link_them(guarded: dict, tmp_path: Path) -> None:
    kernels = tmp_path / "kernels.txt"
    kernels.write_text("aten::mul.out\n")
    (lacking,) = eg.check_pte(
        guarded["int4-group32"][3], against=eg.program.RuntimeInventory.from_file(kernels)
    ).with_code("EG521")
    assert "quantized_decomposed::embedding_4bit.out" in lacking.message and "quantized_ops_lib" in (lacking.fix or "")


def test_the_stock_wheel_runtime_lacks_the_kernels_and_export_guards_runs_register_them(
    guarded: dict, tmp_path: Path
) -> None:
    """In a fresh interpreter: ``executorch.runtime`` alone has no quantized embedding kernel and
    does not load the program; ``run_pte`` (the fixtures' runner) registers them and runs it."""
    model, inputs, _, pte = guarded["int2-group32"]
    (tmp_path / "p.pte").write_bytes(pte)
    torch.save(list(inputs), tmp_path / "inputs.pt")
    script = (
        "import json, sys, torch\n"
        "import export_guards\n"
        "from executorch.runtime import Runtime\n"
        "pte = open(sys.argv[1], 'rb').read()\n"
        "before = 'quantized_decomposed::embedding_2bit.out' in Runtime.get().operator_registry.operator_names\n"
        "try:\n"
        "    Runtime.get().load_program(pte).load_method('forward')\n"
        "    loaded = True\n"
        "except Exception:\n"
        "    loaded = False\n"
        "from export_guards.verify import run_pte\n"
        "(out,) = run_pte(pte, torch.load(sys.argv[2]))\n"
        "torch.save(out, sys.argv[3])\n"
        "print(json.dumps({'before': before, 'loaded': loaded}))\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(Path(eg.__file__).parent.parent), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", script, tmp_path / "p.pte", tmp_path / "inputs.pt", tmp_path / "out.pt"],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"before": False, "loaded": False}
    with torch.no_grad():
        assert torch.equal(torch.load(tmp_path / "out.pt"), model(*inputs))


def test_the_pass_list_writes_a_decoder_with_a_quantized_embedding_and_stock_cannot() -> None:
    model, inputs = quantized("int4-group32", TiedHead())
    program = torch.export.export(model, inputs)
    with pytest.raises(Exception, match="torchao::dequantize_affine"):
        to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()]).to_executorch()
    state = {k: _plain(v).clone() for k, v in program.state_dict.items()}
    graph = str(program.graph)
    edge = to_edge_transform_and_lower(program, transform_passes=eg.guard_passes(), partitioner=[XnnpackPartitioner()])
    pte = edge.to_executorch(ExecutorchBackendConfig(passes=eg.emit_passes())).buffer
    (actual,) = run_pte(pte, inputs)
    with torch.no_grad():
        assert torch.allclose(actual, model(*inputs), atol=1e-5, rtol=1e-5)  # the head on XNNPACK: float rounding
    assert b"quantized_decomposed::embedding_4bit" in pte
    assert str(program.graph) == graph and all(
        torch.equal(state[k], _plain(v)) for k, v in program.state_dict.items()
    )  # the caller's program kept


def test_an_embedding_that_is_the_output_is_the_kernels_output() -> None:
    from executorch.exir import to_edge

    model, inputs = quantized("int4-group32", nn.Sequential(nn.Embedding(ROWS, COLUMNS)))
    edge = to_edge(torch.export.export(model, inputs)).transform([QuantizedEmbeddingPass()])
    (actual,) = run_pte(edge.to_executorch().buffer, inputs)
    with torch.no_grad():
        assert torch.equal(actual, model(*inputs))


def _plain(tensor: torch.Tensor) -> torch.Tensor:
    """A torchao weight's codes (its tensor subclass compares nothing), else the tensor."""
    return getattr(tensor, "qdata", tensor)


def test_a_program_without_a_quantized_embedding_keeps_stock_bytes() -> None:
    torch.manual_seed(0)
    model, inputs = TiedHead().eval(), (torch.randint(0, 128, (1, 8)),)
    program = torch.export.export(model, inputs)
    stock = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()]).to_executorch().buffer
    edge = to_edge_transform_and_lower(program, transform_passes=eg.guard_passes(), partitioner=[XnnpackPartitioner()])
    assert edge.to_executorch(ExecutorchBackendConfig(passes=eg.emit_passes())).buffer == stock
    before = edge.exported_program()
    assert QuantizedEmbeddingPass()(before).exported_program is before


@pytest.mark.runs_program
def test_the_lint_writes_and_runs_a_decoder_with_a_quantized_embedding(
    cli: Callable[..., object], tmp_path: Path
) -> None:
    factory = tmp_path / "decoder.py"
    factory.write_text(
        "import torch\n"
        "from torchao.quantization import IntxWeightOnlyConfig, quantize_\n"
        "from torchao.quantization.granularity import PerAxis\n\n"
        "class Decoder(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.embed = torch.nn.Embedding(128, 64)\n"
        "        self.head = torch.nn.Linear(64, 128, bias=False)\n\n"
        "    def forward(self, tokens):\n"
        "        return self.head(self.embed(tokens))\n\n"
        "def model():\n"
        "    torch.manual_seed(0)\n"
        "    net = Decoder().eval()\n"
        "    quantize_(net, IntxWeightOnlyConfig(weight_dtype=torch.int8, granularity=PerAxis(0)),\n"
        "              filter_fn=lambda module, fqn: isinstance(module, torch.nn.Embedding))\n"
        "    return net, (torch.randint(0, 128, (1, 8)),)\n"
    )
    pte = tmp_path / "decoder.pte"
    ran = cli("lint", f"{factory}:model", "--pte", pte, "--output-format", "json")
    findings = json.loads(ran.stdout)["findings"]  # type: ignore[attr-defined]
    (said,) = [f for f in findings if f["code"] == "EG408"]
    assert said["location"]["line"] == 12 and "embedding_byte" in said["message"]
    assert not [f for f in findings if f["severity"] == "error"], ran.stdout  # type: ignore[attr-defined]
    assert pte.stat().st_size > 0 and b"quantized_decomposed::embedding_byte" in pte.read_bytes()


def test_packing_is_the_kernels_layout() -> None:
    codes = torch.tensor([[0, 15, 7, 8], [1, 2, 3, 4]])
    assert pack_codes(codes, 4).tolist() == [[0x0F, 0x78], [0x12, 0x34]]  # the even column in the high nibble
    assert pack_codes(torch.tensor([[0, 1, 2, 3]]), 2).tolist() == [[0b11100100]]  # the first column in the low bits
