"""The fast XNNPACK graph reader (``reader/xnnpack_graph.py``) reads what the generated classes
read: the same tables and fields from the schema, the same payloads on a real export, and on
damaged graphs the same payload or the same error (it gives up, and they say what is wrong)."""

from __future__ import annotations

import random

import pytest

from export_guards.pte.reader import xnnpack
from export_guards.pte.reader.file import PteFile
from export_guards.pte.reader.flatc import DecodeError
from export_guards.pte.reader.headers import XNNHeader
from export_guards.pte.reader.xnnpack_graph import Unreadable, layout
from test_xnnpack_shapes import _zoo


@pytest.fixture(scope="module")
def payloads() -> list[bytes]:
    found = [d.data for d in PteFile(_zoo()).delegates if d.backend == xnnpack.BACKEND_ID and d.data]
    assert found
    return found


def _generated(data: bytes, monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """``read_payload`` with the generated classes alone (or its error's text)."""

    def give_up(graph: object) -> None:
        raise Unreadable

    with monkeypatch.context() as patch:
        patch.setattr(xnnpack, "_read_fast", give_up)
        patch.setattr(xnnpack, "_quantization_fast", give_up)
        return _read(data)


def _read(data: bytes) -> list[object]:
    """The payload and its quantization, or the errors' texts."""
    read: list[object] = []
    for reader in (xnnpack.read_payload, xnnpack.read_quantization):
        try:
            read.append(reader(data))
        except DecodeError as error:
            read.append(f"DecodeError: {error}")
    return read


def _graph(data: bytes) -> bytes:
    offset = int.from_bytes(data[XNNHeader.FLATBUFFER_OFFSET_OFFSET], "little")
    return data[offset : offset + int.from_bytes(data[XNNHeader.FLATBUFFER_SIZE_OFFSET], "little")]


def test_the_schema_is_laid_out_as_flatc_generates_it() -> None:
    schema = layout()
    assert schema is not None
    assert dict(schema.unions["XNodeUnion"]) == xnnpack._node_tables()
    assert {v: k for k, v in schema.enums["XNNDatatype"].items()} == xnnpack._datatype_names()
    for _, table in schema.unions["XNodeUnion"].values():
        assert xnnpack._fast_fields(table) == (xnnpack._id_fields(table), *xnnpack._param_fields(table)), table


def test_an_export_reads_alike(payloads: list[bytes], monkeypatch: pytest.MonkeyPatch) -> None:
    for data in payloads:
        values, _constants, nodes, _ = xnnpack._read_fast(_graph(data))  # it reads them, no giving up
        assert values and nodes
        assert _read(data) == _generated(data, monkeypatch)


def test_damaged_graphs_read_alike(payloads: list[bytes], monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(0)
    outcomes = set()
    for _ in range(150):
        data = bytearray(rng.choice(payloads))
        offset = int.from_bytes(data[XNNHeader.FLATBUFFER_OFFSET_OFFSET], "little")
        size = int.from_bytes(data[XNNHeader.FLATBUFFER_SIZE_OFFSET], "little")
        for _ in range(rng.choice((1, 2, 4))):
            data[rng.randrange(offset, offset + size)] = rng.randrange(256)
        fast, generated = _read(bytes(data)), _generated(bytes(data), monkeypatch)
        assert fast == generated
        outcomes.add(isinstance(fast[0], str))
    assert outcomes == {True, False}  # some damage is read, some refused
