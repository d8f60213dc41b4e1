"""EG526 against ``executorch.runtime``: a data-dependent result (masked_select, nonzero, index
with a boolean mask) planned for fewer elements than its inputs' sizes let the kernel write is
an error of the check, and the runtime, in a child process, fails that call; programs as
ExecuTorch plans them otherwise are clean and run (pytorch/executorch#13585)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower
from torch import nn

import export_guards as eg
from conftest import Ran
from export_guards.pte.smoke import SmokeRun, smoke_test
from export_guards.verify import check_program
from lowering_models import NOT_CORE, Select
from test_kernel_contracts import Lambda

pytestmark = [pytest.mark.subprocess, pytest.mark.slow]  # each claim is run in the runtime, in a child process

# The user's config of #13585, widened to the other data-dependent ops this file exports.
DATA_DEPENDENT = EdgeCompileConfig(
    _core_aten_ops_exception_list=[
        torch.ops.aten.masked_select.default,
        torch.ops.aten.nonzero.default,
        torch.ops.aten.index.Tensor,
    ]
)


class Broadcasting(nn.Module):
    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return torch.masked_select(x, mask) * 2  # the mask broadcasts x: #13585


def selected(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.masked_select(x, mask)  # the mask broadcasts x: #13585


def selected_broadcast_first(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    x, mask = torch.broadcast_tensors(x, mask)  # EG526's fix
    return torch.masked_select(x, mask)


def narrowed_nonzero(x: torch.Tensor) -> torch.Tensor:
    found = torch.nonzero(x > 0)
    torch._check(found.shape[0] <= 10)  # a bound below what the data can make
    return found


def written(
    body: Callable[..., torch.Tensor], inputs: tuple[torch.Tensor, ...], dynamic_shapes: object = None
) -> bytes:
    program = torch.export.export(Lambda(body), inputs, dynamic_shapes=dynamic_shapes)
    return to_edge_transform_and_lower(program, compile_config=DATA_DEPENDENT).to_executorch().buffer


def run(pte: bytes, inputs: tuple[torch.Tensor, ...], folder: Path, name: str) -> SmokeRun:
    """``forward`` on ``inputs`` in executorch.runtime, in a child process."""
    (folder / f"{name}.pte").write_bytes(pte)
    torch.save(list(inputs), folder / f"{name}.pt")
    return smoke_test(folder / f"{name}.pte", inputs=str(folder / f"{name}.pt"), outputs=str(folder / f"{name}.out.pt"))


def ran(smoke: SmokeRun) -> bool:
    return "ran forward" in smoke.steps and smoke.failure is None and smoke.signal is None


def eg526(pte: bytes) -> list[eg.Finding]:
    return list(eg.check_pte(pte).with_code("EG526"))


X = torch.randn(4, 12, generator=torch.Generator().manual_seed(0))
EVERY = torch.ones(6, 4, 12, dtype=torch.bool)  # every element selected: 288 of the broadcast shape
COLUMN = X[:, :1].contiguous()  # broadcast to [4, 12] by a mask of that shape


def test_a_mask_that_broadcasts_the_input_is_an_error_and_the_runtime_fails_it(
    tmp_path: Path, cli: Callable[..., Ran]
) -> None:
    pte = written(selected, (X, EVERY))
    (finding,) = eg526(pte)
    assert finding.severity is eg.Severity.ERROR and "aten::masked_select.out" in finding.message
    assert (
        "can write 288 elements" in finding.message
        and "planned for 48 elements (float32[48], 192 bytes" in finding.message
    )
    assert "torch.broadcast_tensors(x, mask)" in (finding.fix or "")
    (tmp_path / "select.pte").write_bytes(pte)
    done = cli("check", str(tmp_path / "select.pte"))
    assert done.returncode == 1 and "EG526" in done.stdout
    failed = run(pte, (X, EVERY), tmp_path, "select")
    assert not ran(failed) and any("maximum capacity of 48 elements to 288 elements" in line for line in failed.log), (
        failed
    )
    # the input broadcast by a mask of more elements: [4, 1] selected by [4, 12]
    column = written(selected, (COLUMN, EVERY[0]))
    assert "can write 48 elements" in eg526(column)[0].message
    failed = run(column, (COLUMN, EVERY[0]), tmp_path, "column")
    assert not ran(failed) and any("maximum capacity of 4 elements to 48 elements" in line for line in failed.log), (
        failed
    )


def test_the_fix_broadcasts_first_is_clean_and_runs_as_eager(tmp_path: Path) -> None:
    half = torch.rand(6, 4, 12, generator=torch.Generator().manual_seed(1)) > 0.5
    for inputs, dynamic in (
        ((X, EVERY), None),
        ((COLUMN, EVERY[0]), None),
        ((X, half), (({0: torch.export.Dim("rows", min=2, max=8)}, {1: torch.export.Dim("rows", min=2, max=8)}),)),
    ):
        pte = written(selected_broadcast_first, inputs, dynamic)
        assert not eg526(pte)
        smoke = run(pte, inputs, tmp_path, "fixed")
        assert ran(smoke), smoke
        (out,) = torch.load(tmp_path / "fixed.out.pt", weights_only=True)
        torch.testing.assert_close(out, selected(*inputs))


def test_a_dynamic_input_is_bounded_by_its_largest_shape(tmp_path: Path) -> None:
    rows = torch.export.Dim("rows", min=2, max=8)
    pte = written(selected, (X, EVERY), (({0: rows}, {1: rows}),))
    (finding,) = eg526(pte)  # self [8, 12] broadcast with mask [6, 8, 12]: 576, planned for 96
    assert "can write 576 elements" in finding.message and "planned for 96 elements" in finding.message
    failed = run(pte, (X, EVERY), tmp_path, "dynamic")  # 4 rows, within the bound: 288 already
    assert not ran(failed) and any("maximum capacity of 96 elements to 288 elements" in line for line in failed.log), (
        failed
    )


@pytest.mark.parametrize(
    ("name", "body", "inputs"),
    [
        ("masked_select, no broadcast", lambda x: torch.masked_select(x, x > 0) * 2, (X,)),
        ("masked_select, a mask of the last dim", torch.masked_select, (X, torch.ones(12, dtype=torch.bool))),
        ("nonzero", lambda x: torch.nonzero(x > 0), (X,)),
        ("a boolean index", lambda x: x[x > 0], (X,)),
        ("a boolean index of rows", lambda x, m: x[m], (X, torch.ones(4, dtype=torch.bool))),
        (
            "a boolean index of two dims of three",
            lambda x, m: x[m],
            (torch.randn(3, 4, 5), torch.ones(3, 4, dtype=torch.bool)),
        ),
    ],
)
def test_data_dependent_results_as_executorch_plans_them_are_clean_and_run(
    tmp_path: Path, name: str, body: Callable[..., torch.Tensor], inputs: tuple[torch.Tensor, ...]
) -> None:
    pte = written(body, inputs)
    assert not eg526(pte), name
    smoke = run(pte, inputs, tmp_path, "clean")
    assert ran(smoke), smoke
    (out,) = torch.load(tmp_path / "clean.out.pt", weights_only=True)
    if name == "nonzero":  # its out is planned in dim order [1, 0], which the kernel writes as [0, 1]: EG516's
        assert out.shape == body(*inputs).shape and eg.check_pte(pte).with_code("EG516")
    else:
        torch.testing.assert_close(out, body(*inputs))


def test_a_result_bounded_below_what_the_data_makes_is_an_error_the_runtime_confirms(tmp_path: Path) -> None:
    pte = written(narrowed_nonzero, (X,))
    (finding,) = eg526(pte)
    assert (
        "aten::nonzero.out" in finding.message
        and "can write 96 elements" in finding.message
        and "planned for 20 elements" in finding.message
    )
    positive = torch.ones(4, 12)  # 48 rows of indices, past the 10 the program holds
    failed = run(pte, (positive,), tmp_path, "narrowed")
    assert not ran(failed) and any("maximum capacity of 20 elements to 96 elements" in line for line in failed.log), (
        failed
    )


def test_the_guarded_export_with_the_users_lowering_places_it_on_the_users_line() -> None:
    program = torch.export.export(Broadcasting(), (X, EVERY))
    export = eg.lower_with_guards(program, lowering=eg.Lowering(compile_config=NOT_CORE))
    pte = export.edge.to_executorch().buffer  # the bytes as written, whether or not to_pte would hand them out
    (finding,) = check_program(export, pte).with_code("EG526")
    assert finding.location is not None and finding.location.file.endswith("test_out_bounds.py")
    assert "return torch.masked_select(x, mask) * 2" in finding.location.code
    again = eg.lower_with_guards(
        torch.export.export(Broadcasting(), (X, EVERY)), lowering=eg.Lowering(compile_config=NOT_CORE)
    )  # one lowering each
    with pytest.raises(eg.ProgramRefused, match="EG526") as refused:  # the guarded path hands it out no more
        again.to_pte()
    assert refused.value.report.errors[0].location == finding.location
    clean = eg.lower_with_guards(torch.export.export(Select(), (X,)), lowering=eg.Lowering(compile_config=NOT_CORE))
    assert not check_program(clean, clean.to_pte()).with_code("EG526")
