"""EG501-EG505: a ``.pte`` file's header, flatbuffer, segments, alignment and tensor data."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

from executorch.exir._serialize._program import _ExtendedHeader
from executorch.exir.schema import ScalarType, Tensor, TensorDataLocation, TensorShapeDynamism
from executorch.exir.tensor import get_scalar_type

from export_guards.linter.registry import Hit, rule
from export_guards.pte.context import PteContext
from export_guards.pte.file import FILE_IDENTIFIER, MIN_ALIGNMENT, tensor_nbytes
from export_guards.report import Severity

REEXPORT = "Re-export the model and write the file again; if it was copied, check the copy is complete."


@rule(
    "EG501",
    "pte-header",
    Severity.ERROR,
    "The file is not a whole ExecuTorch program: its identifier or extended header is wrong.",
    REEXPORT,
    stage="pte",
)
def pte_header(context: PteContext) -> Iterator[Hit]:
    pte = context.pte
    if pte.size < 8:
        yield Hit(f"{pte.name} is {pte.size} bytes long: too short to be an ExecuTorch program")
        return
    if pte.identifier != FILE_IDENTIFIER:
        if pte.identifier[:2] == b"ET" and pte.identifier[2:].isdigit():
            yield Hit(
                f"{pte.name} has schema version {pte.identifier.decode()}; this ExecuTorch reads "
                f"{FILE_IDENTIFIER.decode()}",
                fix="Export and run with the same ExecuTorch version.",
            )
        else:
            yield Hit(f"{pte.name} is not an ExecuTorch program: bytes 4-8 are {pte.identifier!r}, expected {FILE_IDENTIFIER!r}")
        return
    header = pte.header
    if header is None:
        return  # a program without segments: the flatbuffer is the whole file
    if not header.is_valid():
        yield Hit(f"the extended header's length is {header.length}; it must be at least {_ExtendedHeader.MINIMUM_LENGTH}")
    if not 8 + header.length <= header.program_size <= pte.size:
        yield Hit(f"the header's program size {header.program_size} is outside the file ({pte.size} bytes)")
    base, data_size = header.segment_base_offset, header.segment_data_size
    if base and base < header.program_size:
        yield Hit(f"the segments start at {base}, inside the program flatbuffer (which ends at {header.program_size})")
    if base > pte.size or base + data_size > pte.size:
        yield Hit(f"the header says the segment data ends at byte {base + data_size}, but the file has {pte.size} bytes: it is truncated")


@rule(
    "EG502",
    "pte-unparsable",
    Severity.ERROR,
    "ExecuTorch's deserializer cannot read the program flatbuffer, or it has no method.",
    REEXPORT,
    stage="pte",
)
def pte_unparsable(context: PteContext) -> Iterator[Hit]:
    pte = context.pte
    if pte.size < 8 or pte.identifier != FILE_IDENTIFIER or not 8 <= pte.program_size <= pte.size:
        return  # EG501 says why
    if pte.program is None:
        yield from (Hit(problem) for problem in pte.problems)
    elif not pte.program.execution_plan:
        yield Hit("the program has no method")


@rule(
    "EG503",
    "segment-out-of-bounds",
    Severity.ERROR,
    "A segment, or a constant inside the constant segment, lies outside the file.",
    REEXPORT,
    stage="pte",
)
def segment_out_of_bounds(context: PteContext) -> Iterator[Hit]:
    pte, program = context.pte, context.pte.program
    if program is None:
        return
    if any(s.size for s in program.segments) and pte.header is None:
        yield Hit(f"the program lists {len(program.segments)} segment(s) but the file has no extended header to place them")
        return
    holds = pte.contents
    declared_end = pte.segment_base + (pte.header.segment_data_size if pte.header else 0)
    for region in pte.segments:
        what = f"{region.what} ({holds.get(region.what, 'unused')})"
        if not pte.in_file(region):
            yield Hit(f"{what} spans bytes {region.start}-{region.end}, past the end of the file ({pte.size} bytes)")
        elif pte.header and pte.header.segment_data_size and region.end > declared_end:
            yield Hit(f"{what} ends at byte {region.end}, past the segment data the header declares (to {declared_end})")
    for name, subsegments in pte.subsegment_tables:
        segment = pte.segment(subsegments.segment_index)
        if segment is None:
            yield Hit(f"the {name} is in segment {subsegments.segment_index}, of {len(pte.segments)}")
            continue
        offsets = list(subsegments.offsets)
        if any(b < a for a, b in itertools.pairwise(offsets)):
            yield Hit(f"the {name}'s offsets are not increasing: {offsets[:8]}")
        beyond = [(i, o) for i, o in enumerate(offsets) if not 0 <= o <= segment.size]
        for i, offset in beyond[:5]:
            yield Hit(f"buffer {i} of the {name} starts at {offset}, outside its {segment.size}-byte {segment.what}")


@rule(
    "EG504",
    "misaligned-data",
    Severity.ERROR,
    f"Constant or delegate data is not aligned to {MIN_ALIGNMENT} bytes, which kernels and delegates assume.",
    "Re-export with ExecuTorch's default segment and tensor alignment (ExecutorchBackendConfig).",
    stage="pte",
)
def misaligned_data(context: PteContext) -> Iterator[Hit]:
    pte = context.pte
    if pte.program is None:
        return
    holds = pte.contents
    for region in pte.segments:
        if region.size and region.start % MIN_ALIGNMENT:
            yield Hit(f"{region.what} ({holds.get(region.what, 'unused')}) starts at byte {region.start}, not a multiple of {MIN_ALIGNMENT}")
    for name, subsegments in pte.subsegment_tables:
        misaligned = [(i, o) for i, o in enumerate(subsegments.offsets) if o % MIN_ALIGNMENT]
        for i, offset in misaligned[:5]:
            yield Hit(f"buffer {i} of the {name} is at offset {offset} of its segment, not a multiple of {MIN_ALIGNMENT}")


@rule(
    "EG505",
    "tensor-data-invalid",
    Severity.ERROR,
    "A tensor's constant buffer or memory-plan slot is missing or smaller than its shape and dtype need.",
    REEXPORT,
    stage="pte",
)
def tensor_data_invalid(context: PteContext) -> Iterator[Hit]:
    pte, program = context.pte, context.pte.program
    if program is None:
        return
    buffers = pte.constant_buffer_sizes
    offsets = [o for _, table in pte.subsegment_tables for o in table.offsets if o]
    alignment = max(math.gcd(*offsets), MIN_ALIGNMENT) if offsets else MIN_ALIGNMENT  # the writer's padding
    for plan in program.execution_plan:
        arenas = list(plan.non_const_buffer_sizes or [])
        io = set(plan.inputs) | set(plan.outputs)
        for index, value in enumerate(plan.values):
            tensor = value.val
            if not isinstance(tensor, Tensor):
                continue
            where = f"tensor value {index} of method '{plan.name}' ({_describe(tensor)})"
            nbytes = tensor_nbytes(tensor)
            if nbytes is None:
                yield Hit(f"{where} has an unknown dtype or a negative size", method=plan.name)
                continue
            info = tensor.extra_tensor_info
            if info is not None and info.location == TensorDataLocation.EXTERNAL:
                continue  # its data is named data in a .ptd file: EG508 checks it
            if tensor.data_buffer_idx > 0:
                if tensor.data_buffer_idx >= len(buffers):
                    yield Hit(f"{where} uses constant buffer {tensor.data_buffer_idx}, of {len(buffers)}", method=plan.name)
                elif (held := buffers[tensor.data_buffer_idx]) is not None and held < nbytes:
                    yield Hit(
                        f"{where} needs {nbytes} bytes but constant buffer {tensor.data_buffer_idx} holds "
                        f"{held}: the runtime would read past it",
                        method=plan.name,
                    )
                elif held is not None and held > _padded(nbytes, alignment):
                    yield Hit(
                        f"{where} needs {nbytes} bytes but constant buffer {tensor.data_buffer_idx} holds "
                        f"{held}: its shape or dtype does not match the data written",
                        method=plan.name,
                        severity=Severity.WARNING,
                    )
            elif tensor.allocation_info is None:
                if nbytes and index not in io and tensor.shape_dynamism != TensorShapeDynamism.DYNAMIC_UNBOUND:
                    yield Hit(
                        f"{where} has no data: no constant buffer, no memory plan slot, no external data, "
                        "and it is not an input or output: the runtime would use a null pointer",
                        method=plan.name,
                    )
            else:
                slot = tensor.allocation_info
                memory_id = slot.memory_id
                offset = slot.memory_offset_low + (slot.memory_offset_high << 32)
                if not 0 <= memory_id < len(arenas):
                    yield Hit(f"{where} is planned in memory arena {memory_id}, of {len(arenas)}", method=plan.name)
                elif offset + nbytes > arenas[memory_id]:
                    yield Hit(
                        f"{where} is planned at bytes {offset}-{offset + nbytes} of memory arena {memory_id}, "
                        f"which has {arenas[memory_id]}: the runtime would write past it",
                        method=plan.name,
                    )


def _padded(nbytes: int, alignment: int) -> int:
    return -(-nbytes // alignment) * alignment


def _describe(tensor: Tensor) -> str:
    try:
        dtype = str(get_scalar_type(ScalarType(tensor.scalar_type))).removeprefix("torch.")
    except (KeyError, ValueError):
        dtype = f"scalar type {tensor.scalar_type}"
    return f"{dtype}{list(tensor.sizes)}"
