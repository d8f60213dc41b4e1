"""What a runtime has: the delegate backends and operator kernels it registers. EG521 checks a
program's delegates and operators against it, when a check is given one (``--runtime``: the
``executorch.runtime`` installed here; ``--kernels FILE``: a selective build's list)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import final

from export_guards.compat import register_quantized_kernels

__all__ = ["RuntimeInventory"]

# An operator as the runtime's registry names it: namespace::name, then .overload where there is one.
_OPERATOR = re.compile(r"[A-Za-z_][\w]*::[A-Za-z_][\w]*(?:\.[\w]+)?")


@final
@dataclass(frozen=True)
class RuntimeInventory:
    """The backends and kernels of one runtime.

    Attributes:
        name: how findings name the runtime ("executorch.runtime 1.5.1", a list's path).
        kernels: every operator it has a kernel for (``aten::mm.out``; ``aten::copy_`` for a
            default overload).
        backends: every delegate backend it registers (``XnnpackBackend``); None when not known
            (a kernel list names operators only).
    """

    name: str
    kernels: frozenset[str]
    backends: frozenset[str] | None = None

    @classmethod
    def installed(cls) -> RuntimeInventory:
        """The ``executorch.runtime`` that this Python imports (its portable library, with the
        kernels and backends it was built with), with ExecuTorch's quantized kernels, as
        export-guards runs a program (``compat.register_quantized_kernels``)."""
        from importlib.metadata import PackageNotFoundError, version

        from executorch.runtime import Runtime

        runtime = Runtime.get()
        register_quantized_kernels()
        try:
            name = f"executorch.runtime {version('executorch')}"
        except PackageNotFoundError:
            name = "executorch.runtime"
        return cls(
            name,
            frozenset(runtime.operator_registry.operator_names),
            frozenset(runtime.backend_registry.registered_backend_names),
        )

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> RuntimeInventory:
        """A kernel list: every ``namespace::operator[.overload]`` in the file, one per line or as
        the keys of a selective build's ``selected_operators.yaml`` (``aten::mm.out:``); ``#``
        starts a comment.

        Raises:
            OSError: the file cannot be read.
            ValueError: it names no operator, saying so.
        """
        text = Path(path).read_text(encoding="utf-8", errors="replace")
        kernels = frozenset(_OPERATOR.findall("\n".join(line.split("#", 1)[0] for line in text.splitlines())))
        if not kernels:
            raise ValueError(f"{os.fspath(path)} names no operator kernel (expected lines such as 'aten::mm.out')")
        return cls(os.fspath(path), kernels)

    def has_kernel(self, name: str, overload: str) -> bool:
        """Whether the runtime has the kernel the program's operator table names."""
        from export_guards.pte.reader.operators import spelled

        return spelled(name, overload) in self.kernels
