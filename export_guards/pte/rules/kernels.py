"""EG519: operator calls whose tensors disagree with what the operator computes from them.

Each call that writes a tensor (an ``out`` variant, or an in-place operator such as ``copy_``)
of an ATen or ``dim_order_ops`` operator that has a meta kernel (its own, or its functional
form's) is checked against what ExecuTorch's kernel requires: matrix products, convolutions,
normalisations and copies take all their tensors in one dtype, and ``reader/kernel_contracts.py``
holds what the kernels check beyond torch's meta kernels (batch norm's parameters and stats, the
dim orders of copies), and ``reader/out_shapes.py`` the shapes the kernels resize their outs to,
by operator family (an out planned for another shape, inputs that give none). These read the
operator table (``reader/schemas.py``): no torch.

With the replay (``check_pte(replay=True)``, ``export-guards check --replay``; always with the
runtime run, whose child replays the calls this process finds (it loads torch anyway:
:func:`replay_calls`, :func:`replayed`), and in the guarded export's check of its program), each
such call is also replayed on meta
tensors (dtype and shape only, no data) built from the program's values. Where the operator's
own shape and dtype rules decide the result, an ``out`` tensor of another shape than
ExecuTorch's kernel resizes it to, or inputs that the operator refuses together (torch raises,
whatever the exception), are what the runtime's kernel rejects (``InvalidArgument``) or
computes wrongly. The replay imports torch (and ExecuTorch's operators,
``reader/schema_registry.py``) at the first call it replays.

Out of reach, and left alone: calls with dynamic shapes (their sizes are bounds), dtypes that
meta tensors cannot hold (quantized ones), arguments a replay cannot build (devices, layouts),
operators torch does not know here or that have no meta kernel (torch raises
``NotImplementedError``).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from export_guards.pte.context import Need, PteContext, needs, tupled
from export_guards.pte.reader.file import PteFile
from export_guards.pte.reader.kernel_contracts import OUT_SHAPES, Refused, refusal
from export_guards.pte.reader.operators import ONE_DTYPE, spelled
from export_guards.pte.reader.out_shapes import resized_out
from export_guards.pte.reader.schema_registry import torch_with_executorch_operators
from export_guards.pte.reader.schemas import Argument, operator_schema
from export_guards.pte.reader.tensors import describe_tensor, dtype_name, has_dtype
from export_guards.pte.reader.wheel import (
    Bool,
    BoolList,
    Double,
    DoubleList,
    ExecutionPlan,
    Int,
    IntList,
    KernelCall,
    Null,
    OptionalTensorList,
    String,
    Tensor,
    TensorList,
    TensorShapeDynamism,
)
from export_guards.ruleset import Hit, rule

if TYPE_CHECKING:
    import torch

# What torch says when the replay, not the program, is at fault (an argument it could not pass,
# a path with no meta kernel).
_REPLAY_LIMITS = ("Expected a value of type", "not implemented", "NotImplemented", "Could not run")


class _Unsupported(Exception):
    """An argument this replay cannot build (a device, a layout): the call is left alone."""


ReplayCall = tuple[str, str, tuple[object, ...], tuple[int, ...], tuple[tuple[int, ...] | None, ...]]
"""One distinct call to replay: operator name and overload, the arguments' descriptions, the
written arguments' positions, the shapes ExecuTorch's kernel resizes them to where torch's meta
kernel does not say (``_replay_signature``'s arguments)."""
Verdict = str | tuple[int, tuple[int, ...]] | None
"""What a replay found: ``_replay_signature``'s answer."""


@rule("EG519")
@needs(Need.REPLAYED)
def kernel_call_inconsistent(context: PteContext) -> Iterator[Hit]:
    program = context.pte.program
    if program is None:
        return
    replay = _replay_here if context.replay else context.replayed.get if context.replayed is not None else None
    for plan in program.execution_plan:
        for c, chain in enumerate(plan.chains):
            for i, instruction in enumerate(chain.instructions):
                call = instruction.instr_args
                if isinstance(call, KernelCall) and 0 <= call.op_index < len(plan.operators):
                    problem = _replay(plan, call, replay=replay)
                    if not problem:
                        continue
                    operator = spelled(plan.operators[call.op_index].name, plan.operators[call.op_index].overload)
                    where = f"instruction {i} of chain {c} of method '{plan.name}' calls {operator}"
                    subjects = (f"instruction {c}:{i} of '{plan.name}'",)
                    if isinstance(problem, Refused):
                        # a cause in the model: placed on the user's line where the caller knows the graph, with
                        # the fix of that cause; the run's failure at the same instruction (EG511) is its symptom
                        yield Hit(
                            f"{where} with arguments its portable kernel refuses: {problem.reason}",
                            method=plan.name,
                            fix=problem.fix,
                            node=operator,
                            subjects=subjects,
                        )
                    else:
                        yield Hit(f"{where} {problem}", method=plan.name, subjects=subjects)


def replay_calls(pte: PteFile) -> list[ReplayCall]:
    """The distinct calls of the program that EG519 replays on meta tensors, found without
    torch: what a process that has torch (``check --runtime``'s child) replays for this one
    (:func:`replayed`), whose verdicts come back as ``PteContext.replayed``."""
    program = pte.program
    calls: dict[ReplayCall, None] = {}
    for plan in program.execution_plan if program is not None else ():
        for chain in plan.chains:
            for instruction in chain.instructions:
                call = instruction.instr_args
                if isinstance(call, KernelCall) and 0 <= call.op_index < len(plan.operators):
                    found = _replayable(plan, call)
                    if found is not None and not _mixed_dtypes(found[0][0], *found[1:]):
                        calls[found[0]] = None
    return list(calls)


def replayed(calls: Iterable[Sequence[object]]) -> list[object]:
    """Each call of :func:`replay_calls` (as JSON gives it back: lists for tuples) replayed on
    meta tensors, its verdict as JSON carries it. Imports torch."""
    return [_replay_signature(*tupled(call)) for call in calls]  # type: ignore[arg-type]


def _replay_here(call: ReplayCall) -> Verdict:
    return _replay_signature(*call)


def _replayable(
    plan: ExecutionPlan, call: KernelCall
) -> tuple[ReplayCall, tuple[Argument, ...], tuple[object, ...]] | None:
    """The call as a replay takes it, with its schema's arguments and their descriptions; None
    for a call no replay or contract reaches (no schema, nothing written, an argument it cannot
    build)."""
    operator = plan.operators[call.op_index]
    schema = operator_schema(operator.name, operator.overload)
    if schema is None or not schema.replayable:
        return None
    arguments = schema.arguments
    if len(call.args) < len(arguments) or not all(0 <= i < len(plan.values) for i in call.args):
        return None  # EG512's
    written = tuple(k for k, a in enumerate(arguments) if a.written)
    if not written:
        return None
    try:
        signature = tuple(_describe(plan, call.args[k], a.type) for k, a in enumerate(arguments))
    except _Unsupported:
        return None
    fixed = tuple(OUT_SHAPES.get((operator.name, arguments[k].name)) for k in written)
    return (operator.name, operator.overload, signature, written, fixed), arguments, signature


def _replay(
    plan: ExecutionPlan, call: KernelCall, *, replay: Callable[[ReplayCall], Verdict] | None
) -> str | Refused | None:
    found = _replayable(plan, call)
    if found is None:
        return None
    key, arguments, signature = found
    mixed = _mixed_dtypes(key[0], arguments, signature)
    if mixed:
        return mixed
    if replay is not None:
        # Models repeat their blocks: one replay per distinct call.
        verdict = replay(key)
        if isinstance(verdict, str):
            return f"with tensors it refuses: {verdict}"
        if verdict is not None:
            position, computed = verdict
            return _resized(plan, arguments[position].name, call.args[position], computed)
    # the same out shapes without torch, for the operators whose rule reader/out_shapes.py holds
    by_name = {a.name: call.args[k] for k, a in enumerate(arguments)}
    resized = resized_out(plan, key[0], by_name)
    if isinstance(resized, str):
        return f"with tensors it refuses: {resized}"
    if resized is not None:
        return _resized(plan, *resized)
    return refusal(plan, key[0], by_name)


def _resized(plan: ExecutionPlan, name: str, index: int, shape: Sequence[int]) -> str:
    return (
        f"with out tensor value {index} ('{name}', {describe_tensor(plan.values[index].val)}), but ExecuTorch's kernel "
        f"resizes it to shape {list(shape)}: the kernel rejects the call or writes past the tensor"
    )


_OWN_DTYPE = frozenset({"indices"})  # a max pool's int64 indices


ONE_DTYPE_FIX = (
    "Give the op's tensors one dtype in the model, then export again: a module cast to the inputs' dtype "
    "(`model.half()` for float16 inputs) or the inputs cast to the parameters' (`x.float()` before the op); a "
    "program exported from a model of one dtype was damaged after export: re-export it."
)
"""What fixes a call whose tensors are of different dtypes: most often the model mixes them (a
float16 input into a batch norm whose parameters are float32), which torch's kernels take."""


def _mixed_dtypes(name: str, arguments: tuple[Argument, ...], signature: tuple) -> Refused | None:
    if name not in ONE_DTYPE:
        return None
    dtypes = {
        a.name: dtype_name(d[1])
        for a, d in zip(arguments, signature)
        if isinstance(d, tuple) and d[:1] == ("tensor",) and a.name not in _OWN_DTYPE
    }
    if len(set(dtypes.values())) < 2:
        return None
    listed = ", ".join(f"{k} {v}" for k, v in dtypes.items())
    return Refused(
        f"tensors of different dtypes ({listed}), which ExecuTorch's kernel takes in one dtype only", ONE_DTYPE_FIX
    )


@functools.lru_cache(maxsize=4096)
def _replay_signature(
    name: str, overload_name: str, signature: tuple, written: tuple[int, ...], fixed: tuple[tuple[int, ...] | None, ...]
) -> str | tuple[int, tuple[int, ...]] | None:
    """Run ``name.overload_name`` on meta tensors built from ``signature``: None when it agrees,
    the text of its refusal (dtypes or shapes it does not take together), or (the position of a
    written argument, the shape ExecuTorch's kernel resizes it to: ``fixed``'s where given, else
    the one torch computes)."""
    torch = torch_with_executorch_operators()
    namespace, _, op_name = name.partition("::")
    overload = getattr(getattr(getattr(torch.ops, namespace), op_name), overload_name or "default")
    arguments = overload._schema.arguments
    try:
        built = [_build(description) for description in signature]
    except Exception:  # noqa: BLE001 - a dtype meta tensors cannot hold (quantized ones): out of reach
        return None
    before = {k: tuple(built[k].shape) for k in written if isinstance(built[k], torch.Tensor)}
    positional = [built[k] for k, a in enumerate(arguments) if not a.kwarg_only]
    keywords = {a.name: built[k] for k, a in enumerate(arguments) if a.kwarg_only}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the resize warning: the shapes are compared below
            overload(*positional, **keywords)
    except NotImplementedError:
        return None  # no meta kernel for this operator or this path: out of reach
    except Exception as error:  # noqa: BLE001 - whatever torch raises (IndexError for a dim, ZeroDivisionError for groups) is a refusal
        text = str(error).split("\n")[0]
        if any(limit in text for limit in _REPLAY_LIMITS):
            return None  # the replay could not call the operator: out of reach
        if _functional_agrees(overload, built, written, fixed):
            return None  # torch's out= handling refused, not the computation: ExecuTorch's kernel takes it
        return f"{type(error).__name__}: {text}"[:200] if not isinstance(error, RuntimeError) else text[:200]
    for k, shape in zip(written, fixed):
        if k in before:
            resized = shape if shape is not None else tuple(built[k].shape)
            if resized != before[k]:
                return k, resized
    return None


def _functional_agrees(
    overload: object, built: list[object], written: tuple[int, ...], fixed: tuple[tuple[int, ...] | None, ...]
) -> bool:
    """Whether the operator's functional form computes, from the same inputs, results of the
    shapes (``fixed``'s where given) and dtypes of the call's outs. torch's ``out=`` handling
    refuses what ExecuTorch's kernels take (``empty.out`` any memory format, which
    ``_empty_dim_order.out``'s Python form always passes): where ExecuTorch's kernel and torch's
    disagree, ExecuTorch's wins, and an out that holds exactly what the call computes is not the
    call's fault. The out variant drops TensorOptions (``_to_dim_order_copy``, ``empty``): the
    outs' dtype is the functional form's ``dtype``."""
    torch = torch_with_executorch_operators()
    schema = overload._schema
    outs = [built[k] for k in written]
    if not all(isinstance(out, torch.Tensor) for out in outs):
        return False
    given = {a.name: built[k] for k, a in enumerate(schema.arguments) if k not in written}
    packet = getattr(getattr(torch.ops, schema.name.partition("::")[0]), schema.name.partition("::")[2])
    for name in packet.overloads():
        functional = getattr(packet, name)
        arguments = functional._schema.arguments
        if any(a.alias_info is not None for a in arguments) or len(functional._schema.returns) != len(outs):
            continue
        names = {a.name for a in arguments}
        if not set(given) <= names or any(
            a.name not in given and not a.has_default_value() and a.name != "dtype" for a in arguments
        ):
            continue
        keywords = dict(given)
        if "dtype" in names and "dtype" not in given:
            keywords["dtype"] = outs[0].dtype
        try:
            with warnings.catch_warnings(), torch.device("meta"):
                warnings.simplefilter("ignore")
                results = functional(**keywords)
        except Exception:  # noqa: BLE001 - the functional form refuses the inputs too: the refusal stands
            return False
        results = results if isinstance(results, (tuple, list)) else (results,)
        return all(
            isinstance(result, torch.Tensor)
            and result.dtype == out.dtype
            and tuple(out.shape) == (shape if shape is not None else tuple(result.shape))
            for result, out, shape in zip(results, outs, fixed)
        )
    return False


def _describe(plan: ExecutionPlan, index: int, schema_type: str) -> object:
    """A hashable description of one argument: ``("tensor", dtype, sizes, strides)``, a
    literal, or a tuple of descriptions (a list of tensors)."""
    value = plan.values[index].val
    if isinstance(value, Null):
        return None
    if isinstance(value, Tensor):
        if value.shape_dynamism != TensorShapeDynamism.STATIC:
            raise _Unsupported  # sizes are bounds, not shapes
        return _tensor(value)
    kind = schema_type.removesuffix("?")
    if isinstance(value, Int):
        if kind == "ScalarType":
            return ("dtype", value.int_val)
        if kind in ("MemoryFormat", "Layout", "Device"):
            raise _Unsupported
        return value.int_val
    if isinstance(value, (Double, Bool, String)):
        return getattr(value, {Double: "double_val", Bool: "bool_val", String: "string_val"}[type(value)])
    if isinstance(value, IntList):
        return ("ints", tuple(_int(plan, i) for i in value.items))
    if isinstance(value, (BoolList, DoubleList)):
        return ("list", tuple(value.items))
    if isinstance(value, TensorList):
        return ("tensors", tuple(_describe(plan, i, schema_type) for i in value.items))
    if isinstance(value, OptionalTensorList):
        return ("tensors", tuple(None if i == -1 else _describe(plan, i, schema_type) for i in value.items))
    raise _Unsupported


def _build(description: object) -> object:
    if not isinstance(description, tuple):
        return description
    kind, payload = description[0], description[1:]
    if kind == "tensor":
        dtype, sizes, strides = payload
        return torch_with_executorch_operators().empty_strided(sizes, strides, dtype=_torch_dtype(dtype), device="meta")
    if kind == "dtype":
        return _torch_dtype(payload[0])
    if kind in ("ints", "list"):
        return list(payload[0])
    return [_build(item) for item in payload[0]]  # tensors


def _torch_dtype(scalar_type: int) -> torch.dtype:
    from executorch.exir.tensor import get_scalar_type  # imported with torch, by then

    return get_scalar_type(scalar_type)


def _int(plan: ExecutionPlan, index: int) -> int:
    value = plan.values[index].val if 0 <= index < len(plan.values) else None
    if not isinstance(value, Int):
        raise _Unsupported
    return value.int_val


def _tensor(tensor: Tensor) -> tuple[str, int, tuple[int, ...], tuple[int, ...]]:
    if not has_dtype(tensor.scalar_type):
        raise _Unsupported
    sizes = list(tensor.sizes)
    order = list(tensor.dim_order)
    if sorted(order) != list(range(len(sizes))):
        raise _Unsupported  # EG516's
    strides = [0] * len(sizes)
    step = 1
    for dim in reversed(order):  # the innermost dimension is last in the dim order
        strides[dim] = step
        step *= max(sizes[dim], 1)
    return ("tensor", int(tensor.scalar_type), tuple(sizes), tuple(strides))
