"""Whether a written buffer's initial value changes what a program computes: the program run on
its own example inputs from the buffers' values and from zeros (where ExecuTorch starts them)."""

from __future__ import annotations

from collections.abc import Collection

import torch
import torch.utils._pytree as pytree
from torch.export import ExportedProgram

__all__ = ["initial_values_that_matter"]


def initial_values_that_matter(program: ExportedProgram, buffers: Collection[str]) -> dict[str, float] | None:
    """Of ``buffers`` (FQNs of buffers ``program`` writes in place), those whose initial value
    changes the outputs of one call on the program's example inputs, each with the largest
    difference that starting it from zeros makes; ``None`` when that cannot be told (the
    program keeps no example inputs, or they or the buffers are not on the host, or the run fails).

    A stale KV cache (values left by an eager call) that the call overwrites, or reads only under
    a mask, changes nothing: zeros and the stale values give the same outputs. A buffer the call
    reads before it writes it (a running total) does."""
    if not buffers or program.example_inputs is None:
        return None
    args, kwargs = program.example_inputs
    values = {fqn: program.state_dict.get(fqn, program.constants.get(fqn)) for fqn in buffers}
    tensors = [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
    if not all(isinstance(t, torch.Tensor) and _on_host(t) for t in [*tensors, *values.values()]):
        return None
    try:
        module = program.module()
        baseline = _outputs(module, values, (), args, kwargs)
        everything = _differs(baseline, _outputs(module, values, buffers, args, kwargs))
        if not everything:
            return {}
        alone = {fqn: _differs(baseline, _outputs(module, values, (fqn,), args, kwargs)) for fqn in buffers}
    except Exception:  # noqa: BLE001 - a program that does not run here gives no evidence either way
        return None
    mattering = {fqn: difference for fqn, difference in alone.items() if difference}
    return mattering or dict.fromkeys(buffers, everything)  # only together: each one matters


def _outputs(module: torch.nn.Module, values: dict[str, torch.Tensor], zeroed: Collection[str], args: object, kwargs: object) -> list[object]:
    """One call's outputs, flat, with the written buffers as copies (the program's own stay as
    they are): ``zeroed`` ones at zeros, the others at their values."""
    state = {fqn: torch.zeros_like(value) if fqn in zeroed else value.clone() for fqn, value in values.items()}
    with torch.no_grad():
        return pytree.tree_leaves(torch.func.functional_call(module, state, args, kwargs))


def _differs(expected: list[object], got: list[object]) -> float:
    """The largest difference between two calls' outputs (exactly: the same program on the same
    inputs computes the same values unless a buffer's value reaches them); ``inf`` where a
    shape or a non-tensor output differs."""
    if len(expected) != len(got):
        return float("inf")
    largest = 0.0
    for a, b in zip(expected, got):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            largest = largest if a == b else float("inf")
        elif a.shape != b.shape:
            largest = float("inf")
        elif not torch.equal(a, b):
            if a.is_floating_point() and bool(((a == b) | (a.isnan() & b.isnan())).all()):
                continue  # NaN where both have NaN: the same
            largest = max(largest, float((a.double() - b.double()).abs().nan_to_num(float("inf")).max()))
    return largest


def _on_host(tensor: torch.Tensor) -> bool:
    return tensor.device.type == "cpu" and not isinstance(tensor, torch._subclasses.FakeTensor)
