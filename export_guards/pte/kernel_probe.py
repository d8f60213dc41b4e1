"""The dtypes each portable kernel of the installed ``executorch.runtime`` takes, found by running
it: what ``reader/kernel_dtypes.py`` serves to EG525 (``make kernel-table`` writes the shipped
table; for another ExecuTorch version, :func:`write_cached` writes one into the user's cache).

For each operator of the runtime's kernel registry, a call is made up from the operator's schema
(the first arguments torch's checks take on meta tensors, tried in a fixed order: tensors of ones
of a small shape in a base dtype, float32 or else int32, index tensors int64, masks bool) and
written as a one-op program (torch.export, ``to_edge`` without the IR check, ``to_executorch``);
a program that calls anything but that kernel is dropped. The program is run once in its base
dtype; where it runs, it is retargeted without exporting again: every tensor of the base dtype
becomes each dtype of ``DTYPES`` (the planned memory laid out again for the widest one), and
each ``Scalar`` argument an int and a float. Every variant runs in a child process
(``workers/kernel_probe.py``: a kernel can abort), and what it did is kept by the call's dtype
signature (``reader/kernel_dtypes.signature``), read back from the written bytes as the rule
reads a program. An operator none of whose made-up calls runs in its base dtype is left out:
EG525 never judges it.

Imports torch and ExecuTorch (minutes for the whole registry, once per ExecuTorch version)."""

from __future__ import annotations

import copy
import itertools
import json
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from export_guards.pte.reader.file import PteFile
from export_guards.pte.reader.kernel_dtypes import SHIPPED, cached_path, installed_versions, signature, write_table
from export_guards.pte.reader.tensors import dtype_name
from export_guards.pte.reader.wheel import KernelCall

__all__ = ["DTYPES", "probe", "write_cached", "write_shipped"]

DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64")
"""The dtypes every probed kernel is called with."""
_SHAPES = ((2, 2), (2, 2, 2), (1, 2, 2, 2), (2,))  # tried in order: the first torch's kernel takes
_INDEX = frozenset({"indices", "index", "target", "repeats"})
_MASK = frozenset({"mask", "condition"})
_BASES = ("float32", "int32")  # the made-up tensors' dtype: float32, else int32 (the bitwise kernels)
_PER_BASE = 2  # made-up calls tried per operator and base dtype until one runs
_ATTEMPTS = _PER_BASE * len(_BASES)
_LOWERINGS = 3  # made-up calls lowered per operator and base dtype, at most
_PER_METHOD_SECONDS = 20


def probe(operators: Iterable[str] | None = None) -> dict[str, dict[str, object]]:
    """The table: for each probed operator (``aten::_log_softmax.out``), the dtypes it ran with
    (``takes``) and what each call signature did in the runtime (``calls``: ``"ok"``, or how it
    failed: ``"0x12"``, ``"abort"``). ``operators``: the runtime's whole registry when None.

    An operator's made-up calls are tried in turn (``_ATTEMPTS`` at most) until one runs in its
    base dtype (float32, else int32: the bitwise kernels); only then is it run in every dtype."""
    import torch
    from executorch.runtime import Runtime

    names = sorted(operators if operators is not None else Runtime.get().operator_registry.operator_names)
    made = {name: _one_op_programs(torch, name) for name in names}
    table: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory(prefix="export-guards-kernel-probe-") as folder:
        for attempt in range(_ATTEMPTS):
            programs = {
                name: found
                for name, calls in made.items()
                if name not in table and (found := next(calls, None)) is not None
            }
            if not programs:
                break
            based = list(_variants(programs, Path(folder, str(attempt)), base_only=True))
            running = {
                name for (name, *_), outcome in zip(based, _run([path for *_, path in based])) if outcome == "ok"
            }
            jobs = list(_variants({n: p for n, p in programs.items() if n in running}, Path(folder, f"{attempt}-all")))
            for (name, dtype, key, _path), outcome in zip(jobs, _run([path for *_, path in jobs])):
                row = table.setdefault(name, {"takes": [], "calls": {}})
                row["calls"][key] = outcome  # type: ignore[index]
                if outcome == "ok" and dtype not in row["takes"]:  # type: ignore[operator]
                    row["takes"].append(dtype)  # type: ignore[union-attr]
    return dict(sorted(table.items()))


def write_shipped() -> Path:
    """Probe every kernel of the installed runtime and write the shipped table (``make
    kernel-table``, after a change of the pinned ExecuTorch)."""
    write_table(SHIPPED, installed_versions(), probe())
    return SHIPPED


def write_cached() -> Path:
    """Probe every kernel of the installed runtime into the user's cache: the table EG525 reads
    for an ExecuTorch version other than the shipped one's (``python -c "from
    export_guards.pte.kernel_probe import write_cached; write_cached()"``, minutes, once)."""
    versions = installed_versions()
    write_table(cached_path(versions), versions, probe())
    return cached_path(versions)


def _one_op_programs(torch: Any, name: str) -> Iterator[tuple[Any, str]]:
    """One-op programs of ``name`` (ExecuTorch's ``Program`` value, with the dtype of its made-up
    tensors), one for each made-up call that torch's checks take and whose program calls that
    kernel alone, most likely first."""
    functional = _functional(torch, name)
    if functional is None:
        return
    for base in _BASES:
        made = lowered = 0
        for positional, keywords in _calls(torch, functional._schema, getattr(torch, base)):
            if made == _PER_BASE or lowered == _LOWERINGS:
                break  # a second each: an operator that lowering decomposes is so for every call
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    # on meta tensors: torch's shape and dtype checks, and no kernel that a made-up call could crash
                    functional(
                        *_on_meta(torch, positional), **dict(zip(keywords, _on_meta(torch, list(keywords.values()))))
                    )
            except Exception:  # noqa: BLE001, S112 - torch refuses this made-up call: the next one
                continue
            program = _lowered(torch, name, functional, positional, keywords)
            lowered += 1
            if program is not None:
                made += 1
                yield program, base


def _on_meta(torch: Any, values: list[object]) -> list[object]:
    return [
        v.to("meta") if isinstance(v, torch.Tensor) else _on_meta(torch, v) if isinstance(v, list) else v
        for v in values
    ]


def _functional(torch: Any, name: str) -> Any | None:
    """The overload whose call ExecuTorch writes as the ``out`` kernel ``name``: the one with its
    arguments less the ``out`` ones; None for in-place kernels and the ``executorch_prim`` ones."""
    namespace, _, rest = name.partition("::")
    op_name, _, overload = rest.partition(".")
    if namespace not in ("aten", "dim_order_ops") or not overload or op_name.endswith("_"):
        return None
    packet = getattr(getattr(torch.ops, namespace), op_name, None)
    if packet is None or overload not in packet.overloads():
        return None
    out = getattr(packet, overload)._schema
    taken = [(a.name, str(a.type)) for a in out.arguments if not (a.alias_info is not None and a.alias_info.is_write)]
    if len(taken) == len(out.arguments):
        return None  # not an out variant
    for candidate in packet.overloads():
        schema = getattr(packet, candidate)._schema
        if [(a.name, str(a.type)) for a in schema.arguments] == taken and not any(
            a.alias_info is not None for a in schema.arguments
        ):
            return getattr(packet, candidate)
    return None


def _calls(torch: Any, schema: Any, base: Any) -> Iterator[tuple[list[object], dict[str, object]]]:
    """Made-up calls of ``schema`` with tensors of dtype ``base``, most likely first: per shape,
    each argument's candidates."""
    for shape in _SHAPES:
        choices = [
            _candidates(torch, argument, shape, base, k == _first_tensor(schema))
            for k, argument in enumerate(schema.arguments)
        ]
        for combination in itertools.islice(itertools.product(*choices), 48):
            positional = [v for a, v in zip(schema.arguments, combination) if not a.kwarg_only]
            keywords = {a.name: v for a, v in zip(schema.arguments, combination) if a.kwarg_only}
            yield positional, keywords


def _first_tensor(schema: Any) -> int:
    return next((k for k, a in enumerate(schema.arguments) if "Tensor" in str(a.type)), -1)


def _candidates(torch: Any, argument: Any, shape: tuple[int, ...], base: Any, first: bool) -> list[object]:
    """The values to try for one argument, most likely first (its default, where it has one)."""
    kind = str(argument.type)
    optional = kind.startswith("Optional[")
    kind = kind.removeprefix("Optional[").removesuffix("]") if optional else kind
    default = [argument.default_value] if argument.has_default_value() else []
    found = _of_kind(torch, kind, argument.name, shape, base)
    if kind == "Tensor" and not first and len(shape) > 1:  # or one value per channel: a norm's parameters, a 1-d index
        found = [*(found or []), _tensor(torch, argument.name, (shape[1],), base)]
    if found is None:
        return [None, *default] if optional or default else []  # dtypes, layouts, devices: left as given
    return [*default, *([None] if optional and not default else []), *found]


def _of_kind(torch: Any, kind: str, name: str, shape: tuple[int, ...], base: Any) -> list[object] | None:
    k = max(len(shape) - 2, 1)  # a convolution's or pool's spatial dimensions
    if kind == "Tensor":
        return [_tensor(torch, name, shape, base)]
    if kind == "List[Tensor]":
        return [[_tensor(torch, "", shape, base), _tensor(torch, "", shape, base)]]
    if kind == "List[Optional[Tensor]]":
        return [[torch.ones(1, dtype=torch.int64)]]
    if kind == "int":
        return [1, 0, 2]
    if kind == "List[int]":
        lists = [[1] * k, [0] * k, list(shape), [1], [0], list(range(len(shape)))[::-1], [2] * k]
        return lists[1:2] + lists[:1] + lists[2:] if "padding" in name else lists
    if kind == "float":
        return [1.0, 0.5]
    if kind == "bool":
        return [False, True]
    if kind == "number":
        return [2]
    if kind == "str":
        return ["none"]
    return None


def _tensor(torch: Any, name: str, shape: tuple[int, ...], base: Any) -> Any:
    if name in _INDEX:
        return torch.zeros(shape, dtype=torch.int64)
    if name in _MASK:
        return torch.ones(shape, dtype=torch.bool)
    return torch.ones(shape, dtype=base)  # as the runtime's run has them: log, sqrt and pow of them are numbers


def _lowered(
    torch: Any, name: str, functional: Any, positional: list[object], keywords: dict[str, object]
) -> Any | None:
    from executorch.exir import EdgeCompileConfig, to_edge

    tensors: list[Any] = []
    template = [_placed(torch, value, tensors) for value in positional]
    named = {k: _placed(torch, v, tensors) for k, v in keywords.items()}

    class Call(torch.nn.Module):
        def forward(self, *inputs: Any) -> Any:
            return functional(
                *(_filled(v, inputs) for v in template), **{k: _filled(v, inputs) for k, v in named.items()}
            )

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exported = torch.export.export(Call(), tuple(tensors))
            program = (
                to_edge(exported, compile_config=EdgeCompileConfig(_check_ir_validity=False))
                .to_executorch()
                .executorch_program
            )
    except Exception:  # noqa: BLE001 - torch.export or ExecuTorch refuses the call: not probed
        return None
    plan = program.execution_plan[0]
    if [f"{o.name}.{o.overload}" if o.overload else o.name for o in plan.operators] != [name]:
        return None  # decomposed, or with other kernels around it: a failure would not be this kernel's
    return program


def _placed(torch: Any, value: object, tensors: list[Any]) -> object:
    if isinstance(value, torch.Tensor):
        tensors.append(value)
        return ("input", len(tensors) - 1)
    if isinstance(value, list) and value and all(isinstance(v, torch.Tensor) for v in value):
        return [_placed(torch, v, tensors) for v in value]
    return value


def _filled(value: object, inputs: Sequence[object]) -> object:
    if isinstance(value, tuple) and len(value) == 2 and value[0] == "input":
        return inputs[value[1]]
    if isinstance(value, list):
        return [_filled(v, inputs) for v in value]
    return value


def _variants(
    programs: dict[str, tuple[Any, str]], folder: Path, *, base_only: bool = False
) -> Iterator[tuple[str, str, str, Path]]:
    """Each operator's program in each dtype (its base dtype alone with ``base_only``) and with
    each kind of ``Scalar``: (operator, dtype, its call's signature as the written bytes give
    it, the file)."""
    import torch
    from executorch.exir._serialize._program import PTEFile, serialize_pte_binary
    from executorch.exir.tensor import scalar_type_enum

    folder.mkdir(parents=True, exist_ok=True)
    for n, (name, (program, base)) in enumerate(programs.items()):
        for dtype, scalars in itertools.product((base,) if base_only else DTYPES, (int, float)):
            variant = _retargeted(
                copy.deepcopy(program),
                scalar_type_enum(getattr(torch, dtype)),
                scalars,
                scalar_type_enum(getattr(torch, base)),
            )
            if variant is None:
                continue
            path = folder / f"{n}-{dtype}-{scalars.__name__}.pte"
            path.write_bytes(bytes(serialize_pte_binary(PTEFile(program=variant))))
            key = _written_signature(path)
            if key is not None:
                yield name, dtype, key, path
            if base_only:
                break  # one run says whether the made-up call runs


def _retargeted(program: Any, dtype: Any, scalars: type, base: Any) -> Any | None:
    """``program`` with its tensors of dtype ``base`` in ``dtype`` and its Scalar arguments of kind
    ``scalars``, its planned memory laid out again (each tensor 8 bytes an element); None for the
    float Scalars of a call that has none (the int variant is the same call)."""
    from executorch.exir.schema import Double, Int

    plan = program.execution_plan[0]
    changed = False
    for value in plan.values:
        v = value.val
        if type(v).__name__ == "Tensor" and v.scalar_type == base:
            v.scalar_type = dtype
        elif scalars is float and isinstance(v, Int) and _is_scalar_argument(plan, value):
            value.val, changed = Double(float(v.int_val)), True
    if scalars is float and not changed:
        return None
    offsets: dict[tuple[int, int], int] = {}
    end = 0
    for value in plan.values:
        v = value.val
        if type(v).__name__ == "Tensor" and v.allocation_info is not None:
            place = (v.allocation_info.memory_id, v.allocation_info.memory_offset_low)
            if place not in offsets:
                offsets[place] = end
                numel = 1
                for size in v.sizes:
                    numel *= size
                end += -(-max(numel * 8, 1) // 16) * 16
            v.allocation_info.memory_offset_low, v.allocation_info.memory_offset_high = offsets[place], 0
    plan.non_const_buffer_sizes = [0, end] + [0] * max(len(plan.non_const_buffer_sizes) - 2, 0)
    return program


def _is_scalar_argument(plan: Any, value: Any) -> bool:
    from export_guards.pte.reader.schemas import operator_schema

    index = next(i for i, v in enumerate(plan.values) if v is value)
    for chain in plan.chains:
        for instruction in chain.instructions:
            call = instruction.instr_args
            operator = plan.operators[call.op_index]
            schema = operator_schema(operator.name, operator.overload)
            if schema is not None and index in call.args:
                argument = schema.arguments[list(call.args).index(index)]
                return argument.type.removesuffix("?") in ("Scalar", "number", "Optional[number]")
    return False


def _written_signature(path: Path) -> str | None:
    plan = PteFile(path.read_bytes(), str(path)).program.execution_plan[0]
    call = plan.chains[0].instructions[0].instr_args
    return signature(plan, call) if isinstance(call, KernelCall) else None


def _job(path: Path) -> dict[str, object]:
    """The child's job for one program: its path, and its inputs' dtypes and sizes."""
    plan = PteFile(path.read_bytes(), str(path)).program.execution_plan[0]
    tensors = [plan.values[i].val for i in plan.inputs]
    return {"program": str(path), "inputs": [[dtype_name(t.scalar_type), list(t.sizes)] for t in tensors]}


def _run(programs: list[Path]) -> list[str]:
    """What each program did in ``executorch.runtime``, run in children: a child that dies takes
    the program it was running with it, which then runs alone in a fresh child (a crash that a
    program before it caused is not its own): ``"abort"`` where it dies there too."""
    outcomes: list[str] = []
    while len(outcomes) < len(programs):
        ran, died = _child([_job(path) for path in programs[len(outcomes) :]])
        outcomes.extend(ran)
        if died:
            alone, _ = _child([_job(programs[len(outcomes)])])
            outcomes.append(alone[0] if alone else "abort")
    return outcomes


def _child(jobs: list[dict[str, object]]) -> tuple[list[str], bool]:
    """The outcomes of ``jobs`` in one child, up to the one it died in, and whether it died."""
    child = subprocess.run(
        [sys.executable, "-m", "export_guards.workers.kernel_probe"],
        check=False,
        input=json.dumps(jobs),
        capture_output=True,
        text=True,
        timeout=_PER_METHOD_SECONDS * len(jobs) + 60,
    )
    lines = [json.loads(line) for line in child.stdout.splitlines() if line.startswith("{")]
    outcomes = [line["outcome"] for line in lines if "outcome" in line]
    return outcomes, len(outcomes) < len(jobs)
