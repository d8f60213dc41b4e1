"""The operator table that ``export-guards check`` reads instead of torch
(``export_guards/pte/reader/schemas.py``): the shipped table is torch's live registry of the
installed versions, field by field, so it cannot go stale unseen (``make operator-table`` writes
it again); for other versions a table is built from the live registry once and read from the
user's cache from then on, without torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from export_guards.pte.reader import schemas
from export_guards.pte.reader.schema_registry import torch_with_executorch_operators

LIVE = """
import json
from export_guards.pte.reader.schema_registry import live_table
print(json.dumps(live_table()))
"""


@pytest.mark.subprocess
def test_the_shipped_table_is_the_live_registry() -> None:
    """Every operator torch and ExecuTorch register in a fresh interpreter (as a check that
    builds its own table sees them), as the table states it; and the versions it was made for
    are the installed ones (else a fresh check would build its own)."""
    document = json.loads(schemas.SHIPPED.read_text())
    assert document["versions"] == schemas.installed_versions(), (
        "run `make operator-table` after changing the pinned versions"
    )
    done = subprocess.run([sys.executable, "-c", LIVE], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    live = json.loads(done.stdout.splitlines()[-1])
    missing, extra = live.keys() - document["operators"].keys(), document["operators"].keys() - live.keys()
    assert not missing and not extra, (
        f"missing {sorted(missing)[:5]}, extra {sorted(extra)[:5]}: run `make operator-table`"
    )
    different = [key for key, row in live.items() if document["operators"][key] != row]
    assert not different, f"{len(different)} operators differ, {different[:5]}: run `make operator-table`"


def test_each_schema_is_torchs() -> None:
    """What a rule reads of an operator is what torch's own schema object says (the one torch's
    lookup by name and overload finds): arguments, their printed and element types, what they
    write; and whether the meta replay runs it."""
    torch = torch_with_executorch_operators()
    checked = 0
    for key in schemas._table():  # the table in use: shipped, or built for these versions (the compat tier's)
        name, _, overload = key.rpartition(".")
        theirs = next(s for s in torch._C._jit_get_schemas_for_operator(name) if s.overload_name == overload)
        ours = schemas.operator_schema(name, overload)
        assert ours is not None, key
        for mine, argument in zip(ours.arguments, theirs.arguments, strict=True):
            assert (mine.name, mine.type, mine.kwarg_only) == (
                argument.name,
                str(argument.type),
                argument.kwarg_only,
            ), key
            assert mine.written == (argument.alias_info is not None and argument.alias_info.is_write), key
            assert mine.optional == isinstance(argument.type, torch._C.OptionalType), key
        assert [r.type for r in ours.returns] == [str(r.type) for r in theirs.returns], key
        checked += 1
    assert checked > 2000
    convolution, relu = schemas.operator_schema("aten::convolution", "out"), schemas.operator_schema("aten::relu", "")
    assert convolution is not None and convolution.replayable and relu is not None and relu.replayable
    quantized = schemas.operator_schema("quantized_decomposed::quantize_per_tensor", "")
    assert quantized is not None and not quantized.replayable  # not a namespace the replay runs
    assert schemas.operator_schema("aten::no_such_operator", "out") is None


LOOKUP = """
import json, sys
from pathlib import Path
from export_guards.pte.reader import schemas
schemas.SHIPPED = Path(sys.argv[1])  # a table for other versions than the installed ones
schema = schemas.operator_schema("aten::add", "out")
print(json.dumps({"arguments": [a.name for a in schema.arguments], "torch": "torch" in sys.modules}))
"""


@pytest.mark.subprocess
def test_other_versions_build_the_table_once_then_read_it_from_the_cache(tmp_path: Path) -> None:
    """Where the shipped table is for other versions, the first lookup builds the table from the
    live registry (torch loads) and keeps it in the user's cache; the next process reads it
    there without torch."""
    stale = tmp_path / "stale.json"
    stale.write_text(json.dumps({"versions": {"torch": "0.0"}, "operators": {}}))
    environment = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    runs = [
        subprocess.run(
            [sys.executable, "-c", LOOKUP, str(stale)], capture_output=True, text=True, env=environment, timeout=600
        )
        for _ in range(2)
    ]
    first, second = (json.loads(run.stdout.splitlines()[-1]) for run in runs)
    assert first["arguments"] == second["arguments"] == ["self", "other", "alpha", "out"]
    assert first["torch"] and not second["torch"]
    (cached,) = (tmp_path / "cache" / "export-guards").glob("*.json")  # beside the tables' indexes
    assert json.loads(cached.read_text())["versions"] == schemas.installed_versions()
