"""How a program's outputs differ from eager's, under one tolerance policy (:class:`Tolerance`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import final

import torch
import torch.utils._pytree as pytree

__all__ = ["QUANTIZATION_ERROR", "TOLERANCES", "OutputError", "Tolerance", "compare_outputs", "quantizes"]

TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-7, 1e-9),
    torch.float32: (1e-3, 1e-4),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (5e-2, 5e-2),
}
"""``(rtol, atol)`` by dtype, :meth:`Tolerance.by_dtype`'s; ``atol`` is a fraction of the output's
largest eager value, so that a value near zero in a large output is not held to a tighter bound
than its neighbours."""

QUANTIZED = (1e-1, 1e-1)
"""A quantized program against its quantized reference: a delegate rounds where the reference
does not quite, and an int8 step (1/127 of the range) of difference compounds layer by layer
(an int8 decoder: 4% of its largest value); a wrong scale or zero point is far beyond a tenth."""


QUANTIZATION_ERROR = (
    "The program quantizes: the runtime's quantized kernels round where torchao's eager ops do not quite, "
    "an int8 step (1/127 of a value's range) that compounds layer by layer, so a quantized program is "
    "not equal to eager within a float tolerance. Compare it with the quantized model (not the float one) "
    "within the quantization's error: atol and rtol of about a tenth of the outputs' scale "
    "(`check_export(..., atol=0.1, rtol=0.1)` for outputs near 1; export-guards lint allows 0.1 of the largest value)."
)
"""Why a quantized program's outputs differ from eager's beyond a float tolerance, and its fix."""


def quantizes(program: torch.export.ExportedProgram) -> bool:
    """Whether ``program`` computes with quantize ops (torchao's or PT2E's): its outputs are
    eager's within the quantization's error, not a float tolerance."""
    from export_guards.analysis.ops import inserted_by_quantizer

    return any(inserted_by_quantizer(node) for node in program.graph.nodes)


@final
@dataclass(frozen=True)
class Tolerance:
    """How far a float output may be from eager's: ``|actual - eager| <= atol + rtol * |eager|``.

    Two policies: :meth:`by_dtype` (``export-guards lint``'s: by the output's dtype, ``atol`` a
    fraction of its largest eager value) and :meth:`absolute` (``torch.allclose``'s, the
    ``check_export`` fixture's ``atol`` / ``rtol``). Integer and bool outputs are compared exactly.
    """

    rtol: float | None = None  # None: by dtype
    atol: float | None = None
    scaled: bool = True  # atol as a fraction of the output's largest eager value
    quantized: bool = False

    @classmethod
    def by_dtype(cls, *, quantized: bool = False) -> Tolerance:
        """By each output's dtype (:data:`TOLERANCES`); looser where the program quantizes (:data:`QUANTIZED`)."""
        return cls(quantized=quantized)

    @classmethod
    def absolute(cls, *, atol: float, rtol: float) -> Tolerance:
        """``torch.allclose(actual, eager, rtol=rtol, atol=atol)``."""
        return cls(rtol=rtol, atol=atol, scaled=False)

    def limits(self, dtype: torch.dtype) -> tuple[float, float]:
        """``(rtol, atol)`` for an output of ``dtype`` (``atol`` as given: scaled or not)."""
        if self.rtol is not None and self.atol is not None:
            return self.rtol, self.atol
        rtol, atol = TOLERANCES.get(dtype, TOLERANCES[torch.float32])
        return (max(rtol, QUANTIZED[0]), max(atol, QUANTIZED[1])) if self.quantized else (rtol, atol)

    def describe(self, dtype: torch.dtype, largest: float) -> str:
        rtol, atol = self.limits(dtype)
        return (
            f"rtol {rtol:g}, atol {atol:g} of the largest value, {largest:.3g}"
            if self.scaled
            else f"rtol {rtol:g}, atol {atol:g}"
        )


@final
@dataclass(frozen=True)
class OutputError:
    """How one output of the program differs from eager.

    Attributes:
        path: the output's place in eager's nest (``[0]``, ``['logits']``).
        shape: eager's shape.
        max_abs / max_rel: the largest absolute and relative difference (floats).
        within: whether the output is within the tolerance.
        problem: what is wrong, in a sentence, where it is not within.
    """

    path: str
    shape: tuple[int, ...]
    max_abs: float
    max_rel: float
    within: bool
    problem: str = ""

    def __str__(self) -> str:
        if self.problem:
            return self.problem
        return f"output {self.path} {list(self.shape)}: max abs error {self.max_abs:.3g}, max rel error {self.max_rel:.3g} (ok)"


def compare_outputs(
    expected: object, actual: Sequence[object], tolerance: Tolerance, *, unsteady: frozenset[int] = frozenset()
) -> list[OutputError]:
    """Each output of ``actual`` (the runtime's flat outputs) against ``expected`` (eager's, any
    nest of tuples, lists and dicts, flattened as ``torch.export`` flattens them) under
    ``tolerance``; the flat indices in ``unsteady`` (outputs that eager itself does not repeat:
    a random op) are not compared."""
    flat = pytree.tree_flatten_with_path(expected)[0]
    if len(flat) != len(actual):
        return [
            OutputError(
                "(all)", (), 0.0, 0.0, False, f"it returned {len(actual)} values where eager returned {len(flat)}"
            )
        ]
    return [
        _compared(pytree.keystr(path) or "[0]", want, got, tolerance)
        for index, ((path, want), got) in enumerate(zip(flat, actual))
        if index not in unsteady
    ]


def _compared(path: str, want: object, got: object, tolerance: Tolerance) -> OutputError:
    where = f"output {path}"
    if not isinstance(want, torch.Tensor):
        same = bool(want == got)
        return OutputError(path, (), 0.0, 0.0, same, "" if same else f"{where} is {got!r} where eager's is {want!r}")
    want = want.detach().cpu()
    shape = tuple(want.shape)
    if not isinstance(got, torch.Tensor) or got.shape != want.shape:
        return OutputError(
            path,
            shape,
            0.0,
            0.0,
            False,
            f"{where} has shape {list(getattr(got, 'shape', []))} where eager's is {list(want.shape)}",
        )
    if not (want.is_floating_point() or want.is_complex()):
        differ = got.to(want.dtype) != want  # bool and integer outputs: exactly
        if not bool(differ.any()):
            return OutputError(path, shape, 0.0, 0.0, True)
        at = [int(i) for i in differ.nonzero()[0]]
        return OutputError(
            path,
            shape,
            0.0,
            0.0,
            False,
            f"{where} differs from eager in {int(differ.sum())} of {want.numel()} values, first at {at} ({got[tuple(at)].item()!r} where eager's is {want[tuple(at)].item()!r})",
        )
    return _compared_floats(where, path, want, got, tolerance)


_CHUNK = 1 << 20
"""Values compared at a time: the float64 copies of a chunk, not of a whole output (a decoder's
logits at its longest length are a GB of temporaries in float64)."""


def _compared_floats(where: str, path: str, want: torch.Tensor, got: torch.Tensor, tolerance: Tolerance) -> OutputError:
    rtol, atol = tolerance.limits(want.dtype)
    flat_want, flat_got = want.reshape(-1), got.reshape(-1)
    chunks = range(0, flat_want.numel(), _CHUNK)
    largest = _largest([flat_want[i : i + _CHUNK].double().abs().max() for i in chunks])
    bound = atol * largest if tolerance.scaled else atol
    max_abs, relative, beyond, flat_at = 0.0, [], 0, 0
    for start in chunks:
        diff, eager, outside = _chunk_differences(
            flat_want[start : start + _CHUNK], flat_got[start : start + _CHUNK], bound, rtol
        )
        beyond += int(outside.sum())
        if float(diff.max()) > max_abs or start == 0:  # the first largest difference, as argmax finds it over the whole
            max_abs, flat_at = float(diff.max()), start + int(diff.argmax())
        nonzero = eager > 0  # relative to the eager value, where there is one
        if bool(nonzero.any()):
            relative.append((diff[nonzero] / eager[nonzero]).max())
    max_rel = _largest(relative)
    if not beyond:
        return OutputError(path, tuple(want.shape), max_abs, max_rel, True)
    at = [int(i) for i in torch.unravel_index(torch.tensor(flat_at), want.shape)] if want.dim() else []
    problem = (
        f"{where} ({str(want.dtype).removeprefix('torch.')}{list(want.shape)}) differs from eager by up to "
        f"{max_abs:.3g} at {at} ({float(flat_got[flat_at].double()):.6g} where eager's is "
        f"{float(flat_want[flat_at].double()):.6g}); {beyond} of {want.numel()} values beyond "
        f"the tolerance ({tolerance.describe(want.dtype, largest)})"
    )
    return OutputError(path, tuple(want.shape), max_abs, max_rel, False, problem)


def _largest(maxima: list[torch.Tensor]) -> float:
    """The largest of the chunks' maxima (a NaN among them, as torch's ``max`` over the whole
    says); 0 for none."""
    return float(torch.stack(maxima).max()) if maxima else 0.0


def _chunk_differences(
    want: torch.Tensor, got: torch.Tensor, bound: float, rtol: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For a chunk of flat values, in float64: ``|got - want|`` (0 where both are the same
    infinity or NaN, infinite where one is NaN), ``|want|``, and where the difference is beyond
    ``bound + rtol * |want|``."""
    expected64, got64 = want.double(), got.double()
    diff = (got64 - expected64).abs().nan_to_num(nan=float("inf"))
    same = (expected64 == got64) | (expected64.isnan() & got64.isnan())  # an infinity or a NaN where eager has it
    diff = torch.where(same, torch.zeros_like(diff), diff)
    eager = expected64.abs()
    return diff, eager, diff > bound + rtol * eager
