"""Where a graph node came from: the user's source line (from its recorded stack trace) and
the module that ran it."""

from __future__ import annotations

import functools
import os
import re
import sysconfig
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from export_guards.analysis.ops import call_nodes, kernel_op_name
from export_guards.analysis.programs import Program, methods_of
from export_guards.report import SourceLocation

__all__ = [
    "location_named_in",
    "node_location",
    "node_module",
    "node_origin",
    "node_site",
    "operator_sites",
    "source_lines",
]

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in [^\n]*\n(?P<code>[^\n]*)')


def _library_roots() -> tuple[str, ...]:
    """Where code the user did not write lives: torch, ExecuTorch, this package, and every
    installed package and the standard library (a model from an installed zoo is placed at the
    user's call, not inside the zoo)."""
    import executorch

    package_dirs = [Path(torch.__file__).parent, Path(executorch.__path__[0]), Path(__file__).parent.parent]
    paths = sysconfig.get_paths()
    package_dirs += [Path(paths[key]) for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths]
    return tuple(f"{d.resolve()}{os.sep}" for d in package_dirs)


_LIBRARY_ROOTS = _library_roots()
_INSTALLED = frozenset({"site-packages", "dist-packages"})


def node_location(node: torch.fx.Node) -> SourceLocation | None:
    """The innermost frame of ``node``'s stack trace that is the user's code, or None.

    Frames inside torch, executorch, this package, installed packages and generated code
    (``<eval_with_key>.N``) are skipped, so a ``Linear`` inside the user's ``forward`` points at
    the user's call, not at ``torch/nn/modules/linear.py``. When no frame is the user's (a bare
    ``nn.Sequential``, say), there is no location: the caller places such findings (the
    command, at the factory).
    """
    trace = node.meta.get("stack_trace")
    if not isinstance(trace, str):
        return None
    frames = [SourceLocation(m["file"], int(m["line"]), m["code"].strip()) for m in _FRAME.finditer(trace)]
    return next((frame for frame in reversed(frames) if not _is_library_file(frame.file)), None)


@functools.lru_cache(maxsize=1024)
def _is_library_file(file: str) -> bool:
    if file.startswith("<"):  # generated code (<eval_with_key>.N of a traced submodule)
        return True
    path = Path(file).resolve()
    return str(path).startswith(_LIBRARY_ROOTS) or not _INSTALLED.isdisjoint(path.parts)


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


def operator_sites(program: Program) -> Callable[[object], Mapping[str, Any]]:
    """Where the written program's operators come from: given an operator as the runtime's
    registry spells it (``"aten::sort.values"``), the site (``node_site``) of the first node of
    ``program`` (the lowered program it was written from) that calls that op, by name whatever
    the overload (emission picks the out variant); nothing for an operator no node calls."""
    first: dict[str, torch.fx.Node] = {}
    for ep in methods_of(program).values():
        for _, node in call_nodes(ep.graph_module):
            if (name := kernel_op_name(node)) is not None:
                first.setdefault(name, node)

    def locate(operator: object) -> Mapping[str, Any]:
        node = first.get(str(operator).split(".", 1)[0])
        return node_site(node) if node is not None else {}

    return locate


def node_origin(node: torch.fx.Node) -> str:
    """The name of the earliest node ``node`` descends from (``linear`` for the ``aten_mm_default``
    that lowering made of it), from the provenance torch.fx keeps in ``meta["from_node"]``; its
    own name when it has none (a torch.export node). One op has one origin in every stage."""
    sources = node.meta.get("from_node") or []
    source = sources[0] if sources else None
    while source is not None and getattr(source, "from_node", None):
        source = source.from_node[0]
    return getattr(source, "name", None) or node.name


def source_lines(graph_module: torch.fx.GraphModule) -> set[tuple[str, int]]:
    """The user's source lines, as ``(file, line)``, that the nodes of ``graph_module`` and of
    its control-flow branches come from: the lines a finding about them can point at."""
    lines = set()
    for module in graph_module.modules():
        if isinstance(module, torch.fx.GraphModule):
            for node in module.graph.nodes:
                if (location := node_location(node)) is not None:
                    lines.add((location.file, location.line))
    return lines


def location_named_in(graph: torch.fx.Graph, text: str) -> SourceLocation | None:
    """The user's line that made the first op of ``graph`` that ``text`` (an error message)
    names by its overload (``aten.rand_like.default``), or ``None``."""
    for node in graph.nodes:
        if node.op == "call_function" and str(node.target) in text and (location := node_location(node)) is not None:
            return location
    return None
