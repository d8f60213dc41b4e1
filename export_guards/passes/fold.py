"""Fold every computation that depends only on constants into one static constant.

A weight computed at run time (spectral norm's ``weight / sigma``, weight norm's ``g * v/|v|``,
any ``w * scale.exp()``) is a graph computation whose inputs are all parameters, buffers or
lifted constants. XNNPACK will not delegate a conv or linear whose weight is not a static
parameter, so this pass evaluates each such subgraph once, at export time, and replaces it with
its result: a parameter named after the weight it feeds.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, cast

import torch
from executorch.exir.backend.partitioner import Partitioner
from executorch.exir.pass_base import ExportedProgramPassBase
from torch.export import ExportedProgram
from torch.export.graph_signature import ExportGraphSignature, InputKind, InputSpec, TensorArgument
from torch.fx import Node
from torch.fx.node import Argument

from export_guards.analysis.fold_plan import DeclinedFold, FoldPlan, outside_core_aten, plan_fold, written_growth
from export_guards.analysis.ops import ancestors, argument_name, aten_name, is_view
from export_guards.analysis.program_bytes import constant_cost
from export_guards.analysis.programs import ConstantKind, ProgramConstant
from export_guards.analysis.reparametrization import reparametrized_tensor
from export_guards.analysis.source import node_location, node_origin, node_site
from export_guards.analysis.storage import plain_tensors
from export_guards.internals import fake_mode_of, program_with_parts
from export_guards.passes.int8_dynamic import rewrite_int8_dynamic_linears
from export_guards.passes.quantized_ops import decompose_torchao_quantize_ops
from export_guards.passes.result import GuardPassResult
from export_guards.report import Finding, Report
from export_guards.ruleset import CATALOG, Hit, finding
from export_guards.settings import DEFAULT_MAX_GROWTH

if TYPE_CHECKING:
    from torch._subclasses.fake_tensor import FakeTensorMode

__all__ = ["FoldConstantsPass", "fold_constants", "fold_non_core_constants"]


def fold_constants(
    program: ExportedProgram, *, max_growth: float = DEFAULT_MAX_GROWTH
) -> tuple[ExportedProgram, Report]:
    """Fold ``program``'s constant-only computations; return the new program and the report.

    See :class:`FoldConstantsPass`. ``program`` itself is never modified.
    """
    result = FoldConstantsPass(max_growth=max_growth)(program)
    return result.exported_program, result.report


def fold_non_core_constants(
    program: ExportedProgram,
    *,
    max_growth: float = DEFAULT_MAX_GROWTH,
    plan: FoldPlan | None = None,
    partitioner: Sequence[Partitioner] | Mapping[str, Sequence[Partitioner]] | None = None,
) -> tuple[ExportedProgram, Report]:
    """Make ``program`` one that ``to_edge`` takes: each linear that torchao's
    ``Int8DynamicActivationInt8WeightConfig`` quantized, whose ``aten._int_mm`` ``to_edge``
    rejects, rewritten into the dynamically quantized linear this ExecuTorch computes
    (:func:`~export_guards.passes.int8_dynamic.rewrite_int8_dynamic_linears`, EG407); then
    folded now if one of its constant-only computations uses an op outside core
    ATen, which ``to_edge`` decomposes or, when no decomposition exists, rejects
    (``orthogonal``'s ``linalg_matrix_exp``, ``linalg_householder_product``, ``linalg_solve``;
    hand-written weight math), or a quantize of constants (folded now, a quantized linear's
    weight is a constant when ``to_edge`` decides to keep the linear whole, as XNNPACK needs);
    otherwise return ``program`` unchanged, for the fold in ``transform_passes`` to do.

    Apply it to the torch.export program, before ``to_edge`` / ``to_edge_transform_and_lower``.
    ``plan`` is ``program``'s fold plan at ``max_growth``, when the caller has made it (the
    lint reads it too); otherwise it is made here (and again after a rewrite). ``partitioner``:
    the partitioners the program will be lowered with, as ``to_edge_transform_and_lower`` takes
    them; ``[]`` for the portable kernels, which have no kernel for torchao's quantize ops: they
    are then decomposed into the core ATen ops torchao defines them by; not given, a delegate
    (XNNPACK) takes them.
    """
    rewritten, report = rewrite_int8_dynamic_linears(program)
    if not _delegated(partitioner):  # the portable kernels have none of torchao's quantize ops
        rewritten = decompose_torchao_quantize_ops(rewritten)
    if rewritten is not program:
        program, plan = rewritten, None
    folded, early = fold_outside_core(program, plan or plan_fold(program, max_growth=max_growth))
    return folded, report + early


def fold_outside_core(program: ExportedProgram, plan: FoldPlan) -> tuple[ExportedProgram, Report]:
    """:func:`fold_non_core_constants`'s fold alone, on a ``program`` already rewritten for
    ``to_edge`` (``lower_with_guards`` has rewritten it, and scans it once): its plan's folds
    done now if one of them uses an op outside core ATen; otherwise ``program`` unchanged."""
    if not plan.roots or not any(outside_core_aten(node.target) for node in plan.foldable):
        return program, Report()  # what it declines, the fold in transform_passes says
    return _apply(program, plan)


def _delegated(partitioner: Sequence[Partitioner] | Mapping[str, Sequence[Partitioner]] | None) -> bool:
    """Whether a delegate lowers the program: partitioners not given, or given for a method."""
    if partitioner is None:
        return True
    lists = list(partitioner.values()) if isinstance(partitioner, Mapping) else [partitioner]
    return any(len(parts) for parts in lists)


class FoldConstantsPass(ExportedProgramPassBase):
    """Evaluate every subgraph whose inputs are all constants and replace it by its result.

    Constants are parameters, buffers that the program never mutates, and lifted tensor
    constants; what is folded is planned by :func:`export_guards.analysis.fold_plan.plan_fold`.
    Anything a user input or a mutated buffer reaches stays in the graph.

    A fold is judged on the whole program (:func:`~export_guards.analysis.fold_plan.plan_fold`):
    done when the written program is smaller (instructions, planned results and constants
    counted, not the constants' bytes alone), when ``to_edge`` could not take its ops, or when it gives
    a conv / linear / matmul the static weight a delegate needs, within ``max_growth`` for the
    whole program; other folds are declined. Each result that the rest of the graph reads
    becomes a parameter named after the weight it feeds (``decoder.0.weight``: the consuming
    module and argument), identical results are stored once, and constants left unused
    (``weight_orig``, ``weight_u``, ``weight_v``, ``parametrizations.*.original*``) leave the
    program. The result's ``report`` holds one ``EG201`` info finding per folded constant (its
    name, the ops folded, what the written program gains, the constants' bytes before and
    after) and one ``EG203`` per declined fold that computes something (the reason, and the
    setting that allows it; folds that read alike are one finding). Tensor subclasses
    (torchao's quantized weights) are left as they are: ``to_edge`` unpacks them.

    Works on an ATen-dialect ``ExportedProgram`` before lowering and in
    ``to_edge_transform_and_lower(..., transform_passes=[...])``. The input program is never
    modified; a new one is returned when something was folded. Nothing is kept on the pass
    between calls. Constants the host cannot compute with (device or meta storage) are not folded: that is
    the placement guard's to report.

    Args:
        max_growth: the folds that give a delegate a static weight may grow the program's
            constants, all together, to at most this many times their bytes (or by 4 KiB),
            so that ``expand`` / ``repeat`` / ``full`` do not bloat the ``.pte``. At least 1.
    """

    changes_input = False
    """The input program is never modified."""

    def __init__(self, *, max_growth: float = DEFAULT_MAX_GROWTH) -> None:
        if not max_growth >= 1:
            raise ValueError(f"max_growth must be at least 1 (the program's own size), not {max_growth!r}")
        self.max_growth = max_growth

    def call(self, exported_program: ExportedProgram) -> GuardPassResult:
        plan = plan_fold(exported_program, max_growth=self.max_growth)
        declined = _declined_report(plan.declined, self.max_growth)
        if not plan.roots:
            return GuardPassResult(exported_program, False, declined)
        folded, report = _apply(exported_program, plan)
        return GuardPassResult(folded, True, Report.of([*report.findings, *declined.findings]))


def _evaluate(plan: FoldPlan) -> dict[Node, torch.Tensor]:
    """The value of every root, computing each foldable node once and dropping
    intermediate values as soon as their last foldable user has run."""
    constants = plan.constants
    needed: set[Node] = set()
    assertions = [n for n in plan.foldable if not n.users and n.target is not operator.getitem]
    stack = [*plan.roots, *assertions]
    while stack:
        node = stack.pop()
        if node in needed or node in constants:
            continue
        needed.add(node)
        stack.extend(node.all_input_nodes)
    pending = Counter(i for n in needed for i in n.all_input_nodes if i in needed)
    roots = set(plan.roots)
    values: dict[Node, object] = {}
    results: dict[Node, torch.Tensor] = {}
    order = [n for n in next(iter(plan.roots)).graph.nodes if n in needed]
    with torch.no_grad():
        for node in order:
            args, kwargs = torch.fx.node.map_arg(
                (node.args, node.kwargs),
                lambda n: cast("Argument", constants[n].tensor if n in constants else values[n]),
            )
            values[node] = node.target(*args, **kwargs)
            if node in roots:
                results[node] = cast(torch.Tensor, values[node])  # a root's value is a tensor
            for i in node.all_input_nodes:
                if i in pending:
                    pending[i] -= 1
                    if pending[i] == 0 and i not in roots:
                        del values[i]
    return results


def _apply(ep: ExportedProgram, plan: FoldPlan) -> tuple[ExportedProgram, Report]:
    """A new program with each root replaced by a parameter holding its value (identical
    values stored once), and one EG201 finding per new parameter."""
    constants = plan.constants
    values = _evaluate(plan)
    fqn_of = {node: constant.fqn for node, constant in constants.items()}
    # The names of the constants that leave are free again: a weight folded twice (before
    # to_edge, then what to_edge's decompositions made of its reader) keeps one name.
    leaving = {fqn_of[n] for n in constants if n.users and all(u in plan.foldable for u in n.users)}
    taken = (set(ep.state_dict) | set(ep.constants)) - leaving
    parameters: dict[str, torch.Tensor] = {}  # the new parameters, by FQN
    stored_as: dict[Node, str] = {}  # root -> the FQN of the parameter that replaces it
    by_layout: dict[tuple[object, ...], list[str]] = {}  # (dtype, shape, stride) -> FQNs
    for root in plan.roots:
        value = _materialize(values[root], [c.tensor for c in constants.values()])
        key = (value.dtype, tuple(value.shape), value.stride())
        same = next((fqn for fqn in by_layout.get(key, []) if _same_bytes(parameters[fqn], value)), None)
        if same is None:
            sources, _ = _subgraph(root, plan.foldable, constants)
            source_bytes = {fqn_of[s]: constants[s].tensor.nbytes for s in sources}
            same = _unique(_constant_name(root, plan.foldable, source_bytes), taken)
            taken.add(same)
            parameters[same] = value
            by_layout.setdefault(key, []).append(same)
        stored_as[root] = same
    findings = [
        _folded(fqn, [r for r in plan.roots if stored_as[r] == fqn], parameters[fqn], plan) for fqn in parameters
    ]
    return _rebuilt(ep, plan, stored_as, parameters, fqn_of), Report.of(findings)


def _folded(fqn: str, roots: list[Node], value: torch.Tensor, plan: FoldPlan) -> Finding:
    """The EG201 finding for one new parameter, made of ``roots`` (several where identical
    results are stored once): the ops folded, the constants they read, the bytes."""
    sources: dict[Node, None] = {}
    ops: dict[Node, None] = {}
    for root in roots:
        root_sources, root_ops = _subgraph(root, plan.foldable, plan.constants)
        sources.update(dict.fromkeys(root_sources))
        ops.update(dict.fromkeys(root_ops))
    # A constant the rest of the graph reads too (a dequantize's scale) stays in the program:
    # only the bytes of those that leave it are replaced.
    staying = [s for s in sources if any(u not in plan.foldable for u in s.users)]
    before = sum(plan.constants[s].tensor.nbytes for s in sources if s not in staying)
    shared = f" (one value for {len(roots)} computations)" if len(roots) > 1 else ""
    kept = f"; {', '.join(_named(plan.constants[s]) for s in staying)} stay, read elsewhere" if staying else ""
    # Identical results are stored once: one constant for all of ``roots``.
    growth = written_growth(roots, ops, plan.constants) - constant_cost(value) * (len(roots) - 1)
    instructions = sum(
        1 for n in ops if aten_name(n.target) and n.op == "call_function" and n.target is not operator.getitem
    )
    written = (
        f"the written program about {-growth:,} bytes smaller"
        if growth < 0
        else f"the written program about {growth:,} bytes larger"
        if growth > 0
        else "the written program no smaller"
    )
    constants = (
        f"constants {before:,} -> {value.nbytes:,} bytes"
        if before != value.nbytes
        else f"constants of the same size, {before:,} bytes"
    )
    message = (
        f"folded {len(ops)} op{'s' if len(ops) != 1 else ''} ({_summary(list(ops))}) on "
        f"{', '.join(_named(plan.constants[s]) for s in sources)} into parameter '{fqn}'{shared}: "
        f"{written} ({instructions} instruction{'s' if instructions != 1 else ''} fewer, {constants}){kept}"
    )
    fix = None
    if staying and not before:  # every source stays: the program holds the data twice
        message += f", so the program holds that data twice ({value.nbytes:,} bytes more)"
        fix = (
            "The price of a static weight: its consumer reads the folded copy (a delegate takes it static; XNNPACK "
            "keeps its own copy of a linear's weight anyway, F.linear(x, weight) too), the other readers the original. "
            "To keep one copy, export with fold=False: the computation then runs at every call, on portable kernels"
        )
    root = roots[0]
    consumer = next(u for u in root.users if u not in plan.foldable)
    shown = consumer if node_location(consumer) or not node_location(root) else root
    # The parameter is a subject too: a weight folded before to_edge and folded again after it
    # (to_edge decomposed its reader) keeps its name, and is one finding, the first.
    subjects = (f"constant '{fqn}'", *dict.fromkeys(node_origin(r) for r in roots))
    return finding(CATALOG["EG201"], Hit(message, shown, fqn, fix=fix, subjects=subjects), locate=node_site)


def _rebuilt(
    ep: ExportedProgram,
    plan: FoldPlan,
    stored_as: Mapping[Node, str],
    parameters: Mapping[str, torch.Tensor],
    fqn_of: Mapping[Node, str],
) -> ExportedProgram:
    """``ep``'s graph copied in one pass (node metadata shared, not deep-copied): without the
    folded nodes and the constants they alone read, with one placeholder per new parameter
    (after the existing parameters) standing for the roots. ``ep`` is not modified."""
    kept = _kept_nodes(ep.graph, plan, stored_as)
    graph, new, input_specs = _copied_graph(ep, kept, stored_as, parameters)
    output_specs = [
        replace(spec, arg=TensorArgument(new[_output_node(ep.graph, i)].name))
        if isinstance(spec.arg, TensorArgument)
        else spec
        for i, spec in enumerate(ep.graph_signature.output_specs)
    ]
    dropped = {fqn_of[n] for n in fqn_of if n not in kept}
    graph_module = torch.fx.GraphModule(ep.graph_module, graph)
    graph_module.meta.update(ep.graph_module.meta)
    return program_with_parts(  # as ExecuTorch's pass manager does: the same program, new parts
        ep,
        graph_module=graph_module,
        graph_signature=ExportGraphSignature(input_specs, output_specs),
        state_dict={
            **{k: v for k, v in ep.state_dict.items() if k not in dropped},
            **{fqn: torch.nn.Parameter(value, requires_grad=False) for fqn, value in parameters.items()},
        },
        constants={k: v for k, v in ep.constants.items() if k not in dropped},
    )


def _copied_graph(
    ep: ExportedProgram, kept: set[Node], stored_as: Mapping[Node, str], parameters: Mapping[str, torch.Tensor]
) -> tuple[torch.fx.Graph, dict[Node, Node], list[InputSpec]]:
    """A new graph of ``ep``'s ``kept`` nodes, each original node's copy, and the input specs
    of the new graph: a placeholder per new parameter, after the existing parameters, which
    each node ``stored_as`` names reads instead."""
    specs = {spec.arg.name: spec for spec in ep.graph_signature.input_specs}
    fake_mode = fake_mode_of(n.meta.get("val") for n in ep.graph.nodes if n.op == "placeholder")
    graph = torch.fx.Graph()
    new: dict[Node, Node] = {}
    placeholder_of: dict[str, Node] = {}
    input_specs: list[InputSpec] = []

    root_of = {fqn: root for root, fqn in reversed(list(stored_as.items()))}

    names = {n.name for n in ep.graph.nodes}  # the copied nodes keep theirs

    def add_parameters() -> None:
        for fqn, value in parameters.items():
            node = graph.placeholder(_unique("p_" + fqn.replace(".", "_"), names))
            names.add(node.name)
            # Only "val", as torch.export gives parameters: other metadata (source_fn_stack)
            # would pull the placeholder into partitioners' patterns.
            node.meta["val"] = _fake_value(root_of[fqn], value, fake_mode)
            placeholder_of[fqn] = node
            input_specs.append(InputSpec(InputKind.PARAMETER, TensorArgument(node.name), fqn, None))

    for node in ep.graph.nodes:
        is_parameter = node.op == "placeholder" and specs[node.name].kind == InputKind.PARAMETER
        if not placeholder_of and not is_parameter:
            add_parameters()
        if node not in kept:
            continue
        new[node] = graph.node_copy(node, lambda n: placeholder_of[stored_as[n]] if n in stored_as else new[n])
        if node.op == "placeholder":
            new[node].name = node.name  # node_copy renames names such as "input"
            input_specs.append(specs[node.name])
    return graph, new, input_specs


def _named(constant: ProgramConstant) -> str:
    """A constant as the user knows it: its name, or for a tensor that torch.export lifted out
    of the code (``_lifted_tensor_constant3``), the module whose code made it."""
    if constant.kind is not ConstantKind.TENSOR_CONSTANT:
        return repr(constant.fqn)
    module = next((path for user in constant.node.users if (path := _module_path(user))), "")
    return f"a tensor constant of '{module}'" if module else "a tensor constant"


def _declined_report(folds: Iterable[DeclinedFold], max_growth: float) -> Report:
    """One EG203 finding per declined computation, except that computations which would read
    the same (one source line, module, ops and reason: ``tanh(x / torch.tensor(cap)) *
    torch.tensor(cap)`` lifts two constants on one line) are one finding that counts them."""
    groups: dict[tuple[object, ...], list[DeclinedFold]] = {}
    for fold in folds:
        consumer = next(iter(fold.roots[0].users))
        key = (node_location(consumer), _module_path(consumer), _declined_ops(fold), fold.reason)
        groups.setdefault(key, []).append(fold)
    return Report.of(_declined(group, max_growth) for group in groups.values())


def _declined_ops(fold: DeclinedFold) -> str:
    computed = {n for r in fold.roots for n in ancestors(r, lambda i: i.op == "call_function")}
    return _summary([n for n in fold.roots[0].graph.nodes if n in computed])


def _declined(folds: list[DeclinedFold], max_growth: float) -> Finding:
    """The EG203 finding for computations left in the program (several that read alike)."""
    fold = folds[0]
    consumer = next(iter(fold.roots[0].users))
    module = _module_path(consumer)
    where = f" in '{module}'" if module else ""
    what = "the computation" if len(folds) == 1 else f"{len(folds)} computations"
    message = f"left {what} on constants{where} ({_declined_ops(fold)}) in the program: {fold.reason}"
    if "budget" in fold.reason:
        allow = f"raise the fold's budget above {max_growth:g} (the growth allowed, in times the program's constants)"
    else:
        allow = "set the fold's budget to inf, which folds every computation on constants whatever it costs"
    fix = (
        f"Nothing to do if the program is fine as it is. To fold it anyway, {allow}: fold-max-growth in "
        "[tool.export-guards], --fold-max-growth, or Settings(fold_max_growth=...) in Python"
    )
    subjects = tuple(dict.fromkeys(node_origin(r) for f in folds for r in f.roots))
    return finding(CATALOG["EG203"], Hit(message, consumer, fix=fix, subjects=subjects), locate=node_site)


def _module_path(node: Node) -> str:
    """The user's module that ``node`` runs in (``layers.0.attention.wq``), or ``""``."""
    stack = node.meta.get("nn_module_stack") or {}
    return next(reversed(stack.values()))[0] if stack else ""


def _fake_value(root: Node, value: torch.Tensor, fake_mode: FakeTensorMode | None) -> torch.Tensor:
    """The root's own fake value when it describes the dense ``value``, else a new one."""
    fake = root.meta.get("val")
    if (
        isinstance(fake, torch.Tensor)
        and fake.shape == value.shape
        and fake.dtype == value.dtype
        and fake.stride() == value.stride()
    ):
        return fake
    return fake_mode.from_tensor(value, static_shapes=True) if fake_mode else value


def _kept_nodes(graph: torch.fx.Graph, plan: FoldPlan, stored_as: Mapping[Node, str]) -> set[Node]:
    """The nodes of the folded graph: all but the roots (replaced), the folded nodes only
    they needed, and the constants only those read."""
    kept: set[Node] = set()
    for node in reversed(graph.nodes):
        if node in stored_as:
            continue
        folded_away = node in plan.foldable or (node.op == "placeholder" and node.users)
        if not folded_away or any(user in kept for user in node.users):
            kept.add(node)
    return kept


def _output_node(graph: torch.fx.Graph, index: int) -> Node:
    return cast("Sequence[Node]", graph.output_node().args[0])[index]


def _materialize(value: torch.Tensor, constants: Iterable[torch.Tensor]) -> torch.Tensor:
    """``value`` as a dense tensor of its own: a view of a constant (``reshape`` of a weight)
    or a broadcast with zero strides is copied, since ExecuTorch stores dense constants and
    the caller's tensors must not be shared with the new program. The memory format
    (channels_last) is kept: the ops reading it expect its dim order."""
    value = value.detach()
    shared = {t.untyped_storage().data_ptr() for c in constants for t in plain_tensors(c) if t.numel()}
    dense = value.is_contiguous() or value.is_contiguous(memory_format=torch.channels_last)
    whole = value.untyped_storage().nbytes() == value.nbytes
    if dense and whole and 0 not in value.stride() and value.untyped_storage().data_ptr() not in shared:
        return value
    return value.clone(memory_format=torch.preserve_format)


def _same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))
    )


def _subgraph(
    root: Node, foldable: frozenset[Node], constants: Mapping[Node, ProgramConstant]
) -> tuple[list[Node], list[Node]]:
    """The constants that ``root`` is computed from, and the folded ops, in graph order."""
    seen = ancestors(root, lambda i: i in foldable or i in constants)
    ordered = [n for n in root.graph.nodes if n in seen]
    return [n for n in ordered if n in constants], [n for n in ordered if n in foldable]


def _summary(ops: list[Node]) -> str:
    return ", ".join(dict.fromkeys(aten_name(n.target) or "getitem" for n in ops))


def _constant_name(root: Node, readers: frozenset[Node], sources: dict[str, int]) -> str:
    """A meaningful name for the folded ``root``.

    1. The weight or bias it feeds, when a module's op reads it as ``weight`` / ``bias``
       (looking through views): ``decoder.0.weight``.
    2. Else the tensor that the largest constant it comes from reparametrizes:
       ``a.parametrizations.weight.original`` and ``a.weight_orig`` give ``a.weight``.
    3. Else that constant's name suffixed ``_folded``.

    ``sources`` maps the FQNs of the constants it is computed from to their bytes.
    """
    value, reader = root, next(u for u in root.users if u not in readers)
    while is_view(reader.target) and len(reader.users) == 1:
        value, reader = reader, next(iter(reader.users))
    argument = argument_name(reader, value)
    path = _module_path(reader)
    if argument in ("weight", "bias") and path:
        return f"{path}.{argument}"
    largest = max(sources, key=sources.__getitem__)
    folded_already = largest.endswith("_folded")  # folded before to_edge, folded again after it
    return reparametrized_tensor(largest, sources) or (largest if folded_already else f"{largest}_folded")


def _unique(name: str, taken: set[str]) -> str:
    candidate, index = name, 0
    while candidate in taken:
        index += 1
        candidate = f"{name}_{index}"
    return candidate
