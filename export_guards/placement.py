"""Constant placement: the guards that keep a constant the host would read off device memory
(EG101-EG103), as passes, partitioners and checks (docs/placement.md). A public namespace: it
only names what the passes' room makes."""

from __future__ import annotations

from export_guards.errors import ConstantPlacementError
from export_guards.passes.placement import (
    DEVICE_BACKENDS,
    ConstantPlacementPass,
    EmitPlacementPass,
    GuardedPartitioner,
    check_constant_placement,
    emit_passes,
    guard_constant_placement,
    guard_partitioners,
)
from export_guards.settings import PlacementPolicy

__all__ = [
    "DEVICE_BACKENDS",
    "ConstantPlacementError",
    "ConstantPlacementPass",
    "EmitPlacementPass",
    "GuardedPartitioner",
    "PlacementPolicy",
    "check_constant_placement",
    "emit_passes",
    "guard_constant_placement",
    "guard_partitioners",
]
