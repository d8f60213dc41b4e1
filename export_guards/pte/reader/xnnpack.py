"""What an XNNPACK delegate's payload says about its constant data: which tensors, how many
bytes each needs, and where they are (inline in the payload, or named data by key); and which
named data each convolution reads."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import final

from executorch.backends.xnnpack.serialization.xnnpack_graph_serialize import XNNHeader

from export_guards.pte.reader.flatc import DecodeError, generated_reader

__all__ = ["BACKEND_ID", "XnnConstant", "XnnConv", "XnnPayload", "read_payload"]

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
class XnnConv:
    """A 2-d convolution node: its kind (``XNNConv2d``, ``XNNDepthwiseConv2d``) and the
    named-data keys of its filter and bias (``""`` when inline or absent)."""

    kind: str
    filter_key: str
    bias_key: str


@final
@dataclass(frozen=True)
class XnnPayload:
    """A decoded payload: its constants, its convolutions, and the bounds of its inline
    constant data."""

    constants: tuple[XnnConstant, ...]
    constant_data_offset: int
    constant_data_size: int
    size: int
    convs: tuple[XnnConv, ...] = ()


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
    try:
        constants = _constants(graph)
        return XnnPayload(constants, *constant_data, len(data), _convs(graph, constants))
    except DecodeError:
        raise
    except Exception as error:  # a damaged flatbuffer fails in the reader in many ways
        raise DecodeError(f"its graph cannot be read: {type(error).__name__}: {error}") from None


def _constants(graph: bytes) -> tuple[XnnConstant, ...]:
    schema = generated_reader("executorch.backends.xnnpack.serialization", "schema.fbs")
    datatypes = {v: k for k, v in vars(schema.XNNDatatype).items() if not k.startswith("_")}
    root = schema.XNNGraph.GetRootAs(graph, 0)
    entries = [root.ConstantData(i) for i in range(root.ConstantDataLength())]
    constants = []
    for i in range(root.XvaluesLength()):
        value = root.Xvalues(i)
        kind, table = value.XvalueUnionType(), value.XvalueUnion()
        if table is None or kind == schema.XValueUnion.NONE:
            continue
        if kind == schema.XValueUnion.XNNQuantizedTensorValue:
            quantized = schema.XNNQuantizedTensorValue()
            quantized.Init(table.Bytes, table.Pos)
            tensor = quantized.TensorValue()
        else:
            tensor = schema.XNNTensorValue()
            tensor.Init(table.Bytes, table.Pos)
        if tensor is None or tensor.ConstantBufferIdx() == 0:
            continue  # not a constant
        index = tensor.ConstantBufferIdx()
        if index >= len(entries):
            raise DecodeError(f"value {tensor.IdOut()} uses constant {index}, of {len(entries)}")
        entry = entries[index]
        dims = tuple(int(tensor.Dims(j)) for j in range(tensor.DimsLength()))
        datatype = datatypes.get(tensor.Datatype(), f"datatype {tensor.Datatype()}")
        per_element = _ELEMENT_BYTES.get(datatype)
        nbytes = None if per_element is None else math.ceil(math.prod(dims) * per_element)
        key = entry.NamedKey()
        constants.append(
            XnnConstant(tensor.IdOut(), dims, datatype, nbytes, key.decode() if key else "", entry.Offset(), entry.Size())
        )
    return tuple(constants)


def _convs(graph: bytes, constants: tuple[XnnConstant, ...]) -> tuple[XnnConv, ...]:
    schema = generated_reader("executorch.backends.xnnpack.serialization", "schema.fbs")
    kinds = {schema.XNodeUnion.XNNConv2d: "XNNConv2d", schema.XNodeUnion.XNNDepthwiseConv2d: "XNNDepthwiseConv2d"}
    key_of = {c.value_id: c.named_key for c in constants}
    root = schema.XNNGraph.GetRootAs(graph, 0)
    convs = []
    for i in range(root.XnodesLength()):
        node = root.Xnodes(i)
        kind, table = node.XnodeUnionType(), node.XnodeUnion()
        if kind not in kinds or table is None:
            continue
        conv = schema._XNNNodeConv()
        conv.Init(table.Bytes, table.Pos)
        convs.append(XnnConv(kinds[kind], key_of.get(conv.FilterId(), ""), key_of.get(conv.BiasId(), "")))
    return tuple(convs)
