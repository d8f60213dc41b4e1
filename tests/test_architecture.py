"""The house rules of the code: imports flow one way, every code is one registered rule, and
the rule table answers without torch."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import export_guards as eg
from export_guards.ruleset import CATALOG, RuleSet
from export_guards.ruleset.catalog import RETIRED

PACKAGE = Path(eg.__file__).resolve().parent
ROOT = PACKAGE.parent

# Each room may import only the rooms before it in this order (and itself).
LAYERS = [
    {"report"},
    {"ruleset"},
    {"settings"},
    {"errors", "targets", "render"},
    {"analysis"},
    {"linter", "pte"},
    {"passes"},
    {"recipes"},
    {"pipeline"},
    {"testing"},
    {"cli", "pytest_plugin", "workers"},
    {"__main__"},
]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in PACKAGE.rglob("*.py")}


def imports(path: Path, known: set[str]) -> Iterator[str]:
    """The export_guards modules ``path`` imports, anywhere in it except under
    ``if TYPE_CHECKING:`` (type names only, never run)."""
    tree = ast.parse(path.read_text())
    type_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for statement in node.body
        for inner in ast.walk(statement)
    }
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                target = f"{base}.{alias.name}"
                if target in known:
                    yield target  # a submodule imported by name
                elif base in known:
                    yield base


def import_graph() -> dict[str, set[str]]:
    found = modules()
    return {name: set(imports(path, set(found))) - {name} for name, path in found.items()}


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_the_import_graph_has_no_circle() -> None:
    graph = import_graph()
    state: dict[str, str] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for imported in sorted(graph[module]):
            if state.get(imported) == "open":
                circle = path[path.index(imported) :] + [imported]
                pytest.fail("import circle: " + " -> ".join(circle))
            if imported not in state:
                visit(imported, [*path, imported])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])


def test_rooms_import_one_way() -> None:
    layer_of = {r: i for i, layer in enumerate(LAYERS) for r in layer}
    graph = import_graph()
    rooms = {room(m) for m in graph} - {"__init__"}
    assert rooms <= set(layer_of), f"rooms missing from LAYERS: {rooms - set(layer_of)}"
    wrong = [
        f"{module} imports {imported}"
        for module, imported_modules in graph.items()
        for imported in imported_modules
        if room(module) != "__init__"
        and room(imported) != room(module)
        and layer_of[room(imported)] >= layer_of[room(module)]
    ]
    assert not wrong, "imports against the flow:\n" + "\n".join(sorted(wrong))
    importers_of_workers = [m for m, imported in graph.items() if any(room(i) == "workers" for i in imported) and room(m) != "workers"]
    assert not importers_of_workers, f"child-process entry points are imported by {importers_of_workers}"


def test_the_layer_check_sees_imports() -> None:
    """The graph is read, not assumed: known edges are in it."""
    graph = import_graph()
    assert "export_guards.ruleset.catalog" in graph["export_guards.linter.rules.placement"] or (
        "export_guards.ruleset" in graph["export_guards.linter.rules.placement"]
    )
    assert "export_guards.linter" in graph["export_guards.passes.placement"]
    assert "export_guards.pipeline" in graph["export_guards.workers.export_once"]


def test_rule_sets_implement_every_checked_code_once() -> None:
    from export_guards.linter import LINT_RULES
    from export_guards.pte.rules import PTE_RULES

    implemented = [r.code for r in (*LINT_RULES, *PTE_RULES)]
    assert len(implemented) == len(set(implemented))
    checked_stages = {"program", "partitioned", "pte", "reproducible", "runtime"}
    assert set(implemented) == {code for code, r in CATALOG.items() if r.stage in checked_stages}
    for rule in (*LINT_RULES, *PTE_RULES):
        assert rule == CATALOG[rule.code]  # the metadata is the catalog's, not a copy of it
    with pytest.raises(ValueError, match="has no check"):
        RuleSet.of(CATALOG["EG101"])


def test_every_code_in_the_source_is_registered_and_documented() -> None:
    rules_page = (ROOT / "docs" / "rules.md").read_text()
    written = {code for path in PACKAGE.rglob("*.py") for code in re.findall(r"\bEG\d{3}\b", path.read_text())}
    assert written, "the scan found no code at all"
    retired = set(RETIRED)
    assert written <= set(CATALOG) | retired, f"codes in the source but not in the catalog: {written - set(CATALOG)}"
    assert not retired & set(CATALOG)
    for code, registered in CATALOG.items():
        assert f"## {code} {registered.name}\n" in rules_page, f"docs/rules.md has no section for {code}"


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The command, in a fresh interpreter that then says which heavy packages it loaded."""
    script = (
        "import sys\n"
        "from export_guards.cli import main\n"
        "try:\n"
        "    code = main(sys.argv[1:])\n"
        "except SystemExit as exit:\n"
        "    code = exit.code\n"
        "heavy = sorted(m for m in ('torch', 'executorch', 'numpy') if m in sys.modules)\n"
        "print('HEAVY', ','.join(heavy), file=sys.stderr)\n"
        "sys.exit(code)\n"
    )
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=120)


@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("args", "status"),
    [
        (["rules"], 0),
        (["explain", "EG101"], 0),
        (["--version"], 0),
        (["--help"], 0),
        (["lint", "--help"], 0),
        (["explain", "eg999"], 2),
        (["lint"], 2),
        (["lint", "model.py:factory", "--select", "EG5O1"], 2),
        (["check", "missing.pte", "--fail-level", "loud"], 2),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else str(value),
)
def test_what_needs_no_model_answers_without_torch(args: list[str], status: int) -> None:
    done = run_cli(*args)
    assert "HEAVY \n" in done.stderr, done.stderr[-2000:]
    assert done.returncode == status


@pytest.mark.subprocess
def test_rules_lists_and_explain_explains_every_code() -> None:
    listed = run_cli("rules")
    assert [line.split()[0] for line in listed.stdout.splitlines()] == list(CATALOG)
    for code, registered in CATALOG.items():
        explained = run_cli("explain", code.lower())
        assert explained.returncode == 0, explained.stderr
        assert explained.stdout.startswith(f"{code} {registered.name} ({registered.severity.value}; ")
        assert registered.summary in explained.stdout and registered.help_uri in explained.stdout
