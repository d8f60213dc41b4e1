"""A team's own rules, shipped as a package (``tests/project_rules``: the ``acme_rules`` module
and the metadata pip would write for it), found through the ``export_guards.rules`` entry-point
group: selected by default, listed, explained, configured, and run by ``lint`` and ``check``."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conftest import Ran
from export_guards.ruleset import registry

TESTS = Path(__file__).parent
MODELS = TESTS / "cli_models.py"


def _forget_installed_rules() -> None:
    for cached in (registry._entry_points, registry._loaded, registry._known):
        cached.cache_clear()
    for module in ("acme_rules", "broken_rules"):
        sys.modules.pop(module, None)


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Path], None]]:
    """Put a folder of installed packages on ``sys.path`` (as site-packages is), afresh."""

    def install(site: Path) -> None:
        monkeypatch.syspath_prepend(str(site))
        _forget_installed_rules()

    yield install
    monkeypatch.undo()
    _forget_installed_rules()


@pytest.mark.slow
def test_a_rule_package_is_selected_listed_explained_configured_and_run(
    cli: Callable[..., Ran], installed: Callable[[Path], None], tmp_path: Path
) -> None:
    installed(TESTS / "project_rules")
    listed = cli("rules").stdout.splitlines()
    codes = [line.split()[0] for line in listed]
    assert codes[-2:] == ["ACME001", "ACME501"] and "EG001" in codes  # ours, then the project's
    table = {r["code"]: r for r in json.loads(cli("rules", "--format", "json").stdout)}
    assert table["ACME001"]["package"] == "acme-rules" and table["EG001"]["package"] == "export-guards"
    explained = cli("explain", "acme001")
    assert explained.returncode == 0 and explained.stdout.startswith("ACME001 no-sigmoid (warning; the torch.export")
    assert (
        "from the package acme-rules" in explained.stdout and "https://acme.example/rules#acme001" in explained.stdout
    )
    assert "did you mean ACME001?" in cli("explain", "acme0o1").stderr  # a letter O for a zero

    pte = tmp_path / "gated.pte"  # the lint checks the program it writes: the team's pte-stage rule too
    refused = cli("lint", f"{MODELS}:gated", "--backend", "portable", "--pte", pte)
    assert refused.returncode == 1 and "ACME501 [error]" in refused.stdout and not pte.exists(), refused.stderr[-2000:]
    # selected by default, beside ours: a warning does not fail
    linted = cli("lint", f"{MODELS}:gated", "--backend", "portable", "--pte", pte, "--extend-ignore", "ACME501")
    assert linted.returncode == 0, linted.stderr[-2000:]
    assert "ACME001 [warning] '" in linted.stdout and "calls sigmoid" in linted.stdout
    assert "cli_models.py:" in linted.stdout  # placed on the user's line, as ours are
    checked = cli("check", pte, "--format", "json")
    found = json.loads(checked.stdout)["findings"]
    assert checked.returncode == 1 and {f["code"] for f in found} == {"ACME501", "EG520"}
    assert any("aten::sigmoid.out" in f["message"] for f in found)
    sarif = json.loads(cli("check", pte, "--format", "sarif").stdout)
    described = {r["id"]: r for r in sarif["runs"][0]["tool"]["driver"]["rules"]}
    assert described["ACME501"]["name"] == "unshipped-kernel" and "helpUri" not in described["ACME501"]

    (tmp_path / "pyproject.toml").write_text(
        '[tool.export-guards]\nignore = ["ACME0"]\n[tool.export-guards.severity]\nACME501 = "info"\n'
    )
    configured = cli("check", pte, "--format", "json", cwd=tmp_path)
    severities = {f["code"]: f["severity"] for f in json.loads(configured.stdout)["findings"]}
    assert configured.returncode == 0 and severities == {"ACME501": "info", "EG520": "warning"}
    assert cli("check", pte, "--select", "EG").stdout.count("ACME") == 0
    typo = cli("check", pte, "--select", "ACME9")
    assert typo.returncode == 2 and "no code nor prefix" in typo.stderr


def _package(site: Path, prefix: str, source: str) -> None:
    (site / "broken_rules.py").write_text(source)
    info = site / "broken_rules-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-rules\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[export_guards.rules]\n{prefix} = broken_rules\n")


RULE = 'from export_guards import Severity\nfrom export_guards.ruleset import Rule\nR = Rule({code!r}, "r", Severity.WARNING, "s", "f", "program", check=lambda c: ())\n'


@pytest.mark.parametrize(
    ("prefix", "source", "problem"),
    [
        ("E", RULE.format(code="E001"), "overlaps export-guards' own prefix EG"),
        ("ACME", RULE.format(code="ACM001"), "rule 'ACM001' is not its prefix ACME and three digits"),
        ("ACME", "import a_module_that_is_not_there\n", "importing it raised ModuleNotFoundError"),
        ("ACME", "RULES = []\n", "it holds no Rule"),
        ("acme", RULE.format(code="acme001"), "1 to 8 capital letters"),
    ],
)
def test_a_broken_rule_package_is_one_clear_usage_error(
    cli: Callable[..., Ran], installed: Callable[[Path], None], tmp_path: Path, prefix: str, source: str, problem: str
) -> None:
    _package(tmp_path, prefix, source)
    installed(tmp_path)
    for command in (["rules"], ["check", "missing.pte"]):
        done = cli(*command)
        assert done.returncode == 2 and done.stdout == ""
        message = done.stderr.strip()
        assert message.startswith("export-guards: error: project rules") and problem in message, message
        assert "package broken-rules" in message and "pip uninstall broken-rules" in message
