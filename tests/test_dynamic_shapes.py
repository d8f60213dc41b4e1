"""Dynamic shapes (``torch.export.Dim``): the fold, the lint, lowering and the runtime at two
sizes; nothing that depends on a symbolic size is folded."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.export import Dim

import export_guards as eg
from export_guards.verify import run_pte

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from transformer import sinusoidal_positions


class ImageNet(nn.Module):
    """Weight-normed and spectral-normed convs over a batch of images of any size."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.utils.parametrizations.weight_norm(nn.Conv2d(3, 8, 3, padding=1))
        self.body = nn.utils.parametrizations.spectral_norm(nn.Conv2d(8, 8, 3, padding=1))
        self.head = nn.Conv2d(8, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.body(torch.relu(self.stem(x)))))


class Vocoder(nn.Module):
    """Weight-normed 1-D convs over audio of any length, as in HiFi-GAN."""

    def __init__(self) -> None:
        super().__init__()
        self.pre = nn.utils.parametrizations.weight_norm(nn.Conv1d(4, 16, 7, padding=3))
        self.res = nn.utils.parametrizations.weight_norm(nn.Conv1d(16, 16, 3, padding=1))
        self.post = nn.utils.parametrizations.weight_norm(nn.Conv1d(16, 1, 7, padding=3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = nn.functional.leaky_relu(self.pre(x), 0.1)
        h = h + self.res(nn.functional.leaky_relu(h, 0.1))
        return torch.tanh(self.post(h))


class Positions(nn.Module):
    """Sinusoidal positions sliced to the sequence length: the slice depends on a symbolic
    size and must stay in the graph; the weight-normed projection is folded."""

    def __init__(self, width: int = 16, longest: int = 64) -> None:
        super().__init__()
        self.register_buffer("table", sinusoidal_positions(longest, width))
        self.table: torch.Tensor
        self.proj = nn.utils.parametrizations.weight_norm(nn.Linear(width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x + self.table[: x.shape[1]])


batch = Dim("batch", min=1, max=4)
CASES = {
    "image": (
        ImageNet,
        (2, 3, 16, 24),
        {"x": {0: batch, 2: Dim("height", min=8, max=64), 3: Dim("width", min=8, max=64)}},
        [(1, 3, 32, 16), (3, 3, 12, 40)],
    ),
    # Time only: XNNPACK lowers a 1-D conv through a reshape, which takes one dynamic dimension.
    "audio": (Vocoder, (1, 4, 100), {"x": {2: Dim("time", min=16, max=400)}}, [(1, 4, 37), (1, 4, 321)]),
    "sequence": (Positions, (2, 10, 16), {"x": {0: batch, 1: Dim("length", min=2, max=64)}}, [(1, 3, 16), (4, 64, 16)]),
}


@pytest.mark.parametrize("case", CASES)
def test_a_dynamic_model_folds_lints_lowers_and_runs_at_other_sizes(case: str) -> None:
    factory, shape, dynamic, other_shapes = CASES[case]
    torch.manual_seed(0)
    model = factory().eval()
    program = torch.export.export(model, (torch.randn(shape),), dynamic_shapes=dynamic)

    guarded = eg.lower_with_guards(program)
    assert guarded.edge is not None and not guarded.report.errors, guarded.report
    assert guarded.report.with_code("EG201"), "the reparametrized weights are folded"
    summary = guarded.delegation
    assert summary.portable.keys().isdisjoint({"convolution", "linear", "addmm", "mm"}), summary
    pte = guarded.to_pte()
    assert not eg.check_pte(pte).errors
    for size in other_shapes:
        x = torch.randn(size, generator=torch.Generator().manual_seed(sum(size)))
        with torch.no_grad():
            torch.testing.assert_close(run_pte(pte, (x,))[0], model(x), atol=1e-4, rtol=1e-4)


def test_what_depends_on_a_symbolic_size_is_not_folded() -> None:
    torch.manual_seed(0)
    program = torch.export.export(Positions().eval(), (torch.randn(2, 10, 16),), dynamic_shapes=CASES["sequence"][2])
    folded, report = eg.fold.fold_constants(program)
    assert {f.constant for f in report} == {"proj.weight"}
    assert "table" in folded.state_dict, "the table is sliced by the input's length at run time"
    slices = [n for n in folded.graph.nodes if n.op == "call_function" and "slice" in str(n.target)]
    assert slices, "the slice by the symbolic length stays in the graph"


class ScalarFromPosition(nn.Module):
    """A dynamic position input sliced to a scalar (0-d) that a delegated op reads, as decoders'
    cache positions are; and a 0-d value computed on the portable kernels."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.proj(x)
        return y - positions[-1].float(), y * y.mean()


def test_a_0d_tensor_bound_to_a_one_element_graph_input_is_no_warning_and_runs_at_every_size() -> None:
    """EG514 follows the runtime: it hands XNNPACK the 0-d tensor's own dims, and a 0-d value
    and the graph's [1] are taken alike. The program binds such tensors, checks clean, and
    matches eager at each length, its bounds included."""
    from export_guards.pte.reader.file import PteFile
    from export_guards.pte.reader.wheel import DelegateCall, Tensor

    torch.manual_seed(0)
    model = ScalarFromPosition().eval()
    length = Dim("length", min=1, max=32)
    program = torch.export.export(
        model, (torch.randn(1, 4, 8), torch.arange(4)), dynamic_shapes=({1: length}, {0: length})
    )
    pte = eg.lower_with_guards(program).to_pte()
    plan = PteFile(pte).program.execution_plan[0]
    calls = [
        i.instr_args for chain in plan.chains for i in chain.instructions if isinstance(i.instr_args, DelegateCall)
    ]
    scalars = [
        a
        for call in calls
        for a in call.args
        if isinstance(plan.values[a].val, Tensor) and not plan.values[a].val.sizes
    ]
    assert len(scalars) >= 2, "the delegates take 0-d tensors"
    assert not eg.check_pte(pte).with_code("EG514")
    for size in (1, 5, 32):
        inputs = (torch.randn(1, size, 8, generator=torch.Generator().manual_seed(size)), torch.arange(size) + 3)
        with torch.no_grad():
            for got, expected in zip(run_pte(pte, inputs), model(*inputs)):
                torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_check_export_runs_a_dynamic_program_at_its_bounds(check_export: Callable[..., Any]) -> None:
    """Each bound on a freshly loaded program after the example: a program right at its example
    length only fails the test at the first bound where it is wrong, naming it."""
    from cli_models import dynamic, dynamic_wrong_at_bounds

    model, inputs, dynamic_shapes = dynamic()
    done = check_export(model, inputs, dynamic_shapes=dynamic_shapes, backend="portable")
    assert [c[0].shape for c in done.comparisons] == [(1, 6, 4), (1, 1, 4), (1, 64, 4)]
    model, inputs, dynamic_shapes = dynamic_wrong_at_bounds()
    with pytest.raises(pytest.fail.Exception) as failed:
        check_export(model, inputs, dynamic_shapes=dynamic_shapes, backend="portable")
    said = str(failed.value)
    assert "the .pte's outputs differ from eager on the inputs at length=1 (the lower bound)" in said, said
    assert "The program matched eager on the example inputs" in said
