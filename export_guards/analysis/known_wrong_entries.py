"""What a delegate of ExecuTorch is known to compute wrong: each pattern's name, the delegates
that compute it wrong, the upstream report and the releases it holds in, without torch.

One list, read by both sides: the graph side finds each pattern in an edge program and keeps it
off its delegate (``analysis/known_wrong.py``, the pass of ``passes/known_wrong.py``, EG405); the
program side recognises each in a written program (``pte/rules/known_wrong.py``, EG524). Each
side binds every entry to its own finder, and a test checks that neither lacks one.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import metadata
from typing import final

__all__ = ["KNOWN_WRONG", "XNNPACK_LINEAR_WEIGHT_MATH", "KnownWrong", "executorch_release", "release_text"]


@final
@dataclass(frozen=True)
class KnownWrong:
    """One pattern that a delegate computes wrong.

    Attributes:
        name: a stable name (``"xnnpack-linear-weight-math"``).
        backend_ids: the delegates that compute it wrong (``DelegationSpec.backend_id``).
        summary: what goes wrong, in one clause.
        report: the upstream report.
        fixed_in: the first ExecuTorch release that computes it right, ``None`` while none does.
        slower: what running it on the portable kernels costs, measured against the form the
            delegate computes right (a benchmark named), for the finding; ``""`` if unmeasured.
    """

    name: str
    backend_ids: tuple[str, ...]
    summary: str
    report: str
    fixed_in: tuple[int, int, int] | None
    slower: str = ""

    def applies(self, release: tuple[int, int, int] | None = None) -> bool:
        """Whether ExecuTorch ``release`` (the installed one by default) computes it wrong."""
        release = release or executorch_release()
        return self.fixed_in is None or release < self.fixed_in

    def applies_to(self, backend_ids: tuple[str, ...] | None) -> bool:
        """Whether it applies in the installed ExecuTorch to a delegate of ``backend_ids``
        (``None``: the delegates are not known, so every one)."""
        return self.applies() and (backend_ids is None or bool(set(self.backend_ids) & set(backend_ids)))


@functools.cache
def executorch_release() -> tuple[int, int, int]:
    """The installed ExecuTorch's release, as numbers (``(1, 5, 1)``), read from its package
    metadata (ExecuTorch itself is not imported)."""
    found = re.match(r"(\d+)\.(\d+)\.(\d+)", metadata.version("executorch"))
    return (int(found[1]), int(found[2]), int(found[3])) if found else (0, 0, 0)


def release_text() -> str:
    """The installed ExecuTorch's release as findings name it (``"1.5.1"``)."""
    return ".".join(map(str, executorch_release()))


XNNPACK_LINEAR_WEIGHT_MATH = KnownWrong(
    name="xnnpack-linear-weight-math",
    backend_ids=("XnnpackBackend",),
    summary="a weight-only quantized linear's integer weight is read as the float one (torchao's "
    "Int8WeightOnlyConfig, IntxWeightOnlyConfig)",
    report="https://github.com/pytorch/executorch/issues/8830",
    fixed_in=None,
    slower="on decoder-sized linears 20x or more the time of 8da8w on XNNPACK for one token, "
    "5x to 9x for 64: benchmarks/weight_only_speed.py",
)

KNOWN_WRONG: tuple[KnownWrong, ...] = (XNNPACK_LINEAR_WEIGHT_MATH,)
"""Every pattern known to be computed wrong, by the delegate that does."""
