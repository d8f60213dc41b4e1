"""The export-guards command, end to end in a subprocess, as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
MODELS = TESTS / "cli_models.py"


def run(*args: str, cwd: Path = TESTS) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "export_guards", *args], capture_output=True, text=True, cwd=cwd, timeout=600
    )


def test_clean_model_exits_0_and_writes_the_pte(tmp_path: Path) -> None:
    out = tmp_path / "model.pte"
    done = run("lint", f"{MODELS}:clean", "--output", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    assert out.stat().st_size > 0 and out.read_bytes()[4:8] == b"ET12"
    assert "EG402 [info] 1 of 1 compute ops delegated (100%) to XnnpackBackend" in done.stdout
    assert "Found 1 finding (1 info)." in done.stdout
    assert "export-guards: exporting with torch.export..." in done.stderr  # progress on stderr only
    assert "exporting" not in done.stdout


def test_findings_at_the_fail_level_exit_1_and_keep_the_pte_back(tmp_path: Path) -> None:
    out = tmp_path / "model.pte"
    done = run("lint", f"{MODELS}:training_mode", "--output", str(out))
    assert done.returncode == 1
    assert "EG301 [error] dropout 'dropout' runs in training mode" in done.stdout
    assert "module: 1 (Dropout)" in done.stdout
    assert "fix: Call model.eval() before torch.export." in done.stdout
    assert not out.exists()
    assert "not writing" in done.stderr
    ignored = run("lint", f"{MODELS}:training_mode", "--ignore", "EG3", "--format", "json")
    assert ignored.returncode == 0
    assert all(not f["code"].startswith("EG3") for f in json.loads(ignored.stdout)["findings"])


def test_device_constants_are_reported_not_crashed_on(trapdev: object) -> None:
    done = run("lint", f"{MODELS}:on_trapdev")
    assert done.returncode == 1, done.stderr[-2000:]
    assert "EG101 [error] parameter 'weight' (float32[3, 4], 48 bytes) is on trapdev:0" in done.stdout
    copied = run("lint", f"{MODELS}:on_trapdev", "--placement", "copy", "--format", "json")
    assert copied.returncode == 0
    codes = [f["code"] for f in json.loads(copied.stdout)["findings"]]
    assert codes.count("EG103") == 2 and "EG101" not in codes


def test_json_format_is_stable_and_complete() -> None:
    done = run("lint", f"{MODELS}:reparametrized", "--no-fold", "--format", "json")
    assert done.returncode == 0  # warnings only; the fail level is error
    document = json.loads(done.stdout)
    assert document["version"] == 1
    assert set(document["summary"]) == {"error", "warning", "info"}
    by_code = {f["code"]: f for f in document["findings"]}
    assert {"EG210", "EG212", "EG401", "EG402"} <= set(by_code)
    foldable = by_code["EG210"]
    assert foldable["severity"] == "warning" and "The fold is off" in foldable["message"]
    assert foldable["location"]["file"].endswith("container.py") or foldable["location"]["line"] > 0
    assert set(foldable) == {"code", "severity", "message", "method", "node", "constant", "location", "fix", "module"}
    assert "Expected weight to be a static param" in by_code["EG401"]["message"]

    folded = json.loads(run("lint", f"{MODELS}:reparametrized", "--format", "json").stdout)
    folded_codes = {f["code"]: f for f in folded["findings"]}
    assert folded_codes["EG210"]["severity"] == "info" and "EG401" not in folded_codes
    assert "EG201" in folded_codes


def test_sarif_format_follows_2_1_0() -> None:
    done = run("lint", f"{MODELS}:training_mode", "--format", "sarif")
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
        (["lint", f"{MODELS}:nope"], "has no callable 'nope'"),
        (["lint", f"{MODELS}:not_a_pair"], "must return (model, example_inputs)"),
        (["lint", "no_such_package.module:f"], "cannot import 'no_such_package.module'"),
        (["explain", "EG999"], "no rule 'EG999'"),
    ],
)
def test_usage_errors_exit_2_with_one_clear_line(args: list[str], message: str) -> None:
    done = run(*args)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""


def test_a_model_that_fails_to_export_exits_2_summarised_then_verbose() -> None:
    done = run("lint", f"{MODELS}:broken")
    assert done.returncode == 2
    assert "the model failed to export:" in done.stderr and "--verbose" in done.stderr
    assert "Traceback" not in done.stderr
    verbose = run("lint", f"{MODELS}:broken", "--verbose")
    assert verbose.returncode == 2 and "Traceback (most recent call last)" in verbose.stderr


def test_rules_and_explain() -> None:
    listed = run("rules")
    assert listed.returncode == 0
    lines = listed.stdout.splitlines()
    assert [line.split()[0] for line in lines] == sorted(line.split()[0] for line in lines)
    assert any(line.startswith("EG210  foldable-weight") for line in lines)
    explained = run("explain", "eg212")
    assert explained.returncode == 0
    assert explained.stdout.startswith("EG212 reparametrization-leftover (warning")
    assert "## EG212 reparametrization-leftover" in explained.stdout  # the docs page section


def test_pyproject_configuration_and_command_line_precedence(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.export-guards]\nignore = ["EG301"]\nfail-level = "warning"\n[tool.export-guards.severity]\nEG402 = "warning"\n'
    )
    done = run("lint", f"{MODELS}:training_mode", "--format", "json", cwd=tmp_path)
    document = json.loads(done.stdout)
    assert "EG301" not in {f["code"] for f in document["findings"]}
    assert done.returncode == 1  # EG402 raised to warning, and warnings fail
    assert run("lint", f"{MODELS}:training_mode", "--fail-level", "error", cwd=tmp_path).returncode == 0
    (tmp_path / "pyproject.toml").write_text('[tool.export-guards]\nselct = ["EG"]\n')
    typo = run("lint", f"{MODELS}:clean", cwd=tmp_path)
    assert typo.returncode == 2 and "unknown setting(s) selct" in typo.stderr


def test_stdout_carries_only_the_report_even_when_the_model_prints(tmp_path: Path) -> None:
    done = run("lint", f"{MODELS}:noisy", "--format", "json")
    assert done.returncode == 0
    assert json.loads(done.stdout)["version"] == 1
    assert "the factory talks on stdout" in done.stderr
    unwritable = run("lint", f"{MODELS}:clean", "--output", str(tmp_path / "missing" / "x.pte"))
    assert unwritable.returncode == 2 and "cannot write" in unwritable.stderr
