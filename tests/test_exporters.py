"""ExecuTorch's LLM exporter, guarded (issue 54): ``LLMEdgeManager`` (what ``export_llm`` builds
on) with ``guard_passes(partitioner=guarded)``, guarded partitioners and ``emit_passes()``,
beside the same flow without the guards: the same bytes or fewer, the same tokens.

Each program is built once a run (``built_once``: bytes, shared by the xdist workers), of a
one-layer decoder (what the claims are about is in every layer; a second one only doubles
ExecuTorch's lowering time); the runtime runs both over a prefill and decode steps through one
loaded method (the KV cache carries over), and their argmax tokens must agree."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.extension.llm.export.builder import LLMEdgeManager

import export_guards as eg
from conftest import built_once
from export_guards.verify import LoadedMethod

EXAMPLES = Path(__file__).parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))
import llm  # noqa: E402  (examples/llm.py)

pytestmark = [pytest.mark.slow]  # a quantized decoder exported twice by ExecuTorch's LLM exporter, and run

VARIANT = "8da4w"  # ExecuTorch's XNNPACK LLM default (llama_q8da4w.yaml, llama_xnnpack.yaml)
CONFIG = llm.Config(layers=1)  # the example's decoder but for its depth


def manager(variant: str) -> LLMEdgeManager:
    """The decoder exported as ExecuTorch's LLM flow exports it: strict, with a dynamic length
    shared by the tokens and their positions, so that one program runs prefill and decode."""
    return LLMEdgeManager(
        model=llm.decoder(variant, CONFIG),
        modelname=f"decoder_{variant}",
        max_seq_len=CONFIG.max_len,
        use_kv_cache=True,
        example_inputs=llm.tokens(4),
        dynamic_shapes=llm.dynamic_length(),
        enable_dynamic_shape=True,
    ).export()


def stock(variant: str) -> bytes:
    return manager(variant).to_edge_transform_and_lower([XnnpackPartitioner()]).to_executorch().export_program.buffer


def guarded(variant: str) -> bytes:
    partitioners = eg.guard_partitioners([XnnpackPartitioner()])
    builder = manager(variant).to_edge_transform_and_lower(
        partitioners, transform_passes=eg.guard_passes(partitioner=partitioners)
    )
    return builder.to_executorch(passes=[*eg.emit_passes()]).export_program.buffer


def run_steps(pte: bytes) -> list[torch.Tensor]:
    method = LoadedMethod(pte)
    return [method(step)[0] for step in llm.steps(prompt=4, decode=3)]


@pytest.fixture(scope="session")
def programs(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, bytes]:
    """Stock's and the guarded program, as bytes: the two tests that read them may run on two workers."""
    return built_once(tmp_path_factory, f"llm-edge-manager-{VARIANT}", lambda: (stock(VARIANT), guarded(VARIANT)))


def test_guarded_llm_edge_manager_is_stock_or_smaller(programs: tuple[bytes, bytes]) -> None:
    stock_pte, guarded_pte = programs
    assert len(guarded_pte) <= len(stock_pte)
    assert not eg.check_pte(guarded_pte).findings


def test_guarded_llm_edge_manager_gives_stock_tokens(programs: tuple[bytes, bytes]) -> None:
    stock_pte, guarded_pte = programs
    stock_logits, guarded_logits = run_steps(stock_pte), run_steps(guarded_pte)
    assert [logits.shape[1] for logits in guarded_logits] == [4, 1, 1, 1]  # one program: prefill, then decode
    for ours, theirs in zip(guarded_logits, stock_logits, strict=True):
        assert torch.equal(ours.argmax(-1), theirs.argmax(-1))
        torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=1e-4)


def test_guard_passes_are_what_llm_edge_manager_hands_on() -> None:
    """``LLMEdgeManager.to_edge_transform_and_lower(transform_passes=...)`` is typed ``List``
    but hands the value to ``to_edge_transform_and_lower`` as it is: a ``GuardPasses`` runs as
    ExecuTorch's pass manager (its guard errors unwrapped), a ``list(...)`` of its passes in
    ExecuTorch's own manager (a guard error as the ``__cause__`` of a bare ``Exception``)."""
    import inspect

    source = inspect.getsource(LLMEdgeManager.to_edge_transform_and_lower)
    assert "transform_passes=transform_passes" in source
    passes = eg.guard_passes(partitioner=eg.guard_partitioners([XnnpackPartitioner()]))
    assert isinstance(passes, eg.passes.GuardPasses) and len(list(passes)) == len(passes)
