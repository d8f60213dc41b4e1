"""The lint's own machinery: registry, configuration, the lint pass, renderers."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
import torch
from executorch.exir import to_edge_transform_and_lower
from torch import nn

import export_guards as eg
from export_guards.render import is_report, render_json, render_sarif, render_text
from export_guards.ruleset import without_symptoms

ROOT = Path(__file__).resolve().parent.parent


def train_mode_program() -> torch.export.ExportedProgram:
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5), nn.Linear(4, 2), nn.Linear(2, 2)).train()
    return torch.export.export(model, (torch.randn(2, 4),))


def test_every_rule_is_documented_with_a_runnable_example() -> None:
    rules_page = (ROOT / "docs" / "rules.md").read_text()
    for code, registered in eg.RULES.items():
        assert re.fullmatch(r"EG\d{3}", code)
        section = rules_page.split(f"## {code} {registered.name}\n", 1)
        assert len(section) == 2, f"docs/rules.md has no section '## {code} {registered.name}'"
        body = section[1].split("\n## ", 1)[0]
        assert "```python" in body and code in body.split("```python", 1)[1]
        assert registered.help_uri.endswith(f"#{code.lower()}-{registered.name}")


def test_config_selects_by_longest_prefix() -> None:
    config = eg.Settings(select=("EG", "EG301"), ignore=("EG3",))
    assert config.enabled("EG301") and not config.enabled("EG302") and config.enabled("EG210")
    assert not eg.Settings(select=("EG2",)).enabled("EG101")
    # EG003 is off by default: only its full code selects it.
    assert not config.enabled("EG003") and not eg.Settings(select=("EG0",)).enabled("EG003")
    assert eg.Settings(select=("EG", "EG003")).enabled("EG003") and not eg.Settings(
        select=("EG", "EG003"), ignore=("EG003",)
    ).enabled("EG003")
    report = eg.lint(train_mode_program(), eg.Settings(ignore=("EG301",)))
    assert not report.with_code("EG301")


def test_settings_serialise_whole_and_read_back_equal() -> None:
    # What a child process is handed (check --reproducible's exports): every field, none dropped.
    changed = {
        "select": ("EG2", "EG501"), "ignore": ("EG210",), "severity": {"EG304": eg.Severity.ERROR}, "fail_level": eg.Severity.WARNING,
        "backend": "portable", "placement": "copy", "fold": False, "fold_max_growth": 3.5, "recipe": "xnnpack_fp32", "show_info": True,
    }  # fmt: skip
    assert set(changed) == {f.name for f in dataclasses.fields(eg.Settings)}  # a new field is added here too
    for settings in (eg.Settings(), eg.Settings(**changed)):
        again = eg.Settings.from_json(settings.to_json())
        assert again == settings and again.severity == settings.severity and again.fail_level is settings.fail_level
    assert eg.Settings.from_json(eg.Settings(**changed).to_json()).severity["EG304"] is eg.Severity.ERROR
    with pytest.raises(ValueError, match="exactly the fields"):
        eg.Settings.from_json('{"backend": "portable"}')
    with pytest.raises(ValueError, match="fold-max-growth must be"):
        eg.Settings.from_json(eg.Settings().to_json().replace('"fold_max_growth": 1.25', '"fold_max_growth": 0.5'))


def test_config_from_pyproject_and_its_errors(tmp_path: Path) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_text(
        '[tool.export-guards]\nselect = ["eg2"]\nfail-level = "WARNING"\n[tool.export-guards.severity]\nEG210 = "error"\n'
    )
    config = eg.Settings.from_pyproject(path)
    assert config.select == ("EG2",) and config.fail_level is eg.Severity.WARNING
    assert config.severity == {"EG210": eg.Severity.ERROR}
    with pytest.raises(ValueError, match="fail-level must be one of error, warning, info; not 'loud'"):
        eg.Settings.from_mapping({"fail-level": "loud"})
    with pytest.raises(ValueError, match="select must be a list of rule codes"):
        eg.Settings.from_mapping({"select": 3})
    with pytest.raises(ValueError, match="severity must be a table"):
        eg.Settings.from_mapping({"severity": "error"})
    with pytest.raises(ValueError, match="severity keys are rule codes"):
        eg.Settings.from_mapping({"severity": {"float64": "error"}})
    assert eg.Settings.from_mapping({"severity": {"eg304": "error"}}).severity == {"EG304": eg.Severity.ERROR}
    assert eg.Settings.from_mapping({"show-info": True}).show_info and not eg.Settings().show_info
    with pytest.raises(ValueError, match="show-info must be true or false, not 'yes'"):
        eg.Settings.from_mapping({"show-info": "yes"})
    path.write_text("[project]\nname = 'x'\n")
    assert eg.Settings.from_pyproject(path) == eg.Settings()


def test_severity_overrides_apply() -> None:
    report = eg.lint(train_mode_program(), eg.Settings(severity={"EG301": eg.Severity.INFO}))
    (finding,) = report.with_code("EG301")
    assert finding.severity is eg.Severity.INFO


def test_lint_pass_raises_one_error_listing_every_failing_finding() -> None:
    program = train_mode_program()
    lint_pass = eg.passes.LintPass(eg.Settings(fail_level=eg.Severity.ERROR))
    with pytest.raises(Exception, match="LintPass") as raised:
        to_edge_transform_and_lower(program, transform_passes=[lint_pass])
    error = raised.value.__cause__
    assert isinstance(error, eg.LintError)
    assert [f.code for f in error.report] == ["EG301"]
    assert "1 lint finding(s) at or above error" in str(error)

    quiet = eg.passes.LintPass(eg.Settings(ignore=("EG301",)))
    edge = to_edge_transform_and_lower(program, transform_passes=[quiet])
    assert edge.exported_program() is not None
    result = quiet(program)  # a call's findings come with its result; the pass keeps none
    assert isinstance(result, eg.passes.GuardPassResult) and result.exported_program is program
    assert not result.report.at_least(eg.Severity.ERROR) and not result.report.with_code("EG301")
    assert not hasattr(quiet, "report")


def test_text_is_sorted_by_file_and_line_and_shows_each_fix_once() -> None:
    def at(line: int, code: str, fix: str) -> eg.Finding:
        return eg.Finding(
            code, eg.Severity.WARNING, f"problem on line {line}", location=eg.SourceLocation("model.py", line), fix=fix
        )

    report = eg.Report.of([at(30, "EG212", "Fold it."), at(10, "EG212", "Fold it."), at(20, "EG304", "Use float32.")])
    lines = render_text(report).splitlines()
    assert [line.split(":")[1] for line in lines if line.startswith("model.py")] == ["10", "20", "30"]
    assert lines[-4:] == [
        "Fixes:",
        "  EG212 fix: Fold it.",
        "  EG304 fix: Use float32.",
        "Found 3 findings (3 warnings).",
    ]


def test_renderers_read_the_same_findings() -> None:
    report = eg.lint(train_mode_program())
    text = render_text(report, show_info=True)
    # nn.Sequential alone: no line of the user's made the node, and torch's own lines are never shown
    assert re.search(
        r"^<method forward>: EG301 \[error\] dropout 'dropout' runs in training mode: the program drops activations at random$",
        text,
        re.MULTILINE,
    )
    assert "site-packages" not in text
    assert text.rstrip().splitlines()[-1].startswith(f"Found {len(report)} finding")
    document = json.loads(render_json(report))
    assert [f["code"] for f in document["findings"]] == [f.code for f in report]
    assert document["summary"]["error"] == len(report.errors)
    sarif = json.loads(render_sarif(report))
    results = sarif["runs"][0]["results"]
    assert [r["ruleId"] for r in results] == [f.code for f in report]
    assert {r["id"] for r in sarif["runs"][0]["tool"]["driver"]["rules"]} >= set(eg.RULES)
    assert render_text(eg.Report()).strip() == "All checks passed."


def test_text_counts_info_unless_asked_and_says_what_the_run_did() -> None:
    info = eg.Finding("EG310", eg.Severity.INFO, "every dimension of x is fixed", method="forward")
    folded = eg.Finding("EG201", eg.Severity.INFO, "folded 2 ops on 'w' into parameter 'w_folded'", method="forward")
    warning = eg.Finding("EG304", eg.Severity.WARNING, "float64 weight", method="forward")
    ran = ("3 of 4 compute ops delegated (75%) to XnnpackBackend", "program 1,024 bytes")
    clean = eg.Report.of([info, folded])
    assert render_text(clean, ran=ran) == (
        "All checks passed: 1 constant folded; 3 of 4 compute ops delegated (75%) to XnnpackBackend; "
        "program 1,024 bytes (2 infos not shown: --show-info).\n"
    )
    listed = render_text(clean, show_info=True, ran=ran).splitlines()
    assert [line.split(": ", 1)[1].split()[0] for line in listed[:2]] == ["EG201", "EG310"]  # by method, then code
    assert listed[-1] == "Found 2 findings (2 infos): 1 constant folded; 0 problems left."
    problems = render_text(eg.Report.of([info, warning]), subject="model.pte").splitlines()
    assert "[info]" not in "\n".join(problems)
    assert problems[-1] == "model.pte: Found 1 finding (1 warning; 1 info not shown: --show-info)."
    # Each is a report the command may replace at --report-file; a user's text is not.
    assert all(
        is_report(text) for text in (render_text(clean, ran=ran), "\n".join(listed), "Checked 2 programs: 2 passed.\n")
    )
    assert not is_report("All checks were fine, said my notes\n") and not is_report("Checked the oven\n")


def test_partitioned_rules_report_the_partitioners_reason() -> None:
    class Modulated(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(3, 4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return nn.functional.linear(x, self.w * x.mean()) + nn.functional.linear(x, self.w)

    result = eg.export_with_guards(Modulated().eval(), (torch.randn(2, 4),))
    (cause,) = result.report.with_code("EG211")  # one problem, one finding: the weight, not also its linear (EG401)
    assert "depends on a user input" in cause.message and not result.report.with_code("EG401")
    ignored = eg.export_with_guards(Modulated().eval(), (torch.randn(2, 4),), config=eg.Settings(ignore=("EG211",)))
    (left_out,) = ignored.report.with_code("EG401")  # its cause not reported: the symptom says it
    assert left_out.subjects == cause.subjects == ("linear",) and left_out.symptom_of == (
        "EG210",
        "EG211",
        "EG212",
        "EG405",
    )
    assert (
        "the partitioner says Expected weight to be a static param" in left_out.message
        and "compute it from parameters only" in (left_out.fix or "")
    )
    assert not without_symptoms(eg.Report((left_out,), (cause,))).findings  # a cause suppressed by
    assert without_symptoms(eg.Report.of([left_out])).findings == (left_out,)
    (coverage,) = result.report.with_code("EG402")
    assert coverage.message.startswith("1 of 2 compute ops delegated (50%)")
    assert result.delegation is not None and result.delegation.count("linear", "mm") == (1, 2)
    # XNNPACK packs w for the static linear and reads it as the multiply's operand too: the
    # program dies in the runtime (SIGSEGV, stock's bytes alike), so to_pte does not hand it out
    with pytest.raises(eg.ProgramRefused, match=r"EG515 .*packed weight read as an operand"):
        result.to_pte()


def test_export_stops_before_lowering_on_unreadable_constants_even_if_ignored(trapdev: torch.device) -> None:
    model = nn.Linear(4, 3).to(trapdev)
    result = eg.export_with_guards(model, (torch.randn(2, 4).to(trapdev),), config=eg.Settings(ignore=("EG1",)))
    assert result.edge is None and result.delegation is None
    assert {f.code for f in result.report.errors} == {"EG101"}
    with pytest.raises(eg.GuardError, match="stopped before lowering"):
        result.to_pte()


def test_settings_apply_to_what_the_guards_report() -> None:
    model = nn.Sequential(nn.utils.parametrizations.weight_norm(nn.Linear(4, 3))).eval()
    inputs = (torch.randn(2, 4),)
    assert eg.export_with_guards(model, inputs).report.with_code("EG201")
    assert not eg.export_with_guards(model, inputs, config=eg.Settings(ignore=("EG2",))).report.with_code("EG201")
    strict = eg.export_with_guards(model, inputs, config=eg.Settings(select=("EG201",), severity={"EG201": "error"}))
    assert {f.code for f in strict.report} == {"EG201"} and strict.report.errors == strict.report.findings


def test_a_rule_that_fails_is_a_finding_and_the_others_still_run() -> None:
    from export_guards.linter import LINT_RULES
    from export_guards.ruleset import RuleSet, rule

    @rule("EG304")
    def broken(context: object) -> list[object]:
        raise RuntimeError("boom\nand more")

    rules = LINT_RULES.without(RuleSet.of(broken)) + RuleSet.of(broken)
    program = train_mode_program()
    report = eg.lint(program, rules=rules)
    (failure,) = report.with_code("EG001")
    assert failure.message == "rule EG304 (float64) failed on method 'forward': RuntimeError: boom"
    assert failure.severity is eg.Severity.ERROR and report.with_code("EG301")  # the others ran
    assert eg.lint(program, eg.Settings(select=("EG3",)), rules=rules).with_code("EG001")  # select cannot hide it
    assert not eg.lint(program, eg.Settings(ignore=("EG0",)), rules=rules).with_code("EG001")


def codes(model: nn.Module, *inputs: torch.Tensor) -> set[str]:
    return {f.code for f in eg.lint(torch.export.export(model, inputs))}


def test_rules_stay_silent_on_look_alikes() -> None:
    class Attention(nn.Module):
        def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
            return torch.softmax(q @ k.transpose(-1, -2), dim=-1)

    class Caches(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("k_cache", torch.zeros(16, 64))
            self.k_cache: torch.Tensor
            self.register_buffer("v_cache", torch.zeros(16, 64))
            self.v_cache: torch.Tensor
            self.register_buffer("pos_orig", torch.arange(4.0))
            self.pos_orig: torch.Tensor

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.k_cache[0].copy_(x)
            self.v_cache[0].copy_(x * 2)
            return self.k_cache.sum() + self.v_cache.sum() + self.pos_orig.sum()

    q = torch.randn(2, 4, 8)
    assert "EG211" not in codes(Attention(), q, torch.randn(2, 4, 8))  # batched matmuls take dynamic operands
    assert codes(nn.BatchNorm2d(3, track_running_stats=False).eval(), torch.randn(2, 3, 4, 4)).isdisjoint({"EG302"})
    found = codes(Caches(), torch.randn(64))
    assert not found & {"EG306", "EG212", "EG307"}, found


def test_float64_inputs_and_control_flow_branches_are_linted() -> None:
    class Branches(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cond(x.sum() > 0, lambda x: x.double().float(), lambda x: x * 2, (x,))

    assert "EG304" in codes(Branches(), torch.randn(3))
    (finding,) = eg.lint(torch.export.export(nn.Identity(), (torch.randn(3, dtype=torch.float64),))).with_code("EG304")
    assert "input 'input' is float64" in finding.message


def test_output_comparison_handles_bool_and_integer_outputs() -> None:
    from export_guards.verify import Tolerance, compare_outputs

    (same,) = compare_outputs(
        torch.tensor([True, False]), [torch.tensor([True, False])], Tolerance.absolute(atol=0, rtol=0)
    )
    assert same.within
    (wrapped,) = compare_outputs(
        torch.tensor([0, 255], dtype=torch.uint8),
        [torch.tensor([255, 255], dtype=torch.uint8)],
        Tolerance.absolute(atol=0, rtol=0),
    )
    assert not wrapped.within and "differs from eager in 1 of 2 values" in str(wrapped)
    nested = compare_outputs(
        {"a": torch.ones(2), "b": (torch.zeros(1),)},
        [torch.ones(2), torch.ones(1)],
        Tolerance.absolute(atol=1e-5, rtol=0),
    )
    assert [e.within for e in nested] == [True, False] and nested[1].path == "['b'][0]"


class Attention(torch.nn.Module):
    def __init__(self, dropout_p: float) -> None:
        super().__init__()
        self.dropout_p = dropout_p

    def forward(self, q: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.scaled_dot_product_attention(q, q, q, dropout_p=self.dropout_p)


@pytest.mark.parametrize(("dropout_p", "random"), [(0.0, False), (0.1, True)])
def test_attention_is_random_only_with_dropout(dropout_p: float, random: bool) -> None:
    program = torch.export.export(Attention(dropout_p), (torch.randn(1, 2, 4, 8),))
    assert bool(eg.lint(program).with_code("EG303")) is random


def test_the_ledger_records_and_its_report_only_merges_and_settles() -> None:
    from export_guards.ledger import Ledger
    from export_guards.linter import lint_guarded

    model = nn.Sequential(nn.utils.parametrizations.weight_norm(nn.Linear(4, 3))).eval()
    program = torch.export.export(model, (torch.randn(2, 4),))
    linted = lint_guarded(program, eg.Settings())
    _, folded = eg.fold.fold_constants(program)
    ledger = Ledger()
    ledger.put_lint("program", program, linted)
    ledger.put("forward", "fold", folded)

    full = ledger.report(eg.Settings())
    assert folded.with_code("EG201") and linted.findings
    assert {f.code for f in full} == {f.code for f in (*linted, *folded)}
    narrowed = ledger.report(eg.Settings(ignore=("EG2",)))  # settled again, nothing linted again
    assert narrowed.findings == tuple(f for f in full if not f.code.startswith("EG2"))
    ledger.stop(eg.Report.of(folded.with_code("EG201")))  # what stopped an export shows whatever the settings
    assert ledger.report(eg.Settings(ignore=("EG2",))).with_code("EG201") == folded.with_code("EG201")


def test_a_guarded_export_plans_each_programs_fold_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The torch.export program's fold plan serves the early fold and the lint; the edge
    program's is the fold pass's own: one plan per program, none made again for the report."""
    from export_guards import pipeline
    from export_guards.analysis import fold_plan
    from export_guards.linter import context
    from export_guards.passes import fold

    planned: list[int] = []

    def counted(program: torch.export.ExportedProgram, **options: float) -> fold_plan.FoldPlan:
        planned.append(id(program))
        return fold_plan.plan_fold(program, **options)

    for module in (context, fold, pipeline):
        monkeypatch.setattr(module, "plan_fold", counted)
    model = nn.Sequential(nn.utils.parametrizations.weight_norm(nn.Linear(4, 3)), nn.ReLU()).eval()
    result = eg.lower_with_guards(torch.export.export(model, (torch.randn(2, 4),)))
    assert result.report.with_code("EG201")  # the fold pass folded the weight
    assert len(planned) == len(set(planned)) == 2


def test_a_float32_view_to_a_dynamic_shape_is_not_said_to_have_an_invalid_dtype() -> None:
    """Issue 54: XNNPACK's dtype check refuses a view's symbolic size, an operand that is no
    tensor, as "invalid dtype"; EG403 gives the true reason. An int64 op's dtype is named."""

    class Heads(nn.Module):
        def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
            return torch.relu(x.view(1, x.shape[1], 2, 4)), positions.unsqueeze(0)

    length = torch.export.Dim("length", min=2, max=16)
    program = torch.export.export(
        Heads(), (torch.randn(1, 4, 8), torch.arange(4)), dynamic_shapes=({1: length}, {0: length})
    )
    left = {f.node: f.message for f in eg.lower_with_guards(program).report.with_code("EG403")}
    (view,) = (message for node, message in left.items() if node.startswith("aten_view_copy"))
    assert "invalid dtype" not in view and view.endswith(
        "left outside every delegate: a size it takes is symbolic (a dynamic dimension), which XNNPACK does not take for this op"
    )
    (unsqueeze,) = (message for node, message in left.items() if node.startswith("aten_unsqueeze_copy"))
    assert unsqueeze.endswith(": its dtype, int64, is not one XNNPACK takes (float32 and float16)")


def test_eg402_and_the_summary_count_the_kernels_the_written_program_calls() -> None:
    """Issue 54: one count, before and after to_executorch (which edits the edge program): a
    view that ExecuTorch turns into a view runs no kernel; the write-back of a buffer (copy_),
    which to_executorch adds, does. Both agree with the kernel calls of the written program
    (prim ops aside: views and sizes, built into the runtime)."""
    from executorch.exir import ExecutorchBackendConfig
    from executorch.exir.schema import KernelCall

    class Cache(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("cache", torch.zeros(1, 16, 8))
            self.cache: torch.Tensor

        def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
            self.cache.index_copy_(1, positions, torch.relu(x.view(1, x.shape[1], 2, 4)).view(1, x.shape[1], 8))
            return self.cache.sum(1)

    length = torch.export.Dim("length", min=2, max=16)
    program = torch.export.export(
        Cache().eval(), (torch.randn(1, 4, 8), torch.arange(4)), dynamic_shapes=({1: length}, {0: length})
    )
    result = eg.lower_with_guards(program)
    (coverage,) = result.report.with_code("EG402")
    assert result.delegation is not None and coverage.message.startswith(result.delegation.stated() + ": ")
    assert "aten::copy_ x1" in coverage.message and "view_copy" not in coverage.message
    assert any(
        "aten::view_copy" in f.message for f in result.report.with_code("EG403")
    )  # still not delegated: EG403 says why
    written = result.edge.to_executorch(
        ExecutorchBackendConfig(passes=eg.emit_passes())
    ).executorch_program.execution_plan[0]
    calls = [
        written.operators[i.instr_args.op_index].name
        for i in written.chains[0].instructions
        if isinstance(i.instr_args, KernelCall)
    ]
    kernels = [name for name in calls if not name.startswith("executorch_prim::") and name != "aten::sym_size"]
    assert "executorch_prim::et_view" in calls and sum(result.delegation.other_portable.values()) == len(kernels)
    assert result.delegation.stated() == coverage.message.partition(": ")[0]  # after to_executorch too
