"""What differs between the ExecuTorch and torch versions export-guards supports, in one room:
each difference feature-detected (a signature, an attribute), never by comparing version
strings, and a feature that an older version lacks says so in one line, naming the version that
has it. Imports neither torch nor ExecuTorch: it is handed what it inspects."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["load_program", "takes_keyword"]


def takes_keyword(function: Callable[..., Any], name: str) -> bool:
    """Whether ``function`` accepts the keyword argument ``name`` (or any keyword)."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: try the call
        return True
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def load_program(runtime: Any, program: Any, data_path: str | None = None) -> Any:
    """``runtime.load_program(program)`` (``executorch.runtime.Runtime``), with its external
    data file where one is given.

    Raises:
        RuntimeError: a data file was given, and this ExecuTorch's ``Runtime.load_program``
            takes none (its ``data_path`` keyword is new in executorch 1.5).
    """
    if data_path is None:
        return runtime.load_program(program)
    if not takes_keyword(runtime.load_program, "data_path"):
        raise RuntimeError(
            f"this executorch.runtime cannot load the data file {data_path} with a program: "
            "Runtime.load_program(data_path=...) is new in executorch 1.5"
        )
    return runtime.load_program(program, data_path=data_path)
