"""What the program-file rules read: the ``.pte`` and the external data files given with it."""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol, TypeVar

from export_guards.pte.digests import ContentDigests, is_content_key
from export_guards.pte.inventory import RuntimeInventory
from export_guards.pte.reader.dataflow import Access, method_accesses, path_accesses
from export_guards.pte.reader.external import PtdFile
from export_guards.pte.reader.file import Delegate, PteFile, Region
from export_guards.pte.reader.flatc import DecodeError
from export_guards.pte.reader.paths import forward_paths
from export_guards.pte.reader.wheel import ExecutionPlan
from export_guards.pte.reader.xnnpack import BACKEND_ID, XnnPayload, read_payload
from export_guards.ruleset import RuleSet
from export_guards.ruleset.selection import Selection

__all__ = ["Need", "PteContext", "RuntimeAnswers", "needs", "needs_of", "tupled", "verdicts"]

F = TypeVar("F", bound=Callable[..., Any])


class Need(enum.Enum):
    """What a program-file rule needs arranged before the rules run (``check_pte`` arranges
    what the enabled rules declare with :func:`needs`)."""

    REPLAYED = "replayed"
    """The verdicts of the program's kernel calls replayed on torch's meta tensors by the
    runtime's child (with ``runtime``): the calls go with the child's job."""
    CONTENT_DIGESTS = "content_digests"
    """The named data's hashes, started in background threads before the other rules run."""


def needs(*wanted: Need) -> Callable[[F], F]:
    """Declare what the decorated check needs arranged before it runs (under ``@rule``)."""

    def declare(check: F) -> F:
        check.needs = frozenset(wanted)  # type: ignore[attr-defined]
        return check

    return declare


def needs_of(rules: RuleSet, settings: Selection) -> frozenset[Need]:
    """What the program-file rules of ``rules`` that ``settings`` enable need arranged."""
    return frozenset(
        need for r in rules.stage("pte") if settings.enabled(r.code) for need in getattr(r.check, "needs", ())
    )


class RuntimeAnswers(Protocol):
    """The runtime's child under way (``smoke.StartedSmoke``): what it answers before it runs."""

    def answer(self, kind: str) -> Any: ...


@dataclass
class PteContext:
    """A program file and its data files, as the ``pte`` rules see them, the runtime it is
    checked against (``against``, else the one the runtime's child answers), and whether the
    kernel calls are replayed on torch's meta tensors here (EG519; loads torch), or were
    replayed by the runtime's child (``answers``: each of ``replay_calls``' verdicts, by
    ``rules.kernels.replay_calls``'s call). Built once, whole: what its rules need (``needs``,
    :func:`needs_of`) starts when it is made."""

    pte: PteFile
    data_files: tuple[PtdFile, ...] = field(default=())
    against: RuntimeInventory | None = None
    replay: bool = False
    digests: ContentDigests = field(default_factory=ContentDigests)
    answers: RuntimeAnswers | None = None
    replay_calls: Sequence[tuple[object, ...]] = ()
    needs: frozenset[Need] = frozenset()

    def __post_init__(self) -> None:
        if Need.CONTENT_DIGESTS in self.needs:
            _ = self.content_digests  # hashing the weights starts now, beside the other rules

    @cached_property
    def runtime(self) -> RuntimeInventory | None:
        """The runtime whose kernels and backends the program must find: ``against``, else the
        one the runtime's child answered (``None``: no child, or it died first, which its
        result reports)."""
        if self.against is not None:
            return self.against
        answered = self._answered.get("inventory")
        if answered is None:
            return None
        return RuntimeInventory(answered["name"], frozenset(answered["kernels"]), frozenset(answered["backends"]))

    @cached_property
    def replayed(self) -> Mapping[tuple[object, ...], object] | None:
        """Each of ``replay_calls``' verdicts, as the runtime's child replayed them, by call;
        ``None`` where none were sent or it did not answer."""
        answered = self._answered.get("replayed")
        return verdicts(self.replay_calls, answered) if answered is not None else None

    @cached_property
    def _answered(self) -> dict[str, Any]:
        """What the runtime's child answered, asked in the order it answers (an answer asked
        for reads past the ones before it): its runtime's inventory, unless ``against`` is
        given, then the verdicts of ``replay_calls``, where there are any."""
        if self.answers is None:
            return {}
        kinds = [*(["inventory"] if self.against is None else []), *(["replayed"] if self.replay_calls else [])]
        return {kind: self.answers.answer(kind) for kind in kinds}

    @cached_property
    def named_data(self) -> dict[str, tuple[str, Region]]:
        """Every resolvable named-data key: the file that holds it, and where (the program wins)."""
        found: dict[str, tuple[str, Region]] = {}
        for ptd in reversed(self.data_files):
            found.update((key, (ptd.name, region)) for key, region in ptd.named_data.items())
        found.update((key, (self.pte.name, region)) for key, region in self.pte.named_data.items())
        return found

    @cached_property
    def content_digests(self) -> dict[str, Future[str]]:
        """The SHA-256 of each named-data entry whose key has the form of one (XNNPACK names its
        weights by their content's hash), by key: hashed in background threads from the first
        call on, straight from the mapped files, so that the other rules run meanwhile
        (``check_pte`` starts it first; the command, before its imports, in ``digests``).
        Entries outside their file are left out (EG503's)."""
        files = {self.pte.name: self.pte.data, **{ptd.name: ptd.data for ptd in self.data_files}}
        entries = {
            key: (file, region)
            for key, (file, region) in self.named_data.items()
            if is_content_key(key) and region.start >= 0 and region.end <= len(files[file])
        }
        started = self.digests.hash((file, files[file], region.start, region.end) for file, region in entries.values())
        return dict(zip(entries, started))

    @cached_property
    def named_data_layouts(self) -> dict[str, tuple[int, tuple[int, ...], tuple[int, ...]]]:
        """The tensor layout (scalar type, sizes, dim order) that the file ``named_data``
        resolves each key to states for it, where that file is a ``.ptd`` that states one."""
        found: dict[str, tuple[int, tuple[int, ...], tuple[int, ...]]] = {}
        for ptd in reversed(self.data_files):
            found.update((key, layout) for key, layout in ptd.layouts.items() if key in ptd.named_data)
        return {key: layout for key, layout in found.items() if key not in self.pte.named_data}

    @cached_property
    def xnnpack_payloads(self) -> list[tuple[Delegate, XnnPayload | DecodeError]]:
        """Each XNNPACK delegate that has data, with its decoded payload or why it cannot be
        decoded: decoded once, for every rule that reads it."""
        decoded: list[tuple[Delegate, XnnPayload | DecodeError]] = []
        for delegate in self.pte.delegates:
            if delegate.backend == BACKEND_ID and delegate.data:
                try:
                    decoded.append((delegate, read_payload(delegate.data)))
                except DecodeError as error:
                    decoded.append((delegate, error))
        return decoded

    @cached_property
    def xnnpack_graphs(self) -> dict[tuple[str, int], XnnPayload]:
        """Each decodable XNNPACK payload by (method, delegate index): what the call and
        dataflow rules read."""
        return {(d.method, d.index): p for d, p in self.xnnpack_payloads if isinstance(p, XnnPayload)}

    @cached_property
    def straight_methods(self) -> list[tuple[ExecutionPlan, list[Access]]]:
        """Each method that runs one chain straight through, with what each instruction
        accesses, worked out once for the dataflow rules (methods with control flow have no
        static order: they are left alone)."""
        program = self.pte.program
        found = []
        for plan in program.execution_plan if program is not None else ():
            payloads = {index: p for (method, index), p in self.xnnpack_graphs.items() if method == plan.name}
            accesses = method_accesses(plan, payloads)
            if accesses is not None:
                found.append((plan, accesses))
        return found

    @cached_property
    def branching_methods(self) -> list[tuple[ExecutionPlan, list[tuple[tuple[int, ...], list[Access]]]]]:
        """Each method with forward jumps only (``torch.cond``), with each path it can run (the
        chain indices of its instructions) and what each instruction on it accesses. Methods
        with loops, or too many paths, are left out."""
        program = self.pte.program
        found = []
        for plan in program.execution_plan if program is not None else ():
            paths = forward_paths(plan)
            if paths is not None:
                payloads = {index: p for (method, index), p in self.xnnpack_graphs.items() if method == plan.name}
                found.append((plan, [(path, path_accesses(plan, path, payloads)) for path in paths]))
        return found


def verdicts(calls: Iterable[tuple[object, ...]], answered: Sequence[object]) -> dict[tuple[object, ...], object]:
    """The replayed verdicts (``rules.kernels.replayed``'s answer, back from JSON: lists for
    tuples), by call."""
    return dict(zip(calls, (tupled(a) for a in answered), strict=True))


def tupled(value: object) -> object:
    """``value`` as it was before JSON carried it: its lists tuples again."""
    return tuple(tupled(item) for item in value) if isinstance(value, (list, tuple)) else value
