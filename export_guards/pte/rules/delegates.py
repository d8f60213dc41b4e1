"""EG506-EG508, EG513, EG523: delegate payloads, the named data they use, the external tensors,
convolutions that share their weights' named data, and named data that no longer matches its
content-hash key."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator

from export_guards.pte.context import Need, PteContext, needs
from export_guards.pte.reader.backend_ids import KNOWN_BACKEND_IDS
from export_guards.pte.reader.file import Delegate, PteFile
from export_guards.pte.reader.flatc import DecodeError
from export_guards.pte.reader.headers import XNNHeader
from export_guards.pte.reader.tensors import describe_layout, describe_tensor, tensor_nbytes
from export_guards.pte.reader.wheel import Tensor, TensorDataLocation
from export_guards.pte.reader.xnnpack import BACKEND_ID, ELEMENT_BYTES, NO_OFFSET, XnnPayload, is_xnnpack_payload
from export_guards.report import Severity
from export_guards.ruleset import Hit, rule


@rule("EG506")
def delegate_data_invalid(context: PteContext) -> Iterator[Hit]:
    program = context.pte.program
    if program is None:
        return
    for delegate in context.pte.delegates:
        region = _processed(context.pte, delegate)
        if not delegate.backend:
            yield Hit(
                f"delegate {delegate.index} of method '{delegate.method}' has an empty backend id: no runtime registers a "
                f"backend under it, so loading the method fails (NotFound)",
                method=delegate.method,
            )
        elif (
            delegate.backend != BACKEND_ID
            and delegate.backend in KNOWN_BACKEND_IDS
            and is_xnnpack_payload(delegate.data)
        ):
            yield Hit(
                f"{delegate}: its processed data is an XNNPACK payload (header 'XH00'), which backend '{delegate.backend}' "
                f"cannot read: loading the method fails or crashes wherever that backend is registered, and fails "
                f"where it is not",
                method=delegate.method,
                region=region,
            )
        if delegate.data is None:
            yield Hit(
                f"{delegate}: its processed data ({delegate.where}) does not exist or lies outside the file",
                method=delegate.method,
                region=region,
            )
        elif not delegate.data:
            yield Hit(
                f"{delegate}: its processed data ({delegate.where}) is empty", method=delegate.method, region=region
            )
    for delegate, payload in context.xnnpack_payloads:
        region = _processed(context.pte, delegate)
        if isinstance(payload, DecodeError):
            yield Hit(
                f"{delegate}: its XNNPACK payload cannot be decoded: {payload}", method=delegate.method, region=region
            )
        else:
            yield from _inline_constants_out_of_bounds(payload, str(delegate), delegate.method, region)
            if payload.header_length != XNNHeader.EXPECTED_LENGTH:
                yield Hit(
                    f"{delegate}: its XNNPACK header states a length of {payload.header_length}, not "
                    f"{XNNHeader.EXPECTED_LENGTH} (the runtime ignores this field; ExecuTorch's Python reader rejects it)",
                    method=delegate.method,
                    region=region,
                    severity=Severity.WARNING,
                )


def _processed(pte: PteFile, delegate: Delegate) -> tuple[int, int] | None:
    """The bytes of a delegate's processed data when it is a segment (inline data lies inside
    the flatbuffer, at an offset the reader does not know)."""
    region = next((r for r in pte.segments if r.what == delegate.where), None)
    return (region.start, region.size) if region is not None else None


def _inline_constants_out_of_bounds(
    payload: XnnPayload, delegate: str, method: str, region: tuple[int, int] | None
) -> Iterator[Hit]:
    end = payload.constant_data_offset + payload.constant_data_size
    if end > payload.size:
        yield Hit(
            f"{delegate}: its constant data ends at byte {end} of a {payload.size}-byte payload",
            method=method,
            region=region,
        )
    for constant in payload.constants:
        if constant.named_key or constant.offset == NO_OFFSET:
            continue
        if constant.offset + constant.size > payload.constant_data_size:
            yield Hit(
                f"{delegate}: constant value {constant.value_id} is at {constant.offset}+{constant.size} "
                f"of {payload.constant_data_size} bytes of constant data",
                method=method,
                region=region,
            )
        elif constant.nbytes is not None and constant.size < constant.nbytes:
            yield Hit(
                f"{delegate}: constant value {constant.value_id} ({constant.datatype}{list(constant.dims)}) "
                f"needs {constant.nbytes} bytes but has {constant.size}",
                method=method,
                region=region,
            )


@rule("EG507")
def named_data_invalid(context: PteContext) -> Iterator[Hit]:
    program = context.pte.program
    if program is None:
        return
    entries = [
        (e.key, context.pte.segment(e.segment_index), f"segment {e.segment_index}") for e in program.named_data or []
    ]
    yield from _entries_invalid(context.pte.name, entries)
    for ptd in context.data_files:
        entries = [(key, region, region.what if region else "a missing segment") for key, region in ptd.entries]
        yield from _entries_invalid(ptd.name, entries, artifact=ptd.name)


def _entries_invalid(file: str, entries: list, artifact: str | None = None) -> Iterator[Hit]:
    """``artifact``: the ``.ptd`` that holds the entries (None: the program itself)."""
    for key, count in Counter(key for key, _, _ in entries).items():
        if count > 1:
            yield Hit(
                f"named data key '{key}' appears {count} times in {file}: a reader takes only one",
                constant=key,
                artifact=artifact,
            )
    for key, region, where in entries:
        place = (region.start, region.size) if region is not None else None
        if not key:
            yield Hit(f"{file} has named data with an empty key ({where})", region=place, artifact=artifact)
        elif region is None:
            yield Hit(
                f"named data '{key}' of {file} is in {where}, which does not exist", constant=key, artifact=artifact
            )
        elif region.size == 0:
            yield Hit(f"named data '{key}' of {file} is empty ({where})", constant=key, region=place, artifact=artifact)


@rule("EG508")
def named_data_unresolved(context: PteContext) -> Iterator[Hit]:
    program = context.pte.program
    if program is None:
        return
    available = context.named_data
    for delegate, payload in context.xnnpack_payloads:
        if isinstance(payload, DecodeError):
            continue  # EG506 reports it
        biases = payload.bias_elements()  # XNNPACK reads a bias by its node's channels, not its dims
        for constant in payload.constants:
            if not constant.named_key:
                continue
            what = f"{delegate}: constant value {constant.value_id} ({constant.datatype}{list(constant.dims)})"
            found = available.get(constant.named_key)
            element = ELEMENT_BYTES.get(constant.datatype)
            reads = (
                math.ceil(biases[constant.value_id] * element)
                if constant.value_id in biases and element
                else constant.nbytes
            )
            needed = reads or 0  # XNNPACK ignores the entry's size field for named data (XNNCompiler.cpp)
            if found is None:
                yield Hit(
                    f"{what} uses named data '{constant.named_key}', {_missing(context)}",
                    method=delegate.method,
                    constant=constant.named_key,
                )
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
            layout = context.named_data_layouts.get(key)
            if key not in available:
                yield Hit(f"{what}, {_missing(context)}", method=plan.name, constant=key)
            elif layout is not None and layout != (tensor.scalar_type, tuple(tensor.sizes), tuple(tensor.dim_order)):
                yield Hit(
                    f"{what} in dim order {list(tensor.dim_order)}, which {available[key][0]} stores as "
                    f"{describe_layout(layout[0], layout[1])} in dim order "
                    f"{list(layout[2])}: the runtime refuses to load the method (InvalidExternalData)",
                    method=plan.name,
                    constant=key,
                )
            elif available[key][1].size < nbytes:
                yield Hit(
                    f"{what}: it needs {nbytes} bytes and {available[key][0]} holds {available[key][1].size}",
                    method=plan.name,
                    constant=key,
                )


def _missing(context: PteContext) -> str:
    return "which no given data file holds" if context.data_files else "which needs a .ptd file; none was given"


@rule("EG513")
def xnnpack_shared_conv_weights(context: PteContext) -> Iterator[Hit]:
    # XNNPACK's weights cache (on in the Android and Apple builds) names a conv's packed weights
    # by its filter's and bias's named-data keys, which are SHA-256 hashes of their bytes. In
    # ExecuTorch 1.0 to 1.2, the second conv with a name already cached makes XNNPACK call
    # look_up_or_insert with a null pointer, and the cache memcmp()s it: SIGSEGV at load.
    # Fully-connected, transposed and depthwise-with-a-dwconv-kernel paths never make that call.
    uses: dict[tuple[str, str], list[tuple[Delegate, str]]] = {}
    for delegate, payload in context.xnnpack_payloads:
        if isinstance(payload, DecodeError):
            continue  # EG506 reports it
        for conv in payload.convs:
            if conv.filter_key:
                uses.setdefault((conv.filter_key, conv.bias_key), []).append((delegate, conv.kind))
    for (filter_key, bias_key), convs in uses.items():
        if len(convs) < 2:
            continue
        where = ", ".join(dict.fromkeys(str(delegate) for delegate, _ in convs))
        certain = any(kind == "XNNConv2d" for _, kind in convs[1:])  # a depthwise conv may take the dwconv path
        bias = f" and bias '{bias_key[:12]}…'" if bias_key else " (no bias)"
        yield Hit(
            f"{len(convs)} convolutions in {where} read filter '{filter_key[:12]}…'{bias}: ExecuTorch 1.0.0 "
            f"to 1.2.0 runtimes with the XNNPACK weights cache (the official Android AAR and iOS frameworks) "
            f"{'crash' if certain else 'may crash'} with SIGSEGV in XNNWeightsCache::look_up_or_insert when "
            "they load this program; 1.3.0 and later load it",
            method=convs[0][0].method,
            constant=filter_key,
        )


@rule("EG523")
@needs(Need.CONTENT_DIGESTS)
def named_data_hash_mismatch(context: PteContext) -> Iterator[Hit]:
    """Named data whose key is the SHA-256 of its content (XNNPACK's) that its bytes no longer
    match: a weights cache keyed by that name keeps the damage across launches."""
    readers: dict[str, set[str]] = {}
    for delegate, payload in context.xnnpack_payloads:
        if isinstance(payload, XnnPayload):
            for constant in payload.constants:
                if constant.named_key:
                    readers.setdefault(constant.named_key, set()).add(str(delegate))
    for key, digest in context.content_digests.items():
        found = digest.result()
        if found != key:
            file, region = context.named_data[key]
            read_by = f", read by {', '.join(sorted(readers[key]))}" if key in readers else ""
            yield Hit(
                f"named data '{key[:16]}…' ({region.what} of {file}, {region.size:,} bytes{read_by}) no longer "
                f"matches its key, the SHA-256 of its content (it hashes to {found[:16]}…): its bytes changed after export",
                constant=key,
                region=(region.start, region.size),
                artifact=file if file != context.pte.name else None,
            )
