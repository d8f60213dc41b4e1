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

__all__ = ["TESTED", "load_program", "say_once_if_untested", "takes_keyword", "untested"]

TESTED: frozenset[tuple[str, str]] = frozenset({("1.5", "2.13"), ("1.4", "2.13"), ("1.5", "2.14"), ("1.4", "2.14"), ("1.5", "2.15")})
"""The (executorch, torch) minor versions that the test suite has run on (docs/compatibility.md
has the table: by CI, every change, or by hand, with the date)."""

_said = False


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
    global _said
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


def _minor(version: str) -> str:
    """``"2.13.0+cpu"`` -> ``"2.13"``."""
    match = re.match(r"(\d+)\.(\d+)", version)
    return f"{match[1]}.{match[2]}" if match else version
