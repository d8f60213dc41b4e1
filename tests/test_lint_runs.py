"""The lint's runs at a dynamic program's bounds (``export_guards.verify.run_program``): one
loaded program and one method for every input set, eager called the same way, once a set."""

from __future__ import annotations

import export_guards as eg  # first: it keeps the libraries' known noise off the terminal

# isort: split

import pytest
import torch
from torch import nn

from export_guards.pte.smoke import SmokeInputs, SmokeWorker
from export_guards.verify import Tolerance, compare_outputs, run_program
from export_guards.verify import outputs as compared_outputs


class Accumulates(nn.Module):
    """A running total written in place, so that each call sees what the calls before it added;
    counts its eager calls (a Python attribute: not in the program)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("total", torch.zeros(4))
        self.total: torch.Tensor
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        out = x * 2 + self.total
        self.total.add_(x.sum(1).squeeze(0))
        return out


@pytest.fixture(scope="module")
def accumulating() -> tuple[Accumulates, tuple[torch.Tensor], eg.GuardedExport, bytes]:
    model, inputs = Accumulates(), (torch.arange(12.0).reshape(1, 3, 4),)
    length = torch.export.Dim("length", min=1, max=16)
    export = eg.export_with_guards(
        model, inputs, dynamic_shapes={"x": {1: length}}, config=eg.Settings(backend="portable")
    )
    return model, inputs, export, export.to_pte()


def test_the_runs_share_one_loaded_method_and_its_state(accumulating, tmp_path) -> None:
    """The second run sees the total the first added: the same method, not a program loaded afresh."""
    _, inputs, _, pte = accumulating
    (tmp_path / "program.pte").write_bytes(pte)
    torch.save(list(inputs), tmp_path / "inputs.pt")
    runs = [SmokeInputs(str(tmp_path / "inputs.pt"), str(tmp_path / f"outputs-{i}.pt"), f"run {i}") for i in range(2)]
    with SmokeWorker() as worker:
        done = worker.run_each(tmp_path / "program.pte", runs)
    assert [ran.failure for ran in done] == [None, None]
    first, second = (torch.load(tmp_path / f"outputs-{i}.pt", weights_only=True)[0] for i in range(2))
    assert torch.equal(first, inputs[0] * 2) and torch.equal(second, inputs[0] * 2 + inputs[0].sum(1))


def test_eager_follows_the_program_from_set_to_set_once_a_set_and_is_left_as_it_was(accumulating) -> None:
    """At both bounds after the example, the program matches eager called in the same order;
    eager ran once a set (not twice: it repeats only where the program differs), and its state
    is put back."""
    model, inputs, export, pte = accumulating
    model.calls = 0
    runs = run_program(export, pte, model, inputs)
    assert not runs.report and runs.shapes == (
        "the example inputs",
        "length=1 (the lower bound)",
        "length=16 (the upper bound)",
    )
    assert model.calls == 3 and torch.equal(model.total, torch.zeros(4))


def test_outputs_eager_does_not_repeat_are_not_compared() -> None:
    """A train-mode dropout: the program's outputs differ from eager's, and so do eager's own
    from call to call; eager's calls are made again, and those outputs are left out."""
    torch.manual_seed(0)
    model, inputs = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5)).train(), (torch.randn(4, 8),)
    export = eg.export_with_guards(model, inputs, config=eg.Settings(backend="portable"))
    runs = run_program(export, export.to_pte(), model, inputs)
    assert runs.shapes == ("the example inputs",) and not runs.report.with_code("EG522")


@pytest.mark.parametrize("chunk", [1, 3, 64])
def test_outputs_compared_in_chunks_say_what_the_whole_says(chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The largest difference (the first, where two tie), where, the count beyond the tolerance and
    the largest eager value (a NaN or an infinity among them) do not depend on the chunk size."""
    generator = torch.Generator().manual_seed(chunk)
    want = torch.randn(5, 40, generator=generator)
    got = want + torch.randn(5, 40, generator=generator) * 1e-6
    want[1, 3] = want[4, 0] = 0.5
    got[1, 3] = got[4, 0] = 5.5  # two equal largest differences: the first is named
    odd_want, odd_got = want.clone(), got.clone()
    odd_want[2, 2], odd_got[2, 2], odd_got[3, 1] = float("inf"), float("inf"), float("nan")
    cases = [
        (w, g, tolerance)
        for w, g in ((want, got), (odd_want, odd_got))
        for tolerance in (Tolerance.by_dtype(), Tolerance.absolute(atol=1e-3, rtol=1e-3))
    ]
    whole = [compare_outputs(w, [g], tolerance) for w, g, tolerance in cases]
    monkeypatch.setattr(compared_outputs, "_CHUNK", chunk)
    assert [compare_outputs(w, [g], tolerance) for w, g, tolerance in cases] == whole
    assert (
        "differs from eager by up to 5 at [1, 3]" in whole[0][0].problem
        and "2 of 200 values beyond" in whole[0][0].problem
    )
    assert (
        not whole[3][0].within and whole[2][0].within
    )  # a NaN is beyond an absolute tolerance; an infinite largest value allows all
