"""What an app update does to XNNPACK's packed-weight cache: the shipped program against the new
build, weight by weight (``export-guards diff``).

XNNPACK names each constant by the SHA-256 of its bytes as stored (``scale_`` and that hash
for the scales of a per-channel or blockwise quantized weight, bf16 for blockwise; a
per-tensor scale is inline; no scale is part of a packed entry's key), and its runtime weights cache
(``XNNWeightsCache.cpp``) keys a packed weight by its filter's name followed by its bias's
name. So a weight is reused when that key is in both programs, re-packed when the new build
has a key the old one lacks, and the old key's entry is orphaned. Weights are paired across
the two programs by their source, the delegate and XNNPACK value they feed, so that a
re-pack is told apart: its source tensor changed (an update of the weights), or the same
source gives other bytes (the same bytes under another key, or the same float weight
quantized to other integers): a needless re-pack on every device, which an export should not make.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import final

from export_guards.pte.reader.file import PteFile
from export_guards.pte.reader.flatc import DecodeError
from export_guards.pte.reader.xnnpack import BACKEND_ID, XnnQuantization, read_payload, read_quantization

__all__ = ["CacheDiff", "ProgramUpdate", "Weight", "WeightChange", "diff_weights", "weights_of"]

# The integers of XNNPACK's quantized datatypes, as numpy reads them (4-bit types are left out:
# their bytes are compared as they are).
_INTEGERS = {
    "xnn_datatype_qint8": "int8", "xnn_datatype_qcint8": "int8", "xnn_datatype_qdint8": "int8",
    "xnn_datatype_quint8": "uint8", "xnn_datatype_qint32": "int32", "xnn_datatype_qcint32": "int32",
}  # fmt: skip


@final
@dataclass(frozen=True)
class ProgramUpdate:
    """The shipped program and the new build, as the command read them: the subject of the
    ``update`` rules' analysis."""

    old: PteFile
    new: PteFile


@final
@dataclass(frozen=True)
class Weight:
    """One named constant of a program, where it feeds and how the cache keys it.

    Attributes:
        method, delegate, value_id: its source: the method, the delegate call (its index in
            the method) and the XNNPACK value it is; for named data that no XNNPACK delegate
            reads, ``delegate`` is -1 and ``value_id`` -1 (its key is its source).
        dims, datatype: its shape and XNNPACK datatype (``()`` and ``""`` outside XNNPACK).
        key: its named-data key.
        cache_key: the key of the packed entry it goes into: its node's filter key followed by
            its bias key, for a filter or bias; its own key otherwise.
        role: ``"filter"``, ``"bias"`` or ``"constant"``.
        nbytes: the bytes it holds as stored.
        content: those bytes, or ``None`` when the program does not hold them (a ``.ptd``).
        quantization: how its integers map to reals, for a quantized weight.
        scale_content: the bytes of its scales, when they are named data.
        region: where its bytes are in the file, ``(offset, length)``.
    """

    method: str
    delegate: int
    value_id: int
    dims: tuple[int, ...]
    datatype: str
    key: str
    cache_key: str
    role: str
    nbytes: int
    content: memoryview | None = field(default=None, repr=False, compare=False)
    quantization: XnnQuantization | None = None
    scale_content: memoryview | None = field(default=None, repr=False, compare=False)
    region: tuple[int, int] | None = None

    @property
    def source(self) -> tuple[str, int, int] | str:
        return (self.method, self.delegate, self.value_id) if self.delegate >= 0 else self.key

    def __str__(self) -> str:
        if self.delegate < 0:
            return f"named data '{_short(self.key)}' ({self.nbytes:,} bytes)"
        shape = f"{self.datatype.removeprefix('xnn_datatype_')}{list(self.dims)}"
        return f"{self.role} value {self.value_id} ({shape}, {self.nbytes:,} bytes) of delegate {self.delegate} of method '{self.method}'"


@final
@dataclass(frozen=True)
class WeightChange:
    """One weight of either program and what the update does to its cache entry.

    Attributes:
        weight: the weight (the new build's; the old program's when ``status`` is ``"orphaned"``).
        status: ``"reused"``, ``"repacked"`` or ``"orphaned"``.
        cause: for a re-pack: ``"new"`` (no source in the old program), ``"changed"`` (its source
            changed: other shape, datatype or values), ``"partner"`` (it is packed with a filter
            or bias whose source changed), or ``"same-source"`` (nothing of its entry changed
            but the bytes or their key); for a reused weight, ``"stale"`` when the old entry
            holds other content under the same key (the cache serves the old packing), else ``""``.
        old: the weight at the same source in the old program, if any.
        why: how the cause was told, in words.
    """

    weight: Weight
    status: str
    cause: str = ""
    old: Weight | None = None
    why: str = ""


@final
@dataclass(frozen=True)
class CacheDiff:
    """Every weight of the two programs, and the cache's account of the update.

    Attributes:
        old, new: the two programs' names (their paths, as given).
        changes: the new build's weights, then the old program's orphaned ones.
        repacked_bytes: the bytes of the new cache entries (each entry once): what the first
            launch after the update packs.
        orphaned_bytes: the bytes of the old entries that no weight of the new build uses.
        reused_bytes: the bytes of the entries both use.
    """

    old: str
    new: str
    changes: tuple[WeightChange, ...]
    repacked_bytes: int
    orphaned_bytes: int
    reused_bytes: int

    def of(self, status: str) -> tuple[WeightChange, ...]:
        return tuple(c for c in self.changes if c.status == status)

    @property
    def growth(self) -> int:
        """What a cache that keeps the old entries adds: the new entries' bytes."""
        return self.repacked_bytes

    def summary(self) -> str:
        """``3 weights: 2 reused, 1 re-packed (1,024 bytes), 1 orphaned (1,024 bytes)``."""
        counts = {
            status: len({c.weight.cache_key for c in self.of(status)}) for status in ("reused", "repacked", "orphaned")
        }
        weights = len(self.changes) - len(self.of("orphaned"))
        return (
            f"{weights} weight{'s' if weights != 1 else ''} in {counts['reused'] + counts['repacked']} cache entries: "
            f"{counts['reused']} reused ({self.reused_bytes:,} bytes), {counts['repacked']} re-packed "
            f"({self.repacked_bytes:,} bytes), {counts['orphaned']} orphaned ({self.orphaned_bytes:,} bytes); a cache "
            f"that keeps its old entries grows by {self.growth:,} bytes"
        )


def diff_weights(update: ProgramUpdate) -> CacheDiff:
    """Every weight of ``update``'s two programs, reused, re-packed or orphaned, each re-pack with
    its cause. Both programs must have been read (``PteFile.program`` not ``None``).

    Raises:
        DecodeError: an XNNPACK delegate's payload cannot be read, saying which.
    """
    old = list(weights_of(update.old))
    new = old if update.new is update.old else list(weights_of(update.new))  # diff A A: the program read once
    old_entries, new_entries = _entries(old), _entries(new)
    at_source = {w.source: w for w in old}
    causes = {w: _cause(w, at_source.get(w.source)) for w in new if w.cache_key not in old_entries}
    changes = []
    for weight in new:
        if weight.cache_key in old_entries:
            stale = _stale(old_entries[weight.cache_key], new_entries[weight.cache_key])
            changes.append(
                WeightChange(weight, "reused", "stale" if stale else "", at_source.get(weight.source), stale)
            )
            continue
        cause, why = causes[weight]
        if cause == "unchanged":  # then its entry re-packs for a partner's change, or for nothing
            partners = [
                p
                for p in new_entries[weight.cache_key]
                if p is not weight and (p.method, p.delegate) == (weight.method, weight.delegate)
            ]
            changed = [p for p in partners if causes[p][0] in ("new", "changed")]
            cause = "partner" if changed else "same-source"
            if changed:
                why = f"its own source is unchanged; it is packed with {changed[0].role} value {changed[0].value_id}, whose source changed"
            elif partners:
                why += f"; what it is packed with ({', '.join(f'{p.role} value {p.value_id}' for p in partners)}) did not change either"
        changes.append(WeightChange(weight, "repacked", cause, at_source.get(weight.source), why))
    changes += [WeightChange(w, "orphaned") for w in old if w.cache_key not in new_entries]
    return CacheDiff(
        update.old.name,
        update.new.name,
        tuple(changes),
        repacked_bytes=_bytes(new_entries, new_entries.keys() - old_entries.keys()),
        orphaned_bytes=_bytes(old_entries, old_entries.keys() - new_entries.keys()),
        reused_bytes=_bytes(new_entries, new_entries.keys() & old_entries.keys()),
    )


def weights_of(pte: PteFile) -> Iterator[Weight]:
    """Each named constant of ``pte``'s XNNPACK delegates, then its named data that no XNNPACK
    delegate reads (another backend's, or external tensors'), each once per source.

    Raises:
        DecodeError: an XNNPACK delegate's payload cannot be read, saying which.
    """
    named = pte.named_data
    read: set[str] = set()
    for delegate in pte.delegates:
        if delegate.backend != BACKEND_ID or delegate.data is None:
            continue
        try:
            payload = read_payload(delegate.data)
            quantization = read_quantization(delegate.data)
        except DecodeError as error:
            raise DecodeError(f"{delegate} in {pte.name}: {error}") from None
        keys = {c.value_id: c.named_key for c in payload.constants}
        entry: dict[int, tuple[str, str]] = {}  # value id -> (role, the cache key of its packed entry)
        for node in payload.nodes:
            filter_, bias = node.operand("FilterId"), node.operand("BiasId")
            if filter_ is None or not keys.get(filter_):
                continue
            cache_key = keys[filter_] + (
                keys.get(bias, "") if bias is not None else ""
            )  # as XNNWeightsCache::look_up names it
            entry.setdefault(filter_, ("filter", cache_key))
            if bias is not None and keys.get(bias):
                entry.setdefault(bias, ("bias", cache_key))
        for constant in payload.constants:
            if not constant.named_key:
                continue  # inline in the payload: no name, no cache entry of its own
            role, cache_key = entry.get(constant.value_id, ("constant", constant.named_key))
            quant = quantization.get(constant.value_id)
            read.add(constant.named_key)
            if quant is not None and quant.scale_key:
                read.add(quant.scale_key)
            yield Weight(
                delegate.method,
                delegate.index,
                constant.value_id,
                constant.dims,
                constant.datatype,
                constant.named_key,
                cache_key,
                role,
                constant.size,
                _content(pte, constant.named_key, constant.size),
                quant,
                _content(pte, quant.scale_key, None) if quant is not None and quant.scale_key else None,
                _region(pte, constant.named_key, constant.size),
            )
    for key, region in named.items():
        if key not in read:
            yield Weight(
                "",
                -1,
                -1,
                (),
                "",
                key,
                key,
                "constant",
                region.size,
                _content(pte, key, region.size),
                region=(region.start, region.size),
            )


def _content(pte: PteFile, key: str, size: int | None) -> memoryview | None:
    """The bytes of named data ``key`` (its first ``size``), as a view of the mapped file: a
    large program is compared in place, never copied."""
    region = pte.named_data.get(key)
    if region is None or not pte.in_file(region):
        return None
    return memoryview(pte.data)[region.start : region.start + (region.size if size is None else min(size, region.size))]


def _region(pte: PteFile, key: str, size: int) -> tuple[int, int] | None:
    region = pte.named_data.get(key)
    return (region.start, min(size, region.size)) if region is not None else None


def _entries(weights: list[Weight]) -> dict[str, list[Weight]]:
    entries: dict[str, list[Weight]] = {}
    for weight in weights:
        entries.setdefault(weight.cache_key, []).append(weight)
    return entries


def _bytes(entries: dict[str, list[Weight]], keys: set[str]) -> int:
    """The bytes of these entries: each named constant in them once."""
    return sum(sum({w.key: w.nbytes for w in entries[key]}.values()) for key in keys)


def _stale(old: list[Weight], new: list[Weight]) -> str:
    """Why the old entry of a reused key holds other content than the new build (``""``: it
    does not): a key that is not the hash of the bytes, or scales changed under the same
    integers, both of which the cache serves from the old packing."""
    for weight in new:
        before = next((w for w in old if w.key == weight.key), None)
        if before is None:
            continue
        if (
            before.content is not None
            and weight.content is not None
            and not _same_bytes(before.content, weight.content)
        ):
            return f"named data '{_short(weight.key)}' holds other bytes in each program under the same key"
        if _scales(before) != _scales(weight):
            return f"the scales of {weight.role} value {weight.value_id} changed under the same integers"
    return ""


_CHUNK = 1 << 20


def _same_bytes(a: memoryview, b: memoryview) -> bool:
    """Whether two buffers hold the same bytes: a megabyte at a time, each compared with
    ``memcmp`` (a memoryview's own ``==`` compares element by element, ten times slower)."""
    if a.nbytes != b.nbytes:
        return False
    return all(a[i : i + _CHUNK].tobytes() == b[i : i + _CHUNK].tobytes() for i in range(0, a.nbytes, _CHUNK))


def _cause(new: Weight, old: Weight | None) -> tuple[str, str]:
    """Whether ``new``'s source changed from ``old`` (at the same source): ``("new", ...)``,
    ``("changed", ...)`` or ``("unchanged", how that was told)``."""
    if old is None:
        return "new", "the old program has no weight at its source"
    if (old.dims, old.datatype) != (new.dims, new.datatype):
        return "changed", f"its source was {old.datatype.removeprefix('xnn_datatype_')}{list(old.dims)}"
    if old.content is None or new.content is None:
        return (
            "changed",
            "its bytes are outside the program (a .ptd), so its source cannot be compared: taken as changed",
        )
    if _same_bytes(old.content, new.content) and _scales(old) == _scales(new):
        return (
            "unchanged",
            f"its bytes are the same in both programs, under the key '{_short(old.key)}' and now '{_short(new.key)}'",
        )
    close = _same_reals(old, new)
    if close is not None:
        return (
            "unchanged",
            f"its integers dequantize to the same reals within a quantization step ({close}): the same float weight, quantized to other bytes",
        )
    return "changed", "its values differ"


def _scales(weight: Weight) -> tuple[tuple[float, ...], bytes | None, int] | None:
    quant = weight.quantization
    return (
        None
        if quant is None
        else (quant.scales, None if weight.scale_content is None else bytes(weight.scale_content), quant.zero_point)
    )


def _same_reals(old: Weight, new: Weight) -> str | None:
    """How closely the two quantized weights dequantize to the same reals, when each element
    of one lies within half a quantization step of each (plus the other's): two quantizations
    of one float tensor. ``None`` when they do not, or the weights are not quantized to
    integers this can read."""
    import numpy as np  # flatbuffers' AsNumpy readers need it already

    integer = _INTEGERS.get(new.datatype)
    if (
        integer is None
        or old.quantization is None
        or new.quantization is None
        or old.content is None
        or new.content is None
    ):
        return None
    reals = []
    for weight in (old, new):
        quant = weight.quantization
        assert quant is not None and weight.content is not None
        values = np.frombuffer(weight.content, dtype=integer).astype(np.float64)
        if values.size != math.prod(weight.dims) or not weight.dims:
            return None
        scales = np.asarray(quant.scales, dtype=np.float64)
        if quant.kind == "per_channel" and not scales.size and weight.scale_content is not None:
            scales = np.frombuffer(weight.scale_content, dtype=np.float32).astype(np.float64)
        if quant.kind == "per_tensor" and scales.size == 1:
            reals.append(((values - quant.zero_point) * scales[0], np.full(values.shape, scales[0])))
        elif (
            quant.kind == "per_channel"
            and 0 <= quant.channel_dim < len(weight.dims)
            and scales.size == weight.dims[quant.channel_dim]
        ):
            shape = [1] * len(weight.dims)
            shape[quant.channel_dim] = scales.size
            grid = np.broadcast_to(scales.reshape(shape), weight.dims).reshape(-1)
            reals.append((values * grid, grid))
        else:
            return None
    (a, step_a), (b, step_b) = reals
    if not np.all(np.abs(a - b) <= (step_a + step_b) / 2 * (1 + 1e-6)):
        return None
    return (
        f"largest difference {float(np.max(np.abs(a - b))):.3g}, half a step {float(np.max((step_a + step_b) / 4)):.3g}"
    )


def _short(key: str) -> str:
    return f"{key[:12]}…" if len(key) > 16 else key
