"""``export-guards diff OLD.pte NEW.pte`` on real XNNPACK programs: what an app update does to the
packed-weight cache, weight by weight, and its exit codes."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower

import export_guards as eg
from conftest import Ran
from test_sarif import validated

pytestmark = pytest.mark.slow  # the programs are exported and lowered once per module (about 15 s)

INPUTS = (torch.ones(2, 16),)


def _model(changed_seed: int | None = None) -> torch.nn.Module:
    """Two linear layers from seed 0; ``changed_seed`` gives the second one other weights
    (the update that retrains one layer)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)).eval()
    if changed_seed is not None:
        torch.manual_seed(changed_seed)
        model[2].weight.data = torch.randn_like(model[2].weight)
    return model


def _lowered(model: torch.nn.Module, weight_range: int | None = None) -> bytes:
    """The XNNPACK program; with ``weight_range``, dynamically quantized per channel to integers
    in [-weight_range, weight_range] (XNNPACKQuantizer's default is 127)."""
    program = torch.export.export(model, INPUTS)
    if weight_range is not None:
        from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
            XNNPACKQuantizer,
            get_symmetric_quantization_config,
        )
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

        config = get_symmetric_quantization_config(
            is_per_channel=True, is_dynamic=True, weight_qmin=-weight_range, weight_qmax=weight_range
        )
        prepared = prepare_pt2e(program.module(), XNNPACKQuantizer().set_global(config))
        prepared(*INPUTS)
        program = torch.export.export(convert_pt2e(prepared), INPUTS)
    return to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()]).to_executorch().buffer


@pytest.fixture(scope="module")
def programs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The shipped program, the same model built again, one with its second layer retrained,
    and one model quantized twice from the same float weights with another integer range."""
    folder = tmp_path_factory.mktemp("diff")
    built = {
        "shipped": _lowered(_model()),
        "again": _lowered(_model()),
        "retrained": _lowered(_model(changed_seed=5)),
        "quantized": _lowered(_model(), weight_range=127),
        "requantized": _lowered(_model(), weight_range=100),
    }
    for name, data in built.items():
        (folder / f"{name}.pte").write_bytes(data)
    return {name: folder / f"{name}.pte" for name in built}


def _findings(done: Ran) -> list[dict[str, object]]:
    return json.loads(done.stdout)["findings"]


def test_the_same_model_built_again_reuses_every_weight(cli: Callable[..., Ran], programs: dict[str, Path]) -> None:
    done = cli("diff", programs["shipped"], programs["again"], "--format", "json")
    assert done.returncode == 0, done.stderr
    findings = _findings(done)
    assert sorted(f["code"] for f in findings) == ["EG534"] * 4 + ["EG535"]  # 2 filters, 2 biases; the account
    (account,) = [f for f in findings if f["code"] == "EG535"]
    assert "2 reused (3,232 bytes), 0 re-packed (0 bytes), 0 orphaned (0 bytes)" in account["message"]
    assert "grows by 0 bytes" in account["message"]
    biases = [str(f["message"]) for f in findings if str(f["message"]).startswith("bias value")]
    assert len(biases) == 2 and all(
        "its filter's key" in m and "followed by its own" in m for m in biases
    )  # not the filter's key alone
    text = cli("diff", programs["shipped"], programs["again"])
    assert text.returncode == 0 and "EG534" not in text.stdout  # infos are counted, listed with --show-info
    assert "2 reused (3,232 bytes)" in text.stdout


def test_a_retrained_layer_repacks_its_weights_alone_and_orphans_the_old_ones(
    cli: Callable[..., Ran], programs: dict[str, Path]
) -> None:
    done = cli("diff", programs["shipped"], programs["retrained"], "--format", "json")
    assert done.returncode == 0, done.stderr
    by_code: dict[str, list[dict[str, object]]] = {}
    for finding in _findings(done):
        by_code.setdefault(str(finding["code"]), []).append(finding)
    repacked = {f["message"].split(" of delegate")[0]: f for f in by_code["EG532"]}
    assert set(repacked) == {"filter value 4 (fp32[8, 32], 1,024 bytes)", "bias value 5 (fp32[8], 32 bytes)"}
    assert "its source changed (its values differ)" in repacked["filter value 4 (fp32[8, 32], 1,024 bytes)"]["message"]
    assert "packed with filter value 4, whose source changed" in repacked["bias value 5 (fp32[8], 32 bytes)"]["message"]
    assert {f["message"].split(" of delegate")[0] for f in by_code["EG534"]} == {
        "filter value 1 (fp32[32, 16], 2,048 bytes)",
        "bias value 2 (fp32[32], 128 bytes)",
    }
    orphaned = by_code["EG533"]
    assert len(orphaned) == 2 and all(str(f["artifact"]).endswith("shipped.pte") for f in orphaned)
    assert {f["constant"] for f in orphaned}.isdisjoint(
        {f["constant"] for f in by_code["EG532"]} - {repacked["bias value 5 (fp32[8], 32 bytes)"]["constant"]}
    )
    (account,) = by_code["EG535"]
    assert "1 reused (2,176 bytes), 1 re-packed (1,056 bytes), 1 orphaned (1,056 bytes)" in account["message"]
    assert "grows by 1,056 bytes" in account["message"]
    assert "EG530" not in by_code and "EG531" not in by_code


def test_the_same_float_weights_quantized_to_other_integers_exit_1(
    cli: Callable[..., Ran], programs: dict[str, Path]
) -> None:
    done = cli("diff", programs["quantized"], programs["requantized"])
    assert done.returncode == 1, done.stderr
    errors = [line for line in done.stdout.splitlines() if "EG530 [error]" in line]
    assert len(errors) == 2  # one per packed entry (filter and bias), for both layers
    assert all("dequantize to the same reals within a quantization step" in line for line in errors)
    assert (
        "filter value 2 (qcint8[32, 16], 512 bytes)" in errors[0]
        and "640 bytes re-packed on every device for nothing" in errors[0]
    )
    assert "EG530 fix: Make the export deterministic for unchanged weights" in done.stdout
    assert (
        "2 re-packed (928 bytes), 2 orphaned (928 bytes)" in done.stderr
    )  # the account, which infos hold, said anyway
    report = eg.program.diff_pte(programs["quantized"], programs["requantized"])  # the same from Python
    assert [f.code for f in report.errors] == ["EG530", "EG530"]
    assert not eg.program.diff_pte(programs["quantized"], programs["quantized"]).errors


def test_json_and_sarif_hold_every_weight(cli: Callable[..., Ran], programs: dict[str, Path]) -> None:
    as_json = json.loads(cli("diff", programs["quantized"], programs["requantized"], "--format", "json").stdout)
    assert as_json["summary"] == {
        "error": 2,
        "warning": 0,
        "info": 5,
        "suppressed": 0,
    }  # 4 orphaned weights, the account
    for finding in as_json["findings"]:
        assert finding["artifact"].endswith(".pte") and finding["code"] in {"EG530", "EG533", "EG535"}
    done = cli("diff", programs["quantized"], programs["requantized"], "--format", "sarif")
    assert done.returncode == 1
    document = validated(done.stdout)
    (run,) = document["runs"]
    assert {r["ruleId"] for r in run["results"]} == {"EG530", "EG533", "EG535"}
    located = [r for r in run["results"] if r["ruleId"] == "EG530"]
    assert all(
        r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].endswith("requantized.pte") for r in located
    )


def test_bad_input_exits_2_saying_what_and_how_to_fix(
    cli: Callable[..., Ran], programs: dict[str, Path], tmp_path: Path
) -> None:
    missing = cli("diff", tmp_path / "gone.pte", programs["shipped"])
    assert missing.returncode == 2 and "no such file" in missing.stderr and "OLD, the shipped program" in missing.stderr
    text = tmp_path / "notes.pte"
    text.write_text("not a program at all")
    other = cli("diff", programs["shipped"], text)
    assert (
        other.returncode == 2
        and "notes.pte (NEW, the new build) cannot be read as a program: it is a text file; expected an ExecuTorch program"
        in other.stderr
    )
    damaged = tmp_path / "damaged.pte"
    data = programs["shipped"].read_bytes()
    damaged.write_bytes(data[:40])  # the identifier survives; the flatbuffer does not
    cut = cli("diff", programs["shipped"], damaged)
    assert (
        cut.returncode == 2
        and "damaged.pte (NEW, the new build) cannot be read as a program: it is truncated: 40 bytes of the "
        in cut.stderr
    )
    empty = tmp_path / "empty.pte"
    empty.write_bytes(b"")
    said = cli("diff", empty, programs["shipped"]).stderr  # the sentence check gives: one classification
    assert (
        "empty.pte (OLD, the shipped program) cannot be read as a program: it is empty (0 bytes); expected an ExecuTorch program (.pte)"
        in said
    )
    assert cli("check", empty).stderr.partition("a program: ")[2] == said.partition("a program: ")[2]
    folder = cli("diff", tmp_path, programs["shipped"])
    assert folder.returncode == 2 and "is a folder" in folder.stderr


def test_a_truncated_program_is_exit_2_in_one_line_wherever_it_is_cut(
    cli: Callable[..., Ran], programs: dict[str, Path], tmp_path: Path
) -> None:
    """Issue 63: a file cut short (a bad copy) has no weights to compare: never "all reused".
    Cut anywhere, as either program, the answer is exit 2 and one line, no traceback, no
    placeholder."""
    data = programs["shipped"].read_bytes()
    cut = tmp_path / "cut.pte"
    for length in sorted({8, 40, 200, len(data) // 4, len(data) // 2, len(data) - 64, len(data) - 1}):
        cut.write_bytes(data[:length])
        for pair in ((cut, programs["shipped"]), (programs["shipped"], cut)):
            done = cli("diff", *pair)
            assert done.returncode == 2, (length, done.stdout)
            assert (
                len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr and "{" not in done.stderr
            ), (length, done.stderr)
            assert "cut.pte" in done.stderr
    cut.write_bytes(data[: len(data) // 2])
    assert (
        f"it is truncated: {len(data) // 2} bytes of the {len(data)} its header gives"
        in cli("diff", cut, programs["shipped"]).stderr
    )
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    said = cli("diff", text, programs["shipped"]).stderr
    assert (
        "it is 6 bytes long, too short for a program; expected an ExecuTorch program (.pte)" in said and "{" not in said
    )


def test_byte_flips_give_a_verdict_or_exit_2_never_a_traceback(
    cli: Callable[..., Ran], programs: dict[str, Path], tmp_path: Path
) -> None:
    """Issue 63: the fuzz ``check`` has, for ``diff``: a byte flipped anywhere is a verdict
    (exit 0 or 1) or a one-line exit 2, never a crash."""
    import random

    data = programs["shipped"].read_bytes()
    flipped = tmp_path / "flipped.pte"
    rng = random.Random(0)
    for _ in range(40):
        mutant = bytearray(data)
        at = rng.randrange(len(mutant))
        mutant[at] ^= 1 << rng.randrange(8)
        flipped.write_bytes(bytes(mutant))
        done = cli("diff", programs["shipped"], flipped)
        assert done.returncode in (0, 1, 2), (at, done.stderr)
        assert "Traceback" not in done.stderr and "Traceback" not in done.stdout, (at, done.stderr)
        if done.returncode == 2:
            assert len(done.stderr.strip().splitlines()) == 1, (at, done.stderr)


def _largest_named(data: bytes) -> tuple[str, int, int]:
    from export_guards.pte.reader.file import PteFile

    key, region = max(PteFile(data, "<bytes>").named_data.items(), key=lambda item: item[1].size)
    return key, region.start, region.end


def test_the_same_bytes_under_another_key_exit_1(
    cli: Callable[..., Ran], programs: dict[str, Path], tmp_path: Path
) -> None:
    """A step after export that names the weights otherwise (here: each occurrence of one key,
    in the named data's table and in the delegate's graph, replaced by another of its length)."""
    data = programs["shipped"].read_bytes()
    key, _, _ = _largest_named(data)
    renamed = tmp_path / "renamed.pte"
    renamed.write_bytes(data.replace(key.encode(), hashlib.sha256(b"another naming").hexdigest().encode()))
    done = cli("diff", programs["shipped"], renamed)
    assert done.returncode == 1, done.stderr
    (error,) = [line for line in done.stdout.splitlines() if "EG530 [error]" in line]
    assert "filter value 1 (fp32[32, 16], 2,048 bytes)" in error and "its bytes are the same in both programs" in error


def test_other_bytes_under_the_same_key_are_served_stale_exit_1(
    cli: Callable[..., Ran], programs: dict[str, Path], tmp_path: Path
) -> None:
    """A weight's bytes changed and its key did not (a copy damaged after export): a cache keyed
    by name serves the old packing."""
    data = bytearray(programs["shipped"].read_bytes())
    _, start, _ = _largest_named(bytes(data))
    data[start : start + 8] = bytes(b ^ 0xFF for b in data[start : start + 8])
    damaged = tmp_path / "damaged-weights.pte"
    damaged.write_bytes(bytes(data))
    done = cli("diff", programs["shipped"], damaged)
    assert done.returncode == 1, done.stderr
    (error,) = [line for line in done.stdout.splitlines() if "EG531 [error]" in line]
    assert "holds other bytes in each program under the same key" in error and "serves the old packing" in error


@pytest.mark.subprocess
def test_diff_reads_both_programs_without_torch(programs: dict[str, Path]) -> None:
    code = "import sys; from export_guards.cli import main; rc = main(sys.argv[1:]); assert 'torch' not in sys.modules; sys.exit(rc)"
    done = subprocess.run(
        [sys.executable, "-c", code, "diff", "-q", programs["shipped"], programs["retrained"]],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "1 re-packed (1,056 bytes)" in done.stdout


def test_show_info_lists_each_weight_then_the_total(cli: Callable[..., Ran], programs: dict[str, Path]) -> None:
    """Issue 63: the EG535 total follows every weight of both programs, not among them."""
    done = cli("diff", programs["shipped"], programs["retrained"], "--show-info")
    listed = [line for line in done.stdout.splitlines() if " [info] " in line]
    assert len(listed) > 2 and " EG535 [info] " in listed[-1] and not any(" EG535 " in line for line in listed[:-1]), (
        done.stdout
    )
