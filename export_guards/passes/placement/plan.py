"""The placement plan: the one decision of what the guard does with each constant of one
method's program that the host cannot read, at one stage of the export.

Every way in asks it: the guard on a whole program and its pass (``guard.py``), the guarded
exports before lowering (``lower_with_guards``, a guarded recipe's first step), the guarded
partitioner once its partitioner has decided (``partitioner.py``), and the emit pass
(``emit.py``). Each constant the host cannot read (``analysis.storage``) is one entry: why,
who reads it (a backend or the emitter, once a partitioner has decided) and the action:

- ``"stop"``: a host reader would crash on it: the guard raises, naming every such constant;
- ``"copy"``: the copy policy copies it to the host (the program's host twin, ``host_copy``);
- ``"defer"``: a later stage decides: before partitioning, the guarded partitioners (for a
  backend that may read device memory itself); after a partitioner, the next one, or the
  emit pass that copies it;
- ``"keep"``: a backend that reads device memory itself (the CUDA backend) takes it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal, final

from executorch.exir.backend.partitioner import PartitionResult
from torch.export import ExportedProgram
from torch.fx import GraphModule

from export_guards.analysis.programs import ProgramConstant, iter_constants
from export_guards.analysis.source import node_site
from export_guards.analysis.storage import Unreadable, describe, device_problem, first_user, unreadable_constants
from export_guards.passes.placement.decomposed import kept_decompositions
from export_guards.passes.placement.host_copy import host_twin
from export_guards.passes.placement.messages import FIX_BACKEND, FIX_EMITTER, placement_error
from export_guards.passes.result import GuardPassResult
from export_guards.report import Finding, Report
from export_guards.ruleset import CATALOG, Hit, finding
from export_guards.settings import PLACEMENT_POLICIES, PlacementPolicy

__all__ = ["EMITTER", "Action", "Placed", "PlacementPlan", "check_policy", "plan_partition", "plan_placement"]

Action = Literal["stop", "copy", "defer", "keep"]
"""What the guard does with a constant the host cannot read (the module's docstring)."""

EMITTER = "emitter"
"""The reader of what no partition takes: ``to_executorch``'s emitter."""


@final
@dataclass(frozen=True)
class Placed:
    """One constant the host cannot read, and what the plan does with it.

    Attributes:
        constant: the constant.
        problem: why the host cannot read it.
        action: what the guard does with it.
        reader: once a partitioner has decided, the backend id whose preprocess reads it, or
            :data:`EMITTER`; ``None`` before.
    """

    constant: ProgramConstant
    problem: Unreadable
    action: Action
    reader: str | None = None

    def finding(self) -> Finding:
        """Its ``EG101`` (device memory) or ``EG102`` (no data) finding, at the user's line;
        once a partitioner has decided, the message names the reader and the fix suits it."""
        message, fix = self.problem.said_of(self.constant), None
        if self.reader == EMITTER:
            message, fix = (
                f"{message}; no partition takes it, so the emitter will copy it from host memory",
                FIX_EMITTER,
            )
        elif self.reader is not None:
            message, fix = (
                f"{message}; {self.reader}'s preprocess will read it from host memory",
                FIX_BACKEND.format(backend=self.reader),
            )
        code = "EG101" if self.problem.on_device else "EG102"
        hit = Hit(message, first_user(self.constant.node), self.constant.fqn, fix=fix)
        return finding(CATALOG[code], hit, method=self.constant.method, locate=node_site)


@final
@dataclass(frozen=True)
class PlacementPlan:
    """The plan for one method's program at one stage: an entry per constant the host cannot
    read, in program order.

    Attributes:
        method: the method's name, when known.
        placed: the entries.
    """

    method: str | None
    placed: tuple[Placed, ...] = ()

    def findings(self) -> Report:
        """Every entry's ``EG101`` / ``EG102`` finding, in code order, then program order (as
        the lint lists them)."""
        return _findings(self.placed)

    @functools.cached_property
    def stops(self) -> Report:
        """The findings of the constants that stop the export: each one a host reader would
        crash on."""
        return _findings(p for p in self.placed if p.action == "stop")

    @property
    def to_copy(self) -> tuple[ProgramConstant, ...]:
        """The constants the copy policy copies to the host."""
        return tuple(p.constant for p in self.placed if p.action == "copy")

    def copies(self) -> Report:
        """One ``EG103`` finding per constant copied to the host."""
        return Report.of(
            finding(
                CATALOG["EG103"],
                Hit(f"copied {describe(c)} from {c.tensor.device} to host memory", first_user(c.node), c.fqn),
                method=self.method,
                locate=node_site,
            )
            for c in self.to_copy
        )

    def kept_decompositions(self, graph_module: GraphModule) -> Report:
        """One ``EG104`` per attention that ``graph_module`` (of the program this plan copies)
        had decomposed on the device before the copy: the copy cannot undo it."""
        if not self.to_copy:
            return Report()
        return kept_decompositions(self.method, graph_module, self.to_copy[0].tensor.device)

    def carried_out(self, ep: ExportedProgram) -> GuardPassResult:
        """The plan carried out on ``ep``, the program it was made of: the same program when
        nothing is to copy, else its host twin with the ``EG103`` copies (and an ``EG104`` per
        attention decomposed on the device before) as the report. ``ep`` is never modified.

        Raises:
            ConstantPlacementError: some constant stops the export; the error names each one.
        """
        stops = self.stops
        if stops:
            raise placement_error(stops)
        if not self.to_copy:
            return GuardPassResult(ep, False)
        return GuardPassResult(
            host_twin(ep, self.to_copy), True, self.copies() + self.kept_decompositions(ep.graph_module)
        )


def _findings(placed: Iterable[Placed]) -> Report:
    return Report.of(sorted((p.finding() for p in placed), key=lambda f: f.code))


def plan_placement(
    method: str | None,
    ep: ExportedProgram,
    policy: PlacementPolicy = "error",
    *,
    defer_device_constants: bool = False,
    reader: str | None = None,
) -> PlacementPlan:
    """The plan for ``ep`` where no partitioner has said who reads what: before partitioning
    (a torch.export or edge program) or at emission (``reader=EMITTER``: what is left in the
    program, the emitter reads).

    A constant without data stops the export, whatever the policy: there are no bytes to read
    or to copy. One in device memory is copied with ``policy="copy"`` (unless some constant
    stops the export: then the program has no host twin), deferred to the guarded
    partitioners with ``defer_device_constants``, and stops the export otherwise.

    Raises:
        ValueError: ``policy`` is not a placement policy.
    """
    check_policy(policy)
    unreadable = unreadable_constants(method, ep)
    copying = policy == "copy" and all(problem.on_device for _, problem in unreadable)

    def action(problem: Unreadable) -> Action:
        if problem.on_device and copying:
            return "copy"
        if problem.on_device and defer_device_constants:
            return "defer"
        return "stop"

    return PlacementPlan(method, tuple(Placed(c, problem, action(problem), reader) for c, problem in unreadable))


def plan_partition(
    result: PartitionResult, trusted: frozenset[str], *, emitter: PlacementPolicy | None
) -> PlacementPlan:
    """The plan for a partitioner's decision: each constant in device memory is read by the
    backend whose partition holds it, or, when no partition does, by the emitter (``emitter``
    is its policy; ``None`` when a later partitioner decides first).

    A backend in ``trusted`` reads device memory itself: its constants are kept. What the
    emitter will copy (``emitter="copy"``) is deferred to the emit pass. Every other reader
    reads host memory: the constant stops the export. Constants without data were the
    transform stage's to stop (ExecuTorch partitions a copy whose constants are fake tensors
    on the real ones' devices, so only the device is read here).
    """
    backends: Mapping[str, str] = {tag: spec.backend_id for tag, spec in result.partition_tags.items()}
    placed = []
    for constant in iter_constants(None, result.tagged_exported_program):
        problem = device_problem(constant.tensor)
        if problem is None:
            continue
        tag = constant.node.meta.get("delegation_tag")
        reader = backends[tag] if tag is not None and tag in backends else EMITTER if emitter is not None else None
        placed.append(Placed(constant, problem, _after_partitioning(reader, trusted, emitter), reader))
    return PlacementPlan(None, tuple(placed))


def check_policy(policy: str) -> None:
    """Raise ``ValueError`` unless ``policy`` is a placement policy."""
    if policy not in PLACEMENT_POLICIES:
        raise ValueError(f"placement policy must be 'error' or 'copy', not {policy!r}")


def _after_partitioning(reader: str | None, trusted: frozenset[str], emitter: PlacementPolicy | None) -> Action:
    if reader is None or (reader == EMITTER and emitter == "copy"):
        return "defer"
    return "keep" if reader in trusted else "stop"
