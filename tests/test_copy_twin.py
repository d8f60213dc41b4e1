"""The copy policy's program is the CPU export's, byte for byte, on every bundled example: each
model exported from the test device and copied at each stage that copies differently, against
the same lowering of the same model exported on the CPU (where the copy has nothing to do).
A copy made after ``to_edge`` decomposed the graph keeps the device's decomposition of
attention: there the one difference is that, and the copy says so (EG104).

The flow matrix (``test_flow_matrix.py``) holds its own rows to the same, column by column.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import ExecutorchBackendConfig, to_edge, to_edge_transform_and_lower
from executorch.exir.backend.partitioner import Partitioner

import export_guards as eg
import models
from export_guards.compat import has_pre_decomposition_transform
from export_guards.testing import load_trapdev

ROOT = Path(__file__).resolve().parent.parent
PLACEMENT_DOCS = (ROOT / "docs" / "placement.md").read_text()
sys.path.insert(0, str(ROOT / "examples"))

import decoder  # noqa: E402 - the examples folder is not a package
import device_constants  # noqa: E402
import llm  # noqa: E402
import segmentation  # noqa: E402
import transformer  # noqa: E402

pytestmark = [pytest.mark.slow]  # each case lowers a model twice

EXAMPLES: dict[str, Callable[[], tuple[torch.nn.Module, tuple[torch.Tensor, ...]]]] = {
    "decoder": decoder.model,
    "device_constants": lambda: device_constants.model("cpu"),
    # Grouped attention over a KV cache, a 4-token prefill; one layer instead of two: every op
    # and parameter of the decoder is in each layer, in half the lowering time.
    "llm": lambda: (llm.decoder("fp32", llm.Config(layers=1)), llm.tokens(4)),
    # 32 x 32 instead of the report's 400 x 400: every layer and parameter but the position
    # embedding's length is the same (the class token, the reported [1, 1, 192], included),
    # in seconds instead of minutes.
    "segmentation": lambda: segmentation.model(32),
    "transformer": transformer.model,
}
"""Every ``examples/*.py`` model factory (``demo.py`` and ``device_demo.py`` use these)."""

STAGES: dict[str, tuple[Callable[[torch.export.ExportedProgram], bytes], bool]] = {
    # The torch.export program's host twin, then the fold and XNNPACK: what the report ran.
    "lower_with_guards(config=Settings(placement='copy'))": (
        lambda ep: eg.lower_with_guards(ep, config=eg.Settings(placement="copy")).to_pte(),
        False,
    ),
    # Guarded XNNPACK handed the copy: its partitioner copies before to_edge_transform_and_lower
    # decomposes (executorch 1.5), the transform passes find nothing left to copy.
    "guard_partitioners + guard_passes(config=Settings(placement='copy'))": (
        lambda ep: _partitioned_copy(ep),  # noqa: PLW0108 - defined below
        not has_pre_decomposition_transform(Partitioner),
    ),
    # The edge program's twin, in transform_passes; every constant stays in the program table.
    "guard_passes(config=Settings(placement='copy'))": (
        lambda ep: (
            to_edge_transform_and_lower(ep, transform_passes=eg.guard_passes(config=eg.Settings(placement="copy")))
            .to_executorch()
            .buffer
        ),
        True,
    ),
    # The graph twinned inside to_executorch (portable: XNNPACK's preprocess would read the
    # device constants before it).
    "emit_passes('copy')": (
        lambda ep: to_edge(ep).to_executorch(ExecutorchBackendConfig(passes=eg.emit_passes("copy"))).buffer,
        True,
    ),
}
"""Each way the copy is made: on the torch.export program (as ``guard_constant_placement``
and the recipes make it too), before decomposition by the guarded partitioners, on the edge
program, and at emission; and whether it is made after ``to_edge`` decomposed the graph."""


def _partitioned_copy(ep: torch.export.ExportedProgram) -> bytes:
    parts = eg.guard_partitioners([XnnpackPartitioner()])
    edge = to_edge_transform_and_lower(
        ep, transform_passes=eg.guard_passes(partitioner=parts, config=eg.Settings(placement="copy")), partitioner=parts
    )
    return edge.to_executorch(ExecutorchBackendConfig(passes=eg.emit_passes())).buffer


DEVICE_CHOSEN = {"aten._scaled_dot_product_flash_attention_for_cpu.default"}
"""The ops whose decomposition ``to_edge`` picks by the device the graph was traced on (the
CPU's fused attention kernel; the math path elsewhere): a copy made after ``to_edge`` keeps the
device's pick, which docs/placement.md names."""


@functools.cache
def exported(example: str, device: str) -> torch.export.ExportedProgram:
    """The example exported on ``device`` (``"cpu"`` or ``"trapdev"``), once per process: a
    copy never changes the program it is given, and these lowerings leave it as it was."""
    model, inputs = EXAMPLES[example]()
    if device == "trapdev":
        target = load_trapdev()
        model, inputs = models.to_device(model, target), tuple(x.to(target) for x in inputs)
    return torch.export.export(model, inputs)


@functools.cache
def edge(example: str, device: str) -> torch.export.ExportedProgram:
    """The example's edge program, decomposed where it was exported."""
    return to_edge(exported(example, device)).exported_program()


@functools.cache
def decomposed_for_the_cpu(example: str) -> frozenset[str]:
    """The ops that ``to_edge`` decomposed the CPU export's graph from and not the device's."""

    def origins(ep: torch.export.ExportedProgram) -> set[str]:
        return {str(node.meta.get("original_aten")) for node in ep.graph.nodes}

    return frozenset(origins(edge(example, "cpu")) - origins(edge(example, "trapdev")))


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("example", EXAMPLES)
def test_the_copy_from_the_device_is_the_cpu_export(trapdev: torch.device, example: str, stage: str) -> None:
    """Byte for byte, unless ``to_edge`` chose a decomposition by device before the copy: then
    that choice is the one difference, the docs say to copy before ``to_edge``, and the copy
    reports it (EG104)."""
    lower, after_to_edge = STAGES[stage]
    if after_to_edge and decomposed_for_the_cpu(example):
        assert decomposed_for_the_cpu(example) <= DEVICE_CHOSEN
        assert all(op.removeprefix("aten.").split(".")[0] in PLACEMENT_DOCS for op in decomposed_for_the_cpu(example))
        assert late_copy_warnings(example), (
            f"{example}: the copy after to_edge did not say it kept the device's attention"
        )
        return
    copied, on_cpu = lower(exported(example, "trapdev")), lower(exported(example, "cpu"))
    assert len(copied) == len(on_cpu), (
        f"{example} through {stage}: {len(copied):,} bytes, the CPU export {len(on_cpu):,}"
    )
    differ = sum(a != b for a, b in zip(copied, on_cpu, strict=True))
    assert differ == 0, f"{example} through {stage}: {differ:,} bytes differ from the CPU export's"


def late_copy_warnings(example: str) -> list[eg.Finding]:
    """The EG104 findings of the copy of the example's edge program exported on the device."""
    return eg.placement.ConstantPlacementPass("copy")(edge(example, "trapdev")).report.with_code("EG104")


@pytest.mark.parametrize("example", EXAMPLES)
def test_a_copy_after_to_edge_says_so_exactly_where_the_device_decomposed_attention(
    trapdev: torch.device, example: str
) -> None:
    """EG104 where the CPU decomposes otherwise (the segmentation model's and the LLM's 4-D
    attention), nowhere else; each names the attention, its device, and the user's line."""
    warnings = late_copy_warnings(example)
    assert bool(warnings) == bool(decomposed_for_the_cpu(example))
    for warning in warnings:
        assert "scaled_dot_product_attention" in warning.message and "trapdev:0" in warning.message
        assert warning.severity is eg.Severity.WARNING and warning.location is not None
        assert warning.location.file.startswith(str(ROOT / "examples")), warning.location
