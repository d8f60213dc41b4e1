"""The LLM tier (issue 45): a small Llama-style decoder (RoPE, RMSNorm, a tied embedding, a static
KV cache) in every variant users ship (fp32, torchao 8da4w and int8 weight-only, PT2E, a LoRA
merge), each guarded flow against stock ExecuTorch: the same bytes or fewer (a tied weight stored once), the same delegation
or more, outputs that match eager (as well as stock's do), no false finding.

Each variant's stock and guarded programs are built once, by the variant's one test, which
checks every claim about that variant. The decoder is one layer deep (``llm_builds``): what is
counted below is counted per layer."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower

import export_guards as eg
import llm_builds
from export_guards.analysis.fold_plan import plan_fold
from export_guards.report import Severity
from export_guards.verify import LoadedMethod, run_pte
from llm_builds import CONFIG, llm

BUILDS = Path(llm_builds.__file__)

pytestmark = [pytest.mark.slow]  # decoders quantized, lowered stock and guarded, and run

COMPUTE = ("linear", "mm", "addmm", "bmm")


@dataclass(frozen=True)
class Exported:
    """One variant: its inputs and eager outputs (on a fresh copy, so the KV cache the program
    starts from is the model's), stock's program and the guarded export."""

    model: torch.nn.Module
    inputs: tuple[torch.Tensor, ...]
    eager: torch.Tensor
    stock: bytes
    stock_delegation: eg.program.DelegationSummary
    guarded: eg.GuardedExport
    pte: bytes


def exported(variant: str) -> Exported:
    model, inputs = llm_builds.model(variant)
    with torch.no_grad():
        eager = copy.deepcopy(model)(*inputs)
    stock = to_edge_transform_and_lower(torch.export.export(model, inputs), partitioner=[XnnpackPartitioner()])
    guarded = eg.lower_with_guards(torch.export.export(model, inputs))
    return Exported(
        model, inputs, eager, stock.to_executorch().buffer, eg.delegation_summary(stock), guarded, guarded.to_pte()
    )


def max_error(pte: bytes, done: Exported) -> float:
    return (run_pte(pte, done.inputs)[0] - done.eager).abs().max().item()


# Each variant is built once per worker and checked by one test: the claims about it are
# functions, called by the variant's test, so that no worker exports a variant twice.


def is_stock_or_better(done: Exported, variant: str) -> None:
    """The same bytes or fewer, the same delegation or more (but where XNNPACK computes a linear
    wrong: EG405), outputs as close to eager as stock's, and no finding above info but PT2E's
    tied head quantized apart from its embedding (EG404)."""
    if variant == "int8wo":
        keeps_the_weight_only_linears_off_xnnpack(done)
        return
    assert len(done.pte) <= len(done.stock)
    summary = done.guarded.delegation
    assert summary is not None and summary.count(*COMPUTE)[0] >= done.stock_delegation.count(*COMPUTE)[0]
    # Quantized kernels round differently from torchao's eager math: never worse than stock,
    # and as close as float kernels are where nothing is quantized.
    guarded_error, stock_error = max_error(done.pte, done), max_error(done.stock, done)
    assert guarded_error <= stock_error + 1e-5
    if variant in ("fp32", "lora"):
        assert guarded_error < 1e-4
    # but where PT2E quantized the tied head apart from its embedding: two copies, stated (EG404)
    expected = {"EG404"} if variant == "pt2e" else set()
    assert {f.code for f in done.guarded.report.at_least(Severity.WARNING)} == expected, str(done.guarded.report)


def keeps_the_weight_only_linears_off_xnnpack(done: Exported) -> None:
    """XNNPACK reads a weight-only linear's int8 weight as its float one (executorch #8830): stock
    is far from eager, the guarded program as close as float kernels are, each of the 7
    projections a layer kept off XNNPACK (EG405, on the user's line) and its weight kept int8."""
    assert max_error(done.stock, done) > 1.0
    assert max_error(done.pte, done) < 1e-3
    kept = done.guarded.report.with_code("EG405")
    assert len(kept) == 7 * CONFIG.layers and all(f.location is not None and "llm.py" in f.location.file for f in kept)
    assert {f.code for f in done.guarded.report.at_least(Severity.WARNING)} == {"EG405"}
    assert len(done.pte) < len(done.stock) * 1.05  # the weights stay int8: no float copy of them


def is_stock_byte_for_byte(done: Exported) -> None:
    """Without weight math to fold, the guarded program is stock's, and nothing is "folded"
    (a quantized weight is not a computation)."""
    assert done.pte == done.stock
    assert not done.guarded.report.with_code("EG201")


def warns_of_the_head_quantized_apart_from_its_embedding_with_the_bytes(done: Exported) -> None:
    """PT2E gives the tied head an int8 weight of its own: the bytes differ, nothing is shared
    (tests/test_store_once.py), and EG404 says so with what each copy costs."""
    assert done.pte == done.stock and not eg.program.shared_copies(done.stock)
    (twice,) = done.guarded.report.with_code("EG404")
    float_bytes, int8_bytes = llm.Config.vocab * llm.Config.dim * 4, llm.Config.vocab * llm.Config.dim
    assert twice.severity is Severity.WARNING
    assert (
        "stored twice, in bytes that differ" in twice.message
        and "quantized_decomposed::dequantize_per_channel" in twice.message
    )
    assert f"{int8_bytes:,} bytes" in twice.message and f"{float_bytes:,} bytes" in twice.message
    assert f"holds {int8_bytes + float_bytes:,} bytes for this weight" in twice.message


def stores_the_tied_weight_once(done: Exported) -> None:
    """Stock's program but for the head's copy of the tied weight (XNNPACK's named data), which
    the guarded program points at the embedding's bytes (tests/test_store_once.py); nothing is
    "folded" (a quantized weight is not a computation)."""
    assert eg.program.store_once(done.stock) == done.pte
    assert len(done.stock) - len(done.pte) == done.model.embed.weight.nbytes
    assert not done.guarded.report.with_code("EG201")


def states_the_tied_embedding_stored_once(done: Exported) -> None:
    (once,) = done.guarded.report.with_code("EG404")
    weight = done.model.embed.weight
    assert f"stores them once ({weight.nbytes:,} bytes that stock ExecuTorch stores twice)" in once.message
    assert "aten::embedding" in once.message and once.severity is Severity.INFO
    assert once.location is not None and "self.embed(tokens)" in once.location.code


def counts_the_ops_left_on_the_runtime_kernels(done: Exported) -> None:
    (coverage,) = done.guarded.report.with_code("EG402")
    stated, _, listed = coverage.message.partition(" other ops on the runtime's kernels: ")
    compute = 9 * CONFIG.layers + 1  # a layer's 7 projections and 2 attention matmuls, and the head
    assert stated.startswith(
        f"{compute} of {compute} compute ops delegated (100%) to XnnpackBackend (conv / linear / matmul); "
    )
    counts = [int(item.rpartition(" x")[2]) for item in listed.removesuffix(" (EG403)").split(", ")]
    assert int(stated.rpartition("; ")[2]) == sum(counts) > 20  # norms, cache writes, the embedding, ...
    # the lint's summary, read after to_executorch, says the same: the cache write-backs (2 a layer) counted
    assert (
        done.guarded.delegation is not None and done.guarded.delegation.stated() == coverage.message.partition(": ")[0]
    )
    assert f"aten::copy_ x{2 * CONFIG.layers}" in listed and "aten::view_copy" not in listed


def leaves_torchao_weights_to_to_edge(done: Exported) -> None:
    """torchao's weights are tensor subclasses: the fold never reads them as bytes."""
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    program = torch.export.export(done.model, done.inputs)
    subclassed = {fqn for fqn, tensor in program.state_dict.items() if is_traceable_wrapper_subclass(tensor)}
    assert len(subclassed) == (4 + 3) * CONFIG.layers  # attention's four projections and the MLP's three
    plan = plan_fold(program)
    assert not subclassed & {c.fqn for c in plan.constants.values()} and not plan.roots
    folded, report = eg.fold.fold_constants(program)
    assert folded is program and not report.with_code("EG201")


def the_pass_list_gives_stock_bytes(done: Exported) -> None:
    edge = to_edge_transform_and_lower(
        torch.export.export(done.model, done.inputs),
        transform_passes=eg.guard_passes(),
        partitioner=[XnnpackPartitioner()],
    )
    assert edge.to_executorch().buffer == done.stock


def folds_the_lora_merges_so_xnnpack_takes_every_projection(done: Exported) -> None:
    folds = done.guarded.report.with_code("EG201")
    assert sorted(f.constant for f in folds) == sorted(
        f"layers.{i}.attention.{p}.weight" for i in range(CONFIG.layers) for p in ("wq", "wk", "wv", "wo")
    )
    assert all("'layers." in f.message and ".base.weight'" in f.message for f in folds)
    assert len(done.pte) < len(done.stock)  # the merged weight is smaller than base + A + B
    summary = done.guarded.delegation
    assert summary is not None and summary.count(*COMPUTE)[0] == summary.count(*COMPUTE)[1]
    delegated, total = done.stock_delegation.count(*COMPUTE)
    assert delegated < total  # stock leaves the merged projections out: "Expected weight to be a static param"


CLAIMS: dict[str, tuple[Callable[[Exported], None], ...]] = {
    "fp32": (
        stores_the_tied_weight_once,
        states_the_tied_embedding_stored_once,
        counts_the_ops_left_on_the_runtime_kernels,
    ),
    "8da4w": (stores_the_tied_weight_once, leaves_torchao_weights_to_to_edge, the_pass_list_gives_stock_bytes),
    "int8wo": (),
    "pt2e": (is_stock_byte_for_byte, warns_of_the_head_quantized_apart_from_its_embedding_with_the_bytes),
    "lora": (folds_the_lora_merges_so_xnnpack_takes_every_projection,),
}


@pytest.mark.parametrize("variant", llm.VARIANTS)
def test_each_variant_through_the_guards_against_stock(variant: str) -> None:
    done = exported(variant)
    is_stock_or_better(done, variant)
    for claim in CLAIMS[variant]:
        claim(done)


def test_the_lint_passes_a_quantized_decoder(cli: Callable[..., object], tmp_path: Path) -> None:
    pte = tmp_path / "decoder.pte"
    ran = cli("lint", f"{BUILDS}:model", "--arg", "variant='8da4w'", "--pte", pte)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    (summary,) = ran.stdout.splitlines()
    assert summary.startswith("All checks passed: ") and " other ops on the runtime's kernels" in summary
    assert pte.stat().st_size > 0


def test_the_fixture_checks_a_lora_decoder_against_eager(check_export: Callable[..., object]) -> None:
    model, inputs = llm_builds.model("lora")
    result = check_export(model, inputs, atol=1e-4, rtol=1e-4)
    assert result.report.with_code("EG201")


def test_the_fixture_steps_a_decoder_through_its_kv_cache(check_export: Callable[..., object]) -> None:
    """Decode steps run in order through one loaded method, as eager runs them: each step reads
    the keys the steps before it wrote. The caller's decoder never runs: its cache stays empty."""
    model = llm_builds.decoder("fp32")
    result = check_export(model, steps=[llm.tokens(1, position) for position in range(4)], atol=1e-4, rtol=1e-4)
    assert len(result.comparisons) == 4 and all(e.within for c in result.comparisons for e in c)
    assert not model.layers[0].attention.k_cache.any()


def test_a_kv_cache_left_over_from_an_eager_call_is_no_error_and_the_program_matches_eager(
    check_export: Callable[..., object],
) -> None:
    """A decoder called eagerly before export (a sanity call, a calibration) leaves keys in its
    cache, which the program drops; its writes and its mask make them irrelevant: no EG308, and
    the program, stepped through two chunks of the prompt, matches eager on a copy of the stale
    decoder at every step."""
    model = llm_builds.decoder("fp32")
    with torch.no_grad():
        model(*llm.tokens(12))  # slots 0-11 written; the steps below overwrite 0-7 and mask 8-11
    assert model.layers[0].attention.k_cache[:, :, 8:12].any()
    result = check_export(model, steps=[llm.tokens(4), llm.tokens(4, 4)], atol=1e-4, rtol=1e-4)
    assert not result.report.with_code("EG308") and len(result.comparisons) == 2


def test_a_dynamic_prefill_and_three_decode_steps_through_the_fixture_and_the_recipe(
    check_export: Callable[..., object],
) -> None:
    """One program for every length: the prefill (4 tokens) and three single-token decode steps,
    in order through one loaded method, against eager, by the backend and by a recipe."""
    model, _, dynamic_shapes = llm_builds.prefill()
    for flow in ({}, {"recipe": "xnnpack_fp32"}):
        result = check_export(model, steps=llm.steps(4, 3), dynamic_shapes=dynamic_shapes, atol=1e-4, rtol=1e-4, **flow)
        # the steps, then the prefill at the length's bounds: one token, the whole cache
        assert [c[0].shape for c in result.comparisons] == [(1, 4, 256), *[(1, 1, 256)] * 3, (1, 1, 256), (1, 32, 256)]
        assert not result.report.at_least(Severity.WARNING)


@pytest.mark.runs_program
def test_the_lint_takes_the_factorys_dynamic_shapes(cli: Callable[..., object], tmp_path: Path) -> None:
    pte = tmp_path / "decoder.pte"
    ran = cli("lint", f"{BUILDS}:prefill", "--pte", pte)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    # the program ran at the example's 4 tokens, and at the length's bounds: one token, the whole cache
    assert (
        "ran the program on the example inputs and at length=1 (the lower bound), length=32 (the upper bound)"
        in ran.stderr
    )
    assert "matched eager on the example inputs and at the dynamic bounds length=1 and length=32" in ran.stdout, (
        ran.stdout
    )
    method = LoadedMethod(pte.read_bytes())
    eager = llm_builds.decoder()
    for step in llm.steps(4, 3):  # the written program takes each length
        torch.testing.assert_close(method(step)[0], eager(*step), atol=1e-4, rtol=1e-4)


def test_a_dynamic_prefill_and_three_decode_steps_through_the_drop_in_guards() -> None:
    """The pass list, the guarded partitioner and the emit passes in the user's own
    to_edge_transform_and_lower: one program for the prefill and each decode step, against eager."""
    model, inputs, dynamic_shapes = llm_builds.prefill()
    edge = to_edge_transform_and_lower(
        torch.export.export(model, inputs, dynamic_shapes=dynamic_shapes),
        transform_passes=eg.guard_passes(),
        partitioner=eg.guard_partitioners([XnnpackPartitioner()]),
    )
    method = LoadedMethod(edge.to_executorch(ExecutorchBackendConfig(passes=eg.emit_passes())).buffer)
    eager = copy.deepcopy(model)
    for step in llm.steps(4, 3):
        with torch.no_grad():
            torch.testing.assert_close(method(step)[0], eager(*step), atol=1e-4, rtol=1e-4)
