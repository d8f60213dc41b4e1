"""Export one model twice, each in a fresh process, to see whether the ``.pte`` bytes repeat.

XNNPACK's on-device weight cache is keyed by named data: an export that renames or rewrites
unchanged weights makes every app update re-pack every weight. Run as
``python -m export_guards.pte.reproducible TARGET OUT.pte BACKEND PLACEMENT FOLD`` it is
one export: it writes the program and, beside it, ``OUT.pte.names.json``, which maps the
SHA-256 of each constant's bytes to its name so that differences can name the constant.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import final

__all__ = ["ExportPair", "export_twice"]


@final
@dataclass(frozen=True)
class ExportPair:
    """Two exports of one model.

    Attributes:
        target: how findings name the pair: ``"the two exports of path/to/file.py:factory"``.
        first, second: the ``.pte`` bytes of each export.
        names: SHA-256 of a constant's bytes (as stored: contiguous, and channels-last for
            4-d tensors, as XNNPACK stores conv weights) to its fully-qualified name.
    """

    target: str
    first: bytes
    second: bytes
    names: dict[str, str]


class ExportFailed(Exception):
    """An export of the target failed; the message says how."""


def export_twice(
    target: str, *, backend: str = "xnnpack", placement: str = "error", fold: bool = True, timeout_s: float = 900.0
) -> ExportPair:
    """Export ``target`` twice, each in its own process, with the guarded pipeline.

    Raises:
        ExportFailed: an export failed, ran past ``timeout_s``, or its lint stopped it.
    """
    with tempfile.TemporaryDirectory(prefix="export-guards-") as scratch:
        outputs = [Path(scratch) / f"export{i}.pte" for i in (1, 2)]
        for output in outputs:
            command = [sys.executable, "-m", "export_guards.pte.reproducible", target, str(output), backend, placement, str(fold)]
            try:
                done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                raise ExportFailed(f"exporting {target} took longer than {timeout_s:.0f} s") from None
            if done.returncode != 0 or not output.is_file():
                lines = done.stderr.strip().splitlines()
                raise ExportFailed(f"exporting {target} failed: {lines[-1] if lines else f'exit status {done.returncode}'}")
        names = json.loads(Path(f"{outputs[0]}.names.json").read_text())
        return ExportPair(f"the two exports of {target}", outputs[0].read_bytes(), outputs[1].read_bytes(), names)


def constant_names(tensors: dict[str, object]) -> dict[str, str]:
    """SHA-256 of each tensor's stored bytes (contiguous; and channels-last for 4-d) to its name."""
    import torch

    names: dict[str, str] = {}
    for name, tensor in tensors.items():
        if not isinstance(tensor, torch.Tensor) or tensor.device.type != "cpu":
            continue
        layouts = [tensor.detach()]
        if tensor.dim() == 4:
            layouts.append(tensor.detach().permute(0, 2, 3, 1))  # NHWC bytes, as XNNPACK stores convs
        for stored in layouts:
            for dtype in {stored.dtype, torch.float32} if stored.is_floating_point() else {stored.dtype}:
                raw = stored.to(dtype).contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
                names.setdefault(hashlib.sha256(raw).hexdigest(), name)
    return names


def _export(target: str, output: str, backend: str, placement: str, fold: bool) -> int:
    import torch

    from export_guards.pipeline import lower_with_guards
    from export_guards.targets import load_target

    model, inputs = load_target(target)
    program = torch.export.export(model, inputs)
    result = lower_with_guards(program, backend=backend, placement=placement, fold=fold)  # type: ignore[arg-type]
    Path(output).write_bytes(result.to_pte())
    tensors = {**dict(program.named_parameters()), **dict(program.named_buffers()), **program.constants}
    Path(f"{output}.names.json").write_text(json.dumps(constant_names(tensors)))
    return 0


if __name__ == "__main__":
    target_, output_, backend_, placement_, fold_ = sys.argv[1:6]
    sys.exit(_export(target_, output_, backend_, placement_, fold_ == "True"))
