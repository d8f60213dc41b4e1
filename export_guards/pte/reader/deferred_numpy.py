"""``flatbuffers`` imported with numpy deferred to its first use.

The ``flatbuffers`` package and every module flatc generates call ``compat.import_numpy()`` when
imported and keep the module it returns (for the ``...AsNumpy`` readers and ``_UnPack``'s
vectors): importing them imports numpy, a sixth of a second, in a process that reads a program
without using numpy. Here ``flatbuffers`` is imported with a stand-in that imports numpy when an
attribute is first asked of it, and ``import_numpy`` gives the same stand-in to the modules
imported after it: whatever uses numpy gets numpy, as before, and the rest never load it. Where
numpy is not installed (or is imported already), nothing is changed.
"""

from __future__ import annotations

import functools
import importlib.machinery
import sys
import threading
from types import ModuleType
from typing import Any, final

__all__ = ["import_flatbuffers"]

_lock = threading.Lock()


@final
class _DeferredNumpy:
    """numpy, imported on the first attribute asked of it."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # what the import system asks of a module in sys.modules
            raise AttributeError(name)
        import numpy  # noqa: ICN001 - the module whose import is deferred, by its own name

        return getattr(numpy, name)

    def __repr__(self) -> str:
        return "<numpy, imported on first use>"


_NUMPY = _DeferredNumpy()


def _import_numpy() -> Any:
    """``flatbuffers.compat.import_numpy``'s answer, with numpy not imported until it is used."""
    if "numpy" in sys.modules:
        return sys.modules["numpy"]
    return _NUMPY if _numpy_installed() else None


@functools.cache
def _numpy_installed() -> bool:
    """Looked for once (each generated module asks, and the search reads the path's folders)."""
    return importlib.machinery.PathFinder.find_spec("numpy") is not None


def import_flatbuffers() -> ModuleType:
    """The ``flatbuffers`` package, imported (once) with numpy deferred."""
    with _lock:
        if "flatbuffers" in sys.modules:
            return sys.modules["flatbuffers"]
        if "numpy" in sys.modules or not _numpy_installed():
            import flatbuffers  # numpy is imported already, or flatbuffers works without it

            return flatbuffers
        # While flatbuffers' own modules import, `import numpy` finds the stand-in.
        sys.modules["numpy"] = _NUMPY  # type: ignore[assignment]
        try:
            import flatbuffers
            import flatbuffers.compat
        finally:
            if sys.modules.get("numpy") is _NUMPY:
                del sys.modules["numpy"]
        flatbuffers.compat.import_numpy = _import_numpy  # the generated modules ask it when imported
        return flatbuffers
