"""Structure-aware edits of written programs, for the tests and the mutation campaign: a
program table or an XNNPACK graph is decoded, changed as a structure, and written back with
ExecuTorch's own serializers, so the file stays well formed and the damage is exactly the
change (a delegate call's arguments, a value's flags, a dim order, an instruction's place)."""

from __future__ import annotations

import hashlib
import importlib.resources
import json
import random
import re
import selectors
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from executorch.backends.xnnpack.serialization.xnnpack_graph_serialize import XNNHeader
from executorch.exir._serialize._flatbuffer import _flatc_compile, _flatc_decompile
from executorch.exir._serialize._program import deserialize_pte_binary, serialize_pte_binary
from executorch.exir.scalar_type import ScalarType
from executorch.exir.schema import (
    BackendDelegateInlineData,
    DelegateCall,
    ExecutionPlan,
    Int,
    IntList,
    KernelCall,
    Program,
    Tensor,
)

from export_guards.pte.reader.backend_ids import KNOWN_BACKEND_IDS

XNN_SCHEMA = "schema.fbs"


def edit_pte(data: bytes, edit: Callable[[Program], None]) -> bytes:
    """``data`` with its program (delegate payloads inline, as ``program.backend_delegate_data``)
    changed by ``edit``, written again with ExecuTorch's serializer."""
    pte = deserialize_pte_binary(data)
    edit(pte.program)
    return bytes(serialize_pte_binary(pte, extract_delegate_segments=True))


def edit_xnnpack_graphs(data: bytes, edit: Callable[[dict], None], which: int = 0) -> bytes:
    """``data`` with the graph of its ``which``-th XNNPACK payload (as the JSON of its
    flatbuffer: ``xvalues``, ``xnodes``, ``num_externs``) changed by ``edit``."""

    def program_edit(program: Program) -> None:
        blob: BackendDelegateInlineData = program.backend_delegate_data[which]
        blob.data = edit_xnnpack_payload(blob.data, edit)

    return edit_pte(data, program_edit)


def edit_xnnpack_payload(payload: bytes, edit: Callable[[dict], None]) -> bytes:
    """An XNNPACK payload (header, graph, constant data) with its graph changed by ``edit``."""
    header = XNNHeader.from_bytes(payload[: XNNHeader.EXPECTED_LENGTH])
    graph = payload[header.flatbuffer_offset : header.flatbuffer_offset + header.flatbuffer_size]
    constants = payload[header.constant_data_offset : header.constant_data_offset + header.constant_data_size]
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        schema = folder / XNN_SCHEMA
        schema.write_bytes(
            importlib.resources.files("executorch.backends.xnnpack.serialization").joinpath(XNN_SCHEMA).read_bytes()
        )
        (folder / "graph.bin").write_bytes(graph)
        _flatc_decompile(scratch, str(schema), str(folder / "graph.bin"), ["--raw-binary"])
        # flatc writes non-finite floats (a clamp's bounds) bare: quote them, as it reads them back
        text = re.sub(r"(?<![\w\"])(-?(?:inf|nan))(?![\w\"])", r'"\1"', (folder / "graph.json").read_text())
        tree = json.loads(text)
        edit(tree)
        (folder / "graph.json").write_text(json.dumps(tree))
        _flatc_compile(scratch, str(schema), str(folder / "graph.json"))
        graph = (folder / "graph.bin").read_bytes()
    pad = -len(graph) % 16
    offset = XNNHeader.EXPECTED_LENGTH + -XNNHeader.EXPECTED_LENGTH % 16
    new_header = XNNHeader(offset, len(graph), offset + len(graph) + pad, len(constants))
    head = new_header.to_bytes()
    return head + b"\0" * (offset - len(head)) + graph + b"\0" * pad + constants


# Structure-aware mutators: each changes one semantic field to another valid-looking value and
# returns the new file, or None where the program has nothing of the kind.

Mutator = Callable[[bytes, random.Random], "bytes | None"]


def _calls(program: Program) -> list[DelegateCall]:
    return [
        i.instr_args
        for p in program.execution_plan
        for c in p.chains
        for i in c.instructions
        if isinstance(i.instr_args, DelegateCall)
    ]


def _tensor_indices(plan: ExecutionPlan) -> list[int]:
    return [i for i, v in enumerate(plan.values) if isinstance(v.val, Tensor)]


def _planned(plan: ExecutionPlan) -> list[int]:
    return [
        i
        for i in _tensor_indices(plan)
        if plan.values[i].val.allocation_info is not None and plan.values[i].val.data_buffer_idx == 0
    ]


def _edit_or_none(data: bytes, edit: Callable[[Program], bool]) -> bytes | None:
    applied = []
    mutated = edit_pte(data, lambda program: applied.append(edit(program)))
    return mutated if applied[0] else None


def call_arguments(data: bytes, rng: random.Random) -> bytes | None:
    """Drop, swap or replace one argument of a delegate call."""

    def edit(program: Program) -> bool:
        calls = _calls(program)
        if not calls:
            return False
        call = rng.choice(calls)
        plan = next(
            p for p in program.execution_plan if any(i.instr_args is call for c in p.chains for i in c.instructions)
        )
        what = rng.random()
        if what < 0.4 and call.args:
            call.args.pop(rng.randrange(len(call.args)))
        elif what < 0.7 and len(call.args) > 1:
            a, b = rng.sample(range(len(call.args)), 2)
            call.args[a], call.args[b] = call.args[b], call.args[a]
        else:
            call.args[rng.randrange(len(call.args))] = rng.choice(_tensor_indices(plan))
        return True

    return _edit_or_none(data, edit)


def _xnn_graph_edit(data: bytes, rng: random.Random, edit: Callable[[dict], bool]) -> bytes | None:
    program = deserialize_pte_binary(data).program
    blobs = [i for i, b in enumerate(program.backend_delegate_data) if b.data[4:8] == XNNHeader.EXPECTED_MAGIC]
    if not blobs:
        return None
    applied = []
    mutated = edit_xnnpack_graphs(data, lambda graph: applied.append(edit(graph)), rng.choice(blobs))
    return mutated if applied[0] else None


def _tensor_value(value: dict) -> dict:
    union = value["xvalue_union"]
    return union.get("tensor_value", union)  # a quantized value wraps its tensor value


def xnnpack_values(data: bytes, rng: random.Random) -> bytes | None:
    """Change one XNNPACK value's flags, external id or dims."""

    def edit(graph: dict) -> bool:
        values = [_tensor_value(v) for v in graph.get("xvalues", []) if v.get("xvalue_union")]
        if not values:
            return False
        value = rng.choice(values)
        what = rng.random()
        if what < 0.35:
            value["flags"] = rng.choice([0, 1, 2, 3])
        elif what < 0.7:
            value["external_id"] = rng.choice([0, 1, 2, graph.get("num_externs", 1), 2**32 - 1])
        elif value.get("dims"):
            dims = value["dims"]
            if len(dims) > 1:
                a, b = rng.sample(range(len(dims)), 2)
                dims[a], dims[b] = dims[b], dims[a]
            else:
                dims[0] = max(1, dims[0] + rng.choice([-1, 1]))
        return True

    return _xnn_graph_edit(data, rng, edit)


def xnnpack_nodes(data: bytes, rng: random.Random) -> bytes | None:
    """Point one id of one XNNPACK node at another value, or swap two nodes."""

    def edit(graph: dict) -> bool:
        nodes = graph.get("xnodes", [])
        ids = [_tensor_value(v).get("id_out", 0) for v in graph.get("xvalues", []) if v.get("xvalue_union")]
        if not nodes or not ids:
            return False
        if rng.random() < 0.3 and len(nodes) > 1:
            a, b = rng.sample(range(len(nodes)), 2)
            nodes[a], nodes[b] = nodes[b], nodes[a]
            return True
        fields = nodes[rng.randrange(len(nodes))].get("xnode_union", {})
        keys = [k for k in fields if k.endswith("_id") and fields[k] != 2**32 - 1]
        if not keys:
            return False
        fields[rng.choice(keys)] = rng.choice(ids)
        return True

    return _xnn_graph_edit(data, rng, edit)


# Same-size dtype swaps (the bytes stay; their meaning changes).
_SAME_SIZE = {ScalarType.FLOAT: [ScalarType.INT], ScalarType.INT: [ScalarType.FLOAT], ScalarType.HALF: [ScalarType.BFLOAT16, ScalarType.SHORT],
              ScalarType.BFLOAT16: [ScalarType.HALF], ScalarType.CHAR: [ScalarType.BYTE, ScalarType.BOOL], ScalarType.BYTE: [ScalarType.CHAR],
              ScalarType.BOOL: [ScalarType.BYTE], ScalarType.LONG: [ScalarType.DOUBLE], ScalarType.DOUBLE: [ScalarType.LONG]}  # fmt: skip


def tensor_layout(data: bytes, rng: random.Random) -> bytes | None:
    """A same-size dtype swap, a same-numel reshape, or a dim order changed."""

    def edit(program: Program) -> bool:
        plan = rng.choice(program.execution_plan)
        indices = _tensor_indices(plan)
        if not indices:
            return False
        tensor = plan.values[rng.choice(indices)].val
        what = rng.random()
        if what < 0.35 and tensor.scalar_type in _SAME_SIZE:
            tensor.scalar_type = rng.choice(_SAME_SIZE[tensor.scalar_type])
        elif what < 0.7 and len(tensor.sizes) > 1 and len(set(tensor.sizes)) > 1:
            a, b = rng.sample(range(len(tensor.sizes)), 2)
            tensor.sizes[a], tensor.sizes[b] = tensor.sizes[b], tensor.sizes[a]
        elif len(tensor.dim_order) > 1:
            order = list(tensor.dim_order)
            if rng.random() < 0.5:
                rng.shuffle(order)
            else:
                order[rng.randrange(len(order))] = order[rng.randrange(len(order))]
            if order == list(tensor.dim_order):
                return False
            tensor.dim_order = order
        else:
            return False
        return True

    return _edit_or_none(data, edit)


def memory_plan(data: bytes, rng: random.Random) -> bytes | None:
    """Move one arena tensor onto another tensor's slot."""

    def edit(program: Program) -> bool:
        plan = rng.choice(program.execution_plan)
        planned = _planned(plan)
        if len(planned) < 2:
            return False
        a, b = (plan.values[i].val.allocation_info for i in rng.sample(planned, 2))
        if (a.memory_offset_low, a.memory_offset_high) == (b.memory_offset_low, b.memory_offset_high):
            return False
        a.memory_offset_low, a.memory_offset_high = b.memory_offset_low, b.memory_offset_high
        return True

    return _edit_or_none(data, edit)


def instructions(data: bytes, rng: random.Random) -> bytes | None:
    """Swap two instructions, drop one, or point an output at another tensor."""

    def edit(program: Program) -> bool:
        plan = rng.choice(program.execution_plan)
        chain = plan.chains[0].instructions if plan.chains else []
        what = rng.random()
        if what < 0.4 and len(chain) > 1:
            a, b = rng.sample(range(len(chain)), 2)
            chain[a], chain[b] = chain[b], chain[a]
        elif what < 0.7 and len(chain) > 1:
            chain.pop(rng.randrange(len(chain)))
        elif plan.outputs:
            others = [i for i in _tensor_indices(plan) if i not in plan.outputs]
            if not others:
                return False
            plan.outputs[rng.randrange(len(plan.outputs))] = rng.choice(others)
        else:
            return False
        return True

    return _edit_or_none(data, edit)


def header_fields(data: bytes, rng: random.Random) -> bytes | None:
    """Shift one extended-header field, or one field of an XNNPACK payload's header (its length,
    the graph's offset and size, the constant data's offset and size), by a little."""
    mutated = bytearray(data)
    if rng.random() < 0.3:
        at = bytes(data).find(XNNHeader.EXPECTED_MAGIC) - 4  # the payload's first byte
        if at < 0:
            return None
        # (offset, size) of each field from the payload's start: length, graph offset and size, constant offset and size
        offset, size = rng.choice([(8, 2), (10, 4), (14, 4), (18, 4), (22, 8)])
        value = int.from_bytes(data[at + offset : at + offset + size], "little")
        shifted = (value + rng.choice([-8, -4, -2, -1, 1, 2, 8])) % 2 ** (8 * size)
        mutated[at + offset : at + offset + size] = shifted.to_bytes(size, "little")
        return bytes(mutated)
    if data[8:12] != b"eh00":
        return None
    offset, size = rng.choice(
        [(12, 4), (16, 8), (24, 8), (32, 8)]
    )  # length, program size, segment base, segment data size
    value = int.from_bytes(data[offset : offset + size], "little")
    mutated[offset : offset + size] = (
        (value + rng.choice([-128, -16, -8, -1, 1, 8, 16, 64])) % 2 ** (8 * size)
    ).to_bytes(size, "little")
    return bytes(mutated)


def _kernel_calls(plan: ExecutionPlan) -> list[KernelCall]:
    return [i.instr_args for c in plan.chains for i in c.instructions if isinstance(i.instr_args, KernelCall)]


def kernel_arguments(data: bytes, rng: random.Random) -> bytes | None:
    """Change one integer argument of a kernel call (a dim, a size, a group count), or resize,
    split or drop one dimension of a tensor it takes."""

    def edit(program: Program) -> bool:
        plan = rng.choice(program.execution_plan)
        calls = _kernel_calls(plan)
        if not calls:
            return False
        arguments = [i for i in rng.choice(calls).args if 0 <= i < len(plan.values)]
        integers = [i for i in arguments if isinstance(plan.values[i].val, (Int, IntList))]
        tensors = [i for i in arguments if isinstance(plan.values[i].val, Tensor)]
        if integers and (rng.random() < 0.5 or not tensors):
            value = plan.values[rng.choice(integers)].val
            if isinstance(value, IntList):
                items = [
                    plan.values[i].val
                    for i in value.items
                    if 0 <= i < len(plan.values) and isinstance(plan.values[i].val, Int)
                ]
                if not items:
                    return False
                value = rng.choice(items)
            value.int_val = rng.choice([0, -1, 1, 2, value.int_val + 1, value.int_val - 1, value.int_val * 2])
            return True
        if not tensors:
            return False
        tensor = plan.values[rng.choice(tensors)].val
        sizes, what = list(tensor.sizes), rng.random()
        if what < 0.5 and sizes:
            k = rng.randrange(len(sizes))
            sizes[k] = max(0, sizes[k] + rng.choice([-1, 1, sizes[k]]))
        elif what < 0.75 and sizes and sizes[0] % 2 == 0:
            sizes = [2, sizes[0] // 2, *sizes[1:]]
        elif len(sizes) > 1:
            sizes = [sizes[0] * sizes[1], *sizes[2:]]
        else:
            return False
        if len(sizes) != len(tensor.sizes):
            tensor.dim_order = list(range(len(sizes)))
        tensor.sizes = sizes
        return True

    return _edit_or_none(data, edit)


def return_slots(data: bytes, rng: random.Random) -> bytes | None:
    """Point the slot a kernel call returns into (its last argument) at another value."""

    def edit(program: Program) -> bool:
        plan = rng.choice(program.execution_plan)
        calls = [call for call in _kernel_calls(plan) if call.args]
        if not calls or len(plan.values) < 2:
            return False
        call = rng.choice(calls)
        other = rng.randrange(len(plan.values))
        if other == call.args[-1]:
            return False
        call.args[-1] = other
        return True

    return _edit_or_none(data, edit)


def runtime_names(data: bytes, rng: random.Random) -> bytes | None:
    """Rename one operator (its overload, or its name) or one delegate's backend (empty,
    misspelt, or another ExecuTorch backend's id): a kernel or a backend that the runtime may
    not have."""

    def edit(program: Program) -> bool:
        plan = rng.choice(program.execution_plan)
        if plan.delegates and (rng.random() < 0.4 or not plan.operators):
            delegate = rng.choice(plan.delegates)
            other = rng.choice(sorted(set(KNOWN_BACKEND_IDS) - {delegate.id}))
            delegate.id = rng.choice(
                ["", delegate.id.lower(), f"{delegate.id}V2", f"{delegate.id}_experimental", other]
            )
        elif plan.operators:
            operator = rng.choice(plan.operators)
            if rng.random() < 0.5:
                operator.overload = (operator.overload or "default") + "_v2"
            else:
                operator.name += "_v2"
        else:
            return False
        return True

    return _edit_or_none(data, edit)


# Running programs in a child process, on fixed inputs, to compare a mutant's outputs with the
# original's: a crash or hang there is an outcome, never the caller's death.


def program_inputs(data: bytes) -> dict[str, list[object]]:
    """Deterministic inputs for each method of a (valid) program, from its own values."""
    import torch
    from executorch.exir.schema import Bool, Double, Int, Tensor
    from executorch.exir.tensor import get_scalar_type

    from export_guards.pte.reader.file import PteFile
    from export_guards.workers.runtime_smoke import in_dim_order

    generator = torch.Generator().manual_seed(0)
    inputs: dict[str, list[object]] = {}
    for plan in PteFile(data).program.execution_plan:
        values: list[object] = []
        for index in plan.inputs:
            value = plan.values[index].val
            if isinstance(value, Tensor):
                dtype, sizes = get_scalar_type(value.scalar_type), list(value.sizes)
                if dtype.is_floating_point:
                    dense = torch.randn(sizes, generator=generator).to(dtype)
                elif dtype == torch.bool:  # a mask of both values: damage to it shows
                    dense = torch.randint(0, 2, sizes, generator=generator).bool()
                else:  # ones: safe as indices
                    dense = torch.ones(sizes, dtype=dtype)
                values.append(in_dim_order(dense, list(value.dim_order)))
            elif isinstance(value, (Int, Double, Bool)):
                values.append(getattr(value, {Int: "int_val", Double: "double_val", Bool: "bool_val"}[type(value)]))
        inputs[plan.name] = values
    return inputs


def worker() -> int:
    """The child: for each line ``{"pte", "data", "inputs"}`` on stdin, run every method three
    times (on the inputs, on :func:`_varied` ones, on the inputs again) and print
    ``{"outcome": "ok", "digest"}`` or ``{"outcome": "error", "why"}``."""
    import torch
    from executorch.runtime import Runtime

    runtime = Runtime.get()
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        job = json.loads(line)
        inputs = torch.load(job["inputs"])
        digest = hashlib.sha256()
        try:
            program = runtime.load_program(job["pte"], data_path=job["data"])
            # Each method three times, the second time on other inputs: state a program carries
            # between runs (a mutable buffer) counts too, a state that is never updated shows, and
            # so does a state the second run leaves damaged (the third run reads it).
            runs = [inputs, {n: _varied(given) for n, given in inputs.items()}, inputs]
            for name, given in [(n, run[n]) for run in runs for n in sorted(run)]:
                for output in program.load_method(name).execute(given):
                    if isinstance(output, torch.Tensor):
                        digest.update(
                            str((output.dtype, tuple(output.shape))).encode() + output.contiguous().numpy().tobytes()
                        )
                    else:
                        digest.update(repr(output).encode())
            print(json.dumps({"outcome": "ok", "digest": digest.hexdigest()}), flush=True)
        except Exception as error:  # noqa: BLE001 - the runtime's refusal is the outcome
            print(json.dumps({"outcome": "error", "why": f"{type(error).__name__}: {error}"[:200]}), flush=True)
    return 0


def _varied(values: list[object]) -> list[object]:
    """Other inputs of the same dtypes, shapes and strides: floats -x/2 + 1/4, masks negated,
    integers zero (as safe as indices as ones)."""
    import torch

    varied: list[object] = []
    for value in values:
        if isinstance(value, torch.Tensor):
            value = value.clone()  # noqa: PLW2901 - clone keeps the strides: the dim order the program states
            if value.is_floating_point():
                value.mul_(-0.5).add_(0.25)
            elif value.dtype == torch.bool:
                value.logical_not_()
            else:
                value.zero_()
        varied.append(value)
    return varied


class Runner:
    """Runs programs in one child process, started again after each crash or hang."""

    def __init__(self, timeout: float) -> None:
        self.timeout, self.child = timeout, None

    def _start(self) -> None:
        self.child = subprocess.Popen(
            [sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True, bufsize=1,
        )  # fmt: skip
        self.child.stdout.readline()  # ready

    def run(self, pte: Path, data: Path | None, inputs: Path) -> dict[str, str]:
        if self.child is None or self.child.poll() is not None:
            self._start()
        self.child.stdin.write(
            json.dumps({"pte": str(pte), "data": str(data) if data else None, "inputs": str(inputs)}) + "\n"
        )
        self.child.stdin.flush()
        selector = selectors.DefaultSelector()
        selector.register(self.child.stdout, selectors.EVENT_READ)
        if not selector.select(self.timeout):
            self.child.kill()
            self.child.wait()
            self.child = None
            return {"outcome": "hang"}
        line = self.child.stdout.readline()
        if not line:
            code = self.child.wait()
            self.child = None
            return {"outcome": "crash", "why": f"signal {-code}" if code < 0 else f"exit {code}"}
        return json.loads(line)

    def close(self) -> None:
        if self.child is not None:
            self.child.kill()


STRUCTURE_MUTATORS: dict[str, Mutator] = {
    "call arguments": call_arguments,
    "xnnpack values": xnnpack_values,
    "xnnpack nodes": xnnpack_nodes,
    "tensor layout": tensor_layout,
    "memory plan": memory_plan,
    "instructions": instructions,
    "header fields": header_fields,
    "kernel arguments": kernel_arguments,
    "return slots": return_slots,
}
"""The structure-aware mutators, by kind."""

RUNTIME_MUTATORS: dict[str, Mutator] = {"runtime names": runtime_names}
"""Mutators whose damage only a check against the runtime at hand sees (EG521): a sound file
that names a kernel or backend the runtime lacks."""


if __name__ == "__main__":
    sys.exit(worker())
