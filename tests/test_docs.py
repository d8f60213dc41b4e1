"""The documented examples stay true: every ``python`` code block of the README and docs/ runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^( *)```python\n(.*?)^\1```", re.DOTALL | re.MULTILINE)


def python_blocks() -> list[pytest.param]:
    blocks = []
    for page in PAGES:
        for number, match in enumerate(BLOCK.finditer(page.read_text()), start=1):
            indent = len(match.group(1))
            code = "\n".join(line[indent:] for line in match.group(2).splitlines())
            blocks.append(pytest.param(code, id=f"{page.relative_to(ROOT)}#{number}"))
    return blocks


def test_the_docs_have_examples() -> None:
    assert len(python_blocks()) >= 5


@pytest.mark.slow  # most examples export and lower a model
@pytest.mark.parametrize("code", python_blocks())
def test_documented_example_runs(code: str, trapdev: object) -> None:
    exec(compile(code, "<doc example>", "exec"), {"__name__": "__doc_example__"})
