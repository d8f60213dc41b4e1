"""EG510: two exports of one model differ; each difference named in the program's terms."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

from export_guards.pte.reader.file import PteFile
from export_guards.pte.reader.flatc import DecodeError
from export_guards.pte.reader.tensors import describe_tensor, tensor_nbytes
from export_guards.pte.reader.wheel import Tensor
from export_guards.pte.reader.xnnpack import BACKEND_ID, XnnConstant, read_payload
from export_guards.pte.reproducible import ExportPair
from export_guards.ruleset import Hit, rule

_MAX_HITS = 20  # past this, one summary line: the first differences explain the rest


@rule("EG510")
def not_reproducible(pair: ExportPair) -> Iterator[Hit]:
    if pair.first == pair.second:
        return
    first, second = PteFile(pair.first, "export 1"), PteFile(pair.second, "export 2")
    for pte in (first, second):
        if pte.program is None:
            problems = "; ".join(pte.problems) or "it is not an ExecuTorch program"
            yield Hit(f"{pair.target} differ, and {pte.name} cannot be compared: {problems}")
            return
    hits = [*_delegate_constants(first, second, pair.names), *_constant_buffers(first, second, pair.names)]
    hits += _named_data(first, second) if not hits else []
    if not hits:
        hits = [_first_difference(first, second, pair.target)]
    yield from hits[:_MAX_HITS]
    if len(hits) > _MAX_HITS:
        yield Hit(f"... and {len(hits) - _MAX_HITS} more differences between {pair.target}")


def _delegate_constants(first: PteFile, second: PteFile, names: dict[str, str]) -> Iterator[Hit]:
    """XNNPACK constants whose named data key or size changed, paired by delegate and value id."""
    for one, two in zip(first.delegates, second.delegates):
        if one.data == two.data:
            continue
        if one.backend != BACKEND_ID or two.backend != BACKEND_ID:
            yield Hit(f"{one}: its processed data differs ({_sizes(one.data, two.data)})", method=one.method)
            continue
        try:
            constants_one = {c.value_id: c for c in read_payload(one.data or b"").constants}
            constants_two = {c.value_id: c for c in read_payload(two.data or b"").constants}
        except DecodeError as error:
            yield Hit(f"{one}: its processed data differs and cannot be decoded: {error}", method=one.method)
            continue
        changed = False
        for value_id, constant in constants_one.items():
            other = constants_two.get(value_id)
            if other is None or (constant.named_key, constant.size) != (other.named_key, other.size):
                changed = True
                yield Hit(
                    f"{one}: constant value {value_id} {_xnn(constant, names)} is named data "
                    f"'{_short_key(constant.named_key)}' in export 1 and "
                    f"'{_short_key(other.named_key) if other else '(absent)'}' in export 2: its bytes "
                    "differ, so XNNPACK's weight cache re-packs it",
                    method=one.method,
                    constant=names.get(constant.named_key, constant.named_key),
                )
        if not changed:
            yield Hit(
                f"{one}: its XNNPACK graph differs while its constants do not ({_sizes(one.data, two.data)})",
                method=one.method,
            )


def _constant_buffers(first: PteFile, second: PteFile, names: dict[str, str]) -> Iterator[Hit]:
    """Constant tensors (outside delegates) whose bytes differ, paired by method and value."""
    assert first.program is not None and second.program is not None
    for plan_one, plan_two in zip(first.program.execution_plan, second.program.execution_plan):
        for index, (value_one, value_two) in enumerate(zip(plan_one.values, plan_two.values)):
            one, two = value_one.val, value_two.val
            if (
                not (isinstance(one, Tensor) and isinstance(two, Tensor))
                or one.data_buffer_idx <= 0
                or one.allocation_info
            ):
                continue  # not a constant (a planned tensor's buffer index names its initial value)
            data_one, data_two = first.constant_buffer(one.data_buffer_idx), second.constant_buffer(two.data_buffer_idx)
            if data_one != data_two:
                digest = hashlib.sha256((data_one or b"")[: tensor_nbytes(one)]).hexdigest()  # without padding
                name = names.get(digest)
                yield Hit(
                    f"constant tensor value {index} of method '{plan_one.name}' ({describe_tensor(one)}"
                    + (f", '{name}'" if name else "")
                    + f") has different bytes ({_sizes(data_one, data_two)})",
                    method=plan_one.name,
                    constant=name,
                )


def _named_data(first: PteFile, second: PteFile) -> Iterator[Hit]:
    keys_one, keys_two = list(first.named_data), list(second.named_data)
    for key in sorted(set(keys_one) ^ set(keys_two)):
        yield Hit(f"named data '{_short_key(key)}' is only in export {1 if key in keys_one else 2}", constant=key)
    if set(keys_one) == set(keys_two) and keys_one != keys_two:
        yield Hit("the named data keys are the same but in a different order")
    for key in set(keys_one) & set(keys_two):
        if first.read(first.named_data[key]) != second.read(second.named_data[key]):
            yield Hit(f"named data '{_short_key(key)}' has different bytes under the same key", constant=key)


def _first_difference(first: PteFile, second: PteFile, target: str) -> Hit:
    a, b = first.data, second.data
    offset = _first_differing_byte(a, b)
    where = "the program flatbuffer"
    for region in first.segments:
        if region.start <= offset < region.end:
            where = f"{region.what} ({first.contents.get(region.what, 'unused')})"
    return Hit(f"{target} differ first at byte {offset}, in {where} ({len(a)} and {len(b)} bytes)")


def _first_differing_byte(a: bytes, b: bytes, block: int = 1 << 20) -> int:
    """Compared a megabyte at a time (C speed), then byte by byte in the first differing block."""
    for start in range(0, min(len(a), len(b)), block):
        if a[start : start + block] != b[start : start + block]:
            return start + next(
                i for i, (x, y) in enumerate(zip(a[start : start + block], b[start : start + block])) if x != y
            )
    return min(len(a), len(b))


def _xnn(constant: XnnConstant, names: dict[str, str]) -> str:
    name = names.get(constant.named_key)
    return f"({constant.datatype.removeprefix('xnn_datatype_')}{list(constant.dims)}" + (
        f", '{name}')" if name else ")"
    )


def _short_key(key: str) -> str:
    return key if len(key) <= 16 else f"{key[:12]}…"


def _sizes(one: bytes | None, two: bytes | None) -> str:
    return f"{len(one or b'')} and {len(two or b'')} bytes"
