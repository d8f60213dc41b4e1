"""What a delegate is known to compute wrong, recognised in the written program (EG524): the
program that stock ExecuTorch writes for each weight-only quantized linear is an error of
``check_pte`` and ``export-guards check``, and computes wrong in ``executorch.runtime``; the
guarded program of the same model, and every program XNNPACK computes right, are not."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from torch import nn

import export_guards as eg
from export_guards.analysis.known_wrong import FINDERS, XNNPACK_LINEAR_WEIGHT_MATH
from export_guards.analysis.known_wrong_entries import KNOWN_WRONG, release_text
from export_guards.pte.rules.known_wrong import RECOGNISERS
from export_guards.verify import run_pte
from quantized_cases import CASES

pytestmark = [pytest.mark.slow]  # quantized models lowered stock and guarded

WEIGHT_ONLY = ["torchao-int8wo", "torchao-intx8wo-channel", "torchao-intx4wo-group32"]
"""torchao's weight-only linears, which stock XNNPACK computes wrong (tests/test_known_wrong.py)."""

RIGHT = ["torchao-8da4w-group32", "torchao-8da8w-channel", "pt2e-static-channel-linear", "pt2e-dynamic-channel-linear"]
"""Quantized linears XNNPACK computes right."""


def stock(model: nn.Module, inputs: tuple[torch.Tensor, ...]) -> bytes:
    return (
        to_edge_transform_and_lower(torch.export.export(model, inputs), partitioner=[XnnpackPartitioner()])
        .to_executorch()
        .buffer
    )


def relative_error(model: nn.Module, inputs: tuple[torch.Tensor, ...], pte: bytes) -> float:
    with torch.no_grad():
        expected = model(*inputs)
    (actual,) = run_pte(pte, inputs)
    return float((actual - expected).abs().max() / expected.abs().max())


@pytest.fixture(scope="module")
def weight_only() -> dict[str, tuple[bytes, bytes, float]]:
    """Each weight-only case: its stock program, its guarded program (``lower_with_guards``) and
    the stock program's error against eager (exported once for the module)."""
    written = {}
    for case in WEIGHT_ONLY:
        model, inputs = CASES[case]()
        wrong = stock(model, inputs)
        guarded = eg.lower_with_guards(torch.export.export(model, inputs)).to_pte()
        written[case] = (wrong, guarded, relative_error(model, inputs, wrong))
    return written


def test_every_known_wrong_entry_has_a_finder_in_a_graph_and_a_recogniser_of_a_written_program() -> None:
    assert set(FINDERS) == set(RECOGNISERS) == set(KNOWN_WRONG)


@pytest.mark.parametrize("case", WEIGHT_ONLY)
def test_the_stock_program_of_a_weight_only_linear_is_an_error_and_its_guarded_program_is_not(
    weight_only: dict[str, tuple[bytes, bytes, float]], case: str
) -> None:
    wrong, guarded, error = weight_only[case]
    found = eg.check_pte(wrong).with_code("EG524")
    # Keyed to the releases as the entry is: a release that writes it right fails here (its
    # program computes right) until the entry's fixed_in says so.
    assert (error > 1e-2) == XNNPACK_LINEAR_WEIGHT_MATH.applies() == bool(found), (case, error)
    assert [f.severity for f in found] == [eg.Severity.ERROR] * 2, case  # the MLP's two linears
    up, down = found
    assert up.message.startswith(
        "delegate 0 (XnnpackBackend) of method 'forward': fully connected node 0 (64 to 32 channels) "
    )
    assert down.message.startswith(
        "delegate 0 (XnnpackBackend) of method 'forward': fully connected node 1 (32 to 16 channels) "
    )
    for finding in found:
        assert f"Xnnpack in executorch {release_text()} computes it wrong" in finding.message
        assert XNNPACK_LINEAR_WEIGHT_MATH.report in finding.message and finding.method == "forward"
        assert "guard_passes(partitioner=partitioner)" in (finding.fix or "") and "lower_with_guards" in (
            finding.fix or ""
        )
        assert finding.constant  # the filter's named data
    assert not eg.check_pte(guarded).with_code("EG524")


def test_the_finding_names_the_integers_and_the_constants_the_graph_never_reads(
    weight_only: dict[str, tuple[bytes, bytes, float]],
) -> None:
    (first, _), (int4, _) = (
        eg.check_pte(weight_only[case][0]).with_code("EG524") for case in ("torchao-int8wo", "torchao-intx4wo-group32")
    )
    assert "filter value 1 (fp32[32, 64]), which holds only integers (-128 to 127)" in first.message
    assert "(program values 0 (float32[32]) and 1 (float32[32, 1]): the scales, zero points or bias)" in first.message
    # int4 with groups of 32: codes -8..7, a scale and a zero point per group of each channel
    assert (
        "which holds only integers (-8 to 7)" in int4.message and "float32[32, 2]) and 1 (int8[32, 2])" in int4.message
    )


def test_export_guards_check_fails_on_the_stock_program(
    weight_only: dict[str, tuple[bytes, bytes, float]], cli: Callable[..., object], tmp_path: Path
) -> None:
    wrong, guarded, _ = weight_only["torchao-intx4wo-group32"]
    (tmp_path / "wrong.pte").write_bytes(wrong)
    (tmp_path / "guarded.pte").write_bytes(guarded)
    ran = cli("check", tmp_path / "wrong.pte")
    assert ran.returncode == 1 and ran.stdout.count("EG524 [error]") == 2, ran.stdout  # type: ignore[attr-defined]
    ran = cli("check", tmp_path / "guarded.pte")
    assert ran.returncode == 0 and "EG524" not in ran.stdout, ran.stdout  # type: ignore[attr-defined]


class Wide(nn.Module):
    """Linears of other shapes than the cases': no bias, three of them, a group of 16."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(96, 48, bias=False), nn.ReLU(), nn.Linear(48, 80, bias=False), nn.Linear(80, 8)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def test_any_shape_and_group_size_is_recognised() -> None:
    from torchao.quantization import IntxWeightOnlyConfig, quantize_
    from torchao.quantization.granularity import PerGroup

    torch.manual_seed(0)
    model, inputs = Wide().eval(), (torch.randn(5, 96),)
    quantize_(model, IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(16)))  # type: ignore[attr-defined]  # torch's stubs lack the sub-byte dtypes
    wrong = stock(model, inputs)
    assert relative_error(model, inputs, wrong) > 1e-2
    found = eg.check_pte(wrong).with_code("EG524")
    assert [f.message.split(" multiplies")[0].split(": ", 1)[1] for f in found] == [
        "fully connected node 0 (96 to 48 channels)",
        "fully connected node 1 (48 to 80 channels)",  # the ReLU is node 0's output clamp
        "fully connected node 2 (80 to 8 channels)",
    ]


@pytest.mark.parametrize("case", RIGHT)
def test_a_quantized_program_xnnpack_computes_right_is_not_this(case: str) -> None:
    model, inputs = CASES[case]()
    assert not eg.check_pte(stock(model, inputs)).with_code("EG524")


def test_a_float_linear_whose_weights_are_integers_is_not_this() -> None:
    """Integers alone are a float weight that may be meant (a hand-made matrix): without
    constants passed to the call and never read, nothing was dropped."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 16)).eval()
    with torch.no_grad():
        for layer in (model[0], model[2]):
            layer.weight.copy_(torch.randint(-128, 128, layer.weight.shape).float())
    inputs = (torch.randn(2, 64),)
    program = stock(model, inputs)
    assert relative_error(model, inputs, program) < 1e-4
    assert not eg.check_pte(program).with_code("EG524")


@pytest.mark.subprocess
def test_the_stock_program_is_recognised_without_torch(
    weight_only: dict[str, tuple[bytes, bytes, float]], tmp_path: Path
) -> None:
    """The recogniser reads the decoded graph and the weights' bytes only: in a fresh
    interpreter, ``export-guards check`` finds the same EG524 errors with neither torch nor
    executorch.exir loaded."""
    path = tmp_path / "wrong.pte"
    path.write_bytes(weight_only["torchao-int8wo"][0])
    child = (
        "import json, sys\n"
        "from export_guards.cli import main\n"
        "code = main(['check', sys.argv[1], '--format', 'json'])\n"
        "heavy = sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.') or m == 'executorch.exir')\n"
        "print(json.dumps(heavy), file=sys.stderr)\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run([sys.executable, "-c", child, str(path)], capture_output=True, text=True, timeout=300)
    assert json.loads(done.stderr.strip().splitlines()[-1]) == [], done.stderr[-2000:]
    found = [f for f in json.loads(done.stdout)["findings"] if f["code"] == "EG524"]
    assert done.returncode == 1 and [f["message"] for f in found] == [
        f.message for f in eg.check_pte(path).with_code("EG524")
    ]
