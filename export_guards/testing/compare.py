"""Compare a program's outputs on the ExecuTorch runtime with eager outputs, for a person."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import final

import torch
import torch.utils._pytree as pytree
from torch.export import ExportedProgram

from export_guards.analysis.programs import mutated_constants
from export_guards.compat import RuntimeMismatch, runtime_mismatch

__all__ = ["LoadedMethod", "OutputError", "compare_outputs", "input_differences", "mutable_buffers", "runtime_error_text", "run_pte"]


@final
@dataclass(frozen=True)
class OutputError:
    """How one output of the program differs from eager."""

    path: str
    shape: tuple[int, ...]
    max_abs: float
    max_rel: float
    within: bool
    problem: str = ""

    def __str__(self) -> str:
        if self.problem:
            return f"output {self.path}: {self.problem}"
        verdict = "ok" if self.within else "MISMATCH"
        return (
            f"output {self.path} {list(self.shape)}: max abs error {self.max_abs:.3g}, "
            f"max rel error {self.max_rel:.3g} ({verdict})"
        )


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
        self._program = Runtime.get().load_program(pte)  # kept: the method's memory is the program's
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


def mutable_buffers(program: ExportedProgram) -> list[str]:
    """The buffers ``program`` writes (its state between calls), by their names in the model."""
    return sorted(mutated_constants(program) & set(program.graph_signature.buffers))


def runtime_error_text(error: BaseException) -> str:
    """The runtime's error in one line, its code as ExecuTorch spells it (``0x14``: the
    bindings print ``0x:14``)."""
    lines = str(error).strip().splitlines()
    text = re.sub(r"\b0x:([0-9a-fA-F]+)", r"0x\1", lines[0] if lines else "(no message)")
    return f"{type(error).__name__}: {text}"


def input_differences(program: ExportedProgram, inputs: Sequence[object]) -> list[str]:
    """How ``inputs`` differ from what ``program`` was exported for, input by input: a dtype,
    a rank or a fixed dimension (a dynamic one takes any size); empty when they fit."""
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    exported = [placeholders[name].meta.get("val") for name in program.graph_signature.user_inputs if name in placeholders]
    given = pytree.tree_leaves(list(inputs))
    if len(exported) != len(given):
        return [f"the program takes {len(exported)} inputs, {len(given)} were given"]
    differences = []
    for name, want, got in zip(program.graph_signature.user_inputs, exported, given):
        if not (isinstance(want, torch.Tensor) and isinstance(got, torch.Tensor)):
            continue
        fixed = [d if isinstance(d, int) else None for d in want.shape]
        if want.dtype != got.dtype or len(fixed) != got.dim() or any(f is not None and f != g for f, g in zip(fixed, got.shape)):
            shape = ["*" if f is None else f for f in fixed]
            differences.append(f"input '{name}': exported as {str(want.dtype).removeprefix('torch.')}{shape}, given {str(got.dtype).removeprefix('torch.')}{list(got.shape)}")
    return differences


def compare_outputs(eager: object, actual: Sequence[object], *, atol: float, rtol: float) -> list[OutputError]:
    """Per-output errors of ``actual`` (the runtime's flat outputs) against ``eager`` (any nest
    of tuples, lists and dicts of tensors, flattened the way ``torch.export`` flattens them)."""
    leaves, spec = pytree.tree_flatten(eager)
    paths = [pytree.keystr(path) or "[0]" for path, _ in pytree.tree_flatten_with_path(eager)[0]]
    if len(leaves) != len(actual):
        return [OutputError("(all)", (), 0.0, 0.0, False, f"eager returned {len(leaves)} values, the program {len(actual)}")]
    errors = []
    for path, expected, got in zip(paths, leaves, actual):
        if not isinstance(expected, torch.Tensor):
            same = expected == got
            errors.append(OutputError(path, (), 0.0, 0.0, bool(same), "" if same else f"eager {expected!r}, program {got!r}"))
            continue
        expected = expected.detach().cpu()
        if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
            shape = getattr(got, "shape", type(got).__name__)
            errors.append(OutputError(path, tuple(expected.shape), 0.0, 0.0, False, f"shape {list(expected.shape)} in eager, {shape} in the program"))
            continue
        if expected.dtype == torch.bool or not (expected.is_floating_point() or expected.is_complex()):
            same = torch.equal(got.to(expected.dtype), expected)  # bool and integer outputs: exactly
            mismatches = int((got.to(expected.dtype) != expected).sum())
            problem = "" if same else f"{mismatches} of {expected.numel()} values differ"
            errors.append(OutputError(path, tuple(expected.shape), 0.0, 0.0, same, problem))
            continue
        diff = (got.double() - expected.double()).abs()
        scale = expected.abs().double()
        nonzero = scale > 0  # relative to the eager value, where there is one
        max_abs = float(diff.max()) if diff.numel() else 0.0
        max_rel = float((diff[nonzero] / scale[nonzero]).max()) if bool(nonzero.any()) else 0.0
        within = bool(torch.allclose(got.double(), expected.double(), atol=atol, rtol=rtol, equal_nan=True))
        errors.append(OutputError(path, tuple(expected.shape), max_abs, max_rel, within))
    return errors
