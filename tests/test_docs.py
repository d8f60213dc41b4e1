"""The documented examples stay true: every ``python`` code block of the README and docs/ runs,
and prints nothing but what it means to (no library's warning, log line or print)."""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import logging
import re
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from export_guards.quiet import LIBRARIES, filter_known_noise

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FIRST_PAGES = {"README.md", "docs/getting-started.md"}  # what a newcomer copies into a fresh interpreter
BLOCK = re.compile(r"^( *)```python\n(.*?)^\1```", re.DOTALL | re.MULTILINE)
EXAMPLE = "<doc example>"
EXPECTED = re.compile(r'# .*?warns: "([^"]+)"')
NOISY = {"executorch", "torchao"}  # their first import prints torchao's start-up lines unless export_guards came first


def python_blocks(*, first_pages: bool | None = None) -> list[pytest.param]:
    blocks = []
    for page in PAGES:
        name = str(page.relative_to(ROOT))
        if first_pages is not None and (name in FIRST_PAGES) != first_pages:
            continue
        for number, match in enumerate(BLOCK.finditer(page.read_text()), start=1):
            indent = len(match.group(1))
            code = "\n".join(line[indent:] for line in match.group(2).splitlines())
            blocks.append(pytest.param(code, id=f"{name}#{number}"))
    return blocks


def test_the_docs_have_examples() -> None:
    assert len(python_blocks()) >= 5


@pytest.mark.parametrize("code", python_blocks())
def test_an_example_imports_export_guards_before_the_noisy_libraries(code: str) -> None:
    """``import export_guards`` first is what keeps torchao's start-up lines quiet, which an
    in-process run cannot see (the suite imported it long ago): each block shows it."""
    imported = [
        (alias.name if isinstance(node, ast.Import) else node.module or "").split(".")[0]
        for node in ast.walk(ast.parse(code)) if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in (node.names if isinstance(node, ast.Import) else node.names[:1])
    ]  # fmt: skip
    noisy = [name for name in imported if name in NOISY]
    if noisy:
        assert "export_guards" in imported and imported.index("export_guards") < imported.index(noisy[0]), (
            f"the example imports {noisy[0]} before export_guards: its first import prints torchao's start-up lines"
        )


@pytest.mark.slow  # most examples export and lower a model
@pytest.mark.parametrize("code", python_blocks(first_pages=False))
def test_documented_example_runs_quietly(code: str, trapdev: object) -> None:
    """In this process: the Python-level lines (a native library's start-up lines come once per
    process, so the newcomer's pages check those in a fresh interpreter). A line the example
    shows on purpose is named in it: ``# torch warns: "..."``."""
    with _library_noise() as noise:
        exec(compile(code, EXAMPLE, "exec"), {"__name__": "__doc_example__"})  # noqa: S102 - the docs' code blocks run as a reader runs them
    expected = EXPECTED.findall(code)
    noise = [line for line in noise if not any(text in line for text in expected)]
    assert not noise, "the example printed library noise:\n" + "\n".join(noise)


@pytest.mark.slow
@pytest.mark.parametrize("code", python_blocks(first_pages=True))
def test_a_first_page_example_runs_quietly_in_a_fresh_interpreter(code: str, tmp_path: Path) -> None:
    """As a newcomer runs it: a fresh interpreter, the libraries' start-up included."""
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    noise = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith("<string>:")]
    assert not noise, "the example printed library noise:\n" + done.stderr


@contextlib.contextmanager
def _library_noise() -> Iterator[list[str]]:
    """For the block: every warning raised inside a library, every log record at WARNING or
    above, and what the libraries' own code prints to ``sys.stdout``. What the example means to
    print is its own prints and the warnings a library gives at the example's line, about the
    call there (ExecuTorch's ``ExperimentalWarning`` on ``executorch.export``)."""
    filter_known_noise()  # as `import export_guards` left it (a test before may have shown the known lines: -v)
    noise: list[str] = []
    handler = _Recorder(noise)
    root = logging.getLogger()
    loggers = [root, *(logging.getLogger(name) for name in LIBRARIES)]
    stdout = sys.stdout
    with warnings.catch_warnings(record=True) as caught:
        for logger in loggers:
            logger.addHandler(handler)
        sys.stdout = _LibraryPrints(stdout, noise)
        try:
            yield noise
        finally:
            sys.stdout = stdout
            for logger in loggers:
                logger.removeHandler(handler)
    noise += [
        f"warning: {w.category.__name__}: {w.message} ({w.filename}:{w.lineno})"
        for w in caught
        if w.filename != EXAMPLE
    ]


class _Recorder(logging.Handler):
    def __init__(self, noise: list[str]) -> None:
        super().__init__(logging.WARNING)
        self.noise = noise
        self.seen: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record not in self.seen:  # a library's record that reaches the root logger too
            self.seen.append(record)
            self.noise.append(f"log {record.name}: {record.getMessage()}")


class _LibraryPrints:
    """``sys.stdout`` that notes what a library's Python code prints, and passes everything on."""

    def __init__(self, stream: object, noise: list[str]) -> None:
        self._stream, self._noise = stream, noise
        specs = [importlib.util.find_spec(name) for name in LIBRARIES]
        self._folders = tuple(
            f"{folder}/" for spec in specs if spec for folder in spec.submodule_search_locations or []
        )

    def write(self, text: str) -> int:
        if sys._getframe(1).f_code.co_filename.startswith(self._folders) and text.strip():
            self._noise.append(f"print: {text.strip()}")
        return self._stream.write(text)

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)
