"""EG530-EG535: what an app update does to XNNPACK's packed-weight cache, weight by weight."""

from __future__ import annotations

from collections.abc import Iterator

from export_guards.pte.weight_cache import CacheDiff, Weight, WeightChange
from export_guards.ruleset import Hit, rule


@rule("EG530")
def weight_repacked_same_source(diff: CacheDiff) -> Iterator[Hit]:
    said: set[str] = set()
    for change in diff.of("repacked"):
        if change.cause != "same-source" or change.weight.cache_key in said:
            continue
        said.add(change.weight.cache_key)  # one finding per packed entry: its first weight explains it
        weight, old = change.weight, change.old
        assert old is not None
        yield _on(
            weight,
            f"{weight} re-packs after the update, although its source did not change: {change.why}; "
            f"its cache key was '{_short(old.cache_key)}' and is '{_short(weight.cache_key)}': "
            f"{_entry_bytes(diff, change):,} bytes re-packed on every device for nothing",
            diff.new,
        )


@rule("EG531")
def weight_cache_stale(diff: CacheDiff) -> Iterator[Hit]:
    said: set[str] = set()
    for change in diff.of("reused"):
        if change.cause != "stale" or change.weight.cache_key in said:
            continue
        said.add(change.weight.cache_key)
        yield _on(
            change.weight,
            f"{change.weight} keeps its cache key '{_short(change.weight.cache_key)}' across the update, but "
            f"{change.why}: a cache keyed by name serves the old packing, so the new build computes with the old weight",
            diff.new,
        )


@rule("EG532")
def weight_repacked(diff: CacheDiff) -> Iterator[Hit]:
    for change in diff.of("repacked"):
        if change.cause == "same-source":
            continue
        because = {"new": "it is new", "changed": "its source changed", "partner": "what it is packed with changed"}[
            change.cause
        ]
        yield _on(
            change.weight,
            f"{change.weight} re-packs after the update ({change.weight.nbytes:,} bytes): {because} ({change.why})",
            diff.new,
        )


@rule("EG533")
def weight_orphaned(diff: CacheDiff) -> Iterator[Hit]:
    for change in diff.of("orphaned"):
        yield _on(
            change.weight,
            f"{change.weight} of the shipped program is orphaned: no weight of the new build uses its cache key "
            f"'{_short(change.weight.cache_key)}', whose {change.weight.nbytes:,} bytes a cache that keeps old entries holds for nothing",
            diff.old,
        )


@rule("EG534")
def weight_reused(diff: CacheDiff) -> Iterator[Hit]:
    for change in diff.of("reused"):
        if change.cause == "stale":
            continue
        yield _on(
            change.weight,
            f"{change.weight} is reused: {_entry_key(change.weight)} is in both programs",
            diff.new,
        )


@rule("EG535")
def weight_cache_account(diff: CacheDiff) -> Iterator[Hit]:
    yield Hit(f"from {diff.old} to {diff.new}: {diff.summary()}", artifact=diff.new)


def _on(weight: Weight, message: str, artifact: str) -> Hit:
    """The finding ``message`` about ``weight``, in the program ``artifact`` names."""
    return Hit(message, constant=weight.key, method=weight.method or None, artifact=artifact, region=weight.region)


def _entry_bytes(diff: CacheDiff, change: WeightChange) -> int:
    return sum(
        {
            c.weight.key: c.weight.nbytes for c in diff.of("repacked") if c.weight.cache_key == change.weight.cache_key
        }.values()
    )


def _entry_key(weight: Weight) -> str:
    """The key of ``weight``'s packed entry, in words: a bias's begins with its filter's key."""
    if weight.role == "bias":
        return f"its packed entry's key (its filter's key '{_short(weight.cache_key)}' followed by its own, '{_short(weight.key)}')"
    return f"its cache key '{_short(weight.cache_key)}'"


def _short(key: str) -> str:
    return f"{key[:12]}…" if len(key) > 16 else key
