"""Embeddings whose table torchao quantized (``quantize_(model, IntxWeightOnlyConfig(...),
filter_fn=<nn.Embedding>)``), and the quantized embedding kernel of ExecuTorch that computes each.

An edge program reads such a table as ``embedding(dequantize_affine(codes, [1, group], scale,
zero_point, dtype, qmin, qmax), indices)``. No kernel runs ``torchao::dequantize_affine``, and
ExecuTorch's quantized kernel library has one op for the pattern: ``quantized_decomposed::
embedding_byte`` (int8 or uint8 codes), ``embedding_4bit`` (two codes a byte: the even column in
the high nibble, each stored plus 8) and ``embedding_2bit`` (four a byte, the first column in the
low bits, each stored plus 2), each computing ``(code - zero_point) * scale`` per row or per group
of a row, in float32 as ``dequantize_affine`` does. :func:`quantized_embeddings` finds each such
embedding and what the kernel reads for it (:class:`EmbeddingKernel`); the guard pass
(``passes/quantized_embedding.py``, EG408) rewrites it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast, final

import torch
from torch.export import ExportedProgram
from torch.fx import Node

from export_guards.analysis.ops import aten_name, input_node
from export_guards.analysis.programs import ConstantKind, ProgramConstant, iter_constants

__all__ = ["EmbeddingKernel", "QuantizedEmbedding", "pack_codes", "quantized_embeddings"]

KERNEL_DTYPES = (torch.float32, torch.float16)
"""The scale, zero point and output dtypes the quantized embedding kernels compute in."""

_OFFSET = {2: 2, 4: 8}
"""What the 2- and 4-bit kernels subtract from each stored code (they store it unsigned)."""


@final
@dataclass(frozen=True)
class EmbeddingKernel:
    """What ExecuTorch's quantized embedding kernel reads for one table.

    Attributes:
        bits: 8, 4 or 2: ``embedding_byte``, ``embedding_4bit``, ``embedding_2bit``.
        codes: the table as the kernel reads it: ``[rows, columns * bits / 8]``, the codes as
            they are for 8 bits, packed for 4 and 2.
        scale: one per row (``[rows, 1]``) or per group of a row (``[rows, groups]``).
        zero_point: as ``scale``, in its dtype; ``None`` where every zero point is 0.
        quant_min, quant_max: the code range the kernel is told (the 2- and 4-bit kernels
            require their own: -2..1, -8..7).
        out_dtype: the embedding's dtype; the ``.dtype`` overload is used where it is not the
            scale's.
    """

    bits: int
    codes: torch.Tensor
    scale: torch.Tensor
    zero_point: torch.Tensor | None
    quant_min: int
    quant_max: int
    out_dtype: torch.dtype

    @property
    def op_name(self) -> str:
        return "embedding_byte" if self.bits == 8 else f"embedding_{self.bits}bit"


@final
@dataclass(frozen=True)
class QuantizedEmbedding:
    """One embedding of a quantized table.

    Attributes:
        embedding: the ``aten.embedding`` node.
        dequantize: the ``dequantize_affine`` node it reads its table from.
        sources: the constants ``dequantize`` reads (codes, scale, zero point), by node.
        group: the columns that share a scale (the row's width for one scale per row).
        kernel: what the quantized kernel reads.
    """

    embedding: Node
    dequantize: Node
    sources: dict[Node, ProgramConstant]
    group: int
    kernel: EmbeddingKernel

    @property
    def table_shape(self) -> tuple[int, int]:
        rows, columns = self.sources[self.dequantize.args[0]].tensor.shape  # type: ignore[index]
        return int(rows), int(columns)


def quantized_embeddings(ep: ExportedProgram) -> list[QuantizedEmbedding]:
    """Each embedding of ``ep`` (an edge program) that reads a table ``dequantize_affine``
    computes from constants, which a quantized embedding kernel computes exactly; others (a
    bfloat16 table, int32 indices, blocks that are not groups of a row) are left out."""
    constants = {c.node: c for c in iter_constants(None, ep)}
    return [found for node in ep.graph.nodes if (found := _matched(node, constants)) is not None]


def _matched(node: Node, constants: dict[Node, ProgramConstant]) -> QuantizedEmbedding | None:
    if node.op != "call_function" or aten_name(node.target) != "embedding" or len(node.args) < 2:
        return None
    table, indices = node.args[0], node.args[1]
    if not isinstance(table, Node) or table.op != "call_function" or aten_name(table.target) != "dequantize_affine":
        return None
    if not isinstance(indices, Node) or getattr(indices.meta.get("val"), "dtype", None) != torch.int64:
        return None  # the kernels read int64 indices only
    codes, block_size, scale, zero_point, *_ = table.args
    sources = {n: constants[n] for n in (codes, scale, zero_point) if isinstance(n, Node) and n in constants}
    if codes not in sources or scale not in sources or (zero_point is not None and zero_point not in sources):
        return None
    if any(c.kind is ConstantKind.MUTABLE_BUFFER for c in sources.values()):
        return None  # a table the program writes is no constant to pack
    group = _group(sources[input_node(table, 0)].tensor, block_size)
    if not group:
        return None
    kernel = _kernel(table, sources, group)
    return QuantizedEmbedding(node, table, sources, group, kernel) if kernel is not None else None


def _group(codes: torch.Tensor, block_size: object) -> int | None:
    """The columns a scale covers, where the blocks are groups of one row."""
    if codes.dim() != 2 or not isinstance(block_size, (list, tuple)) or len(block_size) != 2:
        return None
    rows, group = block_size
    return int(group) if rows == 1 and group > 0 and codes.shape[1] % group == 0 else None


def _arguments(dequantize: Node) -> tuple[int, int, torch.dtype]:
    """``dequantize_affine``'s quant_min, quant_max and output dtype."""
    args = dequantize.args
    quant_min = dequantize.kwargs.get("quant_min", args[5] if len(args) > 5 else None)
    quant_max = dequantize.kwargs.get("quant_max", args[6] if len(args) > 6 else None)
    out_dtype = dequantize.kwargs.get("output_dtype", args[7] if len(args) > 7 else torch.float32)
    return quant_min, quant_max, out_dtype  # type: ignore[return-value]


def _kernel(dequantize: Node, sources: dict[Node, ProgramConstant], group: int) -> EmbeddingKernel | None:
    codes_node, scale_node, zero_node = (
        input_node(dequantize, 0),
        input_node(dequantize, 2),
        cast("Node | None", dequantize.args[3]),
    )
    codes, scale = sources[codes_node].tensor.detach(), sources[scale_node].tensor.detach()
    zero = sources[zero_node].tensor.detach() if zero_node is not None else None
    quant_min, quant_max, out_dtype = _arguments(dequantize)
    rows, columns = codes.shape
    per_row = (rows, columns // group)
    if (
        codes.dtype not in (torch.int8, torch.uint8)
        or scale.dtype not in KERNEL_DTYPES
        or out_dtype not in KERNEL_DTYPES
    ):
        return None
    if scale.numel() != per_row[0] * per_row[1] or (zero is not None and zero.numel() != scale.numel()):
        return None
    if zero is not None and zero.dtype.is_floating_point:
        return None  # torchao's float zero point is another op (dequantize_affine_float_zero_point)
    low, high = (int(codes.min()), int(codes.max())) if codes.numel() else (0, 0)
    bits = _bits(low, high, quant_min, quant_max, columns)
    offset = _OFFSET.get(bits, 0)
    # The 2- and 4-bit kernels compute (stored - offset - zero) * scale: signed codes are stored
    # plus the offset; unsigned ones (uint4's 0..15) as they are, their zero point moved by it.
    shift = offset if bits < 8 and not (-offset <= low and high < offset) else 0
    zero_point = _zero_point(zero, shift, per_row, out_dtype)
    stored = codes if bits == 8 else pack_codes(codes.to(torch.int16) + (offset - shift), bits)
    declared = (quant_min, quant_max) if isinstance(quant_min, int) and isinstance(quant_max, int) else (low, high)
    kernel_min, kernel_max = (-offset, offset - 1) if bits < 8 else declared
    return EmbeddingKernel(bits, stored, scale.reshape(per_row), zero_point, kernel_min, kernel_max, out_dtype)


def _bits(low: int, high: int, quant_min: object, quant_max: object, columns: int) -> int:
    """The fewest bits a kernel stores the codes ``low..high`` in (a row packs whole bytes)."""
    declared = (quant_min, quant_max) if isinstance(quant_min, int) and isinstance(quant_max, int) else (low, high)
    low, high = min(low, declared[0]), max(high, declared[1])
    for bits in (2, 4):
        offset, values_per_byte = _OFFSET[bits], 8 // bits
        fits = (-offset <= low and high < offset) or (low >= 0 and high < 2 * offset)
        if fits and columns % values_per_byte == 0:
            return bits
    return 8


def _zero_point(
    zero: torch.Tensor | None, shift: int, shape: tuple[int, int], dtype: torch.dtype
) -> torch.Tensor | None:
    """The zero point as the kernel reads it: in the kernel's parameter dtype, moved by
    ``shift``; ``None`` where every one is 0."""
    if zero is None and not shift:
        return None
    values = (zero.to(torch.int32) if zero is not None else torch.zeros(shape, dtype=torch.int32)) - shift
    return values.reshape(shape).to(dtype) if bool(values.any()) else None


def pack_codes(stored: torch.Tensor, bits: int) -> torch.Tensor:
    """Unsigned codes (``0 <= code < 2**bits``) packed as ExecuTorch's ``embedding_4bit`` and
    ``embedding_2bit`` kernels read them: ``8 // bits`` columns a byte, the first in the high
    nibble for 4 bits, in the lowest two bits for 2 (``_pack_embedding_weight`` in
    ``exir/passes/_quant_patterns_and_replacements.py``)."""
    rows, columns = stored.shape
    per_byte = 8 // bits
    parts = stored.to(torch.uint8).reshape(rows, columns // per_byte, per_byte)
    shifts = [bits * (per_byte - 1 - i) for i in range(per_byte)] if bits == 4 else [bits * i for i in range(per_byte)]
    packed = torch.zeros(rows, columns // per_byte, dtype=torch.uint8)
    for i, shift in enumerate(shifts):
        packed |= parts[:, :, i] << shift
    return packed
