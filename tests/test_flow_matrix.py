"""Every guarded flow on every kind of model: the flow × model matrix.

Rows are the architectures of ``flow_models``; columns are the ways in: the drop-in passes with
each kind of partitioner, the emit passes, the guarded partitioners with the copy policy, and
every XNNPACK recipe by name. Each cell either runs in ``executorch.runtime`` and matches eager
(within the flow's tolerance; a copy cell gives the CPU twin's bytes), or is a limitation of
stock ExecuTorch, which ``STOCK_LIMITS`` names and the test shows by the stock flow failing the
same way (``docs/compatibility.md`` lists them). The rows a flow can do lower side by side in
one program (``program_rows``), built once a run, so that the matrix costs a few lowerings per
flow rather than one per cell; each cell checks its own row's output.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import re
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import executorch.kernels.quantized  # noqa: F401 - registers the quantized kernels a portable int8 program needs
import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import ExecutorchBackendConfig, to_edge, to_edge_transform_and_lower

import export_guards as eg
import models
from conftest import built_once
from device_backend import BACKEND_ID, HostCopyPartitioner, runnable
from export_guards.analysis.ops import compute_op_name
from export_guards.verify import run_pte
from flow_models import ROWS, Inputs

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.slow]  # every cell lowers a model

RECIPES = sorted(name for name in eg.recipes.recipe_names() if name.startswith("xnnpack_"))
"""The recipes whose programs the runtime here can run (XNNPACK's); the others lower only
where their SDK is (tests/test_recipes.py lowers Core ML's)."""

# How far a flow's output may be from eager, relative to the output's largest magnitude:
# float flows round, quantized recipes approximate by design, and XNNPACK's int8 kernels
# requantize where eager's reference (quantize, dequantize, float op) does not.
# The static int8 bound is the stock recipe's own error on the reparametrized rows folded by
# hand (0.14 on "spectral norm", which the guarded recipe matches to the bit).
TOLERANCE = {"xnnpack_pt2e_int8_dynamic": 0.05, "xnnpack_pt2e_int8_static": 0.2, "xnnpack_torchao_int8da_int4w": 0.25}
QUANTIZED_ROW_TOLERANCE = 0.05
FLOAT_TOLERANCE = 1e-4

STOCK_LIMITS: dict[tuple[str, str], str] = {
    # to_edge rejects the matrix exponential before any transform pass runs; the guarded
    # entry points (lower_with_guards, the recipes) fold it first: fold_non_core_constants.
    **{("orthogonal", flow): "linalg_matrix_exp.default is not in Core ATen opset" for flow in (
        "guard_passes × portable", "guard_passes × XNNPACK", "guard_passes × Vulkan", "guard_passes × test device backend",
        "emit_passes copy", "guard_partitioners + copy",
    )},
    # Vulkan's quantized-conv pattern expects its own quantizer's weight scales.
    ("PT2E-quantized conv", "guard_passes × Vulkan"): "AssertionError in quantized_convolution.py",
}  # fmt: skip
"""Cells that stock ExecuTorch cannot do, with the stock failure they share (docs/compatibility.md)."""


LOWERED_ONLY = {"guard_passes × Vulkan": "VulkanBackend"}
"""Flows whose programs need a backend that the pip runtime lacks (by its backend id): every row
is lowered in one program and checked, not run."""


@dataclass(frozen=True)
class Lowered:
    """A program of one flow, the bytes it must equal (a copy's CPU twin) if any, and the convs
    an XNNPACK flow left on the portable kernels, by row."""

    pte: bytes
    twin: bytes | None = None
    portable_convs: dict[str, int] | None = None


WEIGHTS_COMPUTED_IN_FORWARD = ("weight-standardized conv", "spectral norm", "weight norm")
"""Rows whose conv weights stock lowering leaves computed (and the convs portable): every XNNPACK
flow, the quantizing recipes included, must delegate each of their convs."""


def fresh(name: str) -> tuple[torch.nn.Module, Inputs]:
    """The row's model as built: a new one each time, as flows and eager calls may change a
    model's state (and a model with the old ``weight_norm`` API cannot be deep-copied). A row
    that takes seconds to build (PT2E's calibration) is built once and handed out as copies."""
    if name in BUILT_ONCE:
        model, inputs = _built(name)
        return copy.deepcopy(model), inputs
    return ROWS[name]()


BUILT_ONCE = frozenset({"PT2E-quantized conv"})


@functools.cache
def _built(name: str) -> tuple[torch.nn.Module, Inputs]:
    return ROWS[name]()


@functools.cache
def eager(name: str) -> torch.Tensor:
    model, inputs = fresh(name)
    with torch.no_grad():
        return model(*inputs)


Rows = tuple[str, ...]
"""The rows in one program: one row is its own model; several sit side by side in ``EveryRow``."""


def built(rows: Rows) -> tuple[torch.nn.Module, Inputs]:
    if len(rows) == 1:
        return fresh(rows[0])
    every = EveryRow(list(rows))
    return every, every.inputs


def export(model: torch.nn.Module, inputs: Inputs) -> torch.export.ExportedProgram:
    """``torch.export`` as ExecuTorch's examples do it, without autograd: in grad mode, a
    buffer written in place (the KV cache) fails ``to_executorch`` with "a leaf Variable
    that requires grad is being used in an in-place operation", guards or not."""
    with torch.no_grad():
        return torch.export.export(model, inputs)


def on_trapdev(rows: Rows) -> torch.export.ExportedProgram:
    from export_guards.testing import load_trapdev

    device = load_trapdev()
    model, inputs = built(rows)
    return export(models.to_device(model, device), tuple(x.to(device) for x in inputs))


def exported(rows: Rows) -> torch.export.ExportedProgram:
    """A new export each time: a lowering may edit the program it is given (``to_executorch``
    writes a mutated buffer's write-back into it)."""
    return export(*built(rows))


def portable_convs(program: torch.export.ExportedProgram, rows: Rows) -> dict[str, int]:
    """The convs each row left on the portable kernels, told by the module each node came from."""
    counts = dict.fromkeys(rows, 0)
    for node in program.graph.nodes:
        if compute_op_name(node) == "convolution":
            paths = (path for path, _ in node.meta.get("nn_module_stack", {}).values())
            at = next((int(found[1]) for path in paths if (found := ROW_PATH.match(path))), 0)
            counts[rows[at]] += 1
    return counts


ROW_PATH = re.compile(r"rows\.(\d+)")


def guard_passes_with(
    partitioner: Callable[[], object] | None, trusted: tuple[str, ...] = eg.placement.DEVICE_BACKENDS
) -> Callable[[Rows], Lowered]:
    def lower(rows: Rows) -> Lowered:
        parts = eg.guard_partitioners([partitioner()], device_backends=trusted) if partitioner else []
        edge = to_edge_transform_and_lower(
            exported(rows), transform_passes=eg.guard_passes(partitioner=parts or None), partitioner=parts
        )
        pte = edge.to_executorch(ExecutorchBackendConfig(passes=eg.emit_passes())).buffer
        return Lowered(pte, portable_convs=portable_convs(edge.exported_program(), rows) if partitioner else None)

    return lower


def vulkan() -> object:
    from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner

    return VulkanPartitioner()


def device_backend(rows: Rows) -> Lowered:
    """Constants on the test device, lowered by a backend that reads device memory itself
    (``device_backend.HostCopyBackend``, trusted); what it does not take is copied at emission."""
    parts = eg.guard_partitioners(
        [HostCopyPartitioner()], device_backends=(*eg.placement.DEVICE_BACKENDS, BACKEND_ID), emitter="copy"
    )
    edge = to_edge_transform_and_lower(
        on_trapdev(rows), transform_passes=eg.guard_passes(partitioner=parts), partitioner=parts
    )
    return Lowered(runnable(edge).to_executorch(ExecutorchBackendConfig(passes=eg.emit_passes("copy"))).buffer)


def emit_copy(rows: Rows) -> Lowered:
    pte = to_edge(on_trapdev(rows)).to_executorch(ExecutorchBackendConfig(passes=eg.emit_passes("copy"))).buffer
    return Lowered(pte, twin=to_edge(exported(rows)).to_executorch().buffer)


def partitioners_copy(rows: Rows) -> Lowered:
    """Constants on the test device, copied by the drop-in passes, lowered by guarded XNNPACK."""
    parts = eg.guard_partitioners([XnnpackPartitioner()])
    edge = to_edge_transform_and_lower(
        on_trapdev(rows),
        transform_passes=eg.guard_passes(partitioner=parts, config=eg.Settings(placement="copy")),
        partitioner=parts,
    )
    return Lowered(
        edge.to_executorch(ExecutorchBackendConfig(passes=eg.emit_passes())).buffer,
        twin=cell("guard_passes × XNNPACK", rows).pte,
    )


def lower_with_guards_copy(rows: Rows) -> Lowered:
    """Constants on the test device, copied on the torch.export program, folded and lowered by
    ``lower_with_guards``: the CPU export's bytes, parameter flags included."""
    pte = eg.lower_with_guards(on_trapdev(rows), config=eg.Settings(placement="copy")).to_pte()
    return Lowered(pte, twin=eg.lower_with_guards(exported(rows)).to_pte())


def recipe(recipe_name: str) -> Callable[[Rows], Lowered]:
    def lower(rows: Rows) -> Lowered:
        guarded = eg.export_with_guards(*built(rows), config=eg.Settings(recipe=recipe_name))
        assert guarded.edge is not None
        return Lowered(guarded.to_pte(), portable_convs=portable_convs(guarded.edge.exported_program(), rows))

    return lower


FLOWS: dict[str, Callable[[Rows], Lowered]] = {
    "guard_passes × portable": guard_passes_with(None),
    "guard_passes × XNNPACK": guard_passes_with(XnnpackPartitioner),
    "guard_passes × Vulkan": guard_passes_with(vulkan),
    "guard_passes × test device backend": device_backend,
    "emit_passes copy": emit_copy,
    "guard_partitioners + copy": partitioners_copy,
    "lower_with_guards copy": lower_with_guards_copy,
    **{f"recipe {name}": recipe(name) for name in RECIPES},
}


@functools.cache
def cell(flow: str, rows: Rows) -> Lowered:
    return FLOWS[flow](rows)


ON_ITS_OWN = frozenset({"PT2E-quantized conv"})
"""Rows lowered as their own program: PT2E's converted graph module is the model a user passes
(inside another module, a dynamic-quantizing recipe lowers it otherwise)."""


def program_rows(flow: str, name: str) -> Rows:
    """The rows of the program that holds ``name``'s cell: every row the flow can do lowers in
    one program (a lowering's cost is mostly per program), but for those ``ON_ITS_OWN``."""
    if name in ON_ITS_OWN:
        return (name,)
    return tuple(row for row in ROWS if row not in ON_ITS_OWN and (row, flow) not in STOCK_LIMITS)


def shared_cell(tmp_path_factory: pytest.TempPathFactory, flow: str, rows: Rows) -> Lowered:
    """``cell``, once a run however many workers ask (its bytes only: no test changes them)."""
    key = hashlib.sha256(repr((flow, rows)).encode()).hexdigest()[:16]
    return built_once(tmp_path_factory, f"flow-matrix-{key}", lambda: cell(flow, rows))


@functools.cache
def ran(flow: str, rows: Rows, pte: bytes) -> tuple[torch.Tensor, ...]:
    """Each row's output of the program, run once a process."""
    _, inputs = built(rows)
    return tuple(run_pte(pte, inputs))


def tolerance(name: str, flow: str) -> float:
    recipe = next(
        (t for prefix, t in TOLERANCE.items() if flow.removeprefix("recipe ").startswith(prefix)), FLOAT_TOLERANCE
    )
    return max(recipe, QUANTIZED_ROW_TOLERANCE) if name == "PT2E-quantized conv" else recipe


def cells(flows: list[str]) -> list[tuple[str, str]]:
    """Every row through each of ``flows``, but for the stock limitations."""
    return [(name, flow) for name in ROWS for flow in flows if (name, flow) not in STOCK_LIMITS]


@pytest.mark.parametrize(("name", "flow"), cells([flow for flow in FLOWS if flow not in LOWERED_ONLY]))
def test_the_cell_runs_and_matches_eager(name: str, flow: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    rows = program_rows(flow, name)
    lowered = shared_cell(tmp_path_factory, flow, rows)
    if lowered.twin is not None:
        assert lowered.pte == lowered.twin, "the copy is not the CPU twin"
    if name in WEIGHTS_COMPUTED_IN_FORWARD and lowered.portable_convs is not None:
        assert lowered.portable_convs[name] == 0, (
            "a conv whose weight is computed in forward was left on the portable kernels"
        )
    expected = eager(name)
    actual = ran(flow, rows, lowered.pte)[rows.index(name)]
    error = (actual - expected).abs().max().item() / max(expected.abs().max().item(), 1e-6)
    assert error <= tolerance(name, flow), f"{name} through {flow}: relative error {error:.3g}"


class EveryRow(torch.nn.Module):
    """Every row's model side by side in one module (each reads its own inputs): the lowered-only
    column is one program, since Vulkan's preprocess costs seconds per program, not per op."""

    def __init__(self, names: list[str]) -> None:
        super().__init__()
        built = [fresh(name) for name in names]
        self.rows = torch.nn.ModuleList(model for model, _ in built)
        self.counts = [len(inputs) for _, inputs in built]
        self.inputs = tuple(x for _, inputs in built for x in inputs)

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outputs, at = [], 0
        for model, count in zip(self.rows, self.counts):
            outputs.append(model(*inputs[at : at + count]))
            at += count
        return tuple(outputs)


def test_every_row_lowers_to_vulkan_delegating_all_its_compute_in_a_well_formed_program() -> None:
    flow = "guard_passes × Vulkan"
    names = [name for name in ROWS if (name, flow) not in STOCK_LIMITS]
    rows = EveryRow(names)
    parts = eg.guard_partitioners([vulkan()])
    edge = to_edge_transform_and_lower(
        export(rows, rows.inputs), transform_passes=eg.guard_passes(partitioner=parts), partitioner=parts
    )
    pte = edge.to_executorch(ExecutorchBackendConfig(passes=eg.emit_passes())).buffer
    assert not eg.check_pte(pte).errors
    summary = eg.delegation_summary(edge)
    assert summary.backends.keys() == {LOWERED_ONLY[flow]} and summary.delegated["convolution"] > 0
    assert not summary.portable, f"compute left on the portable kernels: {dict(summary.portable)}"


STOCK_FLOWS: dict[str, Callable[[], object] | None] = {
    "guard_passes × XNNPACK": XnnpackPartitioner,
    "guard_passes × Vulkan": vulkan,
}
"""The stock form of a flow: the same lowering with this partitioner (none for the others)."""


def failure(lower: Callable[[], object]) -> str:
    """How ``lower`` fails: the root exception's type, message and the file that raised it."""
    try:
        lower()
    except Exception as error:  # noqa: BLE001 - the test compares failures
        root = error
        while root.__cause__ is not None:
            root = root.__cause__
        where = traceback.extract_tb(root.__traceback__)[-1].filename.rsplit("/", 1)[-1]
        message = str(root).strip()
        return f"{type(root).__name__}{': ' + message if message else ''} in {where}"
    return "no failure"


@pytest.mark.parametrize(("name", "flow"), STOCK_LIMITS)
def test_stock_limits_fail_the_stock_flow_the_same_way(name: str, flow: str) -> None:
    """A cell the guards cannot do is one that stock ExecuTorch cannot do either: the stock
    lowering of the same model fails the same way, and the docs name it."""
    partitioner = STOCK_FLOWS.get(flow)
    stock = failure(
        lambda: to_edge_transform_and_lower(
            exported((name,)), partitioner=[partitioner()] if partitioner else []
        ).to_executorch()
    )
    guarded = failure(lambda: cell(flow, (name,)))
    assert stock == guarded
    assert STOCK_LIMITS[(name, flow)] in stock
    assert STOCK_LIMITS[(name, flow)] in (ROOT / "docs" / "compatibility.md").read_text()


@pytest.mark.parametrize("name", ["spectral norm"])
def test_one_report_whichever_entry_point_ran(name: str) -> None:
    """A copy is one EG103 per device constant and a fold one EG201 per folded weight, the
    same from the direct entry point and from the recipe."""
    from export_guards.testing import load_trapdev

    device = load_trapdev()
    settings = eg.Settings(placement="copy")
    on_device_program = on_trapdev((name,))
    expected_copies = set(on_device_program.state_dict) | set(on_device_program.constants)
    direct = eg.lower_with_guards(on_device_program, config=settings)
    model, inputs = fresh(name)
    on_device = models.to_device(model, device)
    with torch.no_grad():
        recipe = eg.export_with_guards(
            on_device, tuple(x.to(device) for x in inputs), config=settings.updated({"recipe": "xnnpack_fp32"})
        )

    direct_copies, recipe_copies = (
        {f.constant for f in export.report.with_code("EG103")} for export in (direct, recipe)
    )
    assert direct_copies == expected_copies
    # The recipe's strict torch.export drops the batch norm's unused counter: nothing else differs.
    assert recipe_copies <= direct_copies
    assert {c.rsplit(".", 1)[-1] for c in direct_copies - recipe_copies} <= {"num_batches_tracked"}
    assert len(direct.report.with_code("EG201")) == len(recipe.report.with_code("EG201")) > 0
    on_host = eg.export_with_guards(*fresh(name), config=eg.Settings(recipe="xnnpack_fp32"))
    assert recipe.to_pte() == on_host.to_pte(), "the recipe's copy is not the CPU twin"
    assert direct.to_pte() == eg.lower_with_guards(exported((name,))).to_pte(), "the direct copy is not the CPU twin"
