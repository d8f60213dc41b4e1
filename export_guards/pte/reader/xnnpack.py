"""What an XNNPACK delegate's payload says: its constant data (which tensors, how many bytes
each needs, and where they are: inline in the payload, or named data by key), which named data
each convolution reads, the values it binds to the delegate call's arguments (external ones),
and which values each node reads and writes."""

from __future__ import annotations

import functools
import math
import re
import struct
import types
from dataclasses import dataclass
from typing import Any, final

from export_guards.pte.reader.file import verified_reader
from export_guards.pte.reader.flatc import DecodeError, generated_reader
from export_guards.pte.reader.headers import XNNHeader
from export_guards.pte.reader.wheel import read_resource
from export_guards.pte.reader.xnnpack_graph import Table, Unreadable, layout

__all__ = [
    "BACKEND_ID",
    "ELEMENT_BYTES",
    "GRAPH_IDENTIFIERS",
    "XnnConstant",
    "XnnConv",
    "XnnNode",
    "XnnPayload",
    "XnnQuantization",
    "XnnValue",
    "is_xnnpack_payload",
    "read_payload",
    "read_quantization",
]

BACKEND_ID = "XnnpackBackend"
GRAPH_IDENTIFIERS = (b"XN00", b"XN01")  # the flatbuffer identifiers XNNCompiler.cpp takes
NO_OFFSET = 2**64 - 1  # a constant held as named data has this offset
INVALID_ID = 2**32 - 1  # XNN_INVALID_VALUE_ID: no external id, or an optional operand left out
EXTERNAL_INPUT, EXTERNAL_OUTPUT = 1, 2  # XNN_VALUE_FLAG_EXTERNAL_*: the only flags the runtime takes
_OUTPUT_FIELDS = frozenset({"OutputId", "OutputIndexId", "OutputValueId"})
TRANSPOSE_WEIGHTS = 1  # XNN_FLAG_TRANSPOSE_WEIGHTS: a fully connected filter stored [in, out]

# Bytes per element of XNNPACK's datatypes (schema.fbs, XNNDatatype); 4-bit types hold two.
ELEMENT_BYTES: dict[str, float] = {
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
class XnnValue:
    """A tensor value of an XNNPACK graph.

    Attributes:
        value_id: its id (``id_out``), which nodes use.
        external_id: the delegate call argument it binds to (``INVALID_ID`` when internal).
        flags: ``EXTERNAL_INPUT`` / ``EXTERNAL_OUTPUT`` bits (and any others the file holds).
        datatype: the XNNPACK datatype name.
        dims: its shape.
        constant: whether it holds constant data.
    """

    value_id: int
    external_id: int
    flags: int
    datatype: str
    dims: tuple[int, ...]
    constant: bool


@final
@dataclass(frozen=True)
class XnnNode:
    """A node of an XNNPACK graph: its kind (``XNNConv2d``), its operands as ``(field, value
    id)`` pairs (``("FilterId", 2)``; optional operands left out are not listed), and its other
    fields as ``(field, number or tuple of numbers)`` pairs (``("Flags", 0)``, ``("Perm", (0, 2, 3, 1))``)."""

    kind: str
    operands: tuple[tuple[str, int], ...]
    params: tuple[tuple[str, float | tuple[float, ...]], ...] = ()

    @property
    def reads(self) -> tuple[int, ...]:
        return tuple(value for field, value in self.operands if field not in _OUTPUT_FIELDS)

    @property
    def writes(self) -> tuple[int, ...]:
        return tuple(value for field, value in self.operands if field in _OUTPUT_FIELDS)

    def operand(self, field: str) -> int | None:
        return next((value for name, value in self.operands if name == field), None)

    def output_channels(self, filter_dims: tuple[int, ...]) -> int | None:
        """The output channels a fully connected or convolution node computes with a filter of
        these dims (what it reads of its bias), or None for another kind of node."""
        if self.kind == "XNNFullyConnected" and len(filter_dims) == 2:
            return filter_dims[1] if self.param("Flags") & TRANSPOSE_WEIGHTS else filter_dims[0]
        groups, per_group = self.param("Groups"), self.param("GroupOutputChannels")
        if self.kind in ("XNNConv2d", "XNNDepthwiseConv2d", "XNNConvTranspose2d") and groups and per_group:
            return groups * per_group
        return None

    def param(self, field: str) -> Any:
        """The field's number (or tuple of numbers, for a list), or None if the node has none."""
        return next((value for name, value in self.params if name == field), None)


@final
@dataclass(frozen=True)
class XnnPayload:
    """A decoded payload: its constants, its convolutions, the bounds of its inline constant
    data, its values and nodes in order, the number of external values it declares, and the
    length its header states (which the runtime ignores)."""

    constants: tuple[XnnConstant, ...]
    constant_data_offset: int
    constant_data_size: int
    size: int
    convs: tuple[XnnConv, ...] = ()
    values: tuple[XnnValue, ...] = ()
    nodes: tuple[XnnNode, ...] = ()
    num_externs: int = 0
    header_length: int = XNNHeader.EXPECTED_LENGTH

    def bias_elements(self) -> dict[int, int]:
        """Each constant used only as a bias -> the elements XNNPACK reads of it (its node's
        output channels), which need not be its dims' count."""
        dims = {v.value_id: v.dims for v in self.values}
        uses: dict[int, list[int | None]] = {}
        for node in self.nodes:
            bias, filter_ = node.operand("BiasId"), node.operand("FilterId")
            for field, value in node.operands:
                if field != "BiasId":
                    uses.setdefault(value, []).append(None)
            if bias is not None:
                uses.setdefault(bias, []).append(
                    node.output_channels(dims.get(filter_, ())) if filter_ is not None else None
                )
        return {value: max(counts) for value, counts in uses.items() if None not in counts}  # type: ignore[type-var]


@final
@dataclass(frozen=True)
class XnnQuantization:
    """How a quantized value of an XNNPACK graph maps its integers to reals.

    Attributes:
        kind: ``"per_tensor"``, ``"per_channel"``, ``"per_channel_group"`` or ``"per_token"``.
        scales: the scale (one, per tensor) or scales (one per channel) when the graph holds
            them inline; ``()`` when they are named data (``scale_key``) or dynamic.
        scale_key: the named-data key of its scales (``"scale_<sha256>"``), else ``""``.
        channel_dim: the dimension the scales run along (per channel).
        zero_point: the zero point (per tensor; 0 otherwise).
    """

    kind: str
    scales: tuple[float, ...] = ()
    scale_key: str = ""
    channel_dim: int = 0
    zero_point: int = 0


def read_quantization(data: bytes) -> dict[int, XnnQuantization]:
    """Each quantized value of the payload's graph (by value id) and its quantization, for a
    payload that :func:`read_payload` reads.

    Raises:
        DecodeError: the graph cannot be read, saying how.
    """
    if data[4:8] == XNNHeader.EXPECTED_MAGIC:
        offset = int.from_bytes(data[XNNHeader.FLATBUFFER_OFFSET_OFFSET], "little")
        graph = data[offset : offset + int.from_bytes(data[XNNHeader.FLATBUFFER_SIZE_OFFSET], "little")]
    else:
        graph = data
    try:
        return _quantization_fast(graph)
    except Unreadable:
        pass  # the generated classes read it, and say what is wrong in their words
    schema = _schema()
    kinds = {
        schema.XNNQuantParams.PerTensorQuant: "per_tensor",
        schema.XNNQuantParams.PerChannelQuant: "per_channel",
        schema.XNNQuantParams.PerChannelGroupQuant: "per_channel_group",
        schema.XNNQuantParams.PerTokenDynamicQuant: "per_token",
    }
    found: dict[int, XnnQuantization] = {}
    try:
        with verified_reader():
            root = schema.XNNGraph.GetRootAs(graph, 0)
            for i in range(root.XvaluesLength()):
                value = root.Xvalues(i)
                if value.XvalueUnionType() != schema.XValueUnion.XNNQuantizedTensorValue or value.XvalueUnion() is None:
                    continue
                quantized = schema.XNNQuantizedTensorValue()
                quantized.Init(value.XvalueUnion().Bytes, value.XvalueUnion().Pos)
                kind, table = quantized.QuantParamsType(), quantized.QuantParams()
                if kind not in kinds or table is None:
                    continue
                found[quantized.TensorValue().IdOut()] = _quantization(schema, root, kinds[kind], table)
    except Exception as error:  # noqa: BLE001 - a damaged flatbuffer fails in the reader in many ways
        raise DecodeError(f"its graph's quantization cannot be read: {type(error).__name__}: {error}") from None
    return found


_QUANT_KINDS = {
    "PerTensorQuant": "per_tensor",
    "PerChannelQuant": "per_channel",
    "PerChannelGroupQuant": "per_channel_group",
    "PerTokenDynamicQuant": "per_token",
}


def _quantization_fast(graph: Any) -> dict[int, XnnQuantization]:
    """:func:`read_quantization`'s answer read with ``struct`` on the buffer (``xnnpack_graph``).

    Raises:
        Unreadable: anything this reader does not read as the generated classes do.
    """
    schema = layout()
    if schema is None or len(graph) < 4:
        raise Unreadable
    try:
        tables, unions = schema.tables, schema.unions
        quantized_tag = next(
            tag for tag, (name, _) in unions["XValueUnion"].items() if name == "XNNQuantizedTensorValue"
        )
        kinds = {tag: (_QUANT_KINDS[name], table) for tag, (name, table) in unions["XNNQuantParams"].items()}
        root = Table(graph, int.from_bytes(graph[0:4], "little"), tables["XNNGraph"])
        found: dict[int, XnnQuantization] = {}
        for value in root.tables("Xvalues", tables["XValue"]):
            if value.get("XvalueUnionType") != quantized_tag:
                continue
            quantized = value.table("XvalueUnion", tables["XNNQuantizedTensorValue"])
            if quantized is None:
                continue
            kind, table_name = kinds.get(quantized.get("QuantParamsType"), (None, None))
            params = quantized.table("QuantParams", tables[table_name] if table_name else {})
            if kind is None or params is None:
                continue
            tensor = quantized.table("TensorValue", tables["XNNTensorValue"])
            if tensor is None:
                raise Unreadable
            found[tensor.get("IdOut")] = _params_fast(root, tables, kind, params)
        return found
    except (KeyError, TypeError, UnicodeDecodeError, StopIteration, struct.error) as error:
        raise Unreadable from error


def _params_fast(root: Table, tables: dict[str, Any], kind: str, params: Table) -> XnnQuantization:
    if kind == "per_tensor":
        return XnnQuantization(kind, (params.get("Scale"),), zero_point=params.get("ZeroPoint"))
    if kind == "per_token":
        return XnnQuantization(kind)
    scales, index, key = params.numbers("Scale"), params.get("ScaleBufferIdx"), ""
    if index:
        entries = root.tables("ConstantData", tables["ConstantDataOffset"])
        if index < len(entries):
            key = (entries[index].string("NamedKey") or b"").decode()
    return XnnQuantization(kind, tuple(scales), key, params.get("ChannelDim"))


def _quantization(schema: types.ModuleType, root: object, kind: str, table: object) -> XnnQuantization:
    if kind == "per_tensor":
        params = schema.PerTensorQuant()
        params.Init(table.Bytes, table.Pos)
        return XnnQuantization(kind, (float(params.Scale()),), zero_point=int(params.ZeroPoint()))
    if kind == "per_token":
        return XnnQuantization(kind)
    params = schema.PerChannelQuant() if kind == "per_channel" else schema.PerChannelGroupQuant()
    params.Init(table.Bytes, table.Pos)
    scales = tuple(float(params.Scale(k)) for k in range(params.ScaleLength()))
    key = ""
    if params.ScaleBufferIdx() and params.ScaleBufferIdx() < root.ConstantDataLength():
        key = (root.ConstantData(params.ScaleBufferIdx()).NamedKey() or b"").decode()
    return XnnQuantization(kind, scales, key, int(params.ChannelDim()))


def is_xnnpack_payload(data: bytes | None) -> bool:
    """Whether ``data`` starts as ExecuTorch's XNNPACK serializer writes a payload: the 'XH00'
    header and, at the offset it states, a graph with an XNNPACK identifier."""
    if not data or len(data) < XNNHeader.EXPECTED_LENGTH or data[4:8] != XNNHeader.EXPECTED_MAGIC:
        return False
    offset = int.from_bytes(data[XNNHeader.FLATBUFFER_OFFSET_OFFSET], "little")
    return bytes(data[offset + 4 : offset + 8]) in GRAPH_IDENTIFIERS


def read_payload(data: bytes) -> XnnPayload:
    """Decode an XNNPACK payload with ExecuTorch's header class and XNNPACK's schema.

    Raises:
        DecodeError: the header or the flatbuffer is malformed, saying how.
    """
    if data[4:8] == XNNHeader.EXPECTED_MAGIC:
        if len(data) < XNNHeader.EXPECTED_LENGTH:
            raise DecodeError(f"its header needs {XNNHeader.EXPECTED_LENGTH} bytes; the payload has {len(data)}")
        # Read at the fixed offsets, as the runtime does: it never reads the length field.
        field = lambda part: int.from_bytes(data[part], "little")  # noqa: E731
        header_length = field(XNNHeader.HEADER_SIZE_OFFSET)
        offset, size = field(XNNHeader.FLATBUFFER_OFFSET_OFFSET), field(XNNHeader.FLATBUFFER_SIZE_OFFSET)
        constant_offset, constant_size = (
            field(XNNHeader.CONSTANT_DATA_OFFSET_OFFSET),
            field(XNNHeader.CONSTANT_DATA_SIZE_OFFSET),
        )
        if size < 8 or offset + size > len(data) or constant_offset < offset + size:
            raise DecodeError(
                f"its header puts the graph at {offset}+{size} and constants at {constant_offset}, in {len(data)} bytes"
            )
        graph = data[offset : offset + size]
        constant_data = (constant_offset, constant_size)
        stated = f" (its header states {size} bytes of graph, at byte {offset})"
    else:  # an old payload: the graph alone
        graph, constant_data, header_length = data, (len(data), 0), XNNHeader.EXPECTED_LENGTH
        stated = ""
    identifier = bytes(graph[4:8])
    if identifier not in GRAPH_IDENTIFIERS:
        raise DecodeError(
            f"its graph's identifier is {identifier!r}, not XN00 or XN01: the XNNPACK runtime refuses it "
            f"(DelegateInvalidCompatibility)"
        )
    try:
        values, constants, nodes, num_externs = _read_fast(graph)
        return XnnPayload(
            constants, *constant_data, len(data), _convs(nodes, constants), values, nodes, num_externs, header_length
        )
    except Unreadable:
        pass  # the generated classes read it, and say what is wrong in their words
    try:
        with (
            verified_reader()
        ):  # strings and their NUL inside the graph's stated size, as the runtime's verifier reads them
            root = _schema().XNNGraph.GetRootAs(graph, 0)
            buffer_index: dict[int, int] = {}
            values = _values(root, buffer_index)
            constants = _constants(root, values, buffer_index)
            nodes = _nodes(root)
            _verify_the_rest(root)
        return XnnPayload(
            constants,
            *constant_data,
            len(data),
            _convs(nodes, constants),
            values,
            nodes,
            root.NumExterns(),
            header_length,
        )
    except DecodeError:
        raise
    except Exception as error:  # noqa: BLE001 - a damaged flatbuffer fails in the reader in many ways
        raise DecodeError(f"its graph cannot be read{stated}: {type(error).__name__}: {error}") from None


def _read_fast(graph: Any) -> tuple[tuple[XnnValue, ...], tuple[XnnConstant, ...], tuple[XnnNode, ...], int]:
    """The graph's values, constants, nodes and external count, read with ``struct`` on the
    buffer (``xnnpack_graph``): the same values as the generated classes read, several times
    faster, without numpy.

    Raises:
        Unreadable: anything this reader does not read as the generated classes do.
    """
    schema = layout()
    if schema is None or len(graph) < 4:
        raise Unreadable
    try:
        tables = schema.tables
        root = Table(graph, int.from_bytes(graph[0:4], "little"), tables["XNNGraph"])
        root.string("Version")  # read by the runtime's verifier, as _verify_the_rest reads it
        root.numbers("InputIds"), root.numbers("OutputIds")
        buffer_index: dict[int, int] = {}
        values = _fast_values(schema, root, buffer_index)
        entries = root.tables("ConstantData", tables["ConstantDataOffset"])
        constants = []
        for value in values:
            if value.constant:
                if buffer_index[value.value_id] >= len(entries):
                    raise Unreadable  # the generated classes' reading names the index
                entry = entries[buffer_index[value.value_id]]
                key = (entry.string("NamedKey") or b"").decode()
                constants.append(
                    XnnConstant(
                        value.value_id,
                        value.dims,
                        value.datatype,
                        _nbytes(value),
                        key,
                        entry.get("Offset"),
                        entry.get("Size"),
                    )
                )
        return values, tuple(constants), _fast_nodes(schema, root), root.get("NumExterns")
    except (KeyError, TypeError, UnicodeDecodeError, struct.error) as error:
        raise Unreadable from error


def _fast_values(schema: Any, root: Table, buffer_index: dict[int, int]) -> tuple[XnnValue, ...]:
    tables = schema.tables
    datatypes = {v: k for k, v in schema.enums["XNNDatatype"].items()}
    quantized, plain = tables["XNNQuantizedTensorValue"], tables["XNNTensorValue"]
    quantized_tag = next(
        tag for tag, (name, _) in schema.unions["XValueUnion"].items() if name == "XNNQuantizedTensorValue"
    )
    values = []
    for value in root.tables("Xvalues", tables["XValue"]):
        kind = value.get("XvalueUnionType")
        tensor = value.table("XvalueUnion", quantized if kind == quantized_tag else plain)
        if tensor is None or kind == 0:
            continue
        if kind == quantized_tag:
            tensor = tensor.table("TensorValue", plain)
            if tensor is None:
                raise Unreadable
        value_id, index, datatype = tensor.get("IdOut"), tensor.get("ConstantBufferIdx"), tensor.get("Datatype")
        dims = tensor.numbers("Dims")
        values.append(
            XnnValue(
                value_id,
                tensor.get("ExternalId"),
                tensor.get("Flags"),
                datatypes.get(datatype, f"datatype {datatype}"),
                dims,
                index != 0,
            )
        )
        if index:
            buffer_index[value_id] = index
    return tuple(values)


def _fast_nodes(schema: Any, root: Table) -> tuple[XnnNode, ...]:
    tables = schema.tables
    kinds = {tag: (name, table) for tag, (name, table) in schema.unions["XNodeUnion"].items()}
    nodes = []
    for node in root.tables("Xnodes", tables["XNode"]):
        kind = node.get("XnodeUnionType")
        name, table_name = kinds.get(kind, (f"node type {kind}", None))
        fields = node.table(
            "XnodeUnion", tables[table_name] if table_name is not None else {}
        )  # read whatever its kind, as _nodes reads it
        if fields is None or table_name is None:
            nodes.append(XnnNode(name, ()))
            continue
        ids, scalars, lists = _fast_fields(table_name)
        operands = tuple((field, value) for field in ids if (value := fields.get(field)) != INVALID_ID)
        params = tuple((field, fields.get(field)) for field in scalars) + tuple(
            (field, fields.numbers(field)) for field in lists
        )
        nodes.append(XnnNode(name, operands, params))
    return tuple(nodes)


@functools.cache
def _fast_fields(table_name: str) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """A node table's id fields, other scalar fields and lists, each sorted, as ``_id_fields``
    and ``_param_fields`` name them from the generated class."""
    fields = layout().tables[table_name]  # type: ignore[union-attr]
    ids = sorted(name for name, f in fields.items() if name.endswith("Id"))
    if any(len(fields[name].kind) != 1 or fields[name].kind in "fd?" for name in ids):
        raise KeyError(table_name)  # an id that is not an integer: the generated classes read it
    lists = sorted(name for name, f in fields.items() if f.kind.startswith("["))
    scalars = sorted(name for name in fields if name not in ids and name not in lists)
    if any(len(fields[name].kind) != 1 for name in scalars):
        raise KeyError(table_name)  # a string or table among a node's fields
    return tuple(ids), tuple(scalars), tuple(lists)


def _nbytes(value: XnnValue) -> int | None:
    per_element = ELEMENT_BYTES.get(value.datatype)
    return None if per_element is None else math.ceil(math.prod(value.dims) * per_element)


def _verify_the_rest(root: object) -> None:
    """Read the graph's fields that no rule uses but the runtime's flatbuffer verifier checks:
    its version string (the last bytes ExecuTorch's serializer writes, so a flatbuffer size
    stated a few bytes short cuts it) and its input and output id lists."""
    root.Version()
    for vector in ("InputIds", "OutputIds"):
        if getattr(root, f"{vector}Length")():
            getattr(root, f"{vector}AsNumpy")()


def _constants(root: object, values: tuple[XnnValue, ...], buffer_index: dict[int, int]) -> tuple[XnnConstant, ...]:
    """The constant values, with where their bytes are (``buffer_index``: value id -> entry)."""
    entries = [root.ConstantData(i) for i in range(root.ConstantDataLength())]
    constants = []
    for value in values:
        if not value.constant:
            continue
        index = buffer_index[value.value_id]
        if index >= len(entries):
            raise DecodeError(f"value {value.value_id} uses constant {index}, of {len(entries)}")
        entry = entries[index]
        per_element = ELEMENT_BYTES.get(value.datatype)
        nbytes = None if per_element is None else math.ceil(math.prod(value.dims) * per_element)
        key = entry.NamedKey()
        constants.append(
            XnnConstant(
                value.value_id,
                value.dims,
                value.datatype,
                nbytes,
                key.decode() if key else "",
                entry.Offset(),
                entry.Size(),
            )
        )
    return tuple(constants)


def _convs(nodes: tuple[XnnNode, ...], constants: tuple[XnnConstant, ...]) -> tuple[XnnConv, ...]:
    key_of = {c.value_id: c.named_key for c in constants}
    return tuple(
        XnnConv(node.kind, key_of.get(node.operand("FilterId"), ""), key_of.get(node.operand("BiasId"), ""))  # type: ignore[arg-type]
        for node in nodes
        if node.kind in ("XNNConv2d", "XNNDepthwiseConv2d")
    )


@functools.cache
def _schema() -> types.ModuleType:
    return generated_reader("executorch.backends.xnnpack.serialization", "schema.fbs")


def _tensor_value(schema: types.ModuleType, value: object) -> object | None:
    """The ``XNNTensorValue`` of an ``XValue`` (a quantized one wraps it), or None."""
    kind, table = value.XvalueUnionType(), value.XvalueUnion()
    if table is None or kind == schema.XValueUnion.NONE:
        return None
    if kind == schema.XValueUnion.XNNQuantizedTensorValue:
        quantized = schema.XNNQuantizedTensorValue()
        quantized.Init(table.Bytes, table.Pos)
        return quantized.TensorValue()
    tensor = schema.XNNTensorValue()
    tensor.Init(table.Bytes, table.Pos)
    return tensor


def _values(root: object, buffer_index: dict[int, int]) -> tuple[XnnValue, ...]:
    """Every tensor value; ``buffer_index`` receives each constant's constant-data entry."""
    schema = _schema()
    datatypes = _datatype_names()
    values = []
    for i in range(root.XvaluesLength()):
        tensor = _tensor_value(schema, root.Xvalues(i))
        if tensor is None:
            continue
        value_id, index = tensor.IdOut(), tensor.ConstantBufferIdx()
        dims = tuple(int(d) for d in tensor.DimsAsNumpy()) if tensor.DimsLength() else ()
        datatype = datatypes.get(tensor.Datatype(), f"datatype {tensor.Datatype()}")
        values.append(XnnValue(value_id, tensor.ExternalId(), tensor.Flags(), datatype, dims, index != 0))
        if index:
            buffer_index[value_id] = index
    return tuple(values)


@functools.cache
def _datatype_names() -> dict[int, str]:
    return {v: k for k, v in vars(_schema().XNNDatatype).items() if not k.startswith("_")}


def _nodes(root: object) -> tuple[XnnNode, ...]:
    schema = _schema()
    tables = _node_tables()
    nodes = []
    for i in range(root.XnodesLength()):
        node = root.Xnodes(i)
        kind, table = node.XnodeUnionType(), node.XnodeUnion()
        name, table_name = tables.get(kind, (f"node type {kind}", None))
        if table is None or table_name is None:
            nodes.append(XnnNode(name, ()))
            continue
        fields = getattr(schema, table_name)()
        fields.Init(table.Bytes, table.Pos)
        operands = ((field, int(getattr(fields, field)())) for field in _id_fields(table_name))
        scalars, lists = _param_fields(table_name)
        params = tuple((field, getattr(fields, field)()) for field in scalars)
        params += tuple(
            (field, tuple(getattr(fields, field)(k) for k in range(getattr(fields, f"{field}Length")())))
            for field in lists
        )
        nodes.append(XnnNode(name, tuple((field, value) for field, value in operands if value != INVALID_ID), params))
    return tuple(nodes)


@functools.cache
def _node_tables() -> dict[int, tuple[str, str | None]]:
    """Each node kind's union tag -> (its name, the schema table that holds its fields), read
    from the schema's ``union XNodeUnion`` (``XNNAdd: _XNNNode2x1``, or a table of its own)."""
    text = read_resource("executorch.backends.xnnpack.serialization", "schema.fbs").decode()
    body = re.search(r"union\s+XNodeUnion\s*\{(.*?)\}", text, re.DOTALL)
    members = {}
    for member in (body.group(1) if body else "").split(","):
        line = re.sub(r"//.*", "", member).strip()
        if line:
            name, _, table = (part.strip() for part in line.partition(":"))
            members[name] = table or name
    tags = {k: v for k, v in vars(_schema().XNodeUnion).items() if not k.startswith("_")}
    return {tag: (name, members.get(name)) for name, tag in tags.items() if name != "NONE"}


@functools.cache
def _id_fields(table_name: str) -> tuple[str, ...]:
    """The accessors of a node table that return one value id (``Input1Id``, ``FilterId``, ``OutputId``)."""
    table = getattr(_schema(), table_name)
    return tuple(sorted(name for name in dir(table) if name.endswith("Id") and not name.startswith("_")))


@functools.cache
def _param_fields(table_name: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A node table's other accessors: those of one number (``Flags``, ``KernelHeight``) and
    those of a list of numbers (``Perm``, ``NewShape``), told apart by the ``...Length`` that
    flatc generates for a list."""
    table = getattr(_schema(), table_name)
    names = {name for name in dir(table) if name[:1].isupper() and not name.startswith(("GetRootAs", "Init"))}
    lists = {name for name in names if f"{name}Length" in names}
    helpers = {f"{name}{suffix}" for name in lists for suffix in ("Length", "AsNumpy", "IsNone")}
    scalars = (
        names - lists - helpers - set(_id_fields(table_name)) - {n for n in names if n.endswith("BufferHasIdentifier")}
    )
    return tuple(sorted(scalars)), tuple(sorted(lists))
