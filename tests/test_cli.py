"""The export-guards command end to end, as a user runs it: in this process (the ``cli`` fixture),
and in a subprocess where the process matters (fd 1, library noise at start-up)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import Ran

TESTS = Path(__file__).parent
MODELS = TESTS / "cli_models.py"


def run(*args: str, cwd: Path = TESTS) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "export_guards", *args], capture_output=True, text=True, cwd=cwd, timeout=600
    )


def test_clean_model_exits_0_and_writes_the_pte(cli: Callable[..., Ran], tmp_path: Path) -> None:
    out = tmp_path / "model.pte"
    done = cli("lint", f"{MODELS}:clean", "--pte", str(out), "-v")
    assert done.returncode == 0, done.stderr[-2000:]
    assert out.stat().st_size > 0 and out.read_bytes()[4:8] == b"ET12"
    assert "EG402 [info] 1 of 1 compute ops delegated (100%) to XnnpackBackend" in done.stdout
    assert (
        "EG310 [info] method 'forward' takes input: float32[1, 3, 8, 8] (contiguous); every dimension of input is fixed"
        in done.stdout
    )
    assert "Found 2 findings (2 infos)." in done.stdout
    assert "export-guards: exporting and linting" in done.stderr  # progress on stderr only
    assert "exporting" not in done.stdout


def test_findings_at_the_fail_level_exit_1_and_keep_the_pte_back(cli: Callable[..., Ran], tmp_path: Path) -> None:
    out = tmp_path / "model.pte"
    done = cli("lint", f"{MODELS}:training_mode", "--output", str(out))
    assert done.returncode == 1
    assert "EG301 [error] dropout 'dropout' runs in training mode" in done.stdout
    assert "module: 1 (Dropout)" in done.stdout
    assert (
        "\ntests/cli_models.py:" in "\n" + done.stdout and str(TESTS) not in done.stdout
    )  # relative to the project root
    assert "fix: Call model.eval() before torch.export." in done.stdout
    assert not out.exists()
    assert "not writing" in done.stderr
    ignored = cli("lint", f"{MODELS}:training_mode", "--ignore", "EG3", "--format", "json")
    assert ignored.returncode == 0
    assert all(not f["code"].startswith("EG3") for f in json.loads(ignored.stdout)["findings"])


def test_device_constants_are_reported_not_crashed_on(cli: Callable[..., Ran], trapdev: object) -> None:
    done = cli("lint", f"{MODELS}:on_trapdev")
    assert done.returncode == 1, done.stderr[-2000:]
    assert "EG101 [error] parameter 'weight' (float32[3, 4], 48 bytes) is on trapdev:0" in done.stdout
    copied = cli("lint", f"{MODELS}:on_trapdev", "--placement", "copy", "--format", "json")
    assert copied.returncode == 0
    codes = [f["code"] for f in json.loads(copied.stdout)["findings"]]
    assert codes.count("EG103") == 2 and "EG101" not in codes


def test_json_format_is_stable_and_complete(cli: Callable[..., Ran]) -> None:
    done = cli("lint", f"{MODELS}:reparametrized", "--no-fold", "--format", "json")
    assert done.returncode == 0  # warnings only; the fail level is error
    document = json.loads(done.stdout)
    assert document["version"] == 1
    assert set(document["summary"]) == {"error", "warning", "info", "suppressed"}
    by_code = {f["code"]: f for f in document["findings"]}
    # One finding per weight: its cause (EG212), not also its conv left out of XNNPACK (EG401).
    assert {"EG212", "EG402"} <= set(by_code) and "EG210" not in by_code and "EG401" not in by_code
    foldable = by_code["EG212"]
    assert foldable["severity"] == "warning" and foldable["message"].startswith("'0.weight' is still reparametrized")
    assert (
        "--no-fold" in foldable["fix"] and "--no-fold" not in foldable["message"]
    )  # the fix, once, not in the message
    assert (
        foldable["location"]["file"] == "tests/cli_models.py" and foldable["location"]["line"] > 0
    )  # the factory, from the project root
    assert set(foldable) == {
        "code",
        "severity",
        "message",
        "method",
        "node",
        "constant",
        "location",
        "fix",
        "module",
        "artifact",
        "region",
    }

    folded = json.loads(cli("lint", f"{MODELS}:reparametrized", "--format", "json").stdout)
    folded_codes = {f["code"]: f for f in folded["findings"]}
    assert "EG210" not in folded_codes and "EG212" not in folded_codes and "EG401" not in folded_codes
    assert [f["code"] for f in folded["findings"]].count("EG201") == 1  # the fold fixed it: one finding


def test_sarif_format_follows_2_1_0(cli: Callable[..., Ran]) -> None:
    done = cli("lint", f"{MODELS}:training_mode", "--format", "sarif")
    assert done.returncode == 1
    sarif = json.loads(done.stdout)
    assert sarif["version"] == "2.1.0" and "sarif" in sarif["$schema"]
    (run_,) = sarif["runs"]
    rules = run_["tool"]["driver"]["rules"]
    assert run_["tool"]["driver"]["name"] == "export-guards"
    assert all({"id", "name", "helpUri", "shortDescription"} <= set(r) for r in rules)
    ids = [r["id"] for r in rules]
    result = next(r for r in run_["results"] if r["ruleId"] == "EG301")
    assert result["level"] == "error" and ids[result["ruleIndex"]] == "EG301"
    assert "training mode" in result["message"]["text"]
    location = result["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"].endswith(".py") and location["region"]["startLine"] > 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["lint", "no-colon-here"], "must be path/to/file.py:factory"),
        (["lint", "missing.py:factory"], "no such file"),
        (["lint", f"{MODELS}:nope"], "defines no 'nope'. Its functions: clean, gated, training_mode, "),
        (["lint", f"{MODELS}:not_a_pair"], "must return (model, example_inputs)"),
        (["lint", "no_such_package.module:f"], "cannot import 'no_such_package.module'"),
        (["explain", "EG999"], "no code 'EG999'"),
        (
            ["check", "x.pte", "--runtim"],
            "unrecognized arguments: --runtim (did you mean --runtime?)",
        ),  # no abbreviations
        (["lint", f"{MODELS}:nope", "--selec", "EG"], "unrecognized arguments: --selec EG (did you mean --select EG?)"),
        (
            ["check", "x.pte", "--fail-levle=warning"],
            "unrecognized arguments: --fail-levle=warning (did you mean --fail-level=warning?)",
        ),
        (["check", "x.pte", "--zzzz"], "unrecognized arguments: --zzzz\n"),  # nothing close: no guess
        (
            ["lint", f"{MODELS}:clean", f"{MODELS}:gated", "--pte", "x.pte"],
            "--pte writes one program: give one target with it",
        ),
    ],
)
def test_usage_errors_exit_2_with_one_clear_line(cli: Callable[..., Ran], args: list[str], message: str) -> None:
    done = cli(*args)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""
    if "unrecognized" in message:  # a typo is answered in a usage line and the error, not every option
        assert len(done.stderr.strip().splitlines()) <= 3, done.stderr
    if "unrecognized" in message:  # the usage of the command given, not the top level's
        assert (
            done.stderr.startswith(f"usage: export-guards {args[0]} ")
            and f"export-guards {args[0]}: error:" in done.stderr
        )


@pytest.mark.slow
def test_several_targets_one_after_another_each_its_report_and_one_exit_code(
    cli: Callable[..., Ran], tmp_path: Path
) -> None:
    kept = tmp_path / "not" / "yet" / "model.pte"  # missing folders are made, as for --report-file
    assert cli("lint", f"{MODELS}:clean", "--pte", kept, "-q").returncode == 0 and kept.read_bytes()[4:8] == b"ET12"
    done = cli("lint", f"{MODELS}:clean", f"{MODELS}:raises", f"{MODELS}:training_mode", "-q")
    assert done.returncode == 2  # a step failed: the other targets were linted all the same
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"{MODELS}:clean: All checks passed: ") and "program " in lines[0]
    raised = lines.index(next(line for line in lines if line.startswith(f"{MODELS}:raises: Found 1 finding (1 error)")))
    assert any("EG002 [error] building the model failed" in line for line in lines[:raised])
    assert any("EG301 [error]" in line for line in lines[raised:])
    assert lines[-1] == "Checked 3 targets: 1 passed, 2 with problems (2 errors)."
    assert "building the model failed: raises() raised" in done.stderr  # said once, on stderr, as for one target
    machine = cli("lint", f"{MODELS}:clean", f"{MODELS}:training_mode", "-q", "--output-format", "json")
    assert machine.returncode == 1 and [
        f["code"] for f in json.loads(machine.stdout)["findings"] if f["severity"] != "info"
    ] == ["EG301"]


def test_a_model_that_fails_to_export_exits_2_summarised_then_verbose(cli: Callable[..., Ran]) -> None:
    done = cli("lint", f"{MODELS}:broken")
    assert done.returncode == 2
    assert "export-guards: torch.export failed:" in done.stderr and "run with -v" in done.stderr
    assert "cli_models.py:" in done.stderr and "if x.sum() > 0:" in done.stderr  # the user's line
    assert "Traceback" not in done.stderr
    assert (
        "def forward" not in done.stderr and "\r" not in done.stderr
    )  # torch's partial graph: -v only; no live line off a terminal
    verbose = cli("lint", f"{MODELS}:broken", "--verbose")
    assert verbose.returncode == 2 and "Traceback (most recent call last)" in verbose.stderr
    assert "def forward" in verbose.stderr


@pytest.mark.parametrize(
    ("factory", "step", "cause", "line"),
    [
        ("broken", "torch.export", "if x.sum() > 0:", "if x.sum() > 0:"),
        (
            "lowering_fails",
            "lowering (xnnpack)",
            "SpecViolationError: Operator torch._ops.aten.rand_like.default",
            "return x + torch.rand_like(x)",
        ),
    ],
)
def test_a_failed_step_is_a_report_too(
    cli: Callable[..., Ran], tmp_path: Path, factory: str, step: str, cause: str, line: str
) -> None:
    done = cli("lint", f"{MODELS}:{factory}", "--format", "json")
    assert done.returncode == 2 and f"export-guards: {step} failed:" in done.stderr
    (finding,) = json.loads(done.stdout)["findings"]
    assert finding["code"] == "EG002" and finding["message"].startswith(f"{step} failed: ")
    assert cause in finding["message"] or cause in done.stderr
    source = MODELS.read_text().splitlines()
    assert (
        finding["location"]["file"] == "tests/cli_models.py" and line in source[finding["location"]["line"] - 1]
    )  # the user's line, from the root
    sarif = cli("lint", f"{MODELS}:{factory}", "--format", "sarif", "--report-file", tmp_path / "r.sarif")
    assert sarif.returncode == 2 and sarif.stdout == ""
    assert [r["ruleId"] for r in json.loads((tmp_path / "r.sarif").read_text())["runs"][0]["results"]] == ["EG002"]
    assert cli("lint", f"{MODELS}:{factory}").stdout == ""  # text: stderr says it, once


def test_rules_and_explain(cli: Callable[..., Ran]) -> None:
    listed = cli("rules")
    assert listed.returncode == 0
    lines = listed.stdout.splitlines()
    assert [line.split()[0] for line in lines] == sorted(line.split()[0] for line in lines)
    assert any(line.startswith("EG210  foldable-weight") for line in lines)
    explained = cli("explain", "eg212")
    assert explained.returncode == 0
    assert explained.stdout.startswith("EG212 reparametrization-leftover (warning")
    assert "## EG212 reparametrization-leftover" in explained.stdout  # the docs page section


def test_pyproject_configuration_and_command_line_precedence(cli: Callable[..., Ran], tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.export-guards]\nignore = ["EG301"]\nfail-level = "warning"\n[tool.export-guards.severity]\nEG402 = "warning"\n'
    )
    done = cli("lint", f"{MODELS}:training_mode", "--format", "json", cwd=tmp_path)
    document = json.loads(done.stdout)
    assert "EG301" not in {f["code"] for f in document["findings"]}
    assert done.returncode == 1  # EG402 raised to warning, and warnings fail
    assert cli("lint", f"{MODELS}:training_mode", "--fail-level", "error", cwd=tmp_path).returncode == 0
    (tmp_path / "pyproject.toml").write_text('[tool.export-guards]\nselct = ["EG"]\n')
    typo = cli("lint", f"{MODELS}:clean", cwd=tmp_path)
    assert typo.returncode == 2 and "unknown setting(s) selct" in typo.stderr


def test_configuration_is_found_upward_named_or_left_out(cli: Callable[..., Ran], tmp_path: Path) -> None:
    pte = TESTS / "pte_regressions" / "runtime-sigsegv-mutable-358-program_field.pte"  # EG505 (error), EG520 (warning)
    deeper = tmp_path / "models" / "deeper"
    deeper.mkdir(parents=True)

    def codes(*args: object) -> set[str]:
        done = cli("check", pte, "--format", "json", *args, cwd=deeper)
        assert done.returncode in (0, 1), done.stderr
        return {f["code"] for f in json.loads(done.stdout)["findings"]}

    (tmp_path / "pyproject.toml").write_text('[tool.export-guards]\nselect = ["EG50"]\n')
    (tmp_path / "models" / "pyproject.toml").write_text('[project]\nname = "models"\n')  # no table: searched past
    assert codes() == {"EG505"}  # the project's table, two folders up
    assert codes("--isolated") == {"EG505", "EG520"}
    assert codes("--extend-select", "EG520") == {"EG505", "EG520"}
    (tmp_path / "other.toml").write_text('[tool.export-guards]\nextend-ignore = ["EG505"]\n')
    assert codes("--config", tmp_path / "other.toml") == {"EG520"}
    (tmp_path / "pyproject.toml").write_text('[tool.export-guards]\nfail-levle = "warning"\n')
    typo = cli("check", pte, cwd=deeper)
    assert typo.returncode == 2 and "unknown setting(s) fail-levle (did you mean fail-level?)" in typo.stderr
    assert cli("check", pte, "--isolated", "--config", tmp_path / "other.toml").returncode == 2


def test_a_baseline_gates_only_on_new_findings_from_any_working_folder(cli: Callable[..., Ran], tmp_path: Path) -> None:
    known = TESTS / "pte_regressions" / "runtime-sigsegv-mutable-358-program_field.pte"  # EG505 (error), EG520
    other = TESTS / "pte_regressions" / "runtime-sigsegv-delegate-call-too-few-arguments.pte"  # EG514, EG517
    baseline = tmp_path / "baseline.json"
    written = cli("check", known, "--isolated", "--write-baseline", baseline, cwd=TESTS)
    assert written.returncode == 0 and "wrote 2 finding(s) to the baseline" in written.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    again = cli("check", known, "--isolated", "--baseline", baseline, "--format", "json", cwd=elsewhere)
    assert (
        again.returncode == 0 and json.loads(again.stdout)["findings"] == []
    )  # the same findings, from another folder
    assert "2 finding(s) in the baseline" in again.stderr
    new = cli("check", other, "--isolated", "--baseline", baseline, "--format", "json", cwd=elsewhere)
    assert new.returncode == 1 and {f["code"] for f in json.loads(new.stdout)["findings"]} == {"EG514", "EG517"}
    wrong = cli("check", known, "--isolated", "--baseline", TESTS / "cli_models.py")
    assert wrong.returncode == 2 and "is not an export-guards baseline" in wrong.stderr


NOISY_MODEL = """
import torch
from torch import nn

class Noisy(nn.Module):
    def forward(self, x):
        x = nn.functional.dropout(x, 0.5, training=True)  # noqa: EG301
        x = nn.functional.dropout(x, 0.1, training=True)  # noqa: E501 (another tool's code)
        x = x.double().sum()  # noqa
        return x + 1  # noqa: EG303, EG501

def noisy():
    return Noisy(), (torch.randn(2, 4),)
"""


@pytest.mark.slow
@pytest.mark.runs_program
def test_a_clean_lint_means_the_program_loads_the_lint_checks_what_it_writes(
    cli: Callable[..., Ran], tmp_path: Path
) -> None:
    """Issue 36: no delegate takes sort, and executorch.runtime has no kernel for it. The lint
    checks the program it writes against that runtime, as `check --runtime` does: an error on
    the user's line, and no program kept; delegation is stated although nothing was delegated.
    Against a build whose kernel list has sort (--kernels), the same program is clean and kept."""
    out = tmp_path / "sorted.pte"
    done = cli("lint", f"{MODELS}:sorted_cumsum", "--pte", out, "--format", "json", "--isolated")
    assert done.returncode == 1 and not out.exists(), done.stderr[-2000:]
    findings = json.loads(done.stdout)["findings"]
    (missing,) = [f for f in findings if f["code"] == "EG521"]
    assert missing["severity"] == "error" and "aten::sort.values, for which executorch.runtime" in missing["message"]
    assert missing["location"]["source"] == "return torch.sort(x)[0].cumsum(-1)" and missing["location"][
        "file"
    ].endswith("cli_models.py")
    (coverage,) = [f["message"] for f in findings if f["code"] == "EG402"]
    assert (
        coverage
        == "no conv / linear / matmul to delegate (no delegate); 2 other ops on the runtime's kernels: aten::cumsum x1, aten::sort x1 (EG403)"
    )
    assert sorted(f["message"].split("'")[1] for f in findings if f["code"] == "EG403") == [
        "aten_cumsum_default",
        "aten_sort_default",
    ]
    assert all("XNNPACK has no support for this op" in f["message"] for f in findings if f["code"] == "EG403")
    kernels = tmp_path / "selected_operators.yaml"
    kernels.write_text("aten::sort.values: {}\naten::cumsum.out: {}\n")
    kept = cli("lint", f"{MODELS}:sorted_cumsum", "--pte", out, "--kernels", kernels, "--isolated")
    assert kept.returncode == 0 and out.read_bytes()[4:8] == b"ET12", kept.stdout + kept.stderr[-2000:]
    assert "EG521" not in kept.stdout
    checked = cli("check", out, "--runtime", "--format", "json", "--isolated")  # and check agrees with the lint
    assert checked.returncode == 1 and {"EG521", "EG511"} <= {f["code"] for f in json.loads(checked.stdout)["findings"]}
    missing_list = cli("lint", f"{MODELS}:sorted_cumsum", "--kernels", tmp_path / "nowhere.txt")
    assert missing_list.returncode == 2 and "--kernels" in missing_list.stderr


@pytest.mark.slow
@pytest.mark.runs_program
def test_a_clean_lint_means_the_program_runs_and_matches_eager(cli: Callable[..., Ran], tmp_path: Path) -> None:
    """Issue 47: the lint runs what it writes on the example inputs, in executorch.runtime, in a
    child process. A negative pad (XNNPACK declines it, the portable kernel refuses it at run
    time) is named before the run by the kernel's contract (EG519); without it, the run's failure
    is an error naming the kernel, the runtime's reason and the user's line; no program is kept.
    A program that computes another function than eager is an error with the largest difference
    and where. --no-run skips the run (the pad's program then passes, as it did)."""
    out = tmp_path / "pad.pte"
    # Before any run, the portable kernel's contract (EG519) names the refusal on the user's line,
    # with the fix of its cause; the run's failure at the same instruction is the same problem.
    found = cli("lint", f"{MODELS}:negative_pad", "--format", "json", "--isolated")
    (refused,) = [f for f in json.loads(found.stdout)["findings"] if f["severity"] == "error"]
    assert (
        found.returncode == 1
        and refused["code"] == "EG519"
        and "pad [1, -1, 0, 0] is negative (pad[1] = -1)" in refused["message"]
    )
    assert refused["location"]["source"] == "return self.pad(x) * 2" and "Crop with slicing" in refused["fix"]
    # The run proves it: without the contract, the runtime refuses the call when the program runs.
    done = cli("lint", f"{MODELS}:negative_pad", "--pte", out, "--format", "json", "--isolated", "--ignore", "EG519")
    assert done.returncode == 1 and not out.exists(), done.stderr[-2000:]
    (failed,) = [f for f in json.loads(done.stdout)["findings"] if f["code"] == "EG511"]
    assert (
        "aten::constant_pad_nd.out" in failed["message"]
        and "Padding values must be non-negative, but got pad[1] = -1" in failed["message"]
    )
    assert failed["location"]["source"] == "return self.pad(x) * 2" and failed["module"] == "pad (ConstantPad2d)"
    skipped = cli("lint", f"{MODELS}:negative_pad", "--pte", out, "--no-run", "--isolated", "--ignore", "EG519")
    assert skipped.returncode == 0 and out.is_file() and "EG511" not in skipped.stdout
    differs = cli("lint", f"{MODELS}:export_only", "--format", "json", "--isolated")
    (mismatch,) = [f for f in json.loads(differs.stdout)["findings"] if f["code"] == "EG522"]
    assert (
        differs.returncode == 1
        and "output [0] (float32[2, 3]) differs from eager by up to 1 at [" in mismatch["message"]
    )
    clean = cli("lint", f"{MODELS}:clean", "--isolated")
    assert clean.returncode == 0 and "ran in executorch.runtime and matched eager" in clean.stdout, clean.stdout


def test_noqa_suppresses_the_codes_it_names_on_its_line_and_counts_them(
    cli: Callable[..., Ran], tmp_path: Path
) -> None:
    model = tmp_path / "noisy.py"
    model.write_text(NOISY_MODEL)
    done = cli("lint", f"{model}:noisy", "--format", "json", "--isolated", "--extend-select", "EG003")
    document = json.loads(done.stdout)
    reported = {(f["code"], f["location"]["line"]) for f in document["findings"] if f["location"]}
    assert ("EG301", 8) in reported  # the comment names another code
    # EG301 on line 7 (its dropout's ops, left outside XNNPACK, are still EG403: a code the comment does not name); every code on line 9
    assert not {code for code, line in reported if line in (7, 9)} - {"EG403"} and ("EG403", 7) in reported
    assert document["summary"]["suppressed"] >= 2 and done.returncode == 1
    # Selected, EG003 reports the one comment that suppressed nothing: EG303 on line 10 (the lint
    # does not check EG501, and E501 on line 8 is another tool's code).
    (unused,) = [f for f in document["findings"] if f["code"] == "EG003"]
    assert (
        unused["location"]["line"] == 10
        and unused["message"] == "# noqa: EG303 suppressed nothing: no EG303 finding points at this line"
    )
    counted = json.loads(cli("lint", f"{model}:noisy", "--statistics", "--format", "json", "--isolated").stdout)
    assert counted["suppressed"]["EG301"] == 1 and "EG304" in counted["suppressed"]
    assert "EG003" not in {row["code"] for row in counted["statistics"]}  # off by default


@pytest.mark.subprocess  # fd 1 and library warnings at start-up: a fresh process
def test_stdout_carries_only_the_report_even_when_the_model_prints() -> None:
    done = run("lint", f"{MODELS}:noisy", "--format", "json")
    assert done.returncode == 0
    assert json.loads(done.stdout)["version"] == 1
    assert "the factory talks on stdout" in done.stderr


def test_a_typo_in_a_code_fails_loudly_instead_of_checking_nothing(cli: Callable[..., Ran], tmp_path: Path) -> None:
    empty = tmp_path / "empty.pte"
    empty.write_bytes(b"")
    for select, hint in (("XYZ999", "no code nor prefix"), ("EG5O1", "did you mean EG501?")):
        done = cli("check", str(empty), "--select", select)
        assert done.returncode == 2 and hint in done.stderr and done.stdout == ""
    (tmp_path / "pyproject.toml").write_text('[tool.export-guards]\nselect = ["XYZ999"]\n')
    configured = cli("check", str(empty), cwd=tmp_path)
    assert configured.returncode == 2 and "'XYZ999'" in configured.stderr
    nothing = cli("check", str(empty), "--select", "EG3")
    assert nothing.returncode == 2 and "reports nothing that `check` checks" in nothing.stderr
    real = cli("check", str(empty), "--select", "EG501")  # a real selection: the file is judged, and cannot be read
    assert real.returncode == 2 and "it is empty (0 bytes); expected an ExecuTorch program (.pte)" in real.stderr


def test_the_program_file_is_written_atomically_or_not_left_stale(cli: Callable[..., Ran], tmp_path: Path) -> None:
    out = tmp_path / "model.pte"
    out.write_bytes(
        b"\0\0\0\0ET12 the previous export"
    )  # a program: the stale-output rule removes only the tool's kind
    done = cli("lint", f"{MODELS}:training_mode", "--pte", str(out), "-q")
    assert done.returncode == 1 and not out.exists()
    assert f"removed {out}" in done.stderr and "export-guards: exporting" not in done.stderr  # -q: no progress
    written = cli(
        "lint",
        f"{MODELS}:clean",
        "--pte",
        str(out),
        "--report-file",
        str(tmp_path / "r.json"),
        "--output-format",
        "json",
    )
    assert written.returncode == 0 and out.read_bytes()[4:8] == b"ET12" and written.stdout == ""
    assert json.loads((tmp_path / "r.json").read_text())["version"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pte", "r.json"]  # no temporary file left
    assert out.stat().st_mode & 0o777 == 0o666 & ~_umask()
    deprecated = cli("lint", f"{MODELS}:clean", "--output", str(tmp_path / "missing" / "x.pte"))
    assert deprecated.returncode == 0 and "--output is deprecated: use --pte" in deprecated.stderr
    assert (tmp_path / "missing" / "x.pte").read_bytes()[4:8] == b"ET12"  # the folder is made, as ruff does


def _umask() -> int:
    import os

    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_conventional_options(cli: Callable[..., Ran], tmp_path: Path) -> None:
    version = cli("--version")
    assert version.returncode == 0 and version.stdout.startswith("export-guards ")
    listed = json.loads(cli("rules", "--output-format", "json").stdout)
    assert {"code", "name", "severity", "stage", "summary", "fix", "url"} <= set(listed[0])
    assert "EG201" in {r["code"] for r in listed}
    done = cli("lint", f"{MODELS}:training_mode", "--exit-zero", "--statistics")
    assert done.returncode == 0
    rows = done.stdout.splitlines()
    assert any(r.split()[:2] == ["1", "EG301"] and r.endswith("[error]") for r in rows), done.stdout
    github = cli("lint", f"{MODELS}:training_mode", "--output-format", "github")
    assert github.returncode == 1
    (dropout,) = [line for line in github.stdout.splitlines() if "EG301" in line]
    assert dropout.startswith("::error file=tests/cli_models.py,") and ",title=EG301 train-mode-dropout::" in dropout
    assert ",line=" in dropout and "%0AFix: Call model.eval()" in dropout
    sized = cli("lint", f"{MODELS}:sized", "--arg", "size=12", "--arg", "channels=2", "--output-format", "json")
    assert sized.returncode == 0, sized.stderr[-2000:]
    bad = cli("lint", f"{MODELS}:sized", "--arg", "size")
    assert bad.returncode == 2 and "--arg takes NAME=VALUE" in bad.stderr


@pytest.mark.subprocess  # fd 1 and library warnings at start-up: a fresh process
def test_quiet_by_default_and_stdout_is_only_the_report() -> None:
    done = run("lint", f"{MODELS}:native_noise", "--output-format", "json")
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["version"] == 1  # fd 1 writes went to stderr
    assert "written to fd 1 by native code" in done.stderr
    for noise in ("Failed to load", "FutureWarning", "_pytree", "LeafSpec"):
        assert noise not in done.stderr, done.stderr
    text = run("lint", f"{MODELS}:reparametrized")
    assert "[info]" not in text.stdout  # info is opt-in (issue 38): one summary line says what was done
    (summary,) = text.stdout.splitlines()
    assert summary.startswith("All checks passed: 1 constant folded; ")  # the fold of the weight norm
    assert (
        " compute ops delegated (100%) to XnnpackBackend; program " in summary
        and " bytes; ran in executorch.runtime and matched eager (" in summary
    )
    assert summary.endswith("infos not shown: --show-info).")
    shown = run("lint", f"{MODELS}:reparametrized", "--show-info")
    infos = [line for line in shown.stdout.splitlines() if "[info]" in line]
    hidden = int(summary.rpartition("(")[2].split()[0])
    assert len(infos) == hidden and shown.stdout.splitlines()[-1].startswith(
        f"Found {hidden} findings ({hidden} infos)"
    )


@pytest.mark.parametrize(
    ("factory", "message"),
    [
        ("raises", "building the model failed: raises() raised KeyError: 'linear'\n  at "),
        ("three", "its dynamic_shapes is a str, not a dict, tuple or list"),
        ("exits", "building the model failed: the target called sys.exit(3)"),
    ],
)
def test_errors_name_the_step_in_the_users_terms(cli: Callable[..., Ran], factory: str, message: str) -> None:
    done = cli("lint", f"{MODELS}:{factory}")
    assert done.returncode == 2 and message in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and done.stdout == ""
    if factory == "raises":
        assert 'return weights["linear"], ()' in done.stderr  # the factory's own line


@pytest.mark.parametrize(
    ("factory", "line", "hint"),
    [
        ("grad_in_place", "self.scale.mul_(0.5)", "`with torch.no_grad():`, or call `model.requires_grad_(False)`"),
        ("data_dependent", "n = int(x.sum().item())", "Bound it with `torch._check(...)`"),
        ("mixed_devices", "return x + self.bias", "move the model and every example input to one device"),
    ],
)
def test_a_failed_step_says_where_in_the_users_files_with_a_hint(
    cli: Callable[..., Ran], trapdev: object, factory: str, line: str, hint: str
) -> None:
    """Issue 47: the layers live in another file than the factory (tests/cli_layers.py): the
    failure points at the innermost line there, not at torch's frames, says the cause once, and
    hints at the fix of the torch error users meet (grad mode, devices mixed, data-dependent shapes)."""
    done = cli("lint", f"{MODELS}:{factory}", "--format", "json", "--no-run")
    assert done.returncode == 2 and "export-guards: torch.export failed:" in done.stderr
    assert "cli_layers.py:" in done.stderr and line in done.stderr and "hint: " in done.stderr and hint in done.stderr
    assert "site-packages" not in done.stderr and "caused by" not in done.stderr, done.stderr
    (finding,) = json.loads(done.stdout)["findings"]
    assert finding["location"]["file"] == "tests/cli_layers.py" and finding["location"]["source"] == line
    assert hint in finding["fix"]


def test_a_buffer_written_in_grad_mode_is_named_not_a_parameter(cli: Callable[..., Ran]) -> None:
    """Issue 54: a KV cache written in place while the parameters require grad fails
    to_executorch; the hint names the buffer and no parameter."""
    done = cli("lint", f"{MODELS}:cache_in_grad_mode", "--no-run")
    assert done.returncode == 2 and "export-guards: writing the program (to_executorch) failed:" in done.stderr, (
        done.stderr[-2000:]
    )
    assert "the program writes the buffer 'cache' in place while the model's parameters require grad" in done.stderr
    assert "hint: grad mode:" in done.stderr and "`model.requires_grad_(False)`" in done.stderr
    assert (
        "cli_models.py:" in done.stderr
        and "self.cache[:, cache_position[0] + torch.arange(x.shape[1])] = self.proj(x)" in done.stderr
    )
    assert "changes a parameter" not in done.stderr and "changes the parameter" not in done.stderr
    import cli_models
    import export_guards as eg

    model, inputs = cli_models.cache_in_grad_mode()  # the API says the same
    with pytest.raises(eg.errors.GradModeWriteError, match="writes the buffer 'cache' in place") as raised:
        eg.export_with_guards(model, inputs).to_pte()
    assert "requires_grad_(False)" in raised.value.hint and "parameter 'proj" not in str(raised.value)


def test_a_failed_lowering_says_its_cause_once(cli: Callable[..., Ran]) -> None:
    done = cli("lint", f"{MODELS}:lowering_fails", "--no-run")
    assert (
        done.returncode == 2
        and "export-guards: lowering (xnnpack) failed: SpecViolationError: Operator torch._ops.aten.rand_like"
        in done.stderr
    )
    assert "LoweringFailed" not in done.stderr and done.stderr.count("rand_like.default is not in Core ATen") == 1, (
        done.stderr
    )


@pytest.mark.slow  # exports in children
def test_reproducible_check_of_a_failing_factory_says_why(cli: Callable[..., Ran]) -> None:
    done = cli("check", "--reproducible", f"{MODELS}:raises")
    assert done.returncode == 2
    assert "raises() raised KeyError: 'linear'" in done.stderr and 'return weights["linear"]' in done.stderr


@pytest.mark.runs_program
@pytest.mark.slow  # three exports, one program run
def test_a_factory_asks_for_the_export_its_own_code_makes_strict_or_not(
    cli: Callable[..., Ran], tmp_path: Path
) -> None:
    """``strict`` from the factory reaches torch.export: TorchDynamo traces the model only in a
    strict export, and the written program computes what that export traced."""
    import torch

    from export_guards.verify import run_pte

    for factory, expected in (("strict", 6.0), ("not_strict", 4.0)):  # 3 * 2 where traced by TorchDynamo, else 3 + 1
        pte = tmp_path / f"{factory}.pte"
        # --no-run: the strict program differs from eager on purpose (checked below)
        done = cli("lint", f"{MODELS}:{factory}", "--pte", pte, "--backend", "portable", "--no-run")
        assert done.returncode == 0, done.stderr
        (out,) = run_pte(pte.read_bytes(), (torch.full((3,), 3.0),))
        assert torch.equal(out, torch.full((3,), expected)), factory
    # the lint's own run sees the strict trace part from eager (6 against 4) and writes nothing
    ran = cli("lint", f"{MODELS}:strict", "--pte", tmp_path / "ran.pte", "--backend", "portable")
    assert ran.returncode == 1 and "EG522" in ran.stdout and not (tmp_path / "ran.pte").exists(), ran.stdout


@pytest.mark.runs_program
def test_the_lint_runs_a_dynamic_program_at_its_bounds(cli: Callable[..., Ran]) -> None:
    """A program right at its example length only gets the finding at each bound where it goes
    wrong, naming the shape (tests/test_llm.py: a clean one says where it ran)."""
    wrong = cli("lint", f"{MODELS}:dynamic_wrong_at_bounds", "--format", "json")
    found = {f["code"]: f for f in json.loads(wrong.stdout)["findings"] if f["code"] in ("EG511", "EG522")}
    assert wrong.returncode == 1 and found.keys() == {"EG511", "EG522"}, wrong.stdout
    assert found["EG522"]["message"].startswith("the written program at length=1 (the lower bound) ran, but output [0]")
    assert (
        "failed in the written program at length=64 (the upper bound): Check failed (pad[i] >= 0)"
        in found["EG511"]["message"]
    )
    assert found["EG511"]["location"]["source"] == "return nn.functional.pad(y, (0, 8 - x.shape[-1]))"


@pytest.mark.slow  # two exports in child processes, twice
def test_check_reproducible_exports_with_the_factorys_dynamic_shapes(cli: Callable[..., Ran]) -> None:
    done = cli("check", "--reproducible", f"{MODELS}:dynamic")
    assert done.returncode == 0, done.stdout + done.stderr
    # shapes that contradict the example inputs (a length of 6, at least 8): torch.export says so
    refused = cli("check", "--reproducible", f"{MODELS}:dynamic_out_of_range")
    assert (
        refused.returncode != 0
        and "torch.export failed: ConstraintViolationError: 6 not in range [8, 64]" in refused.stderr
    ), refused.stderr


def test_the_command_line_is_read_once_into_frozen_options() -> None:
    # argparse's answer stops where the parse ends (arguments.options_from): every command is
    # handed its frozen options, with the settings made once.
    import ast
    import dataclasses

    from export_guards.cli import options
    from export_guards.cli.arguments import options_from, parser

    cli = TESTS.parent / "export_guards" / "cli"
    for module in sorted(cli.glob("*.py")):
        names = {n.attr for n in ast.walk(ast.parse(module.read_text())) if isinstance(n, ast.Attribute)}
        assert module.name == "arguments.py" or "Namespace" not in names, f"{module.name} reads argparse's Namespace"
    parsed = options_from(
        parser().parse_args(["check", "--reproducible", f"{MODELS}:clean", "--fold-max-growth", "64", "--isolated"])
    )
    assert isinstance(parsed, options.CheckOptions) and parsed.settings.fold_max_growth == 64
    for kind in (options.LintOptions, options.CheckOptions, options.DiffOptions, options.ReportOptions):
        assert kind.__dataclass_params__.frozen, kind  # type: ignore[union-attr]
    with pytest.raises(dataclasses.FrozenInstanceError):
        parsed.jobs = 2  # type: ignore[misc]
