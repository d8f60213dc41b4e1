"""EG506-EG508: delegate payloads, the named data they use, and the external tensors."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from executorch.exir.schema import Tensor, TensorDataLocation

from export_guards.pte.context import PteContext
from export_guards.pte.reader.flatc import DecodeError
from export_guards.pte.reader.tensors import describe_tensor, tensor_nbytes
from export_guards.pte.reader.xnnpack import NO_OFFSET, XnnPayload
from export_guards.ruleset import Hit, rule


@rule("EG506")
def delegate_data_invalid(context: PteContext) -> Iterator[Hit]:
    program = context.pte.program
    if program is None:
        return
    for delegate in context.pte.delegates:
        if delegate.data is None:
            yield Hit(f"{delegate}: its processed data ({delegate.where}) does not exist or lies outside the file", method=delegate.method)
        elif not delegate.data:
            yield Hit(f"{delegate}: its processed data ({delegate.where}) is empty", method=delegate.method)
    for delegate, payload in context.xnnpack_payloads:
        if isinstance(payload, DecodeError):
            yield Hit(f"{delegate}: its XNNPACK payload cannot be decoded: {payload}", method=delegate.method)
        else:
            yield from _inline_constants_out_of_bounds(payload, str(delegate), delegate.method)


def _inline_constants_out_of_bounds(payload: XnnPayload, delegate: str, method: str) -> Iterator[Hit]:
    end = payload.constant_data_offset + payload.constant_data_size
    if end > payload.size:
        yield Hit(f"{delegate}: its constant data ends at byte {end} of a {payload.size}-byte payload", method=method)
    for constant in payload.constants:
        if constant.named_key or constant.offset == NO_OFFSET:
            continue
        if constant.offset + constant.size > payload.constant_data_size:
            yield Hit(
                f"{delegate}: constant value {constant.value_id} is at {constant.offset}+{constant.size} "
                f"of {payload.constant_data_size} bytes of constant data",
                method=method,
            )
        elif constant.nbytes is not None and constant.size < constant.nbytes:
            yield Hit(
                f"{delegate}: constant value {constant.value_id} ({constant.datatype}{list(constant.dims)}) "
                f"needs {constant.nbytes} bytes but has {constant.size}",
                method=method,
            )


@rule("EG507")
def named_data_invalid(context: PteContext) -> Iterator[Hit]:
    program = context.pte.program
    if program is None:
        return
    entries = [(e.key, context.pte.segment(e.segment_index), f"segment {e.segment_index}") for e in program.named_data or []]
    yield from _entries_invalid(context.pte.name, entries)
    for ptd in context.data_files:
        yield from _entries_invalid(ptd.name, [(key, region, region.what if region else "a missing segment") for key, region in ptd.entries])


def _entries_invalid(file: str, entries: list) -> Iterator[Hit]:
    for key, count in Counter(key for key, _, _ in entries).items():
        if count > 1:
            yield Hit(f"named data key '{key}' appears {count} times in {file}: a reader takes only one", constant=key)
    for key, region, where in entries:
        if not key:
            yield Hit(f"{file} has named data with an empty key ({where})")
        elif region is None:
            yield Hit(f"named data '{key}' of {file} is in {where}, which does not exist", constant=key)
        elif region.size == 0:
            yield Hit(f"named data '{key}' of {file} is empty ({where})", constant=key)


@rule("EG508")
def named_data_unresolved(context: PteContext) -> Iterator[Hit]:
    program = context.pte.program
    if program is None:
        return
    available = context.named_data
    for delegate, payload in context.xnnpack_payloads:
        if isinstance(payload, DecodeError):
            continue  # EG506 reports it
        for constant in payload.constants:
            if not constant.named_key:
                continue
            what = f"{delegate}: constant value {constant.value_id} ({constant.datatype}{list(constant.dims)})"
            found = available.get(constant.named_key)
            needed = max(constant.nbytes or 0, constant.size)
            if found is None:
                yield Hit(f"{what} uses named data '{constant.named_key}', {_missing(context)}", method=delegate.method, constant=constant.named_key)
            elif found[1].size < needed:
                yield Hit(
                    f"{what} needs {needed} bytes of named data '{constant.named_key}', which has "
                    f"{found[1].size} in {found[0]}: XNNPACK would read past its end",
                    method=delegate.method,
                    constant=constant.named_key,
                )
    for plan in program.execution_plan:
        for index, value in enumerate(plan.values):
            tensor = value.val
            info = tensor.extra_tensor_info if isinstance(tensor, Tensor) else None
            if info is None or info.location != TensorDataLocation.EXTERNAL:
                continue
            key = info.fully_qualified_name or ""
            what = f"tensor value {index} of method '{plan.name}' ({describe_tensor(tensor)}) is external data '{key}'"
            nbytes = tensor_nbytes(tensor) or 0
            if key not in available:
                yield Hit(f"{what}, {_missing(context)}", method=plan.name, constant=key)
            elif available[key][1].size < nbytes:
                yield Hit(
                    f"{what}: it needs {nbytes} bytes and {available[key][0]} holds {available[key][1].size}",
                    method=plan.name,
                    constant=key,
                )


def _missing(context: PteContext) -> str:
    return "which no given data file holds" if context.data_files else "which needs a .ptd file; none was given"
