"""Every quantization configuration through every guarded path, on XNNPACK and the portable
kernels (``quantization_matrix``). Each cell, in one test (its programs are lowered once): a right
program, or, where none exists, one error that names the configurations that work; the pass list
(with and without the guarded partitioners), the ``check_export`` fixture and the lint write
``lower_with_guards``'s bytes or another right program; ``docs/llm.md``'s table holds what the cell measures."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pytest
import torch
from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower

import export_guards as eg
import quantization_matrix as matrix
from export_guards.backends import backend_named
from export_guards.cli import main

pytestmark = [pytest.mark.slow]  # each cell lowers a model on every path

CELLS = [(c.name, backend) for c in matrix.CONFIGURATIONS for backend in matrix.BACKENDS]

TABLE_VERSIONS = {"executorch": "1.5.1", "torch": "2.13.0", "torchao": "0.18.0"}
"""The versions ``docs/llm.md``'s table was measured on: its sizes hold for these only."""

TABLE_MEASURED_HERE = all(metadata.version(package).startswith(version) for package, version in TABLE_VERSIONS.items())


@pytest.mark.parametrize(("name", "backend"), CELLS, ids=[f"{name}-{backend}" for name, backend in CELLS])
def test_each_cell_is_right_on_every_path_and_as_documented(
    name: str, backend: str, check_export, tmp_path: Path
) -> None:
    cell = matrix.cell(name, backend)
    if name in matrix.NO_PROGRAM:
        assert cell.pte is None and matrix.NO_PROGRAM[name] in cell.error, f"{name} on {backend}: {cell.written}"
        assert cell.written.startswith("refused, naming "), (
            f"{name} on {backend} names no configuration that works: {cell.error}"
        )
    else:
        assert cell.pte is not None, f"{name} on {backend}: lower_with_guards writes no program: {cell.error}"
        assert cell.relative_error is not None and cell.relative_error <= matrix.RIGHT, (
            f"{name} on {backend}: the program is {cell.relative_error:.3g} off the quantized model ({cell.written})"
        )
        assert not eg.check_pte(cell.pte).errors, (
            f"{name} on {backend}: check finds errors in what lower_with_guards wrote"
        )
        for path, pte in _other_paths(name, backend, check_export, tmp_path):
            if pte != cell.pte:  # another program (a path that decomposes in its own way): it must be right too
                error = matrix.relative_error(name, pte)
                assert error <= matrix.RIGHT, (
                    f"{name} on {backend}: {path}'s program is {error:.3g} off the quantized model"
                )
    if TABLE_MEASURED_HERE:
        documented = matrix.documented_rows().get(name, "")
        assert cell.row() in documented, (
            f"docs/llm.md's quantization row for {name!r} on {backend} is not what the suite measures "
            f"({cell.row()!r}); run `python tests/quantization_matrix.py`"
        )


def _other_paths(name: str, backend: str, check_export, folder: Path) -> list[tuple[str, bytes]]:
    """The program each other guarded path writes for the cell: the pass list (its pre-``to_edge``
    step, ``guard_passes()``, ``emit_passes()``), with the guarded partitioners where there are
    partitioners, the ``check_export`` fixture and the lint (both of which also run it against
    eager, and fail on what they find)."""
    partitioners = backend_named(backend).partitioners()
    written = []
    for guarded in (False, True) if partitioners else (False,):
        parts = eg.guard_partitioners(partitioners) if guarded else partitioners
        program, _ = eg.fold_non_core_constants(matrix.program_of(name), partitioner=parts)  # the pre-to_edge step
        passes = eg.guard_passes(partitioner=parts) if guarded else eg.guard_passes()
        edge = to_edge_transform_and_lower(program, transform_passes=passes, partitioner=parts)
        written.append(
            (
                f"the pass list{' with guard_partitioners' if guarded else ''}",
                edge.to_executorch(ExecutorchBackendConfig(passes=eg.emit_passes())).buffer,
            )
        )
    model, inputs, expected = matrix.model_of(name)
    checked = check_export(model, inputs, backend=backend, atol=matrix.RIGHT * float(expected.abs().max()), rtol=0.0)
    pte = folder / "linted.pte"
    factory = f"{Path(matrix.__file__).as_posix()}:factory"
    said = main(["lint", factory, "--arg", f"name={name!r}", "--backend", backend, "--pte", str(pte), "--quiet"])
    assert said == 0 and pte.exists(), f"{name} on {backend}: the lint exits {said}"
    return [*written, ("check_export", checked.pte), ("the lint", pte.read_bytes())]


def test_the_docs_table_has_a_row_per_configuration_and_no_other() -> None:
    assert list(matrix.documented_rows()) == [c.name for c in matrix.CONFIGURATIONS]


def test_the_model_each_cell_compares_against_is_the_quantized_one() -> None:
    """The reference is the quantized model, not the float one: a weight-only int4 MLP's output
    differs from the float MLP's by more than float rounding."""
    _, _, quantized = matrix.model_of("intx4 weight-only")
    _, _, float_output = matrix.model_of("fp32")
    assert not torch.allclose(quantized, float_output, atol=1e-4)
