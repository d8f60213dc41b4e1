"""What the program check keeps in the user's cache: the readers flatc generates (XNNPACK payloads,
``.ptd`` files), the program readers' compiled code and the tables' indexes. One that is damaged
is made again; where the cache cannot be written, what it would hold is made in memory."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from export_guards.pte.reader import flatc

SCHEMA = ("executorch.backends.xnnpack.serialization", "schema.fbs")


def fresh_reader() -> types.ModuleType:
    """``generated_reader`` as a new process calls it (its per-process cache bypassed)."""
    return flatc.generated_reader.__wrapped__(*SCHEMA)


def cached_files(root: Path) -> list[Path]:
    return sorted((root / "export-guards").glob("schema_*.py"))


def tables(module: types.ModuleType) -> set[str]:
    return {name for name, value in vars(module).items() if isinstance(value, type)}


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path


def test_a_reader_is_generated_once_and_imported_from_the_cache(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = fresh_reader()
    [kept] = cached_files(cache)
    assert first.__file__ == str(kept) and list((kept.parent / "__pycache__").glob(f"{kept.stem}.*.pyc"))

    def no_flatc(*args: object, **kwargs: object) -> None:
        raise AssertionError("flatc ran although its reader is in the cache")

    monkeypatch.setattr(flatc.subprocess, "run", no_flatc)
    again = fresh_reader()
    assert again.__file__ == str(kept) and tables(again) == tables(first) and "XNNGraph" in tables(again)


def test_a_damaged_cached_reader_is_generated_again(cache: Path) -> None:
    fresh_reader()
    [kept] = cached_files(cache)
    text = kept.read_text()
    kept.write_text(text.replace("class XNNGraph", "class Damaged", 1))
    again = fresh_reader()
    assert "XNNGraph" in tables(again) and kept.read_text() == text  # generated anew, and kept whole
    (kept.parent / "__pycache__" / next(p.name for p in (kept.parent / "__pycache__").iterdir())).write_bytes(
        b"not bytecode"
    )
    assert "XNNGraph" in tables(fresh_reader())


def test_without_a_writable_cache_the_reader_is_generated_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = tmp_path / "a file"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))  # no folder can be made under it
    module = fresh_reader()
    assert "XNNGraph" in tables(module) and not hasattr(module, "__file__")


def test_a_damaged_cached_program_reader_is_compiled_again(cache: Path) -> None:
    from export_guards.pte.reader import program_table

    source = "def answer():\n    return 42\n"
    program_table._compiled(source)
    [kept] = sorted((cache / "export-guards").glob("program_readers_*.marshal"))
    whole = kept.read_bytes()
    kept.write_bytes(whole[:-4] + b"\0\0\0\0")
    space: dict[str, object] = {}
    exec(program_table._compiled(source), space)  # noqa: S102
    answer = space["answer"]
    assert callable(answer) and answer() == 42 and kept.read_bytes() == whole  # compiled again, kept whole again


def test_a_table_is_read_through_its_cached_index_row_by_row(cache: Path) -> None:
    """The operator and kernel tables: each row as the JSON holds it, from an index kept in the
    cache (a damaged one is built again); none for other versions."""
    import json

    from export_guards.pte.reader import schemas, version_tables

    document = json.loads(schemas.SHIPPED.read_bytes())
    versions = document["versions"]
    rows = version_tables.read_table(schemas.SHIPPED, versions, "operators")
    assert rows is not None and dict(rows.items()) == document["operators"]
    [kept] = sorted((cache / "export-guards" / "indexes").glob("operator_schemas-*.marshal"))
    whole = kept.read_bytes()
    kept.write_bytes(whole[:100] + b"\xff" * 8 + whole[108:])
    again = version_tables.read_table(schemas.SHIPPED, versions, "operators")
    assert (
        again is not None
        and again["aten::add.out"] == document["operators"]["aten::add.out"]
        and kept.read_bytes() == whole
    )
    assert version_tables.read_table(schemas.SHIPPED, {**versions, "torch": "0.0.1"}, "operators") is None
