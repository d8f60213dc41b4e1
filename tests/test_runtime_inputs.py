"""Issue 52, items 3 and 4: ``check --runtime`` runs inputs the program can take (made-up
integers in range, a failure on made-up integers a warning, ``--inputs`` for real ones), and an
input given as ``None`` runs at the dynamic bounds as in the example."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from executorch.exir import to_edge_transform_and_lower
from torch import nn

from export_guards.analysis.shape_bounds import shape_bounds
from export_guards.pte.check import check_pte
from export_guards.report import Severity

TESTS = Path(__file__).parent
MODELS = TESTS / "cli_models.py"
REGRESSION = TESTS / "pte_regressions" / "external-flip-750.pte"  # any program file: usage errors come first


class _Behind(nn.Module):
    """Writes at ``cache_position - 9``: right for positions from 9 on (a window that starts
    there), out of range at the zeros the check makes up."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("cache", torch.zeros(8, 4))
        self.cache: torch.Tensor

    def forward(self, x: torch.Tensor, cache_position: torch.Tensor) -> torch.Tensor:
        self.cache.index_copy_(0, cache_position - 9, x)
        return self.cache.sum(0)


@pytest.fixture(scope="module")
def behind(tmp_path_factory: pytest.TempPathFactory) -> Path:
    program = torch.export.export(_Behind().eval(), (torch.randn(2, 4), torch.tensor([9, 10])))
    path = tmp_path_factory.mktemp("behind") / "behind.pte"
    path.write_bytes(to_edge_transform_and_lower(program).to_executorch().buffer)
    return path


@pytest.mark.subprocess  # each runtime run is a child process
def test_a_failure_on_made_up_integers_is_a_warning_and_real_inputs_decide(behind: Path, tmp_path: Path) -> None:
    (made_up,) = check_pte(behind, runtime=True).with_code("EG511")
    assert made_up.severity is Severity.WARNING, made_up
    assert "on inputs that export-guards made up (#0 float32[2, 4] random, #1 int64[2] zeros)" in made_up.message
    assert (
        "Index -1 is out of bounds" in made_up.message
        and made_up.fix is not None
        and "--inputs inputs.pt" in made_up.fix
    )
    real, wrong = tmp_path / "real.pt", tmp_path / "wrong.pt"
    torch.save([torch.randn(2, 4), torch.tensor([9, 10])], real)
    torch.save([torch.randn(2, 4), torch.tensor([0, 1])], wrong)
    assert check_pte(behind, runtime=True, inputs=real).findings == ()
    (failed,) = check_pte(behind, runtime=True, inputs=wrong).with_code("EG511")
    assert failed.severity is Severity.ERROR and f"failed in {behind} on the inputs in {wrong}" in failed.message, (
        failed
    )


class _Bucketed(nn.Module):
    """Reads a table at a float scaled to an index: right for the inputs in [0, 0.01) it is
    given, out of range at most random ones, in range at zeros."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("table", torch.arange(10.0))
        self.table: torch.Tensor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.table[(x.abs() * 1000).long()]


@pytest.mark.subprocess
def test_a_failure_on_made_up_floats_that_zeros_do_not_repeat_is_a_warning() -> None:
    torch.manual_seed(0)
    program = torch.export.export(_Bucketed().eval(), (torch.rand(16) / 100,))
    (made_up,) = check_pte(to_edge_transform_and_lower(program).to_executorch().buffer, runtime=True).with_code("EG511")
    assert made_up.severity is Severity.WARNING and "#0 float32[16] random" in made_up.message, made_up
    assert "it ran with zeros for the made-up floats, so their values failed, not the program" in made_up.message


def test_inputs_go_with_runtime_and_one_program(cli: Callable[..., Any], tmp_path: Path) -> None:
    inputs = tmp_path / "inputs.pt"
    inputs.write_bytes(b"not read before the run")
    without = cli("check", REGRESSION, "--inputs", inputs)
    assert (
        without.returncode == 2 and "--inputs are what --runtime runs the program on: add --runtime" in without.stderr
    )
    two = cli("check", REGRESSION, REGRESSION, "--runtime", "--inputs", inputs)
    assert two.returncode == 2 and "--inputs goes with one program (2 were given)" in two.stderr
    missing = cli("check", REGRESSION, "--runtime", "--inputs", tmp_path / "nowhere.pt")
    assert missing.returncode == 2 and "no such file" in missing.stderr and "(--inputs)" in missing.stderr
    typo = cli("check", REGRESSION, "--runtime", "--input", inputs)
    assert typo.returncode == 2 and "(did you mean --inputs " in typo.stderr
    mine = tmp_path / "notes.txt"
    mine.write_text("the user's own")
    kept = cli("lint", f"{MODELS}:cache_at_position", "--save-inputs", mine)  # refused before any export
    assert (
        kept.returncode == 2
        and "is not a file of inputs saved with torch.save" in kept.stderr
        and mine.read_text() == "the user's own"
    )
    several = cli("lint", f"{MODELS}:clean", f"{MODELS}:gated", "--save-inputs", inputs)
    assert several.returncode == 2 and "--save-inputs writes one target's inputs" in several.stderr


@pytest.mark.slow
def test_check_runtime_keeps_a_made_up_cache_position_in_range(cli: Callable[..., Any], tmp_path: Path) -> None:
    """At the upper bound the 32 new entries fill the 32 slots: a position of 1 (ones, as the
    check made up before) writes past the last slot; zeros fit, as the author's position 0 does."""
    out, inputs = tmp_path / "cache.pte", tmp_path / "cache.inputs.pt"
    linted = cli("lint", f"{MODELS}:cache_at_position", "--pte", out, "--save-inputs", inputs, "--isolated")
    assert linted.returncode == 0 and f"wrote the example inputs to {inputs}" in linted.stderr, linted.stderr[-2000:]
    checked = cli("check", out, "--runtime", "--isolated")
    assert checked.returncode == 0 and "EG511" not in checked.stdout, checked.stdout
    assert "ran in executorch.runtime on inputs it made up (--inputs FILE runs real ones)" in checked.stdout
    real = cli(
        "check", out, "--runtime", "--inputs", inputs, "--isolated"
    )  # the factory's: a position of 0 and 4 tokens
    assert real.returncode == 0 and f"ran in executorch.runtime: forward on the inputs in {inputs}" in real.stdout, (
        real.stdout
    )


def test_the_bounds_keep_an_input_given_as_none() -> None:
    from cli_models import optional_embeds

    model, inputs, dynamic_shapes = optional_embeds()
    program = torch.export.export(model, inputs, dynamic_shapes=dynamic_shapes)
    made = shape_bounds(program, inputs)
    assert [b.label for b in made.inputs] == [
        "seq=1 (the lower bound)",
        "seq=32 (the upper bound)",
    ] and made.not_made == []
    assert [[None if x is None else tuple(x.shape) for x in b.inputs] for b in made.inputs] == [
        [(1, 1), None, (1,)],
        [(1, 32), None, (32,)],
    ]
    unpaired = shape_bounds(program, [inputs[0], inputs[2]])  # the None left out: nothing to pair by
    assert unpaired.inputs == [] and unpaired.not_made == [
        "every bound: the example's 2 inputs (flattened) do not pair with the program's 3 inputs"
    ]


@pytest.mark.slow
def test_check_export_runs_a_none_input_at_the_bounds_as_often_as_without_it(check_export: Callable[..., Any]) -> None:
    from cli_models import optional_embeds

    with_none = check_export(*optional_embeds()[:2], dynamic_shapes=optional_embeds()[2], backend="portable")
    model, inputs, dynamic_shapes = optional_embeds(given=True)
    without = check_export(model, inputs, dynamic_shapes=dynamic_shapes, backend="portable")
    assert len(with_none.comparisons) == len(without.comparisons) == 3 and with_none.skipped == without.skipped == []


@pytest.mark.slow
@pytest.mark.runs_program
def test_lint_and_check_run_a_factory_whose_inputs_hold_none(cli: Callable[..., Any], tmp_path: Path) -> None:
    out = tmp_path / "embeds.pte"
    linted = cli("lint", f"{MODELS}:optional_embeds", "--pte", out, "--isolated", "--format", "json")
    assert linted.returncode == 0, linted.stdout + linted.stderr[-2000:]
    assert (
        "ran the program on the example inputs and at seq=1 (the lower bound), seq=32 (the upper bound)"
        in linted.stderr
    )
    checked = cli("check", out, "--runtime", "--isolated", "--format", "json")  # the None made up as None
    assert checked.returncode == 0 and json.loads(checked.stdout)["findings"] == [], checked.stdout


def test_the_inputs_the_parent_reads_are_the_ones_the_child_would_make(behind: Path) -> None:
    """``check --runtime`` hands the child each method's inputs as it read them
    (``smoke.input_specs``), so that the child does not parse the program again: the same
    dtypes, shapes, layouts and fills as the child's own reading of the file (a channels-last
    input, integers and a Python scalar among them)."""
    from export_guards.pte.reader.file import PteFile, open_bytes
    from export_guards.pte.smoke import input_specs
    from export_guards.workers import runtime_smoke

    class _Mixed(nn.Module):
        def forward(self, image: torch.Tensor, index: torch.Tensor, scale: float) -> torch.Tensor:
            return image[:, :, 0, 0].index_select(1, index) * scale

    program = torch.export.export(
        _Mixed(),
        (torch.randn(1, 3, 4, 4).to(memory_format=torch.channels_last), torch.zeros(2, dtype=torch.int64), 2.0),
    )
    written = behind.parent / "mixed.pte"
    written.write_bytes(to_edge_transform_and_lower(program).to_executorch().buffer)
    for path in (behind, written):
        specs = input_specs(PteFile(open_bytes(path)).program)
        assert specs
        for method, given in specs.items():
            made, own = runtime_smoke._from_specs(given), runtime_smoke._inputs(str(path), method, None)
            assert runtime_smoke.made_up(made) == runtime_smoke.made_up(own)
            strides = [(v.stride(), v.dtype) if isinstance(v, torch.Tensor) else v for v in made]
            assert strides == [(v.stride(), v.dtype) if isinstance(v, torch.Tensor) else v for v in own]
