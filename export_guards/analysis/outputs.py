"""How a program's outputs differ from eager's, each at a tolerance that fits its dtype."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.utils._pytree as pytree

__all__ = ["TOLERANCES", "output_mismatches", "tolerance"]

TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-7, 1e-9),
    torch.float32: (1e-3, 1e-4),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (5e-2, 5e-2),
}
"""``(rtol, atol)`` by dtype; ``atol`` is a fraction of the output's largest eager value, so that
a value near zero in a large output is not held to a tighter bound than its neighbours."""

QUANTIZED = (1e-1, 1e-1)
"""A quantized program against its quantized reference: a delegate rounds where the reference
does not quite, and an int8 step (1/127 of the range) of difference compounds layer by layer
(an int8 decoder: 4% of its largest value); a wrong scale or zero point is far beyond a tenth."""


def tolerance(dtype: torch.dtype, *, quantized: bool = False) -> tuple[float, float]:
    """``(rtol, atol as a fraction of the largest value)`` for an output of ``dtype``."""
    rtol, atol = TOLERANCES.get(dtype, TOLERANCES[torch.float32])
    return (max(rtol, QUANTIZED[0]), max(atol, QUANTIZED[1])) if quantized else (rtol, atol)


def output_mismatches(
    expected: object, actual: Sequence[object], *, quantized: bool = False, unsteady: frozenset[int] = frozenset()
) -> list[str]:
    """Each output of ``actual`` (the runtime's flat outputs) that differs from ``expected``
    (eager's, any nest of tuples, lists and dicts, flattened as ``torch.export`` does) beyond
    :func:`tolerance`, described with its largest difference and where; the flat indices in
    ``unsteady`` (outputs that eager itself does not repeat) are not compared."""
    flat = pytree.tree_flatten_with_path(expected)[0]
    if len(flat) != len(actual):
        return [f"it returned {len(actual)} values where eager returned {len(flat)}"]
    found = []
    for index, ((path, want), got) in enumerate(zip(flat, actual)):
        where = f"output {pytree.keystr(path) or '[0]'}"
        if index in unsteady:
            continue
        if not isinstance(want, torch.Tensor):
            if want != got:
                found.append(f"{where} is {got!r} where eager's is {want!r}")
            continue
        want = want.detach().cpu()
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            found.append(f"{where} has shape {list(getattr(got, 'shape', []))} where eager's is {list(want.shape)}")
            continue
        if not (want.is_floating_point() or want.is_complex()):
            differ = got.to(want.dtype) != want
            if bool(differ.any()):
                at = [int(i) for i in differ.nonzero()[0]]
                found.append(f"{where} differs from eager in {int(differ.sum())} of {want.numel()} values, first at {at} ({got[tuple(at)].item()!r} where eager's is {want[tuple(at)].item()!r})")
            continue
        rtol, atol = tolerance(want.dtype, quantized=quantized)
        expected64, got64 = want.double(), got.double()
        scale = float(expected64.abs().max()) if want.numel() else 0.0
        diff = (got64 - expected64).abs().nan_to_num(nan=float("inf"))
        diff = torch.where(expected64.isnan() & got64.isnan(), torch.zeros_like(diff), diff)
        beyond = diff > atol * scale + rtol * expected64.abs()
        if bool(beyond.any()):
            flat_at = int(diff.flatten().argmax())
            at = [int(i) for i in torch.unravel_index(torch.tensor(flat_at), want.shape)] if want.dim() else []
            found.append(
                f"{where} ({str(want.dtype).removeprefix('torch.')}{list(want.shape)}) differs from eager by up to "
                f"{float(diff.flatten()[flat_at]):.3g} at {at} ({float(got64.flatten()[flat_at]):.6g} where eager's is "
                f"{float(expected64.flatten()[flat_at]):.6g}); {int(beyond.sum())} of {want.numel()} values beyond "
                f"the tolerance (rtol {rtol:g}, atol {atol:g} of the largest value, {scale:.3g})"
            )
    return found
