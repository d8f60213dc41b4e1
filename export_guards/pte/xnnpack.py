"""What an XNNPACK delegate's payload says about its constant data: which tensors, how many
bytes each needs, and where they are (inline in the payload, or named data by key)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, final

from executorch.backends.xnnpack.serialization.xnnpack_graph_serialize import XNNHeader, _get_schema_bytes

from export_guards.pte.flatc import DecodeError, decode

__all__ = ["BACKEND_ID", "XnnConstant", "XnnPayload", "read_payload"]

BACKEND_ID = "XnnpackBackend"
NO_OFFSET = 2**64 - 1  # a constant held as named data has this offset

# Bytes per element of XNNPACK's datatypes (schema.fbs, XNNDatatype); 4-bit types hold two.
_ELEMENT_BYTES: dict[str, float] = {
    "xnn_datatype_fp32": 4, "xnn_datatype_fp16": 2, "xnn_datatype_bf16": 2, "xnn_datatype_pfp32": 4,
    "xnn_datatype_qint8": 1, "xnn_datatype_quint8": 1, "xnn_datatype_qcint8": 1, "xnn_datatype_qdint8": 1,
    "xnn_datatype_qint32": 4, "xnn_datatype_qcint32": 4, "xnn_datatype_int32": 4,
    "xnn_datatype_qcint4": 0.5, "xnn_datatype_qbint4": 0.5,
}  # fmt: skip


@final
@dataclass(frozen=True)
class XnnConstant:
    """A constant tensor of an XNNPACK graph.

    Attributes:
        value_id: the XNNPACK value id.
        dims: its shape.
        datatype: the XNNPACK datatype name.
        nbytes: the bytes XNNPACK reads for it (None for a datatype whose size is unknown).
        named_key: the named-data key holding it, or ``""`` when it is inline in the payload.
        offset: for an inline constant, its offset in the payload's constant data.
        size: the size the payload declares for it.
    """

    value_id: int
    dims: tuple[int, ...]
    datatype: str
    nbytes: int | None
    named_key: str
    offset: int
    size: int


@final
@dataclass(frozen=True)
class XnnPayload:
    """A decoded payload: its constants, and the bounds of its inline constant data."""

    constants: tuple[XnnConstant, ...]
    constant_data_offset: int
    constant_data_size: int
    size: int


def read_payload(data: bytes) -> XnnPayload:
    """Decode an XNNPACK payload with ExecuTorch's header class and XNNPACK's schema.

    Raises:
        DecodeError: the header or the flatbuffer is malformed, saying how.
    """
    if data[4:8] == XNNHeader.EXPECTED_MAGIC:
        try:
            header = XNNHeader.from_bytes(data[: XNNHeader.EXPECTED_LENGTH])
        except ValueError as error:
            raise DecodeError(str(error)) from None
        if not header.is_valid() or header.flatbuffer_offset + header.flatbuffer_size > len(data):
            raise DecodeError(
                f"its header puts the graph at {header.flatbuffer_offset}+{header.flatbuffer_size} "
                f"and constants at {header.constant_data_offset}, in {len(data)} bytes"
            )
        graph = data[header.flatbuffer_offset : header.flatbuffer_offset + header.flatbuffer_size]
        constant_data = (header.constant_data_offset, header.constant_data_size)
    else:  # an old payload: the graph alone
        graph, constant_data = data, (len(data), 0)
    document = decode((("schema.fbs", _get_schema_bytes()),), graph)
    try:
        return XnnPayload(_constants(document), *constant_data, len(data))
    except (TypeError, KeyError, ValueError, AttributeError) as error:
        raise DecodeError(f"unexpected graph contents: {error}") from None


def _constants(document: Any) -> tuple[XnnConstant, ...]:
    entries = document.get("constant_data") or []
    constants = []
    for value in document.get("xvalues") or []:
        tensor = value.get("xvalue_union") or {}
        tensor = tensor.get("tensor_value", tensor)  # a quantized tensor wraps a plain one
        index = int(tensor.get("constant_buffer_idx", 0))
        if index == 0:
            continue  # not a constant
        if index >= len(entries):
            raise ValueError(f"value {tensor.get('id_out')} uses constant {index} of {len(entries)}")
        entry = entries[index]
        dims = tuple(int(d) for d in tensor.get("dims") or [])
        per_element = _ELEMENT_BYTES.get(tensor.get("datatype", ""))
        numel = math.prod(dims)
        nbytes = None if per_element is None else math.ceil(numel * per_element)
        constants.append(
            XnnConstant(
                int(tensor.get("id_out", -1)),
                dims,
                str(tensor.get("datatype")),
                nbytes,
                str(entry.get("named_key") or ""),
                int(entry.get("offset", 0)),
                int(entry.get("size", 0)),
            )
        )
    return tuple(constants)
