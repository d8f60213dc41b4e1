"""EG525 (issue 61): a kernel call with dtypes the runtime's portable kernel has no path for,
found without a run, from a table of what each kernel did when run in each dtype
(``export_guards/pte/kernel_probe.py``, shipped as ``reader/kernel_dtypes.json``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from executorch.exir import to_edge_transform_and_lower
from executorch.runtime import Runtime

import export_guards as eg
from conftest import Ran
from export_guards.pte.reader import kernel_dtypes
from pte_models import Written

LOG_SOFTMAX = "aten::_log_softmax.out"

_SHIPPED_FOR = json.loads(kernel_dtypes.SHIPPED.read_text())["versions"]
needs_the_table = pytest.mark.skipif(
    kernel_dtypes.installed_versions() != _SHIPPED_FOR,
    reason=f"the shipped kernel table is {_SHIPPED_FOR}'s, this is {kernel_dtypes.installed_versions()}: EG525 says nothing here "
    "(make kernel-table, or kernel_probe.write_cached(), writes one)",
)
"""The tests of the shipped table's verdicts: on another ExecuTorch (the compat tier's) it has none."""


class LogSoftmax(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(x, dim=-1)  # ExecuTorch #13551: the portable kernel has no float64 path


def portable_pte(model: torch.nn.Module, *inputs: torch.Tensor) -> bytes:
    return to_edge_transform_and_lower(torch.export.export(model, inputs)).to_executorch().buffer


@pytest.fixture(scope="module")
def float64_pte() -> bytes:
    return portable_pte(LogSoftmax(), torch.randn(2, 5, dtype=torch.float64))


@needs_the_table
def test_log_softmax_on_float64_is_an_error_and_the_runtime_fails_it(float64_pte: bytes) -> None:
    (finding,) = eg.check_pte(float64_pte).with_code("EG525")
    assert finding.severity is eg.Severity.ERROR and finding.method == "forward"
    assert f"calls {LOG_SOFTMAX} on float64, which executorch " in finding.message
    assert "it takes float16, bfloat16, float32" in finding.message and "(0x12" in finding.message
    assert "float32" in (finding.fix or "")
    method = Runtime.get().load_program(float64_pte).load_method("forward")
    with pytest.raises(RuntimeError, match="0x12"):  # the table is right: the runtime fails the call
        method.execute([torch.randn(2, 5, dtype=torch.float64)])


def test_the_same_op_on_float32_is_clean_and_runs() -> None:
    pte = portable_pte(LogSoftmax(), torch.randn(2, 5))
    assert not eg.check_pte(pte).with_code("EG525")
    Runtime.get().load_program(pte).load_method("forward").execute([torch.randn(2, 5)])


@needs_the_table
def test_the_command_fails_on_it(cli: Callable[..., Ran], float64_pte: bytes, tmp_path: Path) -> None:
    path = tmp_path / "log_softmax.pte"
    path.write_bytes(float64_pte)
    done = cli("check", str(path), "--format", "json")
    assert done.returncode == 1, done.stderr[-2000:]
    assert [f["code"] for f in json.loads(done.stdout)["findings"] if f["code"] == "EG525"] == ["EG525"]


@needs_the_table
def test_a_guarded_export_places_it_on_the_users_line() -> None:
    inputs = (torch.randn(2, 5, dtype=torch.float64),)
    export = eg.lower_with_guards(torch.export.export(LogSoftmax(), inputs), lowering=eg.Lowering(partitioners=[]))
    (finding,) = eg.program.check_program(export, export.to_pte(refuse=False)).with_code("EG525")
    assert finding.location is not None and finding.location.file.endswith("test_kernel_dtypes.py")
    assert "torch.log_softmax" in Path(finding.location.file).read_text().splitlines()[finding.location.line - 1]
    again = eg.lower_with_guards(torch.export.export(LogSoftmax(), inputs), lowering=eg.Lowering(partitioners=[]))
    with pytest.raises(
        eg.ProgramRefused, match=r"EG525 .*_log_softmax.out on float64"
    ) as refused:  # #13551 no longer handed out
        again.to_pte()
    assert refused.value.report.errors[0].location == finding.location


def test_mixed_dtypes_no_probe_made_are_not_judged() -> None:
    class Promoted(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return x + y  # int32 + float64: an out of the promoted dtype, a signature no probe made

    pte = portable_pte(Promoted(), torch.ones(2, dtype=torch.int32), torch.ones(2, dtype=torch.float64))
    assert not eg.check_pte(pte).with_code("EG525")


@pytest.mark.slow  # builds the shared corpora of programs
@needs_the_table
def test_the_repo_programs_are_free_of_it(
    written_programs: dict[str, Written], valid_program_bytes: dict[str, bytes], architecture_programs: dict[str, bytes]
) -> None:
    every = {
        **{f"valid {name}": data for name, data in valid_program_bytes.items()},
        **{f"architecture {name}": data for name, data in architecture_programs.items()},
        **{f"written {name}": w.pte.read_bytes() for name, w in written_programs.items()},
    }
    assert len(every) >= 25
    judged = 0
    for name, data in every.items():
        assert not eg.check_pte(data).with_code("EG525"), name
        judged += len(probed_calls(data))
    assert judged > 50  # the table speaks to the corpus's calls: its silence is a verdict


def probed_calls(data: bytes) -> list[str]:
    """The program's kernel calls whose dtype signature the probe ran, as ``kernel signature``."""
    from export_guards.pte.reader.file import PteFile
    from export_guards.pte.reader.wheel import KernelCall

    found = []
    for plan in PteFile(data).program.execution_plan:
        for chain in plan.chains:
            for instruction in chain.instructions:
                call = instruction.instr_args
                if isinstance(call, KernelCall):
                    operator = plan.operators[call.op_index]
                    name = f"{operator.name}.{operator.overload}" if operator.overload else operator.name
                    row, key = kernel_dtypes.kernel_dtypes(name), kernel_dtypes.signature(plan, call)
                    if row is not None and key in row.calls:
                        found.append(f"{name} {key}")
    return found


@pytest.mark.slow
def test_the_shipped_table_is_what_the_kernels_do() -> None:
    """Derived, not typed: a fresh probe of a few kernels gives the shipped rows."""
    from export_guards.pte.kernel_probe import probe

    shipped = json.loads(kernel_dtypes.SHIPPED.read_text())
    assert shipped["versions"] == kernel_dtypes.installed_versions()
    few = [LOG_SOFTMAX, "aten::mm.out", "aten::cat.out", "aten::mul.Scalar_out"]
    assert probe(few) == {name: shipped["kernels"][name] for name in few}
    common = (
        "_softmax",
        "add",
        "mul",
        "mm",
        "addmm",
        "bmm",
        "convolution",
        "cat",
        "index.Tensor_out",
        "embedding",
        "sum.IntList_out",
        "native_layer_norm",
    )
    assert all(any(k.startswith(f"aten::{c}.") or k == f"aten::{c}" for k in shipped["kernels"]) for c in common)
    assert len(shipped["kernels"]) >= 140


def test_another_executorch_without_a_table_says_nothing(
    float64_pte: bytes, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(kernel_dtypes, "installed_versions", lambda: {"executorch": "0.0.0"})
    kernel_dtypes._table_once.cache_clear()
    try:
        assert not eg.check_pte(float64_pte).with_code("EG525")  # the shipped table is 1.5.1's: not read
        table = json.loads(kernel_dtypes.SHIPPED.read_text())
        kernel_dtypes.write_table(
            kernel_dtypes.cached_path({"executorch": "0.0.0"}), {"executorch": "0.0.0"}, table["kernels"]
        )
        kernel_dtypes._table_once.cache_clear()
        assert eg.check_pte(float64_pte).with_code("EG525")  # that version's table, from the user's cache
    finally:
        kernel_dtypes._table_once.cache_clear()
