"""Placement in one room: every constant in host memory before anything reads it there.

The face of the room, one name per way in:

- :func:`check_constant_placement`, :func:`guard_constant_placement` and
  :class:`ConstantPlacementPass` (``guard.py``): a whole program, at any stage;
- :func:`guard_partitioners` and :class:`GuardedPartitioner` (``partitioner.py``): after each
  partitioner decides, before a preprocess reads, so that a backend that holds device
  memory on purpose (the CUDA backend) is never blocked;
- :func:`emit_passes` and :class:`EmitPlacementPass` (``emit.py``): the last look before the
  emitter copies the constants;
- ``host_copy.py``: the one host copy (a program's CPU twin), used by every ``"copy"``;
- ``messages.py``: the error, the fixes and the ``EG103`` copy finding.

The facts (whether the host can read a tensor) are ``analysis.storage``'s; the lint's
EG101 / EG102 rules report them.
"""

from export_guards.passes.placement.emit import EmitPlacementPass, EmittedProgram, emit_passes
from export_guards.passes.placement.guard import (
    ConstantPlacementPass,
    check_constant_placement,
    check_policy,
    guard_constant_placement,
)
from export_guards.passes.placement.messages import copy_findings, placement_error
from export_guards.passes.placement.partitioner import DEVICE_BACKENDS, GuardedPartitioner, guard_partitioners

__all__ = [
    "DEVICE_BACKENDS",
    "ConstantPlacementPass",
    "EmitPlacementPass",
    "EmittedProgram",
    "GuardedPartitioner",
    "check_constant_placement",
    "check_policy",
    "copy_findings",
    "emit_passes",
    "guard_constant_placement",
    "guard_partitioners",
    "placement_error",
]
