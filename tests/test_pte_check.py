"""``check_pte`` and ``export-guards check`` on real programs and on damaged copies of them."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from executorch.exir import to_edge_transform_and_lower
from executorch.exir.schema import Program, Tensor

from conftest import Ran
from export_guards.pte.check import check_pte
from export_guards.pte.reader.file import PteFile
from export_guards.pte.reader.xnnpack import read_payload
from export_guards.pte.reproducible import export_twice
from export_guards.report import Severity
from export_guards.settings import Settings
from pte_models import Written
from pte_mutations import rewrite

TESTS = Path(__file__).parent


@pytest.fixture(scope="session")
def programs(written_programs: dict[str, Written]) -> dict[str, Written]:
    return written_programs


def codes(data: bytes, **kwargs: object) -> set[str]:
    return {f.code for f in check_pte(data, **kwargs).errors}  # type: ignore[arg-type]


def messages(data: bytes, code: str) -> str:
    return "\n".join(f.message for f in check_pte(data).with_code(code))


@pytest.mark.parametrize(("name", "expected"), [("portable", {"EG520"}), ("xnnpack", set()), ("mutable", {"EG520"})])
def test_programs_as_exported_have_no_findings_but_portable_compute(
    programs: dict[str, Written], name: str, expected: set[str]
) -> None:
    assert {f.code for f in check_pte(programs[name].pte)} == expected  # EG520: a conv with no delegate


def test_external_data_resolves_only_with_its_data_file(programs: dict[str, Written]) -> None:
    written = programs["external"]
    assert {f.code for f in check_pte(written.pte, data_files=written.data_files)} == {"EG520"}  # portable, not damaged
    missing = check_pte(written.pte).with_code("EG508")
    assert {f.constant for f in missing} == {"conv.weight", "conv.bias", "linear.weight", "linear.bias", "offset"}
    assert "needs a .ptd file; none was given" in missing[0].message


# Each damage below is one that reaches a device and fails there: the check names it first.


def test_wrong_magic_and_other_schema_versions(programs: dict[str, Written]) -> None:
    data = programs["xnnpack"].pte.read_bytes()
    assert "is not an ExecuTorch program: bytes 4-8 are b'PK\\x03\\x04'" in messages(
        data[:4] + b"PK\x03\x04" + data[8:], "EG501"
    )
    assert "has schema version ET11; this ExecuTorch reads ET12" in messages(data[:4] + b"ET11" + data[8:], "EG501")


def test_truncated_file_names_what_is_lost(programs: dict[str, Written]) -> None:
    data = programs["xnnpack"].pte.read_bytes()
    report = check_pte(data[: len(data) - 100])
    assert f"but the file has {len(data) - 100} bytes: it is truncated" in messages(data[: len(data) - 100], "EG501")
    lost = [f.message for f in report.with_code("EG503")]
    assert lost and all("past the end of the file" in m for m in lost)
    assert any("named data '" in m for m in lost)


@pytest.mark.parametrize(("field", "value"), [("program_size", 2**63), ("segment_base_offset", 2**40)])
def test_header_offsets_out_of_bounds(programs: dict[str, Written], field: str, value: int) -> None:
    data = programs["portable"].pte.read_bytes()
    at = {"program_size": 16, "segment_base_offset": 24}[field]
    damaged = data[:at] + value.to_bytes(8, "little") + data[at + 8 :]
    assert "EG501" in codes(damaged)


def test_a_segment_base_moved_back_is_an_error_and_a_stated_program_size_past_it_a_warning(
    programs: dict[str, Written],
) -> None:
    """ExecuTorch writes the segments up to the file's last byte: a base offset moved back (into
    the program, or into the padding after it) makes the runtime read every segment from bytes
    that are not its own. A program size stated past a base that is right is ignored."""
    data = programs["portable"].pte.read_bytes()
    base = int.from_bytes(data[24:32], "little")
    for moved in (base - 128, base - 16, 3):
        report = check_pte(data[:24] + moved.to_bytes(8, "little") + data[32:])
        (finding,) = report.with_code("EG501")
        assert finding.severity is Severity.ERROR
        assert f"{base - moved} bytes short" in finding.message
    report = check_pte(data[:16] + (base + 8).to_bytes(8, "little") + data[24:])
    assert [f.severity for f in report.with_code("EG501")] == [Severity.WARNING]
    assert not report.errors


def test_segment_past_the_end(programs: dict[str, Written]) -> None:
    def grow(program: Program) -> None:
        program.segments[0].size = 2**40

    damaged = rewrite(programs["portable"].pte.read_bytes(), grow)
    assert "segment 0 (constant data) spans bytes" in messages(damaged, "EG503")


def test_misaligned_constant(programs: dict[str, Written]) -> None:
    def shift(program: Program) -> None:
        program.constant_segment.offsets[2] += 4

    damaged = rewrite(programs["portable"].pte.read_bytes(), shift)
    assert "buffer 2 of the constant segment is at offset" in messages(damaged, "EG504")


def test_tensor_larger_than_its_constant_buffer(programs: dict[str, Written]) -> None:
    def enlarge(program: Program) -> None:
        tensor = next(
            v.val for v in program.execution_plan[0].values if isinstance(v.val, Tensor) and v.val.data_buffer_idx > 0
        )
        tensor.sizes[0] *= 4

    damaged = rewrite(programs["portable"].pte.read_bytes(), enlarge)
    assert "the runtime would read past it" in messages(damaged, "EG505")


def test_tensor_planned_past_its_arena(programs: dict[str, Written]) -> None:
    def move(program: Program) -> None:
        tensor = next(
            v.val for v in program.execution_plan[0].values if isinstance(v.val, Tensor) and v.val.allocation_info
        )
        tensor.allocation_info.memory_offset_low = program.execution_plan[0].non_const_buffer_sizes[1]

    damaged = rewrite(programs["mutable"].pte.read_bytes(), move)
    assert "the runtime would write past it" in messages(damaged, "EG505")


def test_delegate_without_its_data(programs: dict[str, Written]) -> None:
    def point_away(program: Program) -> None:
        program.execution_plan[0].delegates[1].processed.index = 99

    damaged = rewrite(programs["xnnpack"].pte.read_bytes(), point_away)
    assert (
        "delegate 1 (XnnpackBackend) of method 'forward': its processed data (segment 99) does not exist"
        in messages(damaged, "EG506")
    )


def test_undecodable_xnnpack_payload(programs: dict[str, Written]) -> None:
    data = programs["xnnpack"].pte.read_bytes()
    pte = PteFile(data)
    start = pte.segments[pte.program.execution_plan[0].delegates[0].processed.index].start
    damaged = bytearray(data)
    damaged[start + 10 : start + 14] = (2**31).to_bytes(4, "little")  # the graph's offset
    assert "its XNNPACK payload cannot be decoded" in messages(bytes(damaged), "EG506")


@pytest.mark.parametrize("damage", ["empty key", "repeated key"])
def test_bad_named_data_keys(programs: dict[str, Written], damage: str) -> None:
    def edit(program: Program) -> None:
        program.named_data[1].key = "" if damage == "empty key" else program.named_data[0].key

    found = messages(rewrite(programs["xnnpack"].pte.read_bytes(), edit), "EG507")
    assert ("named data with an empty key" if damage == "empty key" else "appears 2 times") in found


@pytest.mark.parametrize("which", ["filter", "bias"])
def test_named_data_shorter_than_the_weight_xnnpack_reads(programs: dict[str, Written], which: str) -> None:
    """The weights-cache SIGSEGV: XNNPACK packs (and memcmps) as many bytes as the tensor needs.
    Said once, by EG508 (EG515 leaves a bias held as named data to it)."""
    data = programs["xnnpack"].pte.read_bytes()
    pte = PteFile(data)
    payload = read_payload(pte.delegates[0].data)
    weight = next(c for c in payload.constants if (c.value_id in payload.bias_elements()) == (which == "bias"))
    entry = next(e for e in pte.program.named_data if e.key == weight.named_key)

    def shrink(program: Program) -> None:
        program.segments[entry.segment_index].size = weight.nbytes // 2

    report = check_pte(rewrite(data, shrink))
    found = " ".join(f.message for f in report.with_code("EG508"))
    assert f"needs {weight.nbytes} bytes of named data '{weight.named_key}', which has {weight.nbytes // 2}" in found
    assert "XNNPACK would read past its end" in found
    assert not report.with_code("EG515")


def test_named_data_key_that_no_file_holds(programs: dict[str, Written]) -> None:
    def rename(program: Program) -> None:
        program.named_data[0].key = "renamed"

    damaged = rewrite(programs["xnnpack"].pte.read_bytes(), rename)
    assert "which needs a .ptd file; none was given" in messages(damaged, "EG508")


def test_damaged_data_file(programs: dict[str, Written], tmp_path: Path) -> None:
    written = programs["external"]
    ptd = tmp_path / "damaged.ptd"
    data = written.data_files[0].read_bytes()
    ptd.write_bytes(data[: len(data) // 2])
    report = check_pte(written.pte, data_files=[ptd])
    assert "its header is invalid or points outside the file" in " ".join(f.message for f in report.with_code("EG509"))
    assert report.with_code("EG508")  # and its keys are not there for the program


# The command line.


def test_check_command_exit_codes(cli: Callable[..., Ran], programs: dict[str, Written], tmp_path: Path) -> None:
    assert cli("check", str(programs["xnnpack"].pte)).returncode == 0
    empty = tmp_path / "empty.pte"
    empty.write_bytes(b"")
    done = cli("check", str(empty), "--format", "json")  # a file that is no program at all: one line, as a missing one
    assert done.returncode == 2 and done.stdout == "" and len(done.stderr.strip().splitlines()) == 1
    assert (
        f"{empty} cannot be read as a program: it is empty (0 bytes); expected an ExecuTorch program (.pte)"
        in done.stderr
    )
    missing = cli("check", str(tmp_path / "missing.pte"))
    assert missing.returncode == 2 and f"no such file: {tmp_path / 'missing.pte'}" in missing.stderr
    nothing = tmp_path / "nothing"
    nothing.mkdir()
    folder = cli("check", str(nothing))
    assert folder.returncode == 2 and "holds no .pte file" in folder.stderr
    assert cli("check").returncode == 2
    assert "--jobs takes a number" in cli("check", str(programs["xnnpack"].pte), "--jobs", "0").stderr


def test_check_many_programs_and_folders_each_its_report_one_exit_code(
    cli: Callable[..., Ran], programs: dict[str, Written], tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    (gate / "external").mkdir(parents=True)
    shutil.copy(programs["xnnpack"].pte, gate / "a.pte")
    (gate / "cut.pte").write_bytes(
        _flipped_weights(programs["xnnpack"].pte.read_bytes())
    )  # readable, wrong contents: findings
    shutil.copy(
        programs["external"].pte, gate / "external" / "model.pte"
    )  # the only program there: its .ptd is its own
    for ptd in programs["external"].data_files:
        shutil.copy(ptd, gate / "external" / ptd.name)
    done = cli("check", str(gate), str(programs["portable"].pte), "--isolated", "--ignore", "EG520")
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    summaries = [line for line in lines if ": All checks passed: " in line or ": Found " in line]
    assert [line.split(": ")[0] for line in summaries] == [
        str(gate / "a.pte"),
        str(gate / "cut.pte"),
        str(gate / "external" / "model.pte"),
        str(programs["portable"].pte),
    ]
    assert summaries[1].startswith(f"{gate / 'cut.pte'}: Found ") and "error" in summaries[1]
    assert all(
        ": All checks passed: program " in line for line in summaries[::2] + summaries[3:]
    )  # with its .ptd: no EG508
    assert lines[-1].startswith("Checked 4 programs: 3 passed, 1 with problems (")
    machine = cli("check", str(gate), "--isolated", "--ignore", "EG520", "--output-format", "json")
    assert machine.returncode == 1 and {f["artifact"] for f in json.loads(machine.stdout)["findings"]} == {
        "cut.pte"
    }  # relative to the project root
    data = cli(
        "check", str(gate / "a.pte"), str(gate / "cut.pte"), "--data", str(next(iter(programs["external"].data_files)))
    )
    assert data.returncode == 2 and "--data goes with one program file" in data.stderr
    (gate / "short.pte").write_bytes(programs["xnnpack"].pte.read_bytes()[:3000])  # cannot be read at all: exit 2 wins
    short = cli("check", str(gate), str(programs["portable"].pte), "--isolated", "--format", "json")
    assert short.returncode == 2 and short.stdout == "" and len(short.stderr.strip().splitlines()) == 1
    assert f"{gate / 'short.pte'} cannot be read as a program: it is truncated: 3000 bytes of the " in short.stderr


def _flipped_weights(data: bytes) -> bytes:
    """``data`` with its largest weight's first bytes flipped: a program that reads, and is wrong."""
    region = max(PteFile(data, "<bytes>").named_data.values(), key=lambda region: region.size)
    damaged = bytearray(data)
    for offset in range(region.start, region.start + 50):
        damaged[offset] ^= 0xFF
    return bytes(damaged)


def test_a_program_in_a_folder_of_several_gets_the_ptd_named_after_it(tmp_path: Path) -> None:
    from export_guards.cli.check import data_beside

    for name in ("m.pte", "n.pte", "m.ptd", "m.weights.ptd", "mm.ptd", "_default_external_constant.ptd"):
        (tmp_path / name).write_bytes(b"")
    assert data_beside(tmp_path / "m.pte", list(tmp_path.iterdir())) == (tmp_path / "m.ptd", tmp_path / "m.weights.ptd")
    assert data_beside(tmp_path / "n.pte", list(tmp_path.iterdir())) == ()
    (tmp_path / "n.pte").unlink()
    assert len(data_beside(tmp_path / "m.pte", list(tmp_path.iterdir()))) == 4  # the only program: every .ptd beside it


@pytest.mark.subprocess  # each runtime run is a child process; --jobs runs two at once
def test_jobs_run_the_runtime_checks_at_once_with_the_same_findings(
    cli: Callable[..., Ran], programs: dict[str, Written]
) -> None:
    targets = [str(programs["xnnpack"].pte), str(programs["portable"].pte), str(programs["external"].pte)]
    one = cli("check", *targets, "--runtime", "--isolated", "--output-format", "json")
    two = cli("check", *targets, "--runtime", "--isolated", "--output-format", "json", "--jobs", "2")
    assert one.returncode == two.returncode == 1  # the external program, run without its .ptd
    assert json.loads(one.stdout)["findings"] == json.loads(two.stdout)["findings"]
    assert {f["artifact"] for f in json.loads(two.stdout)["findings"] if f["code"] == "EG511"} == {
        "external/external.pte"
    }


def test_check_command_with_data_files_and_sarif(cli: Callable[..., Ran], programs: dict[str, Written]) -> None:
    written = programs["external"]
    assert cli("check", str(written.pte), *[a for p in written.data_files for a in ("--data", str(p))]).returncode == 0
    two = cli("check", str(written.pte), "--runtime", *[a for p in written.data_files * 2 for a in ("--data", str(p))])
    assert two.returncode == 2 and "--runtime loads one data file" in two.stderr
    done = cli("check", str(written.pte), "--format", "sarif")
    assert done.returncode == 1
    assert {r["ruleId"] for r in json.loads(done.stdout)["runs"][0]["results"]} == {"EG508", "EG520"}


@pytest.mark.subprocess
def test_runtime_smoke_check_passes_a_good_program(programs: dict[str, Written]) -> None:
    assert check_pte(programs["xnnpack"].pte, runtime=True).findings == ()


@pytest.mark.subprocess
def test_runtime_smoke_check_reports_a_failure_without_raising(programs: dict[str, Written]) -> None:
    report = check_pte(programs["external"].pte, runtime=True)  # its data file is not given
    [finding] = report.with_code("EG511")
    assert "the runtime failed on" in finding.message and "run forward" in finding.message


@pytest.mark.subprocess
def test_a_run_past_its_time_limit_is_a_warning_that_names_the_limit(
    cli: Callable[..., Ran], programs: dict[str, Written]
) -> None:
    # 0.05 s: the child cannot even import the runtime, as on a machine too busy for 120 s
    [finding] = check_pte(programs["xnnpack"].pte, runtime=True, runtime_timeout_s=0.05).with_code("EG511")
    assert finding.severity is Severity.WARNING
    assert "within the time limit of 0.05 s" in finding.message and "proves no fault of the program" in finding.message
    assert "--runtime-timeout" in (finding.fix or "")
    done = cli("check", str(programs["xnnpack"].pte), "--runtime", "--runtime-timeout", "0.05")
    assert done.returncode == 0 and "EG511" in done.stdout  # a warning: the gate passes
    assert cli("check", str(programs["xnnpack"].pte), "--runtime-timeout", "0").returncode == 2


class ChannelsLastNorm(torch.nn.Module):
    """GroupNorm on a channels-last tensor: ExecuTorch's portable kernel rejects that dim order."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.GroupNorm(2, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x.to(memory_format=torch.channels_last))


@pytest.mark.subprocess
def test_runtime_smoke_check_names_the_failing_kernel() -> None:
    program = torch.export.export(ChannelsLastNorm().eval(), (torch.randn(1, 4, 6, 6),))
    data = to_edge_transform_and_lower(program).to_executorch().buffer
    assert not check_pte(data).findings  # structurally sound: only running it shows the failure
    [finding] = check_pte(data, runtime=True).with_code("EG511")
    assert "run forward: RuntimeError" in finding.message
    assert "Check failed (tensor_is_default_dim_order(input))" in finding.message
    assert "kernel aten::native_group_norm.out" in finding.message
    assert finding.severity.value == "error"  # a layout the kernel refuses whatever the values: zeros fail alike


@pytest.mark.subprocess
def test_reproducible_export(cli: Callable[..., Ran], tmp_path: Path) -> None:
    done = cli("check", "--reproducible", "pte_models.py:example", "--format", "json")
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    assert json.loads(done.stdout)["findings"] == []


@pytest.mark.subprocess
def test_reproducible_export_hands_every_setting_to_its_children() -> None:
    # The default budget declines the fold of pte_models.Broadcast's repeated weight (EG203,
    # tests/test_fold.py); 64 times takes it. Each child exports with the settings given, whole.
    from export_guards.pipeline import export_target

    target = f"{TESTS / 'pte_models.py'}:broadcast"
    folded, declined = (
        export_target(target, config=settings).to_pte() for settings in (Settings(fold_max_growth=64), Settings())
    )
    assert len(folded) > len(declined) + 64 * 27 * 4 // 2  # the folded weight is 64 times the row's 27 floats
    pair = export_twice(target, Settings(fold_max_growth=64))
    assert pair.first == pair.second == folded


@pytest.mark.subprocess
def test_unreproducible_export_names_the_constants(cli: Callable[..., Ran]) -> None:
    done = cli("check", "--reproducible", "pte_models.py:unseeded", "--format", "json")
    assert done.returncode == 1, done.stderr[-2000:]
    findings = json.loads(done.stdout)["findings"]
    assert {f["code"] for f in findings} == {"EG510"}
    named = {f["constant"] for f in findings}
    assert {"conv.weight", "conv.bias", "linear.weight", "linear.bias"} <= named
    assert any("XNNPACK's weight cache re-packs it" in f["message"] for f in findings)


@pytest.fixture(scope="session")
def valid(valid_program_bytes: dict[str, bytes]) -> dict[str, bytes]:
    return valid_program_bytes


VALID_NAMES = (
    "two methods, xnnpack", "dynamic batch, xnnpack", "bool and int64 inputs", "int8, xnnpack", "initialised state",
    "transformer block, xnnpack", "transformer block, portable", "conv net, xnnpack", "conv net, portable", "conv, portable, channels last",
    "conv net, xnnpack, dynamic batch", "kv cache, xnnpack", "portable ops between delegates", "linear on a 3-d input, portable",
    "one cond", "two conds, guarded",
)  # fmt: skip


@pytest.mark.subprocess
@pytest.mark.parametrize("name", VALID_NAMES)
def test_more_valid_programs_pass_structure_and_runtime(valid: dict[str, bytes], name: str) -> None:
    codes = {f.code for f in check_pte(valid[name], runtime=True)}
    assert codes <= {"EG520"} and not ("xnnpack" in name and codes)  # a portable conv or linear is only a warning


def test_the_fast_program_parse_equals_executorchs(valid: dict[str, bytes], programs: dict[str, Written]) -> None:
    """``parse_program`` decodes with readers compiled once (``read_program``), and converts
    with plans made once where those fail; each must give exactly the dataclasses ExecuTorch's
    ``_flatbuffer_to_program`` gives, on every program the tests write."""
    from executorch.exir._serialize._flatbuffer_program import _flatbuffer_to_program

    from export_guards.pte.reader.program_table import parse_program, read_program

    every = {**valid, **{name: written.pte.read_bytes() for name, written in programs.items()}}
    for name, data in every.items():
        table = data[: PteFile(data).program_size]
        expected = _flatbuffer_to_program(table)
        assert read_program(table) == expected, name
        assert parse_program(table) == expected, name


def test_the_fast_program_parse_fails_where_executorchs_does(programs: dict[str, Written]) -> None:
    """On damaged flatbuffers the compiled readers succeed only where ExecuTorch's unpacking
    (with the check's string checks) does, and then with its result: a damaged buffer they
    refuse is read by ExecuTorch's unpacking, for its own error."""
    import random

    from executorch.exir._serialize._flatbuffer_program import _flatbuffer_to_program

    from export_guards.pte.reader.file import verified_reader
    from export_guards.pte.reader.program_table import read_program
    from pte_mutations import mutate

    outcomes = {True: 0, False: 0}
    for name, written in programs.items():
        base = written.pte.read_bytes()
        for number in range(60):
            data = mutate(
                base, ("flip_program", "program_field")[number % 2], random.Random(f"fast parse {name} {number}"), []
            )
            table = data[: PteFile(data).program_size] if 8 <= PteFile(data).program_size <= len(data) else data
            try:
                fast = read_program(table)
            except Exception:  # noqa: BLE001 - a damaged buffer fails the reader in many ways
                outcomes[False] += 1
                continue
            with verified_reader():
                assert fast == _flatbuffer_to_program(table), f"{name} #{number}"
            outcomes[True] += 1
    assert outcomes[True] and outcomes[False], outcomes  # both ways were tried


def test_every_valid_program_is_checked(valid: dict[str, bytes]) -> None:
    """The names above are needed before the programs are built; a program added to
    ``valid_programs`` or ``architectures`` must be added there too, or this fails."""
    assert sorted(valid) == sorted(VALID_NAMES)


def test_shared_tables_do_not_hang_the_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    """600 references to one table: ExecuTorch's reader expands each (quadratic time)."""
    monkeypatch.setattr("export_guards.pte.reader.file.PARSE_SECONDS", 2.0)
    [finding] = check_pte(TESTS / "pte_regressions" / "hang-shared-tables-600.pte").with_code("EG502")
    assert "expands without bound" in finding.message


def test_runtime_takes_one_data_file(programs: dict[str, Written]) -> None:
    written = programs["external"]
    with pytest.raises(ValueError, match="loads one data file"):
        check_pte(written.pte, data_files=[written.data_files[0]] * 2, runtime=True)


@pytest.mark.subprocess  # the runtime child loads the program with its data file
def test_the_runtime_run_loads_the_data_file_where_this_executorch_takes_one(programs: dict[str, Written]) -> None:
    """``data_path`` is new in executorch 1.5's ``Runtime.load_program`` (issue 37): detected by
    its signature (``export_guards.compat``), never by the version. Here it is there, and the
    external program runs with its ``.ptd``; a signature without it refuses the data file in
    one line that names the version."""
    import inspect

    from executorch.runtime import Runtime

    from export_guards.compat import load_program, takes_keyword

    written = programs["external"]
    assert takes_keyword(Runtime.load_program, "data_path") == (
        "data_path" in inspect.signature(Runtime.load_program).parameters
    )
    if takes_keyword(Runtime.load_program, "data_path"):
        assert not check_pte(written.pte, data_files=written.data_files, runtime=True).with_code("EG511")

    class Before15:  # the signature of Runtime.load_program before executorch 1.5
        def load_program(self, data: bytes, *, verification: object = None) -> bytes:
            return data

    assert load_program(Before15(), b"program") == b"program"
    with pytest.raises(RuntimeError, match=r"Runtime.load_program\(data_path=...\) is new in executorch 1.5"):
        load_program(Before15(), b"program", "weights.ptd")


def test_a_rule_that_raises_is_reported_as_eg001(programs: dict[str, Written], monkeypatch: pytest.MonkeyPatch) -> None:
    """What the fuzz test looks for: a rule that fails on its input is an EG001 finding naming
    the rule and the file, and every other rule still runs."""
    from export_guards.pte.rules import PTE_RULES
    from export_guards.ruleset import RuleSet

    def fail(context: object) -> list[object]:
        raise IndexError("list index out of range")

    broken = PTE_RULES.rules["EG506"].checked_by(fail)
    monkeypatch.setattr("export_guards.pte.check.PTE_RULES", PTE_RULES.without(RuleSet.of(broken)) + RuleSet.of(broken))
    data = programs["xnnpack"].pte.read_bytes()
    report = check_pte(data[:4] + b"PK\x03\x04" + data[8:])
    [failed] = report.with_code("EG001")
    assert failed.message == "rule EG506 (delegate-data-invalid) failed on <bytes>: IndexError: list index out of range"
    assert report.with_code("EG501")


def test_named_data_that_no_longer_matches_its_hash_key_is_an_error(
    programs: dict[str, Written], tmp_path: Path, cli: Callable[..., Ran]
) -> None:
    """Issue 47: XNNPACK names each weight by the SHA-256 of its bytes. 50 flipped bytes in one
    such segment load and run (the runtime does not check), but no longer match the key: an
    error naming the key, the segment and the delegate that reads it. The intact program is clean."""
    data = programs["xnnpack"].pte.read_bytes()
    assert "EG523" not in {f.code for f in check_pte(data).findings}
    pte = PteFile(data, "<bytes>")
    key, region = max(pte.named_data.items(), key=lambda item: item[1].size)
    damaged = bytearray(data)
    for offset in range(region.start, region.start + 50):
        damaged[offset] ^= 0xFF
    path = tmp_path / "damaged.pte"
    path.write_bytes(bytes(damaged))
    (finding,) = check_pte(path).with_code("EG523")
    assert (
        finding.severity is Severity.ERROR and finding.constant == key and finding.region == (region.start, region.size)
    )
    assert f"({region.what} of {path}" in finding.message and "(XnnpackBackend) of method 'forward'" in finding.message
    done = cli("check", path, "--format", "json", "--isolated")  # the command's hashing starts before its imports
    assert [f["constant"] for f in json.loads(done.stdout)["findings"] if f["code"] == "EG523"] == [key]


class Pad(torch.nn.Module):
    def __init__(self, pad: tuple[int, ...]) -> None:
        super().__init__()
        self.pad = pad

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.pad(x, self.pad) * 2


@pytest.mark.subprocess
def test_a_negative_pad_is_refused_before_any_run_and_the_runtime_agrees() -> None:
    """Issue 47: ExecuTorch's constant_pad_nd kernel takes no negative pad (torch's meta kernel
    crops with one). check without --runtime names it (EG519, with the fix of its cause); the
    runtime, in a child process, refuses the same call when it runs."""

    def written(pad: tuple[int, ...]) -> bytes:
        return (
            to_edge_transform_and_lower(torch.export.export(Pad(pad), (torch.randn(1, 2, 4, 4),)))
            .to_executorch()
            .buffer
        )

    data = written((1, -1, 0, 0))
    (refused,) = check_pte(data).with_code("EG519")
    assert (
        "aten::constant_pad_nd.out" in refused.message
        and "pad [1, -1, 0, 0] is negative (pad[1] = -1)" in refused.message
    )
    assert refused.fix is not None and refused.fix.startswith("Crop with slicing")
    (ran,) = check_pte(data, runtime=True, config=Settings(ignore=("EG519",))).with_code("EG511")
    assert "Padding values must be non-negative, but got pad[1] = -1" in ran.message
    assert not check_pte(written((1, 0, 0, 0)), runtime=True).findings  # a non-negative pad: no finding, and it runs


def test_the_context_asks_the_runtimes_child_in_the_order_it_answers() -> None:
    """The child answers its inventory, then the replayed verdicts, and an answer asked for
    reads past those before it: whichever rule asks first (EG519 runs before EG521), the
    context asks for both in that order, and what ``against`` gives is not asked for."""
    from export_guards.pte.context import Need, PteContext, needs_of
    from export_guards.pte.rules import PTE_RULES

    class Child:
        def __init__(self) -> None:
            self.asked: list[str] = []

        def answer(self, kind: str) -> object:
            self.asked.append(kind)
            return {
                "inventory": {"name": "child", "kernels": ["aten::add.out"], "backends": []},
                "replayed": [["refused", [1]]],
            }[kind]

    child = Child()
    context = PteContext(PteFile(b"not a program", "x"), answers=child, replay_calls=[("aten::add.out",)])
    assert context.replayed == {("aten::add.out",): ("refused", (1,))}
    assert child.asked == ["inventory", "replayed"]
    assert context.runtime is not None and context.runtime.name == "child" and child.asked == ["inventory", "replayed"]
    given = PteContext(
        PteFile(b"not a program", "x"),
        against=context.runtime,
        answers=(other := Child()),
        replay_calls=[("aten::add.out",)],
    )
    assert given.replayed is not None and given.runtime is context.runtime and other.asked == ["replayed"]
    assert PteContext(PteFile(b"not a program", "x"), answers=Child()).replayed is None
    assert needs_of(PTE_RULES, Settings()) == {Need.REPLAYED, Need.CONTENT_DIGESTS}
    assert needs_of(PTE_RULES, Settings(ignore=("EG519", "EG523"))) == frozenset()


@pytest.mark.parametrize(
    ("saved", "held"), [({"x": torch.ones(2)}, "holds a dict"), (torch.ones(2, 3), "holds a tensor of shape (2, 3)")]
)
def test_inputs_that_are_not_a_list_are_exit_2_naming_the_file_not_the_program(
    cli: Callable[..., Ran], programs: dict[str, Written], tmp_path: Path, saved: object, held: str
) -> None:
    """Issue 63: an inputs file of the wrong content is the user's file at fault: one line naming
    it, never EG511 blamed on the program."""
    path = tmp_path / "inputs.pt"
    torch.save(saved, path)
    done = cli("check", programs["xnnpack"].pte, "--runtime", "--inputs", path)
    assert done.returncode == 2 and done.stdout == "" and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert (
        f"--inputs {path} {held}, not a list or tuple of the inputs" in done.stderr and "--save-inputs" in done.stderr
    )
    torch.save([torch.ones(1)], path)  # a list: the runtime runs it, and says what it makes of it
    assert cli("check", programs["xnnpack"].pte, "--runtime", "--inputs", path).returncode in (0, 1)
