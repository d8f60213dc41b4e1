"""A runtime child's ``executorch.exir``: its files importable without its ``__init__``.

``executorch.runtime`` reads one small file of ``executorch.exir`` (``_warnings``) and the
runtime child two more (``schema``, ``tensor``); importing any of them first runs the package's
``__init__``, which imports the whole exporter (its passes, capture, torchao): about three
quarters of a child's start-up, spent on nothing the child runs. ``defer_exir_init()`` puts the
package in place with its path and nothing run, so that only the files asked for load; its
``__init__`` runs, into the same module, the first time something reads a name the files
imported so far did not set and that is no submodule (``executorch.exir.to_edge``): nothing
changes for code that needs it.
"""

from __future__ import annotations

import importlib.util
import sys

__all__ = ["defer_exir_init"]

_PACKAGE = "executorch.exir"


def defer_exir_init() -> None:
    """Make ``executorch.exir``'s ``__init__`` run on first use of a name it defines, not on
    import (a no-op where the package is imported already or cannot be found)."""
    if _PACKAGE in sys.modules:
        return
    try:
        spec = importlib.util.find_spec(_PACKAGE)
    except (ImportError, ValueError):
        return
    if spec is None or spec.loader is None or not spec.submodule_search_locations:
        return
    package = importlib.util.module_from_spec(spec)  # path, spec, file and loader set; nothing run
    loader = spec.loader

    def run_init(name: str) -> object:
        if importlib.util.find_spec(f"{_PACKAGE}.{name}") is not None:
            # a submodule (``from executorch.exir import memory``): the import system imports it,
            # as it does inside the package's own __init__, which may be half-way through
            raise AttributeError(name)
        del package.__dict__["__getattr__"]  # once: from here on, the module's own names
        loader.exec_module(package)
        return getattr(package, name)

    package.__getattr__ = run_init  # type: ignore[method-assign]  # PEP 562: read only for missing names
    sys.modules[_PACKAGE] = package
    sys.modules["executorch"].exir = package  # type: ignore[attr-defined]  # as an import of it would (find_spec imported the parent)
