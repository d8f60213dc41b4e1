"""Where a graph node came from: the user's source line (from its recorded stack trace) and
the module that ran it."""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Any

import torch

from export_guards.report import SourceLocation

__all__ = ["node_location", "node_module", "node_site"]

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in [^\n]*\n(?P<code>[^\n]*)')


def _library_roots() -> tuple[str, ...]:
    import executorch

    package_dirs = [Path(torch.__file__).parent, Path(executorch.__path__[0]), Path(__file__).parent]
    return tuple(f"{d.resolve()}{os.sep}" for d in package_dirs)


_LIBRARY_ROOTS = _library_roots()


def node_location(node: torch.fx.Node) -> SourceLocation | None:
    """The innermost frame of ``node``'s stack trace that is the user's code.

    Frames inside torch, executorch and this package, and generated code, are skipped, so a
    ``Linear`` inside the user's ``forward`` points at the user's call, not at
    ``torch/nn/modules/linear.py``. When every frame is library code (a bare
    ``nn.Sequential``, say), the innermost one is used.
    """
    trace = node.meta.get("stack_trace")
    if not isinstance(trace, str):
        return None
    frames = [
        SourceLocation(m["file"], int(m["line"]), m["code"].strip()) for m in _FRAME.finditer(trace)
    ]
    if not frames:
        return None
    for frame in reversed(frames):
        if not _is_library_file(frame.file):
            return frame
    return frames[-1]


@functools.lru_cache(maxsize=1024)
def _is_library_file(file: str) -> bool:
    if file.startswith("<"):  # generated code (<eval_with_key>.N of a traced submodule)
        return True
    return str(Path(file).resolve()).startswith(_LIBRARY_ROOTS)


def node_module(node: torch.fx.Node) -> str | None:
    """The module that created ``node``: its path and class, ``"decoder.0 (Conv2d)"``."""
    stack = node.meta.get("nn_module_stack")
    if not stack:
        return None
    path, module_type = next(reversed(stack.values()))
    name = getattr(module_type, "__name__", None) or str(module_type).rsplit(".", 1)[-1]
    return f"{path or '<root>'} ({name})"


def node_site(node: torch.fx.Node) -> dict[str, Any]:
    """Where ``node`` is, as a finding's ``node``, ``location`` and ``module`` (the engine's
    ``Locate`` for graph subjects)."""
    return {"node": node.name, "location": node_location(node), "module": node_module(node)}
