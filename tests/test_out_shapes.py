"""EG519's out shapes without torch (``reader/out_shapes.py``, issue 52): on every kernel call of
the corpus whose operator has a rule, an out planned one element longer than ExecuTorch's kernel
resizes it to is the same finding without torch as with the replay on meta tensors (``copy_``'s
self, which it reads too, a refusal in words of its own); an input one
element longer is a finding without torch exactly where the replay makes one (operands that no
longer broadcast, matrices that no longer multiply, in words of its own); and the programs as
ExecuTorch writes them have none."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import export_guards as eg
from export_guards.pte.reader import wheel
from export_guards.pte.reader.file import PteFile
from export_guards.pte.reader.out_shapes import RULES
from export_guards.pte.reader.schemas import operator_schema
from pte_models import Written
from pte_structure import edit_pte


def ruled_calls(data: bytes) -> Iterator[tuple[int, int, str]]:
    """(method, instruction, operator) of each call of the first chain whose operator has a rule
    and whose first written argument is a static tensor."""
    program = PteFile(data).program
    for m, plan in enumerate(program.execution_plan if program is not None else ()):
        for i, instruction in enumerate(plan.chains[0].instructions if plan.chains else ()):
            call = instruction.instr_args
            if not isinstance(call, wheel.KernelCall) or plan.operators[call.op_index].name not in RULES:
                continue
            operator = plan.operators[call.op_index]
            schema = operator_schema(operator.name, operator.overload)
            written = [k for k, a in enumerate(schema.arguments) if a.written] if schema is not None else []
            out = plan.values[call.args[written[0]]].val if written else None
            if isinstance(out, wheel.Tensor) and out.shape_dynamism == wheel.TensorShapeDynamism.STATIC and out.sizes:
                yield m, i, operator.name


def one_longer(method: int, instruction: int, written: bool = True) -> object:
    """The edit that plans the call's first out (or its first tensor input) one element longer
    in its last dim."""

    def edit(program: object) -> None:
        plan = program.execution_plan[method]
        call = plan.chains[0].instructions[instruction].instr_args
        schema = operator_schema(plan.operators[call.op_index].name, plan.operators[call.op_index].overload)
        values = [plan.values[call.args[k]].val for k, a in enumerate(schema.arguments) if a.written == written]
        first = next(v for v in values if isinstance(v, wheel.Tensor) and v.sizes)
        first.sizes[-1] += 1

    return edit


def at(instruction: int, data: bytes, *, replay: bool) -> list[eg.Finding]:
    return [
        f for f in eg.check_pte(data, replay=replay).with_code("EG519") if f" {instruction} of chain 0 " in f.message
    ]


def test_each_out_shape_rule_finds_what_the_replay_finds(
    written_programs: Mapping[str, Written], valid_program_bytes: Mapping[str, bytes]
) -> None:
    programs = {name: p.pte.read_bytes() for name, p in written_programs.items()} | dict(valid_program_bytes)
    covered: set[str] = set()
    for name, data in programs.items():
        assert not eg.check_pte(data).with_code("EG519"), name  # as ExecuTorch writes it
        for method, instruction, operator in ruled_calls(data):
            mutant = edit_pte(data, one_longer(method, instruction))
            found, replayed = at(instruction, mutant, replay=False), at(instruction, mutant, replay=True)
            assert found and replayed, f"{name}, instruction {instruction} ({operator}): {found} != {replayed}"
            if "but ExecuTorch's kernel resizes it to shape" in replayed[0].message:  # not copy_'s self, an input too
                assert found == replayed, f"{name}, instruction {instruction} ({operator}): {found} != {replayed}"
                covered.add(operator)
    assert len(covered) >= 20, sorted(covered)  # 24 operators when written


def test_an_input_out_of_shape_is_a_finding_where_the_replay_makes_one(
    valid_program_bytes: Mapping[str, bytes],
) -> None:
    refused = 0
    for name, data in valid_program_bytes.items():
        for method, instruction, operator in ruled_calls(data):
            mutant = edit_pte(data, one_longer(method, instruction, written=False))
            found, replayed = at(instruction, mutant, replay=False), at(instruction, mutant, replay=True)
            assert bool(found) == bool(replayed), (
                f"{name}, instruction {instruction} ({operator}): {found} != {replayed}"
            )
            refused += any("with tensors it refuses" in f.message for f in found)
    assert refused >= 5, refused
