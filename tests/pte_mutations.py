"""Mutations of valid ``.pte`` files for the fuzz test: byte flips, truncation, and field-aware
changes made through ExecuTorch's own serializer (so the flatbuffer stays parseable and the
damage lands where the checker must catch it)."""

from __future__ import annotations

import random
from collections.abc import Callable

from executorch.exir._serialize._flatbuffer_program import _flatbuffer_to_program, _program_to_flatbuffer
from executorch.exir._serialize._program import _ExtendedHeader, _get_extended_header, _insert_flatbuffer_header
from executorch.exir.schema import DataLocation, Program, Tensor

INTERESTING = [0, 1, 7, 15, 16, 17, 255, 4096, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63 - 1, 2**64 - 1]


def _number(rng: random.Random, current: int, size: int) -> int:
    choice = rng.random()
    if choice < 0.4:
        return rng.choice(INTERESTING)
    if choice < 0.7:
        return max(0, current + rng.choice([-1, 1, -16, 16, size, -size]))
    return rng.randrange(0, max(2, size * 2))


def flip_bits(data: bytes, rng: random.Random, start: int = 0, end: int | None = None) -> bytes:
    end = len(data) if end is None else end
    if end <= start:
        return data
    mutated = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        mutated[rng.randrange(start, end)] ^= 1 << rng.randrange(8)
    return bytes(mutated)


def truncate(data: bytes, rng: random.Random) -> bytes:
    return data[: rng.randrange(0, len(data))]


def header_field(data: bytes, rng: random.Random) -> bytes:
    header = _get_extended_header(data)
    if header is None:
        return flip_bits(data, rng, 0, min(len(data), 48))
    field = rng.choice(["program_size", "segment_base_offset", "segment_data_size", "length", "magic"])
    if field == "magic":
        return data[:8] + bytes(rng.randrange(256) for _ in range(4)) + data[12:]
    if field == "length":
        return data[:12] + _number(rng, header.length, 64).to_bytes(8, "little")[:4] + data[16:]
    value = _number(rng, getattr(header, field), len(data)) % 2**64
    offset = {"program_size": 16, "segment_base_offset": 24, "segment_data_size": 32}[field]
    return data[:offset] + value.to_bytes(8, "little") + data[offset + 8 :]


def program_field(data: bytes, rng: random.Random) -> bytes:
    """Change one field of the program table, then write it back with ExecuTorch's serializer
    in front of the original segments."""
    mutate = rng.choice(_FIELD_MUTATIONS)
    return rewrite(data, lambda program: mutate(program, rng, len(data)))


def rewrite(data: bytes, edit: Callable[[Program], None]) -> bytes:
    """``data`` with its program table changed by ``edit``, the segments left as they were."""
    header = _get_extended_header(data)
    program = _flatbuffer_to_program(data[: header.program_size if header else len(data)])
    edit(program)
    return _splice(program, data, header)


def _splice(program: Program, data: bytes, header: _ExtendedHeader | None) -> bytes:
    flatbuffer = _program_to_flatbuffer(program).data
    if header is None:
        return flatbuffer
    padded = 32  # the header, padded to the schema's largest force_align (as the serializer does)
    program_size = padded + len(flatbuffer)
    base = max(header.segment_base_offset, -(-program_size // 128) * 128)
    new_header = _ExtendedHeader(program_size, base, header.segment_data_size).to_bytes()
    new_header += b"\0" * (padded - len(new_header))
    body = _insert_flatbuffer_header(flatbuffer, r"ET[0-9a-zA-Z][0-9a-zA-Z]", new_header)
    return body + b"\0" * (base - len(body)) + data[header.segment_base_offset :]


def _segment(program: Program, rng: random.Random, size: int) -> None:
    if program.segments:
        segment = rng.choice(program.segments)
        name = rng.choice(["offset", "size"])
        setattr(segment, name, _number(rng, getattr(segment, name), size) % 2**64)


def _constant_offsets(program: Program, rng: random.Random, size: int) -> None:
    offsets = program.constant_segment.offsets
    if offsets:
        i = rng.randrange(len(offsets))
        offsets[i] = _number(rng, offsets[i], size) % 2**64
    else:
        program.constant_segment.segment_index = _number(rng, 0, 8) % 2**32


def _delegate(program: Program, rng: random.Random, size: int) -> None:
    delegates = [d for plan in program.execution_plan for d in plan.delegates]
    if delegates:
        delegate = rng.choice(delegates)
        if rng.random() < 0.2:
            delegate.processed.location = DataLocation.INLINE
        delegate.processed.index = _number(rng, delegate.processed.index, 16) % 2**32


def _named_data(program: Program, rng: random.Random, size: int) -> None:
    if program.named_data:
        entry = rng.choice(program.named_data)
        what = rng.random()
        if what < 0.3:
            entry.key = ""
        elif what < 0.6:
            entry.key = rng.choice(program.named_data).key
        else:
            entry.segment_index = _number(rng, entry.segment_index, 16) % 2**32


def _tensor(program: Program, rng: random.Random, size: int) -> None:
    tensors = [v.val for plan in program.execution_plan for v in plan.values if isinstance(v.val, Tensor)]
    if not tensors:
        return
    tensor = rng.choice(tensors)
    what = rng.random()
    if what < 0.35 and tensor.sizes:
        i = rng.randrange(len(tensor.sizes))
        tensor.sizes[i] = _number(rng, tensor.sizes[i], 64) % 2**31
    elif what < 0.6:
        tensor.data_buffer_idx = _number(rng, tensor.data_buffer_idx, 16) % 2**32
    elif what < 0.8 and tensor.allocation_info is not None:
        tensor.allocation_info.memory_offset_low = _number(rng, tensor.allocation_info.memory_offset_low, size) % 2**32
    else:
        tensor.scalar_type = rng.choice([0, 6, 7, 11, 15, 22, 26])


def _arenas(program: Program, rng: random.Random, size: int) -> None:
    plan = rng.choice(program.execution_plan)
    if plan.non_const_buffer_sizes:
        i = rng.randrange(len(plan.non_const_buffer_sizes))
        plan.non_const_buffer_sizes[i] = _number(rng, plan.non_const_buffer_sizes[i], 4096) % 2**63


_FIELD_MUTATIONS: list[Callable[[Program, random.Random, int], None]] = [
    _segment, _constant_offsets, _delegate, _named_data, _tensor, _arenas,
]  # fmt: skip


def delegate_payload(data: bytes, rng: random.Random, segments: list[tuple[int, int]]) -> bytes:
    """Flip bits inside one delegate's payload (its XNNPACK header and graph)."""
    if not segments:
        return flip_bits(data, rng)
    start, size = rng.choice(segments)
    return flip_bits(data, rng, start, min(start + min(size, 256), len(data)))


MUTATIONS = ["flip", "flip_program", "truncate", "header_field", "program_field", "delegate_payload"]


def mutate(data: bytes, kind: str, rng: random.Random, delegate_segments: list[tuple[int, int]]) -> bytes:
    """One mutation of ``data`` of the given kind."""
    header = _get_extended_header(data)
    if kind == "flip":
        return flip_bits(data, rng)
    if kind == "flip_program":
        return flip_bits(data, rng, 0, header.program_size if header else len(data))
    if kind == "truncate":
        return truncate(data, rng)
    if kind == "header_field":
        return header_field(data, rng)
    if kind == "program_field":
        return program_field(data, rng)
    return delegate_payload(data, rng, delegate_segments)
