"""What differs between the ExecuTorch and torch versions export-guards supports, in one room:
each difference feature-detected (a signature, an attribute), never by comparing version
strings, and a feature that an older version lacks says so in one line, naming the version that
has it. Imports neither torch nor ExecuTorch: it is handed what it inspects."""

from __future__ import annotations

import inspect
import logging
import re
from collections.abc import Callable, Mapping
from importlib import metadata
from typing import Any

from export_guards.errors import RuntimeMismatch

__all__ = [
    "RUNTIME_BUILT_FOR",
    "TESTED",
    "RuntimeMismatch",
    "has_pre_decomposition_transform",
    "load_program",
    "named_data_alignments",
    "register_quantized_kernels",
    "runtime_mismatch",
    "say_once_if_untested",
    "takes_keyword",
    "untested",
]

TESTED: frozenset[tuple[str, str]] = frozenset(
    {("1.5", "2.13"), ("1.4", "2.13"), ("1.5", "2.14"), ("1.4", "2.14"), ("1.5", "2.15")}
)
"""The (executorch, torch) minor versions that the test suite has run on (docs/compatibility.md
has the table: by CI, every change, or by hand, with the date)."""

RUNTIME_BUILT_FOR: dict[str, str] = {"1.4": "2.13", "1.5": "2.13"}
"""The torch minor whose headers each executorch minor's wheel built its native runtime
(``executorch.runtime``) against: with an older torch, every run fails in C++ with "tensor does
not have a device" (a TensorImpl laid out otherwise); newer ones run (docs/compatibility.md)."""

MISMATCH_SIGNATURE = "tensor does not have a device"
"""What the runtime says, in C++, on every run when it was built against another torch: how a
pair missing from :data:`RUNTIME_BUILT_FOR` is told by its failure."""

_said = False


def runtime_mismatch(failure: str | None = None, versions: Mapping[str, str | None] | None = None) -> str | None:
    """The one line that says the installed torch is not one that executorch's runtime can run
    with (older than the one it was built for, or a runtime ``failure`` that says so), or
    ``None``. ``versions`` default to the installed ones, read from package metadata."""
    versions = versions if versions is not None else {name: _installed(name) for name in ("executorch", "torch")}
    executorch, torch = versions.get("executorch"), versions.get("torch")
    if executorch is None or torch is None:
        return None
    needed = RUNTIME_BUILT_FOR.get(_minor(executorch))
    older = needed is not None and _as_numbers(_minor(torch)) < _as_numbers(needed)
    if not older and (failure is None or MISMATCH_SIGNATURE not in failure):
        return None
    wants = f"torch {needed} or newer" if needed else "the torch it was built against"
    return (
        f"executorch {executorch}'s runtime (executorch.runtime) needs {wants}; torch {torch} is installed, "
        f"with which every run fails ({MISMATCH_SIGNATURE}): install {wants} to run programs; "
        "exports, lints and program checks work as they are"
    )


def takes_keyword(function: Callable[..., Any], name: str) -> bool:
    """Whether ``function`` accepts the keyword argument ``name`` (or any keyword)."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: try the call
        return True
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def has_pre_decomposition_transform(partitioner_type: type) -> bool:
    """Whether ``to_edge_transform_and_lower`` hands each partitioner the torch.export program
    before decomposing it (``Partitioner.transform_for_pre_decomposition``, new in executorch
    1.5): where it does not, a guarded partitioner's copy is made after decomposition."""
    return hasattr(partitioner_type, "transform_for_pre_decomposition")


_QUANTIZED_KERNELS: list[bool] = []  # whether they are registered, once asked


def register_quantized_kernels() -> bool:
    """Register ExecuTorch's quantized kernels (``quantized_decomposed::embedding_4bit.out``,
    ``dequantize_per_channel.out``, ...) in this process's ``executorch.runtime``, once;
    whether it has them. The pip wheel's runtime registers none by itself: they are in the
    wheel's ``executorch/lib/libexecutorch_kernels_quantized.so``, which registers them in the
    runtime's registry when loaded (as ``import executorch.kernels.quantized`` does, through
    the library it loads into torch). Loading it takes under a millisecond (measured on
    executorch 1.5.1). A wheel without it (another layout) leaves the runtime as it is: EG521
    then names the kernels it lacks.
    Call it before loading a program: the runtime looks its kernels up then."""
    if _QUANTIZED_KERNELS:
        return _QUANTIZED_KERNELS[0]
    import ctypes
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("executorch")
    roots = [Path(p) for p in (spec.submodule_search_locations or [])] if spec is not None else []
    libraries = [root / "lib" / "libexecutorch_kernels_quantized.so" for root in roots]
    try:
        for library in libraries:
            if library.is_file():
                ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL)  # its static initializers register the kernels
                _QUANTIZED_KERNELS.append(True)
                break
    except OSError:
        pass
    if not _QUANTIZED_KERNELS:
        _QUANTIZED_KERNELS.append(False)
    return _QUANTIZED_KERNELS[0]


def load_program(runtime: Any, program: Any, data_path: str | None = None) -> Any:
    """``runtime.load_program(program)`` (``executorch.runtime.Runtime``), with its external
    data file where one is given, and ExecuTorch's quantized kernels registered
    (:func:`register_quantized_kernels`).

    Raises:
        RuntimeError: a data file was given, and this ExecuTorch's ``Runtime.load_program``
            takes none (its ``data_path`` keyword is new in executorch 1.5).
    """
    register_quantized_kernels()
    if data_path is None:
        return runtime.load_program(program)
    if not takes_keyword(runtime.load_program, "data_path"):
        raise RuntimeError(
            f"this executorch.runtime cannot load the data file {data_path} with a program: "
            "Runtime.load_program(data_path=...) is new in executorch 1.5"
        )
    return runtime.load_program(program, data_path=data_path)


def named_data_alignments(manager: Any) -> dict[str, int]:
    """The alignment each named-data key of the program asked for, by key, read from
    ExecuTorch's ``ExecutorchProgramManager`` (its private ``_named_data``, a
    ``NamedDataStoreOutput`` whose ``pte_data`` maps each key to a ``DataEntry``); empty where
    a manager keeps none."""
    named = getattr(manager, "_named_data", None)
    entries = getattr(named, "pte_data", None) or {}
    return {key: int(entry.alignment) for key, entry in entries.items() if getattr(entry, "alignment", None)}


def untested(versions: Mapping[str, str | None]) -> str | None:
    """The one line that says ``versions`` (``{"executorch": "1.5.1", "torch": "2.13.0+cpu"}``)
    are a pair the suite has not run on, or ``None`` for a tested pair (or a package that is
    not installed: its import will say so)."""
    executorch, torch = versions.get("executorch"), versions.get("torch")
    if executorch is None or torch is None:
        return None
    if (_minor(executorch), _minor(torch)) in TESTED:
        return None
    tested = ", ".join(f"executorch {e} + torch {t}" for e, t in sorted(TESTED, reverse=True))
    return (
        f"export-guards: untested with executorch {executorch} and torch {torch} (tested: {tested}); "
        "it may work: see docs/compatibility.md, and report what fails"
    )


def say_once_if_untested() -> None:
    """Log :func:`untested`'s line for the installed executorch and torch, once per process
    (read from their package metadata: neither is imported)."""
    global _said  # noqa: PLW0603 - said once per process
    if _said:
        return
    _said = True
    line = untested({name: _installed(name) for name in ("executorch", "torch")})
    if line is not None:
        logging.getLogger("export_guards").warning(line)


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _as_numbers(minor: str) -> tuple[int, ...]:
    return tuple(int(part) for part in minor.split(".") if part.isdigit())


def _minor(version: str) -> str:
    """``"2.13.0+cpu"`` -> ``"2.13"``."""
    match = re.match(r"(\d+)\.(\d+)", version)
    return f"{match[1]}.{match[2]}" if match else version
