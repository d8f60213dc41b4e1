"""The export child of ``check_reproducible``: one guarded export of a target, in a fresh process.

``python -m export_guards.workers.export_once TARGET OUT.pte SETTINGS`` exports with ``SETTINGS``
(``Settings.to_json()``: every setting the parent has, used as is), writes the program to
``OUT.pte`` and, beside it, ``OUT.pte.names.json``: the SHA-256 of each constant's stored bytes
to its name, so that the parent can name the constants that differ.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import torch
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from export_guards.pipeline import export_target
from export_guards.pte.reproducible import EXPORT_FAILED
from export_guards.settings import Settings
from export_guards.targets import StepFailed, TargetError, step

__all__ = ["constant_names", "export_once"]


def constant_names(tensors: dict[str, object]) -> dict[str, str]:
    """SHA-256 of each tensor's stored bytes (contiguous; and channels-last for 4-d) to its name."""
    names: dict[str, str] = {}
    for name, tensor in tensors.items():
        if not isinstance(tensor, torch.Tensor) or tensor.device.type != "cpu" or is_traceable_wrapper_subclass(tensor):
            continue  # a tensor subclass (torchao's quantized weight) has no bytes of its own: to_edge unpacks it
        layouts = [tensor.detach()]
        if tensor.dim() == 4:
            layouts.append(tensor.detach().permute(0, 2, 3, 1))  # NHWC bytes, as XNNPACK stores convs
        for stored in layouts:
            for dtype in {stored.dtype, torch.float32} if stored.is_floating_point() else {stored.dtype}:
                raw = stored.to(dtype).contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
                names.setdefault(hashlib.sha256(raw).hexdigest(), name)
    return names


def export_once(target: str, output: str, settings: Settings) -> int:
    """Export ``target`` with the guarded pipeline and ``settings`` (its backend, or its
    recipe) to ``output``, and its constants' names beside it; the exit status (2, after
    ``EXPORT_FAILED`` and the step's message, when a step fails)."""
    try:
        result = export_target(target, config=settings)
        with step("writing the program (to_executorch)"):
            program = result.to_pte(refuse=False)  # its check is the reproducibility report's
    except (StepFailed, TargetError) as error:
        print(f"{EXPORT_FAILED}{error}", file=sys.stderr)
        return 2
    Path(output).write_bytes(program)
    exported = result.program
    tensors = {**dict(exported.named_parameters()), **dict(exported.named_buffers()), **exported.constants}
    Path(f"{output}.names.json").write_text(json.dumps(constant_names(tensors)))
    return 0


if __name__ == "__main__":
    target_, output_, settings_ = sys.argv[1:4]
    sys.exit(export_once(target_, output_, Settings.from_json(settings_)))
