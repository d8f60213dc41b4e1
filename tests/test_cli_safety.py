"""The command never loses a user's file, answers a wrong command before torch loads, and ends
cleanly on a signal or a closed pipe: end to end as a user runs it, in subprocesses where the
process is the point (start-up without torch, signals, a closed pipe)."""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conftest import Ran
from export_guards.settings import RECIPES
from export_guards.targets import TargetError, check_target

TESTS = Path(__file__).parent
MODELS = TESTS / "cli_models.py"
COMMAND = [sys.executable, "-m", "export_guards"]


def run(*args: str | Path, cwd: Path = TESTS, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COMMAND, *map(str, args)], capture_output=True, text=True, cwd=cwd, env=env, timeout=600)


@pytest.fixture(scope="module")
def torchless(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An environment in which ``import torch`` and ``import executorch`` fail: a command that
    answers there provably answered before loading either."""
    folder = tmp_path_factory.mktemp("torchless")
    for name in ("torch", "executorch"):
        (folder / name).mkdir()
        (folder / name / "__init__.py").write_text(f"raise ImportError('{name} was imported')\n")
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")])))


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A real program and the external data file (.ptd) it reads its weights from."""
    import torch
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower

    folder = tmp_path_factory.mktemp("program")
    exported = torch.export.export(torch.nn.Linear(4, 3).eval(), (torch.randn(2, 4),))
    manager = to_edge_transform_and_lower(exported).to_executorch(ExecutorchBackendConfig(external_constants=True))
    pte = folder / "linear.pte"
    pte.write_bytes(manager.buffer)
    manager.write_tensor_data_to_file(str(folder))
    (ptd,) = folder.glob("*.ptd")
    return pte, ptd


def _model_file(folder: Path) -> Path:
    model = folder / "zoo.py"
    model.write_text(
        "import torch\n\n\ndef model():\n    return torch.nn.Linear(4, 3), (torch.randn(2, 4),)\n\n\ndef make_decoder():\n    return model()\n"
    )
    return model


Case = Callable[[Path, Path, Path], tuple[list[str | Path], str]]


def _symlink(folder: Path, model: Path) -> Path:
    link = folder / "link.pte"
    link.symlink_to(model)
    return link


def _notes(folder: Path) -> Path:
    notes = folder / "notes.txt"
    notes.write_text("my notes, not a report\n")
    return notes


def _syntax_error(folder: Path) -> Path:
    return _write(folder / "bad.py", "def model(:\n    pass\n")


def _package(folder: Path) -> str:
    (folder / "nets").mkdir()
    (folder / "nets" / "__init__.py").write_text("raise RuntimeError('a package __init__ must not run for this')\n")
    (folder / "nets" / "vision.py").write_text("def resnet():\n    pass\n")
    return "nets.vision:resnt"


CASES: dict[str, Case] = {
    # inputs that are missing, malformed or of the wrong kind
    "missing model file": lambda d, m, p: (["lint", f"{d / 'missing.py'}:model"], "no such file"),
    "syntax error": lambda d, m, p: (["lint", f"{_syntax_error(d)}:model"], "bad.py:1: syntax error"),
    "unknown factory": lambda d, m, p: (["lint", f"{m}:modle"], "defines no 'modle'; did you mean 'model'?"),
    "unknown factory in a package": lambda d, m, p: (
        ["lint", _package(d)],
        "defines no 'resnt'; did you mean 'resnet'?",
    ),
    "missing program": lambda d, m, p: (["check", d / "missing.pte"], "no such file"),
    "a .ptd as the program": lambda d, m, p: (
        ["check", next(p.parent.glob("*.ptd"))],
        "not a program: pass it with --data next to its .pte",
    ),
    "missing data file": lambda d, m, p: (["check", p, "--data", d / "missing.ptd"], "no such file"),
    "a .pte as the data": lambda d, m, p: (["check", p, "--data", p], "is a program (.pte), not a data file"),
    "empty program": lambda d, m, p: (
        ["check", _bytes(d / "e.pte", b"")],
        "e.pte cannot be read as a program: it is empty (0 bytes); expected an ExecuTorch program",
    ),
    "another schema version": lambda d, m, p: (
        ["check", _bytes(d / "v.pte", p.read_bytes().replace(b"ET12", b"ET99", 1))],
        "of schema version ET99; expected ET12",
    ),
    "empty inputs": lambda d, m, p: (
        ["check", p, "--runtime", "--inputs", _bytes(d / "in.pt", b"")],
        "in.pt cannot be read as inputs: it is empty (0 bytes)",
    ),
    "text as inputs": lambda d, m, p: (
        ["check", p, "--runtime", "--inputs", _notes(d)],
        "cannot be read as inputs: it is a text file; expected the example inputs",
    ),
    "a .pte as the inputs": lambda d, m, p: (
        ["check", p, "--runtime", "--inputs", p],
        "it is an ExecuTorch program (.pte), not inputs",
    ),
    "truncated inputs": lambda d, m, p: (
        ["check", p, "--runtime", "--inputs", _zip_cut(d)],
        "(truncated, or not a zip archive); expected the example inputs",
    ),
    "unknown recipe": lambda d, m, p: (
        ["lint", f"{m}:model", "--recipe", "xnnpack_fp23"],
        "did you mean xnnpack_fp32?",
    ),
    # outputs that would destroy an input or a file that is not the tool's
    "--pte is the model file": lambda d, m, p: (["lint", f"{m}:model", "--pte", m], "which this run reads"),
    "--pte is a link to the model file": lambda d, m, p: (
        ["lint", f"{m}:model", "--pte", _symlink(d, m)],
        "which this run reads",
    ),
    "--report-file is the program checked": lambda d, m, p: (["check", p, "--report-file", p], "which this run reads"),
    "--pte and --report-file alike": lambda d, m, p: (
        ["lint", f"{m}:model", "--pte", d / "x", "--report-file", d / "." / "x"],
        "is also --pte",
    ),
    "a folder as the report file": lambda d, m, p: (["lint", f"{m}:model", "--report-file", d], "is a folder"),
    "a file as the folder": lambda d, m, p: (["lint", f"{m}:model", "--pte", m / "x.pte"], "is a file, not a folder"),
    "a user's file at --report-file": lambda d, m, p: (
        ["check", p, "--report-file", _notes(d)],
        "pass --force to replace it",
    ),
    "a user's file at --pte": lambda d, m, p: (
        ["lint", f"{m}:model", "--pte", _notes(d)],
        "is not an ExecuTorch program",
    ),
}


def _bytes(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _zip_cut(folder: Path) -> Path:
    """A file laid out as torch.save writes one (a zip archive with a pickle), cut short."""
    import io
    import zipfile

    whole = io.BytesIO()
    with zipfile.ZipFile(whole, "w") as archive:
        archive.writestr("inputs/data.pkl", b"\x80\x02]q\x00." * 40)
        archive.writestr("inputs/version", b"3\n")
    return _bytes(folder / "cut.pt", whole.getvalue()[:-30])


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _files(*folders: Path) -> dict[Path, bytes]:
    return {
        path: path.read_bytes()
        for folder in folders
        for path in folder.rglob("*")
        if path.is_file() and not path.is_symlink()
    }


@pytest.mark.subprocess
@pytest.mark.parametrize("case", list(CASES))
def test_a_usage_error_is_one_line_before_torch_and_touches_no_file(
    case: str, tmp_path: Path, torchless: dict[str, str], program: tuple[Path, Path]
) -> None:
    pte, _ = program
    model = _model_file(tmp_path)
    args, message = CASES[case](tmp_path, model, pte)
    before = _files(tmp_path, pte.parent)
    done = run(*args, cwd=tmp_path, env=torchless)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("export-guards: error: ") and message in lines[0], done.stderr
    assert done.stdout == ""
    assert _files(tmp_path, pte.parent) == before, "a usage error changed or removed a file"


def test_a_file_that_is_not_the_tools_survives_a_failed_run_and_is_replaced_only_with_force(
    cli: Callable[..., Ran], tmp_path: Path
) -> None:
    mine = tmp_path / "model.pte"
    mine.write_bytes(b"the user's own file")
    failed = cli("lint", f"{MODELS}:training_mode", "--pte", mine, "--force", "-q")
    assert failed.returncode == 1 and mine.read_bytes() == b"the user's own file"
    assert "removed" not in failed.stderr
    replaced = cli("lint", f"{MODELS}:clean", "--pte", mine, "--force", "-q")
    assert replaced.returncode == 0 and mine.read_bytes()[4:8] == b"ET12"
    old_report = tmp_path / "report.json"
    old_report.write_text(json.dumps({"version": 1, "findings": [], "summary": {}}))
    again = cli(
        "lint", f"{MODELS}:training_mode", "--pte", mine, "--report-file", old_report, "--output-format", "json", "-q"
    )
    assert again.returncode == 1 and not mine.exists(), "an earlier program is not left to be taken for this run's"
    assert json.loads(old_report.read_text())["summary"]["error"] == 1, "an earlier report of ours is replaced"


@pytest.mark.parametrize(("then", "status"), [("clean", 2), ("training_mode", 1)])
def test_a_report_that_cannot_be_written_goes_to_stdout(
    cli: Callable[..., Ran], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, then: str, status: int
) -> None:
    folder = tmp_path / "reports"
    folder.mkdir()
    monkeypatch.setenv("EG_TEST_REMOVE", str(folder))
    done = cli(
        "lint",
        f"{MODELS}:removes_a_folder",
        "--arg",
        f"then={then}",
        "--report-file",
        folder / "r.json",
        "--output-format",
        "json",
    )
    assert done.returncode == status, done.stderr  # 1: what was found; 2: a clean run whose report was not written
    assert f"writing {folder / 'r.json'} failed" in done.stderr and "the report follows on stdout" in done.stderr
    assert json.loads(done.stdout)["version"] == 1


@contextlib.contextmanager
def _building_slowly(out: Path, *, sighup: object) -> Iterator[subprocess.Popen[str]]:
    """``lint --pte out`` of a model whose factory sleeps, started with SIGINT ignored (as a
    background job of a non-interactive shell starts) and SIGHUP as ``sighup``: yielded once the
    factory says it runs, so that no signal depends on timing; killed after, whatever happened."""

    def start() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, sighup)

    process = subprocess.Popen(
        [*COMMAND, "lint", f"{MODELS}:slow", "--pte", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=TESTS, preexec_fn=start,  # noqa: PLW1509 - the test starts no thread
    )  # fmt: skip
    try:
        assert process.stderr is not None
        for line in process.stderr:
            if "the factory is running" in line:
                break
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


@pytest.mark.subprocess
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: signal.Signals(s).name)
def test_a_signal_exits_128_plus_n_in_one_line_and_leaves_no_program(tmp_path: Path, signum: int) -> None:
    out = tmp_path / "model.pte"
    out.write_bytes(b"\0\0\0\0ET12 the previous export")
    with _building_slowly(out, sighup=signal.SIG_DFL) as process:
        process.send_signal(signum)
        stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + signum, stderr
    assert stderr.strip().splitlines()[-1] == f"export-guards: interrupted ({signal.Signals(signum).name})"
    assert "Traceback" not in stderr and stdout == ""
    assert not out.exists() and f"removed {out}: the run was interrupted" in stderr
    assert sorted(tmp_path.iterdir()) == [], "no temporary file is left"


@pytest.mark.subprocess
def test_sighup_stays_ignored_under_nohup(tmp_path: Path) -> None:
    with _building_slowly(tmp_path / "model.pte", sighup=signal.SIG_IGN) as process:
        process.send_signal(signal.SIGHUP)
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGTERM and stderr.strip().endswith("interrupted (SIGTERM)")


@pytest.mark.subprocess
@pytest.mark.parametrize(
    "args", [["rules"], ["explain", "EG101"], ["rules", "--output-format", "json"], ["lint", "--help"], ["--version"]]
)
def test_a_closed_pipe_ends_quietly(args: list[str], torchless: dict[str, str]) -> None:
    read, write = os.pipe()
    os.close(read)  # the reader has gone before the first write, as `| head -0` does
    try:
        done = subprocess.run(
            [*COMMAND, *args], stdout=write, stderr=subprocess.PIPE, text=True, env=torchless, timeout=120
        )
    finally:
        os.close(write)
    assert done.returncode == 0 and done.stderr == ""


def test_the_factory_is_looked_for_without_running_the_module(tmp_path: Path) -> None:
    plain = _write(
        tmp_path / "plain.py",
        "import torch as t\nif t:\n    from os import path as where\nfor i in range(1):\n    pass\ntry:\n    ok = 1\nexcept Exception as raised:\n    pass\n\ndef build():\n    global late\n    late = 1\n\nclass Net:\n    hidden = 1\n",
    )
    for name in ("t", "where", "i", "ok", "raised", "build", "late", "Net"):
        assert check_target(f"{plain}:{name}") == plain
    with pytest.raises(TargetError, match="defines no 'hidden'"):
        check_target(f"{plain}:hidden")  # a class attribute is no module name
    with pytest.raises(TargetError, match="did you mean 'build'"):
        check_target(f"{plain}:biuld")
    made = {
        "star.py": "from os.path import *\n",
        "getattr.py": "def __getattr__(name):\n    return len\n",
        "globals.py": "def make():\n    globals()['model'] = len\nmake()\n",
    }
    for file, source in made.items():
        path = _write(tmp_path / file, source)
        assert check_target(f"{path}:model") == path, f"{file} may make the name at run time: the import decides"


def test_the_torch_free_recipe_table_is_executorchs() -> None:
    """``settings.RECIPES`` against the recipe types in ExecuTorch's sources (read, not imported:
    a backend whose SDK is missing here still has its names) and the registry here. An older
    ExecuTorch lacks some backends' recipes (Arm's are new in 1.5): a recipe of those is known
    and cannot be made, and says why."""
    from export_guards.recipes import _RECIPE_PACKAGES, recipe_names, recipe_type

    root = Path(next(iter(importlib.util.find_spec("executorch").submodule_search_locations)))
    for prefix, (package, since) in _RECIPE_PACKAGES.items():
        folder = root.joinpath(*package.split(".")[1:])
        ours = {name for name in RECIPES if name.startswith(f"{prefix}_")}
        assert ours, f"RECIPES has no {prefix} recipe"
        if not folder.is_dir():
            with pytest.raises(
                ValueError,
                match=f"recipe '{min(ours)}' cannot be made here: {package} is not in this ExecuTorch: it is new in executorch {since}",
            ):
                recipe_type(min(ours))
            continue
        defined = set()
        for source in folder.glob("*recipe_types.py"):
            for node in ast.walk(ast.parse(source.read_text())):
                if isinstance(node, ast.ClassDef) and any("RecipeType" in ast.unparse(base) for base in node.bases):
                    defined |= {
                        s.value.value
                        for s in node.body
                        if isinstance(s, ast.Assign)
                        and isinstance(s.value, ast.Constant)
                        and isinstance(s.value.value, str)
                    }
        assert ours == defined, package
    assert set(recipe_names()) <= set(RECIPES)
