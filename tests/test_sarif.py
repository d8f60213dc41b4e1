"""SARIF that code scanning accepts: valid against the official SARIF 2.1.0 schema, every
result located (never inside torch, ExecuTorch or generated code), fingerprints that hold across
runs, working directories and machines, and that tell distinct results apart.

``sarif-schema-2.1.0.json`` is the official schema (OASIS SARIF 2.1.0 with Errata 01, JSON
Schema draft-04, ``id`` https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json),
copied byte for byte from the OASIS TC's repository https://github.com/oasis-tcs/sarif-spec,
``sarif-2.1/schema/sarif-schema-2.1.0.json`` at commit e0583813964e (the file was
``Schemata/sarif-schema-2.1.0.json`` until 2024, with the same bytes; sha256 c3b4bb2d6093…).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from torch import nn

import export_guards as eg
from conftest import Ran
from export_guards.pte.check import check_pte
from export_guards.render import render_json, render_sarif, render_text
from export_guards.render.github import render_github
from export_guards.render.sarif import FINGERPRINT, ROOT_ID, project_root

TESTS = Path(__file__).resolve().parent
SCHEMA = json.loads((TESTS / "sarif-schema-2.1.0.json").read_text())
VALIDATOR = jsonschema.validators.validator_for(SCHEMA)  # the draft the schema declares (draft-04)
DAMAGED = TESTS / "pte_regressions" / "xnnpack-flip_program-577.pte"  # EG502: a field the schema requires is missing


def validated(text: str) -> dict[str, Any]:
    """The SARIF document, checked against the schema and what code scanning needs: a physical
    location with a URI on every result, relative URIs under a declared base, rule indices that
    match, no location inside an installed package or generated code, unique fingerprints."""
    document = json.loads(text)
    errors = sorted(VALIDATOR(SCHEMA, format_checker=VALIDATOR.FORMAT_CHECKER).iter_errors(document), key=str)
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors[:5])
    (run,) = document["runs"]
    ids = [r["id"] for r in run["tool"]["driver"]["rules"]]
    root_uri = run["originalUriBaseIds"][ROOT_ID]["uri"]
    assert root_uri.startswith("file:///") and root_uri.endswith("/")
    fingerprints = []
    for result in run["results"]:
        assert ids[result["ruleIndex"]] == result["ruleId"]
        (location,) = result["locations"]
        artifact = location["physicalLocation"]["artifactLocation"]
        uri = artifact["uri"]
        assert uri and not any(part in uri for part in ("site-packages", "eval_with_key", "/torch/", "/executorch/"))
        if "uriBaseId" in artifact:
            assert artifact["uriBaseId"] in run["originalUriBaseIds"] and not uri.startswith(("/", "file:"))
        else:  # a file outside the project root: absolute, never one inside it
            assert uri.startswith("file:///") and not uri.startswith(root_uri)
        fingerprints.append(result["partialFingerprints"][FINGERPRINT])
        assert result["partialFingerprints"]["primaryLocationLineHash"] == fingerprints[-1]  # what GitHub reads
    assert len(set(fingerprints)) == len(fingerprints), fingerprints
    return document


def results(document: dict[str, Any], code: str | None = None) -> list[dict[str, Any]]:
    return [r for r in document["runs"][0]["results"] if code is None or r["ruleId"] == code]


def physical(result: dict[str, Any]) -> dict[str, Any]:
    return result["locations"][0]["physicalLocation"]


class Repeated(nn.Module):
    """One dropout called three times on one line: three findings of one rule at one place."""

    def __init__(self) -> None:
        super().__init__()
        self.drop = nn.Dropout(0.5)
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(3):
            x = self.drop(self.linear(x))  # the line the findings point at
        return x


REPEATED_LINE = next(
    i for i, text in enumerate(Path(__file__).read_text().splitlines(), 1) if "# the line the findings point at" in text
)


def test_lint_points_at_the_users_line_and_tells_repeated_findings_apart() -> None:
    report = eg.lint(torch.export.export(Repeated().train(), (torch.randn(2, 4),)))
    document = validated(render_sarif(report, root=TESTS.parent))
    dropouts = results(document, "EG301")
    assert len(dropouts) == 3 and len({r["properties"]["node"] for r in dropouts}) == 3
    for result in dropouts:
        assert physical(result) == {
            "artifactLocation": {"uri": "tests/test_sarif.py", "uriBaseId": ROOT_ID},
            "region": {"startLine": REPEATED_LINE},
        }
        assert result["locations"][0]["logicalLocations"][0]["fullyQualifiedName"].startswith("forward/dropout")
    fingerprints = [r["partialFingerprints"][FINGERPRINT] for r in dropouts]
    assert len({f.rsplit(":", 1)[0] for f in fingerprints}) == 1  # one identity, told apart in order
    assert [f.rsplit(":", 1)[1] for f in fingerprints] == ["1", "2", "3"]


def test_distinct_findings_at_one_line_and_rule_never_share_a_fingerprint() -> None:
    line = eg.SourceLocation(str(TESTS / "models.py"), 12, "x = self.drop(x)")
    same = eg.Finding(
        "EG301", eg.Severity.ERROR, "dropout 'dropout' runs in training mode", "forward", "dropout", location=line
    )
    twin = eg.Finding(
        "EG301", eg.Severity.ERROR, "dropout 'dropout_1' runs in training mode", "forward", "dropout_1", location=line
    )
    other = eg.Finding(
        "EG301",
        eg.Severity.ERROR,
        "dropout 'dropout_2' runs in training mode",
        "forward",
        "dropout_2",
        location=line,
        module="head (Dropout)",
    )
    document = validated(render_sarif(eg.Report.of([same, twin, other]), root=TESTS.parent))
    fingerprints = [r["partialFingerprints"][FINGERPRINT] for r in results(document)]
    assert len(set(fingerprints)) == 3
    assert fingerprints[0].endswith(":1") and fingerprints[1].endswith(":2") and fingerprints[2].endswith(":1")


def test_no_location_inside_torch_or_generated_code() -> None:
    traced = torch.fx.symbolic_trace(nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))).train()  # <eval_with_key>
    library_only = eg.lint(torch.export.export(traced, (torch.randn(2, 4),)))
    (dropout,) = library_only.with_code("EG301")
    assert dropout.location is None  # no user frame: not torch's dropout.py, not <eval_with_key>.N

    class Outer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = traced

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.inner(x) * 2  # the user's call, through the generated code

    (inside,) = eg.lint(torch.export.export(Outer().train(), (torch.randn(2, 4),))).with_code("EG301")
    assert inside.location is not None and Path(inside.location.file) == Path(__file__).resolve()
    assert inside.location.code == "return self.inner(x) * 2  # the user's call, through the generated code"

    document = validated(render_sarif(library_only, root=TESTS.parent))
    (result,) = results(document, "EG301")
    assert physical(result)["artifactLocation"]["uri"] == "."  # the project: code scanning needs a file
    assert result["locations"][0]["logicalLocations"] == [
        {"name": "dropout", "fullyQualifiedName": "forward/dropout", "kind": "variable"}
    ]
    factory = eg.SourceLocation(str(TESTS / "cli_models.py"), 14, "def training_mode():")
    placed = validated(render_sarif(library_only.located_at(factory), root=TESTS.parent))
    assert all(physical(r)["artifactLocation"]["uri"] == "tests/cli_models.py" for r in results(placed))


class Scaled(nn.Module):
    """A weight computed from constants (folded, EG201) and a linear that XNNPACK takes."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 4))
        self.scale = nn.Parameter(torch.tensor(2.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(x, self.weight * self.scale)


def test_the_report_of_a_guarded_export_validates() -> None:
    result = eg.export_with_guards(Scaled().eval(), (torch.randn(2, 4),))
    assert result.report.with_code("EG201")
    document = validated(render_sarif(result.report, root=TESTS.parent))
    (folded,) = results(document, "EG201")
    assert physical(folded)["artifactLocation"] == {"uri": "tests/test_sarif.py", "uriBaseId": ROOT_ID}


@pytest.fixture(scope="module")
def clean_pte(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    program = torch.export.export(Scaled().eval(), (torch.randn(2, 4),))
    path = tmp_path_factory.mktemp("clean") / "scaled.pte"
    path.write_bytes(to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()]).to_executorch().buffer)
    return path


def test_check_of_a_clean_and_of_a_damaged_program_validates(tmp_path: Path, clean_pte: Path) -> None:
    (tmp_path / ".git").mkdir()  # the project root
    assert project_root(tmp_path / "models" / "x.pte") == tmp_path
    assert results(validated(render_sarif(check_pte(clean_pte), root=tmp_path))) == []

    damaged = tmp_path / "models" / "damaged.pte"
    damaged.parent.mkdir()
    shutil.copy(DAMAGED, damaged)
    report = check_pte(damaged)
    (finding,) = report.with_code("EG502")
    assert finding.artifact == str(damaged) and finding.region is not None and finding.region[0] == 0
    assert str(finding).startswith(f"{damaged}@0: EG502 [error] ")
    (result,) = results(validated(render_sarif(report, root=tmp_path)))
    assert physical(result) == {
        "artifactLocation": {"uri": "models/damaged.pte", "uriBaseId": ROOT_ID},
        "region": {"byteOffset": 0, "byteLength": finding.region[1]},
    }
    (as_json,) = json.loads(render_json(report))["findings"]
    assert as_json["artifact"] == str(damaged) and as_json["region"] == {
        "offset": 0,
        "length": finding.region[1],
    }  # outside the root: absolute
    # Every format names the file as SARIF does: relative to the project root.
    (as_json,) = json.loads(render_json(report, root=tmp_path))["findings"]
    assert as_json["artifact"] == "models/damaged.pte"
    assert render_text(report, root=tmp_path).startswith("models/damaged.pte@0: EG502 [error] ")
    assert render_github(report, root=tmp_path).startswith("::error file=models/damaged.pte,title=EG502 ")

    truncated = tmp_path / "models" / "truncated.pte"
    truncated.write_bytes(clean_pte.read_bytes()[:-64])
    report = check_pte(truncated)
    assert {"EG501", "EG503"} <= {f.code for f in report.errors}
    document = validated(render_sarif(report, root=tmp_path))
    for code in ("EG501", "EG503"):
        for found, result in zip(report.with_code(code), results(document, code), strict=True):
            assert found.region is not None, found
            assert physical(result)["region"] == {"byteOffset": found.region[0], "byteLength": found.region[1]}
    segment = report.with_code("EG503")[0]
    assert segment.region is not None and segment.region[0] + segment.region[1] > truncated.stat().st_size

    as_bytes = check_pte(truncated.read_bytes())  # no file: the project, and the method or program
    assert all(f.artifact is None for f in as_bytes)
    assert {
        physical(r)["artifactLocation"]["uri"] for r in results(validated(render_sarif(as_bytes, root=tmp_path)))
    } == {"."}


def test_a_data_file_finding_points_at_the_data_file(tmp_path: Path, clean_pte: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    bad = tmp_path / "weights.ptd"
    bad.write_bytes(b"\0" * 64)
    (finding,) = check_pte(clean_pte, data_files=[bad]).with_code("EG509")
    assert finding.artifact == str(bad)
    (result,) = results(validated(render_sarif(check_pte(clean_pte, data_files=[bad]), root=tmp_path)), "EG509")
    assert physical(result) == {"artifactLocation": {"uri": "weights.ptd", "uriBaseId": ROOT_ID}}
    outside = validated(render_sarif(check_pte(clean_pte, data_files=[bad]), root=tmp_path / "elsewhere"))
    assert physical(results(outside, "EG509")[0])["artifactLocation"] == {"uri": bad.resolve().as_uri()}


MODEL = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = nn.Dropout(0.1)
        self.drop = nn.Dropout(0.5)
        self.linear = nn.Linear(4, 4)

    def forward(self, x):
        x = self.linear(x)  # FIRST
        for _ in range(2):
            x = self.drop(x)
        return self.linear(x)


def factory():
    torch.manual_seed(0)
    return nn.Sequential(Net(), nn.Dropout(0.2)).train(), (torch.randn(2, 4),)
"""


def lint_copy(folder: Path, source: str) -> eg.Report:
    """Lint the model of ``source``, written to ``folder/model.py`` and imported from there."""
    folder.mkdir(parents=True)
    (folder / ".git").mkdir()
    path = folder / "model.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"model_{abs(hash(str(folder)))}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model, inputs = module.factory()
    return eg.lint(torch.export.export(model, inputs))


def fingerprints(document: dict[str, Any]) -> list[str]:
    return [r["partialFingerprints"][FINGERPRINT] for r in results(document)]


def test_fingerprints_hold_across_roots_working_directories_and_node_numbering(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    one, two = tmp_path / "one" / "project", tmp_path / "two" / "deeper" / "project"
    first, second = lint_copy(one, MODEL), lint_copy(two, MODEL)
    monkeypatch.chdir(one)
    from_one = validated(render_sarif(first))  # the default root: the working directory's project
    monkeypatch.chdir(two.parent)
    from_two = validated(render_sarif(second, root=two))
    assert from_one["runs"][0]["originalUriBaseIds"] != from_two["runs"][0]["originalUriBaseIds"]
    assert fingerprints(from_one) == fingerprints(from_two) and len(fingerprints(from_one)) >= 3
    assert [physical(r) for r in results(from_one)] == [physical(r) for r in results(from_two)]
    assert {physical(r)["artifactLocation"]["uri"] for r in results(from_one, "EG301")} <= {"model.py", "."}

    # An extra node before the others renumbers them (dropout -> dropout_1); what was found keeps its fingerprint.
    renumbered = lint_copy(
        tmp_path / "three", MODEL.replace("x = self.linear(x)  # FIRST", "x = self.first(self.linear(x))")
    )
    document = validated(render_sarif(renumbered, root=tmp_path / "three"))
    assert {f.node for f in renumbered.with_code("EG301")} != {f.node for f in first.with_code("EG301")}
    kept = {
        physical(r)["region"]["startLine"]: r["partialFingerprints"][FINGERPRINT]
        for r in results(document, "EG301")
        if "region" in physical(r)
    }
    before = {
        physical(r)["region"]["startLine"]: r["partialFingerprints"][FINGERPRINT]
        for r in results(from_one, "EG301")
        if "region" in physical(r)
    }
    assert before and all(kept[line] == fingerprint for line, fingerprint in before.items())


def command(cli: Callable[..., Ran], *args: str, cwd: Path) -> dict[str, Any]:
    done = cli(*args, "--format", "sarif", "-q", cwd=cwd)
    assert done.returncode == 1, done.stderr[-2000:]
    return validated(done.stdout)


def test_the_command_writes_the_same_fingerprints_from_any_working_directory(
    cli: Callable[..., Ran], tmp_path: Path
) -> None:
    project = tmp_path / "project"
    (project / "models").mkdir(parents=True)
    (project / ".git").mkdir()
    (project / "models" / "net.py").write_text(MODEL)
    shutil.copy(DAMAGED, project / "models" / "damaged.pte")

    at_root = command(cli, "lint", "models/net.py:factory", cwd=project)
    inside = command(cli, "lint", "net.py:factory", cwd=project / "models")
    assert fingerprints(at_root) == fingerprints(inside) and len(fingerprints(at_root)) >= 4
    assert at_root["runs"][0]["results"] == inside["runs"][0]["results"]
    assert {physical(r)["artifactLocation"]["uri"] for r in results(at_root)} == {
        "models/net.py"
    }  # the factory places the rest
    lines = (project / "models" / "net.py").read_text().splitlines()
    assert {lines[physical(r)["region"]["startLine"] - 1].strip() for r in results(at_root, "EG301")} == {
        "x = self.drop(x)",
        "def factory():",  # the outer nn.Dropout: no user frame, so the factory's line
    }

    checked = [
        command(cli, "check", path, cwd=cwd)
        for path, cwd in (("models/damaged.pte", project), ("damaged.pte", project / "models"))
    ]
    assert fingerprints(checked[0]) == fingerprints(checked[1])
    assert checked[0]["runs"][0]["results"] == checked[1]["runs"][0]["results"]
    assert physical(results(checked[0])[0])["artifactLocation"] == {"uri": "models/damaged.pte", "uriBaseId": ROOT_ID}
