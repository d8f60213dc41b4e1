"""A weight that a delegate and the runtime's kernels both read, with the same bytes, is stored
once (issue 53): the tied decoder of examples/llm.py in fp32 and 8da4w (one layer deep: the tied
weight is the embedding's and the head's, whatever the depth), a pair of readers that is no
embedding, the pass-list flow through ``store_once``; each program loaded and run in
``executorch.runtime`` against stock's, bit for bit. Where the bytes differ (PT2E quantizes the
tied head) nothing is shared and EG404 says so, with the bytes: tests/test_llm.py checks that on
the PT2E decoder it builds anyway."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower

import export_guards as eg
from export_guards.compat import named_data_alignments
from export_guards.pte.reader.file import PteFile
from export_guards.pte.reader.named_regions import segment_offset_fields
from export_guards.report import Severity
from export_guards.verify import LoadedMethod

EXAMPLES = Path(__file__).parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))
import llm  # noqa: E402  (examples/llm.py)

pytestmark = [pytest.mark.slow]  # decoders exported, lowered stock and guarded, and run

STEPS = llm.steps(prompt=4, decode=3)  # a prefill, then three decode steps, through one loaded method
CONFIG = llm.Config(layers=1)  # the example's decoder but for its depth: half the lowering time


def prefill(variant: str) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...], dict[str, dict[int, torch.export.Dim]]]:
    """``llm.prefill(variant)``, one layer deep."""
    return llm.decoder(variant, CONFIG), llm.tokens(4), llm.dynamic_length()


@dataclass(frozen=True)
class Built:
    """One variant's dynamic-length decoder: stock's program, the guarded export and its program."""

    variant: str
    model: torch.nn.Module
    stock: bytes
    guarded: eg.GuardedExport
    pte: bytes


def build(variant: str) -> Built:
    model, inputs, dynamic_shapes = prefill(variant)
    stock = to_edge_transform_and_lower(
        torch.export.export(model, inputs, dynamic_shapes=dynamic_shapes), partitioner=[XnnpackPartitioner()]
    ).to_executorch()
    guarded = eg.lower_with_guards(torch.export.export(model, inputs, dynamic_shapes=dynamic_shapes))
    return Built(variant, model, stock.buffer, guarded, guarded.to_pte())


@pytest.fixture(scope="module", params=["fp32", "8da4w"])
def tied(request: pytest.FixtureRequest) -> Built:
    return build(request.param)


def run_steps(program: bytes | str) -> list[torch.Tensor]:
    if isinstance(program, str):  # a path: the runtime's file loader, memory-mapped
        from executorch.runtime import Runtime

        method = Runtime.get().load_program(program).load_method("forward")
        return [method.execute(list(step))[0] for step in STEPS]
    loaded = LoadedMethod(program)
    return [loaded(step)[0] for step in STEPS]


def test_the_tied_weight_is_stored_once_and_the_program_runs_as_stocks(tied: Built, tmp_path: Path) -> None:
    weight = tied.model.embed.weight
    (shared,) = eg.program.shared_copies(tied.stock)
    assert shared.size == weight.nbytes and shared.target.startswith("constant buffer ")
    # Stock's bytes less the head's copy: the copy was the last segment, so nothing moved.
    assert len(tied.stock) - len(tied.pte) == weight.nbytes
    # A function of stock's bytes alone: reproducible where stock's are.
    assert eg.program.store_once(tied.stock) == tied.pte
    assert not eg.program.shared_copies(tied.pte)  # nothing left to share
    # The head's named data now lies inside the constant segment, at the embedding's bytes.
    pte = PteFile(tied.pte)
    (key,) = shared.keys
    constant = pte.constant_table
    assert constant is not None and constant.segment is not None
    region = pte.named_data[key]
    assert constant.segment.start <= region.start and region.end <= constant.segment.end
    assert pte.read(region) == weight.detach().numpy().tobytes()
    # Bit for bit stock's outputs, through a prefill and decode steps, from bytes and from a file.
    stock = run_steps(tied.stock)
    path = tmp_path / "shared.pte"
    path.write_bytes(tied.pte)
    for outputs in (run_steps(tied.pte), run_steps(str(path))):
        assert all(torch.equal(a, b) for a, b in zip(stock, outputs, strict=True))


def test_the_finding_says_the_weight_is_stored_once(tied: Built) -> None:
    (once,) = tied.guarded.report.with_code("EG404")
    assert once.severity is Severity.INFO
    assert (
        f"stores them once ({tied.model.embed.weight.nbytes:,} bytes that stock ExecuTorch stores twice)"
        in once.message
    )
    assert "aten::embedding" in once.message and "XnnpackBackend keeps a copy" in once.message
    assert once.location is not None and "self.embed(tokens)" in once.location.code


def test_the_checks_accept_the_shared_program(tied: Built, cli: Callable[..., object], tmp_path: Path) -> None:
    assert not eg.program.check_program(tied.guarded, tied.pte).findings
    path = tmp_path / "shared.pte"
    path.write_bytes(tied.pte)
    for args in ((), ("--runtime",)):
        ran = cli("check", path, *args)
        assert ran.returncode == 0, ran.out + ran.err


def test_a_damaged_alias_is_still_caught(tied: Built) -> None:
    """The shared segment moved off the constant's start (a partial overlap), or past the end."""
    pte = PteFile(tied.pte)
    (shared,) = eg.program.shared_copies(tied.stock)
    at = segment_offset_fields(tied.pte)[shared.segment]
    assert at is not None
    for offset, says in (
        (shared.offset + 16, "overlapping segment 0 (constant data)"),
        (len(tied.pte), "past the end of the file"),
    ):
        damaged = bytearray(tied.pte)
        damaged[at : at + 8] = offset.to_bytes(8, "little")
        found = [f for f in eg.check_pte(bytes(damaged)).errors if f.code == "EG503"]
        assert found and says in found[0].message and f"segment {shared.segment} (named data" in found[0].message
    assert pte.size == len(tied.pte)


def test_the_pass_list_stores_it_once_with_store_once(tied: Built) -> None:
    model, inputs, dynamic_shapes = prefill(tied.variant)
    edge = to_edge_transform_and_lower(
        torch.export.export(model, inputs, dynamic_shapes=dynamic_shapes),
        transform_passes=eg.guard_passes(),
        partitioner=[XnnpackPartitioner()],
    )
    manager = edge.to_executorch(ExecutorchBackendConfig(passes=eg.emit_passes()))
    assert manager.buffer == tied.stock
    # what store_once reads of the manager: the alignment each key asked for (XNNPACK: 16)
    alignments = named_data_alignments(manager)
    assert alignments.keys() == PteFile(manager.buffer).named_data.keys() and set(alignments.values()) == {16}
    assert eg.program.store_once(manager) == tied.pte


class SharedWeight(torch.nn.Module):
    """One weight read by a linear (XNNPACK's) and by ``index_select`` (the runtime's kernels)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.weight = torch.nn.Parameter(torch.randn(48, 32))

    def forward(self, x: torch.Tensor, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.nn.functional.linear(x, self.weight), torch.index_select(self.weight, 0, rows)


def test_a_pair_of_readers_that_is_no_embedding_shares_too() -> None:
    model, inputs = SharedWeight().eval(), (torch.randn(2, 32), torch.tensor([1, 5, 7]))
    stock = (
        to_edge_transform_and_lower(torch.export.export(model, inputs), partitioner=[XnnpackPartitioner()])
        .to_executorch()
        .buffer
    )
    guarded = eg.lower_with_guards(torch.export.export(model, inputs))
    pte = guarded.to_pte()
    assert (
        0 <= len(stock) - len(pte) - model.weight.nbytes < 128
    )  # the copy and the padding before it (segments are 128-aligned)
    (once,) = guarded.report.with_code("EG404")
    assert "aten::index_select" in once.message and once.severity is Severity.INFO
    expected = LoadedMethod(stock)(inputs)
    assert all(torch.equal(a, b) for a, b in zip(expected, LoadedMethod(pte)(inputs), strict=True))
    assert not eg.program.check_program(guarded, pte).findings


class TwoWeights(torch.nn.Module):
    """A linear's weight and an index_select's table, two parameters: equal, or equal but for
    their last row (the same size, the same first bytes)."""

    def __init__(self, equal: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.weight = torch.nn.Parameter(torch.randn(48, 32))
        table = self.weight.detach().clone()
        if not equal:
            table[-1, -1] += 1.0
        self.table = torch.nn.Parameter(table)

    def forward(self, x: torch.Tensor, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.nn.functional.linear(x, self.weight), torch.index_select(self.table, 0, rows)


def two_weights(equal: bool) -> tuple[TwoWeights, tuple[torch.Tensor, torch.Tensor]]:
    return TwoWeights(equal).eval(), (torch.randn(2, 32), torch.tensor([1, 5, 47]))


@functools.cache
def two_weights_stock(equal: bool) -> bytes:
    """Stock's program of ``TwoWeights(equal)``, once per process: two tests read the equal one."""
    model, inputs = two_weights(equal)
    return (
        to_edge_transform_and_lower(torch.export.export(model, inputs), partitioner=[XnnpackPartitioner()])
        .to_executorch()
        .buffer
    )


@pytest.mark.parametrize("equal", [True, False])
def test_bytes_that_begin_alike_are_shared_only_when_all_alike(equal: bool) -> None:
    """Data is hashed only where its size and first bytes match another's; what decides is
    every byte."""
    model, inputs = two_weights(equal)
    stock = two_weights_stock(equal)
    shared = eg.program.shared_copies(stock)
    pte = eg.program.store_once(stock)
    if equal:
        assert [copy.size for copy in shared] == [model.weight.nbytes] and len(pte) < len(stock)
    else:
        assert shared == () and pte == stock
    expected = LoadedMethod(stock)(inputs)
    assert all(torch.equal(a, b) for a, b in zip(expected, LoadedMethod(pte)(inputs), strict=True))


def test_a_rewrite_that_would_change_what_a_reader_reads_returns_the_program_as_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The rewrite's own check (each segment it moves or points elsewhere read back), on a
    copy pointed 16 bytes off its constant: the program comes back unchanged."""
    from export_guards.pte import store_once as module

    stock = two_weights_stock(equal=True)
    layout = module._layout
    (copy,) = eg.program.shared_copies(stock)

    def off(pte: PteFile, copies: list[module.SharedCopy]) -> dict[int, int] | None:
        offsets = layout(pte, copies)
        assert offsets is not None
        return {**offsets, copy.segment: copy.offset + 16}

    monkeypatch.setattr(module, "_layout", off)
    assert eg.program.store_once(stock) == stock
