"""Placement in one room: every constant in host memory before anything reads it there.

What to do with each constant the host cannot read is decided in one place, the placement plan
(``plan.py``: :func:`plan_placement` before partitioning or at emission, :func:`plan_partition`
once a partitioner has decided); every way in asks it:

- :func:`check_constant_placement`, :func:`guard_constant_placement` and
  :class:`ConstantPlacementPass` (``guard.py``): a whole program, at any stage;
- :func:`guard_partitioners` and :class:`GuardedPartitioner` (``partitioner.py``): after each
  partitioner decides, before a preprocess reads, so that a backend that holds device
  memory on purpose (the CUDA backend) is never blocked;
- :func:`emit_passes` and :class:`EmitPlacementPass` (``emit.py``): the last look before the
  emitter copies the constants;
- ``host_copy.py``: the one host copy (a program's CPU twin), used by every ``"copy"``;
- ``messages.py``: the error and the fixes.

The facts (whether the host can read a tensor) are ``analysis.storage``'s; the lint's
EG101 / EG102 rules report them.
"""

from export_guards.passes.placement.emit import EmitPlacementPass, EmittedProgram, emit_passes
from export_guards.passes.placement.guard import (
    ConstantPlacementPass,
    check_constant_placement,
    guard_constant_placement,
)
from export_guards.passes.placement.messages import placement_error
from export_guards.passes.placement.partitioner import DEVICE_BACKENDS, GuardedPartitioner, guard_partitioners
from export_guards.passes.placement.plan import PlacementPlan, check_policy, plan_partition, plan_placement

__all__ = [
    "DEVICE_BACKENDS",
    "ConstantPlacementPass",
    "EmitPlacementPass",
    "EmittedProgram",
    "GuardedPartitioner",
    "PlacementPlan",
    "check_constant_placement",
    "check_policy",
    "emit_passes",
    "guard_constant_placement",
    "guard_partitioners",
    "placement_error",
    "plan_partition",
    "plan_placement",
]
