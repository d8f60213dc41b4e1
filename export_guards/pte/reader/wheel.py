"""ExecuTorch's program schema and serialization helpers, loaded from the wheel without torch.

The program check reads a ``.pte`` with ExecuTorch's own Python modules: the schema dataclasses
(``executorch/exir/schema.py`` and the two it imports), the flatbuffer classes flatc generated
(``executorch/exir/_serialize/generated/``, which need only the ``flatbuffers`` package) and the
helpers that convert one to the other (``_serialize/_flatbuffer_program.py`` and
``_serialize/_flatbuffer.py``). Those files import nothing heavy, but their packages do:
``executorch/exir/__init__.py`` and ``executorch/exir/_serialize/__init__.py`` import torch and
most of ExecuTorch (seven seconds here), and Python runs a package's ``__init__`` before any
module in it. So each of these modules is loaded here from its file, under its real name, in
the order they import one another, and registered in ``sys.modules``, without its parent
packages: Python's import finds a module already in ``sys.modules`` without importing its
parents (``executorch`` is a namespace package: it has no ``__init__`` of its own).

The classes are the very ones ExecuTorch uses: when torch and ``executorch.exir`` are imported
later in the same process (a rule that replays a kernel call, a test, the lint), ExecuTorch's
``__init__`` files find these modules in ``sys.modules`` and use them, so ``isinstance`` and
equality hold across both. Python does not set ``package.module`` on a package imported after
its module, so a finder (:class:`_SetSubmodules`) gives each such package its modules when it is
imported. Where ``executorch.exir`` is imported already, everything here is imported the ordinary
way. Where this ExecuTorch lays its files out otherwise (each is looked for; no version string
is compared) or one fails to load, the ordinary imports run too: slower, never different.

Also here, for the same reason: :func:`read_resource` (a data file of an ExecuTorch package,
read without importing the package: ``executorch.backends.xnnpack``'s ``__init__`` imports
torch) and :func:`flatc_path` (the flatc that ExecuTorch's ``_get_flatc_path`` finds).
``tests/test_pte_without_torch.py`` checks that the check loads neither torch nor
``executorch.exir`` and that each piece here equals ExecuTorch's.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import stat
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

__all__ = [
    "LIGHT_MODULES",
    "AllocationDetails",
    "Bool",
    "BoolList",
    "DataLocation",
    "DelegateCall",
    "Double",
    "DoubleList",
    "ExecutionPlan",
    "FreeCall",
    "Int",
    "IntList",
    "JumpFalseCall",
    "KernelCall",
    "MoveCall",
    "Null",
    "OptionalTensorList",
    "Program",
    "ProgramT",
    "ProgramTable",
    "ScalarType",
    "String",
    "SubsegmentOffsets",
    "Tensor",
    "TensorDataLocation",
    "TensorList",
    "TensorShapeDynamism",
    "coerce_bytes",
    "dataclass_field_map",
    "dataclass_type_hints",
    "executorch_folders",
    "flatc_path",
    "loaded_light",
    "patch_generated_flatbuffer_aliases",
    "read_resource",
]

LIGHT_MODULES = (
    "executorch.exir.scalar_type",
    "executorch.exir.backend.compile_spec_schema",
    "executorch.exir.schema",
    "executorch.exir._serialize._flatbuffer",
    "executorch.exir._serialize.generated",  # its __init__ imports executorch_flatbuffer and each table
    "executorch.exir._serialize._flatbuffer_program",
)
"""The modules loaded without their packages, each after those it imports."""


def executorch_folders() -> tuple[Path, ...]:
    """The folders of the ``executorch`` namespace package, found without importing anything."""
    try:
        spec = importlib.util.find_spec("executorch")
    except (ImportError, ValueError):
        return ()
    return tuple(Path(folder) for folder in (spec.submodule_search_locations or ())) if spec is not None else ()


def _source(name: str, folders: Sequence[Path]) -> tuple[Path, bool] | None:
    """The file of module ``name`` of the ``executorch`` package, and whether it is a package."""
    parts = name.split(".")[1:]
    for folder in folders:
        package = folder.joinpath(*parts, "__init__.py")
        if package.is_file():
            return package, True
        module = folder.joinpath(*parts[:-1], f"{parts[-1]}.py")
        if module.is_file():
            return module, False
    return None


class _SetSubmodules(importlib.abc.MetaPathFinder):
    """When one of ``parents`` is imported (for real, later), gives it as attributes the
    modules of it that were loaded here before it, as an ordinary import would have."""

    def __init__(self, children: dict[str, list[str]]) -> None:
        self.children = children  # parent package -> the names of its modules loaded here

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name not in self.children:
            return None
        spec = None
        for finder in list(sys.meta_path):
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        if spec is None:
            return None
        if spec.loader is None and spec.submodule_search_locations is not None:  # a namespace package
            spec.loader = importlib.machinery.NamespaceLoader(
                name, list(spec.submodule_search_locations), importlib.machinery.PathFinder.find_spec
            )
        if not hasattr(spec.loader, "exec_module"):
            return spec
        children = self.children.pop(name)
        if not self.children:
            sys.meta_path.remove(self)
        run = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            for child in children:  # before its __init__ runs: as if imported earlier
                if child in sys.modules:
                    setattr(module, child.rpartition(".")[2], sys.modules[child])
            run(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]  (this spec's own loader)
        return spec


_lock = threading.Lock()
_light: list[str] = []


def loaded_light() -> tuple[str, ...]:
    """The modules this process loaded here without their packages (none: ordinary imports)."""
    return tuple(_light)


def _load() -> None:
    with _lock:
        if "executorch.exir" in sys.modules or all(name in sys.modules for name in LIGHT_MODULES):
            return  # imported the ordinary way already (or loaded here): the imports below find them
        folders = executorch_folders()
        sources = {name: _source(name, folders) for name in LIGHT_MODULES}
        if any(source is None for source in sources.values()):
            return  # laid out otherwise: the ordinary imports below
        loaded: list[str] = []
        try:
            for name, source in sources.items():
                if name in sys.modules:
                    continue
                if name.rpartition(".")[0] in sys.modules:  # its package is imported: nothing to skip
                    importlib.import_module(name)
                    continue
                path, is_package = source  # type: ignore[misc]
                spec = importlib.util.spec_from_file_location(
                    name, path, submodule_search_locations=[str(path.parent)] if is_package else None
                )
                assert spec is not None and spec.loader is not None
                module = importlib.util.module_from_spec(spec)
                sys.modules[name] = module
                loaded.append(name)
                spec.loader.exec_module(module)
        except BaseException as error:  # any failure: undo, and import the ordinary way below
            for name in loaded:
                sys.modules.pop(name, None)
            if not isinstance(error, Exception):
                raise
            return
        children: dict[str, list[str]] = {}
        for name in loaded:
            parent = name.rpartition(".")[0]
            if parent not in sys.modules:
                children.setdefault(parent, []).append(name)
        if children:
            sys.meta_path.insert(0, _SetSubmodules(children))
        _light.extend(loaded)


_load()

# Found in sys.modules (loaded above), or imported the ordinary way.
from executorch.exir._serialize._flatbuffer_program import (  # noqa: E402
    _coerce_bytes as coerce_bytes,
)
from executorch.exir._serialize._flatbuffer_program import (  # noqa: E402
    _dataclass_field_map as dataclass_field_map,
)
from executorch.exir._serialize._flatbuffer_program import (  # noqa: E402
    _dataclass_type_hints as dataclass_type_hints,
)
from executorch.exir._serialize._flatbuffer_program import (  # noqa: E402
    _patch_generated_flatbuffer_aliases as patch_generated_flatbuffer_aliases,
)
from executorch.exir._serialize.generated.executorch_flatbuffer.Program import (  # noqa: E402
    Program as ProgramTable,
)
from executorch.exir._serialize.generated.executorch_flatbuffer.Program import (  # noqa: E402
    ProgramT,
)
from executorch.exir.schema import (  # noqa: E402
    AllocationDetails,
    Bool,
    BoolList,
    DataLocation,
    DelegateCall,
    Double,
    DoubleList,
    ExecutionPlan,
    FreeCall,
    Int,
    IntList,
    JumpFalseCall,
    KernelCall,
    MoveCall,
    Null,
    OptionalTensorList,
    Program,
    ScalarType,
    String,
    SubsegmentOffsets,
    Tensor,
    TensorDataLocation,
    TensorList,
    TensorShapeDynamism,
)


def read_resource(package: str, name: str) -> bytes:
    """The bytes of data file ``name`` of ExecuTorch package ``package``
    (``"executorch.backends.xnnpack.serialization"``), read from its folder without importing
    the package; by ``importlib.resources`` where the folder is not found."""
    parts = package.split(".")
    if parts[0] == "executorch":
        for folder in executorch_folders():
            path = folder.joinpath(*parts[1:], name)
            if path.is_file():
                return path.read_bytes()
    import importlib.resources

    return importlib.resources.files(package).joinpath(name).read_bytes()


def flatc_path() -> str:
    """The flatc executable, as ExecuTorch's ``_serialize._flatbuffer._get_flatc_path`` finds it
    (which reads its package's resources, and so imports ``executorch.exir``): the
    ``flatbuffers-flatc`` of ``executorch/exir/_serialize``, else ``executorch/data/bin/flatc``
    (made executable where it is not), else ``$FLATC_EXECUTABLE``, else ``flatc`` on the path."""
    for parts in (("exir", "_serialize", "flatbuffers-flatc"), ("data", "bin", "flatc")):
        for folder in executorch_folders():
            path = folder.joinpath(*parts)
            if path.is_file():
                try:
                    mode = path.stat().st_mode
                    if not mode & stat.S_IXUSR:
                        path.chmod(mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
                except OSError:
                    pass
                return str(path)
    return os.getenv("FLATC_EXECUTABLE", "flatc")
