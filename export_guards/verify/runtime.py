"""The written program run in this process by ``executorch.runtime``: one method loaded once,
called as eager is (the ``check_export`` fixture's runs, step by step)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import final

import torch
import torch.utils._pytree as pytree
from torch.export import ExportedProgram

from export_guards.compat import RuntimeMismatch, load_program, runtime_mismatch
from export_guards.ruleset import first_line

__all__ = ["LoadedMethod", "input_differences", "run_pte", "runtime_error_text"]


@final
class LoadedMethod:
    """One method of a program, loaded once by ``executorch.runtime``: each call sees the state
    (mutable buffers, such as a KV cache) that the calls before it left, as a model's eager calls do.

    Raises:
        RuntimeMismatch: the runtime cannot run with the installed torch (one line: which
            torch it needs, which is installed), before the run or instead of its C++ trace.
    """

    def __init__(self, pte: bytes, method: str = "forward") -> None:
        from executorch.runtime import Runtime

        mismatch = runtime_mismatch()
        if mismatch is not None:
            raise RuntimeMismatch(mismatch)
        self._program = load_program(Runtime.get(), pte)  # kept: the method's memory is the program's
        self._method = self._program.load_method(method)

    def __call__(self, inputs: Sequence[object]) -> list[object]:
        """Run the method on ``inputs`` (flattened as torch.export flattens them, moved to the CPU)."""
        flat = [x.detach().cpu() if isinstance(x, torch.Tensor) else x for x in pytree.tree_leaves(list(inputs))]
        try:
            return list(self._method.execute(flat))
        except RuntimeError as error:
            mismatch = runtime_mismatch(str(error))  # a pair the table does not know, told by its failure
            if mismatch is not None:
                raise RuntimeMismatch(mismatch) from None
            raise


def run_pte(pte: bytes, inputs: Sequence[object], method: str = "forward") -> list[object]:
    """Load ``pte`` with ``executorch.runtime`` and run ``method`` once on ``inputs`` (moved to
    the CPU); ``RuntimeMismatch`` as :class:`LoadedMethod`."""
    return LoadedMethod(pte, method)(inputs)


def runtime_error_text(error: BaseException) -> str:
    """The runtime's error in one line, its code as ExecuTorch spells it (``0x14``: the
    bindings print ``0x:14``)."""
    text = re.sub(r"\b0x:([0-9a-fA-F]+)", r"0x\1", first_line(error))
    return f"{type(error).__name__}: {text}"


def input_differences(program: ExportedProgram, inputs: Sequence[object]) -> list[str]:
    """How ``inputs`` differ from what ``program`` was exported for, input by input: a dtype,
    a rank or a fixed dimension (a dynamic one takes any size); empty when they fit."""
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    exported = [
        placeholders[name].meta.get("val") for name in program.graph_signature.user_inputs if name in placeholders
    ]
    given = pytree.tree_leaves(list(inputs))
    if len(exported) != len(given):
        return [f"the program takes {len(exported)} inputs, {len(given)} were given"]
    differences = []
    for name, want, got in zip(program.graph_signature.user_inputs, exported, given):
        if not (isinstance(want, torch.Tensor) and isinstance(got, torch.Tensor)):
            continue
        fixed = [d if isinstance(d, int) else None for d in want.shape]
        if (
            want.dtype != got.dtype
            or len(fixed) != got.dim()
            or any(f is not None and f != g for f, g in zip(fixed, got.shape))
        ):
            shape = ["*" if f is None else f for f in fixed]
            differences.append(
                f"input '{name}': exported as {str(want.dtype).removeprefix('torch.')}{shape}, given {str(got.dtype).removeprefix('torch.')}{list(got.shape)}"
            )
    return differences
